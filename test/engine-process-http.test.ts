/**
 * One engine per machine (issue 31, item 2) through the HTTP API: a Switchyard started with
 * `SWITCHYARD_ENGINE_URL` (as the supervisor starts its API processes) serves the embedded models
 * through an engine server hosting the tiny model: streamed chat with usage, decisions,
 * embeddings; a client that goes away mid-stream is recorded as cancelled and the engine frees
 * its slot; with the engine server gone, embedded models answer 503 with Retry-After at once.
 */
import { mkdtempSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import pino from "pino";
import { LlamaCppEngine } from "../src/inference/engines/llama-cpp/llama-cpp.engine.js";
import { type EngineServer, startEngineServer } from "../src/inference/engines/remote/engine-server.js";
import { RemoteEngine } from "../src/inference/engines/remote/remote.engine.js";
import {
  CHAT_MODEL,
  EMBED_MODEL,
  MODELS_DIR,
  type TestServer,
  activityByCustomId,
  createTestCaller,
  eventually,
  expectEnvelope,
  http,
  openaiClient,
  startTestServer,
} from "./support/harness.js";

const TOKEN = "engine-process-http-test-token-0123456789";
let local: LlamaCppEngine;
let engineServer: EngineServer;
let server: TestServer;
let caller: Awaited<ReturnType<typeof createTestCaller>>;

beforeAll(async () => {
  local = new LlamaCppEngine({
    threads: 1,
    sequences: 4,
    embeddingContexts: 2,
    modelsDir: MODELS_DIR,
    dataDir: mkdtempSync(path.join(os.tmpdir(), "sy-engine-http-")),
    gpu: "off",
    logger: pino({ level: "silent" }),
  });
  engineServer = await startEngineServer({ engine: local, token: TOKEN, logger: pino({ level: "silent" }) });
  server = await startTestServer({ engineUrl: engineServer.url, engineToken: TOKEN });
  caller = await createTestCaller(server.url);
}, 60_000);

afterAll(async () => {
  await server?.close();
  await engineServer?.close(0);
  await local?.close();
});

const chatModel = () => server.app.catalog.all().find((m) => m.id === CHAT_MODEL)!;

/** The chat model's slot pool in the engine server's engine. */
async function slots() {
  return (await local.slots(chatModel()))!;
}

test("when Switchyard has SWITCHYARD_ENGINE_URL, then its embedded models are served by the engine server, loaded there", async () => {
  expect(server.app.engines.engineFor(chatModel())).toBeInstanceOf(RemoteEngine);
  expect(local.isLoaded(chatModel())).toBe(true);
  const ready = await http(server.url, "GET", "/v1/health/ready");
  expect(ready.status).toBe(200);
});

test("when a chat is streamed, then its tokens arrive as chunks with the usage at the end", async () => {
  const client = openaiClient(server.url, caller.key);
  const stream = await client.chat.completions.create({
    model: CHAT_MODEL,
    messages: [{ role: "user", content: "Once upon a time" }],
    max_tokens: 16,
    temperature: 0,
    stream: true,
    stream_options: { include_usage: true },
  });
  let text = "";
  let chunks = 0;
  let usage: { completion_tokens: number } | undefined;
  for await (const chunk of stream) {
    const delta = chunk.choices[0]?.delta.content;
    if (delta) {
      text += delta;
      chunks++;
    }
    if (chunk.usage) usage = chunk.usage;
  }
  expect(chunks).toBeGreaterThan(1);
  expect(text.length).toBeGreaterThan(0);
  expect(usage!.completion_tokens).toBe(16);
});

test("when decisions are asked, then the engine server scores them", async () => {
  const res = await http(server.url, "POST", "/v1/decisions", {
    token: caller.key,
    body: {
      model: CHAT_MODEL,
      state: { story: "Tom had a dog. The dog was happy." },
      questions: {
        has_dog: { type: "yes_no", instructions: "Is there a dog in the story?" },
        mood: { type: "choice", criteria: { happy: "a happy story", sad: "a sad story" } },
      },
    },
  });
  expect(res.status).toBe(200);
  expect(Object.keys(res.body.answers).sort()).toEqual(["has_dog", "mood"]);
  expect(res.body.usage.input_tokens).toBeGreaterThan(0);
});

test("when texts are embedded, then the vectors come from the engine server", async () => {
  const res = await http(server.url, "POST", "/v1/embeddings", {
    token: caller.key,
    body: { model: EMBED_MODEL, input: ["a cat", "a dog"] },
  });
  expect(res.status).toBe(200);
  expect(res.body.data).toHaveLength(2);
  expect(res.body.data[0].embedding.length).toBeGreaterThan(0);
});

test("when the client goes away mid-stream, then the engine stops the generation and the request is recorded as cancelled", async () => {
  const controller = new AbortController();
  const res = await fetch(`${server.url}/v1/chat/completions`, {
    method: "POST",
    headers: { authorization: `Bearer ${caller.key}`, "content-type": "application/json" },
    body: JSON.stringify({
      model: CHAT_MODEL,
      messages: [{ role: "user", content: "Once upon a time" }],
      max_tokens: 480,
      stream: true,
      metadata: { custom_id: "walk-away-hop" },
    }),
    signal: controller.signal,
  });
  expect(res.status).toBe(200);
  await res.body!.getReader().read();
  controller.abort();
  const row = await activityByCustomId(server, "walk-away-hop");
  expect(row.status).toBe("cancelled");
  expect(row.completion_tokens).toBeLessThan(480);
  expect(await eventually(async () => engineServer.inFlight() === 0, 10_000)).toBe(true);
  expect(await slots()).toMatchObject({ available: (await slots()).size, waiting: 0 });
});

test("when the engine server is gone, then embedded models answer 503 with Retry-After at once", async () => {
  await engineServer.close(0);
  const res = await http(server.url, "POST", "/v1/chat/completions", {
    token: caller.key,
    body: { model: CHAT_MODEL, messages: [{ role: "user", content: "Once" }], max_tokens: 4 },
  });
  expectEnvelope(res, 503);
  expect(res.headers.get("retry-after")).toBe("1");
  expect(res.body.detail).toContain("engine process");
});
