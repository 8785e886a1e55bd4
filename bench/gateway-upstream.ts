/**
 * The fixed upstream of `bench/gateway.bench.ts`: a plain `node:http` OpenAI-compatible server on
 * loopback that answers every `POST /v1/chat/completions` with the same small chat completion
 * (with usage) and `GET /v1/models` with its one model. Prints `{"port": N}` once listening.
 * A request with `"stream": true` (Switchyard always streams upstream) gets the same answer as
 * SSE, as vLLM sends it: a first chunk with the role and the first word at once, then the other
 * words, the finish chunk, the usage chunk and `[DONE]`. When the last message contains
 * `[bench:gap=N]`, the chunks after the first wait N ms (time-to-first-token runs: the first token
 * then stands apart from the end of the answer).
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
const WORDS = ["Hello!", " This", " is", " a", " fixed", " answer", " from", " the", " bench", " upstream."];

function chunk(delta: Record<string, unknown>, finish: string | null, usage?: unknown): string {
  const choices = usage ? [] : [{ index: 0, delta, logprobs: null, finish_reason: finish }];
  const event = {
    id: "chatcmpl-bench",
    object: "chat.completion.chunk",
    created: 1_700_000_000,
    model: MODEL,
    choices,
  };
  return `data: ${JSON.stringify(usage ? { ...event, usage } : event)}\n\n`;
}
const firstChunk = chunk({ role: "assistant", content: WORDS[0] }, null);
const restOfStream =
  WORDS.slice(1)
    .map((w) => chunk({ content: w }, null))
    .join("") +
  chunk({}, "stop") +
  chunk({}, null, { prompt_tokens: 12, completion_tokens: 12, total_tokens: 24 }) +
  "data: [DONE]\n\n";

const models = JSON.stringify({
  object: "list",
  data: [{ id: MODEL, object: "model", created: 0, owned_by: "bench" }],
});

const server = http.createServer((req, res) => {
  // Read (and parse) the whole body first, as a real engine would.
  const parts: Buffer[] = [];
  req.on("data", (c: Buffer) => parts.push(c));
  req.on("end", () => {
    if (req.method === "POST" && req.url === "/v1/chat/completions") {
      let body: { stream?: unknown; messages?: Array<{ content?: unknown }> } = {};
      try {
        body = JSON.parse(Buffer.concat(parts).toString("utf8")) as typeof body;
      } catch {
        /* answered as a plain request */
      }
      if (body.stream === true) {
        const last = body.messages?.at(-1)?.content;
        const gapMs = Number(/\[bench:gap=(\d+)\]/.exec(typeof last === "string" ? last : "")?.[1] ?? 0);
        res.writeHead(200, { "content-type": "text/event-stream", "cache-control": "no-cache" });
        res.write(firstChunk);
        if (gapMs > 0) setTimeout(() => res.end(restOfStream), gapMs);
        else res.end(restOfStream);
        return;
      }
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
