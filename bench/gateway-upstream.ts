/**
 * The fixed upstream of `bench/gateway.bench.ts`: a plain `node:http` OpenAI-compatible server on
 * loopback that answers every `POST /v1/chat/completions` with the same small chat completion
 * (with usage) and `GET /v1/models` with its one model. Prints `{"port": N}` once listening.
 *
 *   node dist-bench/bench/gateway-upstream.js
 */
import http from "node:http";

const MODEL = "bench-model";

const completion = JSON.stringify({
  id: "chatcmpl-bench",
  object: "chat.completion",
  created: 1_700_000_000,
  model: MODEL,
  choices: [
    {
      index: 0,
      message: { role: "assistant", content: "Hello! This is a fixed answer from the bench upstream." },
      logprobs: null,
      finish_reason: "stop",
    },
  ],
  usage: { prompt_tokens: 12, completion_tokens: 12, total_tokens: 24 },
});
const models = JSON.stringify({
  object: "list",
  data: [{ id: MODEL, object: "model", created: 0, owned_by: "bench" }],
});

const server = http.createServer((req, res) => {
  // Read the whole body first, as a real engine would.
  req.on("data", () => undefined);
  req.on("end", () => {
    if (req.method === "POST" && req.url === "/v1/chat/completions") {
      res.writeHead(200, { "content-type": "application/json", "content-length": Buffer.byteLength(completion) });
      res.end(completion);
    } else if (req.method === "GET" && req.url === "/v1/models") {
      res.writeHead(200, { "content-type": "application/json", "content-length": Buffer.byteLength(models) });
      res.end(models);
    } else {
      res.writeHead(404, { "content-type": "application/json" });
      res.end('{"error":{"message":"not found"}}');
    }
  });
});
server.keepAliveTimeout = 120_000;
server.listen(0, "127.0.0.1", () => {
  console.log(JSON.stringify({ port: (server.address() as { port: number }).port }));
});
process.on("SIGTERM", () => server.close(() => process.exit(0)));
