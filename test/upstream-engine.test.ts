/**
 * The upstream engine end to end (issue 9, item 3 and its Checks): a gateway Switchyard whose
 * catalog routes models (`engine.type: "openai_compatible"`) to upstream Switchyards over their
 * OpenAI-compatible API. Replica `a` is a second server in this process (its own HTTP server on
 * loopback and its own database); replica `b` is a child process on the same database, SIGKILLed
 * in the failover test. Called with the official `openai` and `@anthropic-ai/sdk` clients; what
 * the gateway records (tokens, cost, ledger) must equal what the upstream reported and recorded.
 */
import { mkdtempSync } from "node:fs";
import net from "node:net";
import os from "node:os";
import path from "node:path";
import type Anthropic from "@anthropic-ai/sdk";
import type OpenAI from "openai";
import { OpenAiCompatibleEngine } from "../src/inference/engines/openai-compatible/openai-compatible.engine.js";
import { type ChildServer, cleanUpChildren, launchChild } from "./support/child-server.js";
import { holdNextGeneration } from "./support/engine-faults.js";
import {
  CHAT_MODEL,
  EMBED_MODEL,
  type TestServer,
  anthropicClient,
  createTestCaller,
  eventually,
  expectEnvelope,
  http,
  openaiClient,
  startTestServer,
} from "./support/harness.js";
import { type CatalogJson, writeEditedCatalog } from "./support/test-catalog.js";

/** Prices large enough for costs to show (micro-USD per token), the same on both sides. */
const CHAT_PRICES = { input_per_million_usd: "2", cached_input_per_million_usd: "1", output_per_million_usd: "5" };
const EMBED_PRICES = { input_per_million_usd: "3", cached_input_per_million_usd: "3", output_per_million_usd: "0" };

const priced = (c: CatalogJson) => {
  for (const m of c.models) m.pricing = m.modality === "text_embedding" ? EMBED_PRICES : CHAT_PRICES;
};

let upstream: TestServer;
let replicaB: ChildServer;
let gateway: TestServer;
let openai: OpenAI;
let anthropic: Anthropic;
let key: string;
const childDir = mkdtempSync(path.join(os.tmpdir(), "switchyard-upstream-b-"));

/** A loopback port nothing listens on. */
async function closedPort(): Promise<number> {
  const server = net.createServer();
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as net.AddressInfo;
  await new Promise((resolve) => server.close(resolve));
  return port;
}

beforeAll(async () => {
  const upstreamCatalog = writeEditedCatalog(priced);
  upstream = await startTestServer({ catalogPath: upstreamCatalog });
  replicaB = await launchChild({
    databaseUrl: upstream.databaseUrl,
    dataDir: childDir,
    env: { SWITCHYARD_CATALOG: upstreamCatalog },
  });
  // The gateway's own key on the upstream (both replicas share its database).
  const account = await createTestCaller(upstream.url);
  const deadPort = await closedPort();
  const gatewayCatalog = writeEditedCatalog((c) => {
    priced(c);
    const chat = c.models.find((m) => m.id === CHAT_MODEL)!;
    const embed = c.models.find((m) => m.id === EMBED_MODEL)!;
    const upstreamModel = (base: typeof chat, id: string, engine: Record<string, unknown>) => ({
      ...base,
      id,
      display_name: id,
      engine: { type: "openai_compatible", ...engine },
    });
    c.models.push(
      // Every endpoint whose `models` lists the upstream model: a and b.
      upstreamModel(chat, "up-chat", { upstream_model: CHAT_MODEL }),
      upstreamModel(chat, "up-chat-a", { upstream_model: CHAT_MODEL, endpoints: ["a"] }),
      upstreamModel(embed, "up-embed", { upstream_model: EMBED_MODEL }),
      upstreamModel(chat, "up-dead", { upstream_model: "nobody-serves-this", endpoints: ["dead"] }),
    );
  });
  gateway = await startTestServer({
    catalogPath: gatewayCatalog,
    upstreams: [
      { name: "a", base_url: `${upstream.url}/v1`, api_key: account.key, models: [CHAT_MODEL, EMBED_MODEL] },
      { name: "b", base_url: `${replicaB.url}/v1`, api_key: account.key, models: [CHAT_MODEL, EMBED_MODEL] },
      { name: "dead", base_url: `http://127.0.0.1:${deadPort}/v1`, models: ["nobody-serves-this"] },
    ],
    // Failover must come from the requests themselves, not from a probe in between.
    upstreamProbeMs: 600_000,
  });
  const caller = await createTestCaller(gateway.url);
  key = caller.key;
  openai = openaiClient(gateway.url, key);
  anthropic = anthropicClient(gateway.url, key);
}, 120_000);

afterAll(async () => {
  await gateway?.close();
  await upstream?.close();
  await cleanUpChildren(childDir);
});

interface Recorded {
  id: string;
  status: string;
  model: string;
  prompt_tokens: number;
  completion_tokens: number;
  cached_prompt_tokens: number;
  cost: string;
}

/** The newest activity row of `endpoint` on `server`, and its usage charge (µUSD, as text). */
async function newest(server: TestServer, endpoint: string): Promise<Recorded & { charge: string | undefined }> {
  const [row] = await server.db<Recorded>(
    `SELECT id, status, model, prompt_tokens, completion_tokens, cached_prompt_tokens, cost_micros::text AS cost
       FROM activity WHERE endpoint = $1 ORDER BY created_at DESC, id DESC LIMIT 1`,
    [endpoint],
  );
  const [charge] = await server.db<{ amount: string }>(
    "SELECT amount_micros::text AS amount FROM credit_ledger WHERE type = 'usage' AND source_id = $1",
    [row.id],
  );
  return { ...row, charge: charge?.amount };
}

/** Gateway and upstream recorded the same tokens and cost, and each charged it once. */
async function expectSameUsage(endpoint: string): Promise<Recorded> {
  const ours = await newest(gateway, endpoint);
  const theirs = await newest(upstream, "/v1/chat/completions");
  expect(ours.status).toBe("completed");
  expect(theirs.status).toBe("completed");
  expect(ours.prompt_tokens).toBeGreaterThan(0);
  expect({
    prompt: ours.prompt_tokens,
    completion: ours.completion_tokens,
    cached: ours.cached_prompt_tokens,
    cost: ours.cost,
  }).toEqual({
    prompt: theirs.prompt_tokens,
    completion: theirs.completion_tokens,
    cached: theirs.cached_prompt_tokens,
    cost: theirs.cost,
  });
  expect(BigInt(ours.cost)).toBeGreaterThan(0n);
  expect(ours.charge).toBe(`-${ours.cost}`);
  expect(theirs.charge).toBe(`-${theirs.cost}`);
  return ours;
}

describe("through the upstream", () => {
  test("when a chat completion names an upstream model, then the upstream generates it and both sides record the same usage", async () => {
    const completion = await openai.chat.completions.create({
      model: "up-chat",
      messages: [{ role: "user", content: "Once upon a time" }],
      max_tokens: 12,
      temperature: 0,
    });
    expect(completion.model).toBe("up-chat");
    expect(completion.choices[0].message.content!.length).toBeGreaterThan(0);
    const ours = await expectSameUsage("/v1/chat/completions");
    expect(ours.model).toBe("up-chat");
    expect(completion.usage).toEqual(
      expect.objectContaining({ prompt_tokens: ours.prompt_tokens, completion_tokens: ours.completion_tokens }),
    );
  });

  test("when a chat completion streams, then text arrives in chunks and the usage chunk carries the upstream's counts", async () => {
    const stream = await openai.chat.completions.create({
      model: "up-chat",
      messages: [{ role: "user", content: "Lily had a red ball" }],
      max_tokens: 16,
      temperature: 0,
      stream: true,
      stream_options: { include_usage: true },
    });
    let text = "";
    let chunks = 0;
    let usage: OpenAI.CompletionUsage | null | undefined;
    for await (const chunk of stream) {
      if (chunk.choices[0]?.delta.content) {
        text += chunk.choices[0].delta.content;
        chunks++;
      }
      if (chunk.usage) usage = chunk.usage;
    }
    expect(chunks).toBeGreaterThan(1);
    expect(text.length).toBeGreaterThan(0);
    const ours = await expectSameUsage("/v1/chat/completions");
    expect(usage).toEqual(
      expect.objectContaining({ prompt_tokens: ours.prompt_tokens, completion_tokens: ours.completion_tokens }),
    );
  });

  test("when embeddings name an upstream model, then the vectors are the upstream's and the prompt tokens match", async () => {
    const input = ["The cat sat on the mat", "A dog ran"];
    const ours = await openai.embeddings.create({ model: "up-embed", input });
    const direct = await http(upstream.url, "POST", "/v1/embeddings", {
      token: (await createTestCaller(upstream.url)).key,
      body: { model: EMBED_MODEL, input },
    });
    expect(ours.data.map((d) => d.embedding.length)).toEqual([64, 64]);
    expect(ours.data[1].embedding[0]).toBeCloseTo(direct.body.data[1].embedding[0], 6);
    expect(ours.usage.prompt_tokens).toBe(direct.body.usage.prompt_tokens);
    const row = await newest(gateway, "/v1/embeddings");
    expect(row.prompt_tokens).toBe(direct.body.usage.prompt_tokens);
    expect(row.cost).toBe(String(3 * direct.body.usage.prompt_tokens));
  });

  test("when a response is created on an upstream model, then it completes through chat completions upstream", async () => {
    const response = await openai.responses.create({
      model: "up-chat",
      input: "Tim found a shell",
      max_output_tokens: 10,
    });
    expect(response.status).toMatch(/^(completed|incomplete)$/);
    expect(response.output_text.length).toBeGreaterThan(0);
    const ours = await expectSameUsage("/v1/responses");
    expect(response.usage).toEqual(
      expect.objectContaining({ input_tokens: ours.prompt_tokens, output_tokens: ours.completion_tokens }),
    );
  });

  test("when a message is created on an upstream model, plain and streamed, then the Anthropic client reads the upstream's usage", async () => {
    const message = await anthropic.messages.create({
      model: "up-chat",
      max_tokens: 10,
      system: "Tell a story.",
      messages: [{ role: "user", content: "Sam and the moon" }],
    });
    expect(message.content[0].type).toBe("text");
    let ours = await expectSameUsage("/v1/messages");
    expect(message.usage.input_tokens + (message.usage.cache_read_input_tokens ?? 0)).toBe(ours.prompt_tokens);
    expect(message.usage.output_tokens).toBe(ours.completion_tokens);

    const stream = anthropic.messages.stream({
      model: "up-chat",
      max_tokens: 10,
      messages: [{ role: "user", content: "Ben saw a bird" }],
    });
    const final = await stream.finalMessage();
    ours = await expectSameUsage("/v1/messages");
    expect(final.usage.output_tokens).toBe(ours.completion_tokens);
    expect(final.usage.input_tokens + (final.usage.cache_read_input_tokens ?? 0)).toBe(ours.prompt_tokens);
  });
});

describe("upstream failures", () => {
  test("when the upstream refuses the request (400), then the caller gets a 400 envelope with its detail, and nothing is charged", async () => {
    const before = await gateway.db<{ n: number }>("SELECT count(*)::int AS n FROM credit_ledger WHERE type = 'usage'");
    const res = await http(gateway.url, "POST", "/v1/chat/completions", {
      token: key,
      body: { model: "up-chat", messages: [{ role: "user", content: "Hi" }], max_tokens: 100_000 },
    });
    expectEnvelope(res, 400);
    expect(res.body.detail).toMatch(/context is 512 tokens/);
    expect(res.body.extra).toEqual([{ field: "messages", message: "context_length_exceeded" }]);
    const after = await gateway.db<{ n: number }>("SELECT count(*)::int AS n FROM credit_ledger WHERE type = 'usage'");
    expect(after[0].n).toBe(before[0].n);
  });

  test("when a model's only upstream was down at start, then the gateway still serves and that model answers a 503 envelope", async () => {
    const res = await http(gateway.url, "POST", "/v1/chat/completions", {
      token: key,
      body: { model: "up-dead", messages: [{ role: "user", content: "Hi" }], max_tokens: 4 },
    });
    expectEnvelope(res, 503);
    expect(res.body.detail).toMatch(/1 endpoint: connection refused/);
    expect(res.body.detail).not.toContain("dead:");
    expect(res.headers.get("retry-after")).toBe("5");
    // The embedded default model loaded as always.
    expect((await http(gateway.url, "GET", "/v1/health/ready")).status).toBe(200);
    const [row] = await gateway.db<{ status: string; cost: string }>(
      "SELECT status, cost_micros::text AS cost FROM activity WHERE model = 'up-dead'",
    );
    expect(row).toEqual({ status: "failed", cost: "0" });
  });

  test("when the caller aborts a stream, then the upstream request is cancelled too", async () => {
    // The upstream's next generation waits (its stream already open) until released.
    const held = await holdNextGeneration();
    const controller = new AbortController();
    const stream = await openai.chat.completions.create(
      {
        model: "up-chat-a",
        messages: [{ role: "user", content: "A long story" }],
        max_tokens: 200,
        stream: true,
      },
      { signal: controller.signal },
    );
    await held.started;
    const iterator = stream[Symbol.asyncIterator]();
    await iterator.next(); // the role chunk: both streams are open
    controller.abort();
    await iterator.next().catch(() => undefined);
    held.release();
    let upstreamRow: Recorded | undefined;
    expect(
      await eventually(async () => {
        upstreamRow = await newest(upstream, "/v1/chat/completions");
        return upstreamRow.status === "cancelled";
      }, 10_000),
    ).toBe(true);
    // The gateway records its side once it has seen the stream end (it may come after the upstream's).
    let ours: Recorded | undefined;
    expect(
      await eventually(async () => {
        ours = await newest(gateway, "/v1/chat/completions");
        return ours.model === "up-chat-a";
      }, 10_000),
    ).toBe(true);
    expect(ours!.status).toBe("cancelled");
  });
});

test("when one of two replicas is killed (SIGKILL) between requests, then every request still succeeds on the other", async () => {
  const engine = gateway.app.engines.engineFor(gateway.app.catalog.all().find((m) => m.id === "up-chat")!);
  expect(engine).toBeInstanceOf(OpenAiCompatibleEngine);
  const upstreams = engine as OpenAiCompatibleEngine;
  const ask = (i: number) =>
    openai.chat.completions.create({
      model: "up-chat",
      messages: [{ role: "user", content: `Story ${i}` }],
      max_tokens: 4,
      temperature: 0,
    });
  for (let i = 0; i < 4; i++) await ask(i); // both replicas take turns
  expect(upstreams.health().b.healthy).toBe(true);

  process.kill(replicaB.child.pid!, "SIGKILL");
  await replicaB.exited;
  // The gateway notices the dropped keep-alive connections (no request is in flight on them).
  expect(await eventually(async () => upstreams.health().b.connected === 0, 5_000)).toBe(true);
  for (let i = 0; i < 6; i++) {
    const completion = await ask(100 + i);
    expect(completion.choices[0].finish_reason).toMatch(/^(stop|length)$/);
  }
  expect(upstreams.health().b).toEqual(expect.objectContaining({ healthy: false, reason: "connection refused" }));
  expect(upstreams.health().a.healthy).toBe(true);
});
