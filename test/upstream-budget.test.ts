/**
 * What a request to an upstream engine reserves and sends (issue 9 review, findings 4 and 5),
 * against a loopback fake of a vLLM-style server (`/v1/models`, `/tokenize`, streamed
 * `/v1/chat/completions`) that records what it receives:
 * - without `max_tokens`, the rest of the context after the prompt bound is sent as `max_tokens`,
 *   so the upstream cannot generate past what was reserved; near the context the upstream's
 *   `/tokenize` count is the bound, and a prompt over the context is refused here (400);
 * - a caller of a non-streamed request who leaves is recorded `cancelled` with what the upstream
 *   did until then, and charged for it, and the upstream connection is closed.
 */
import http, { type IncomingMessage, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { randomUUID } from "node:crypto";
import {
  CHAT_MODEL,
  type TestServer,
  activityByCustomId,
  createTestCaller,
  eventually,
  expectEnvelope,
  http as call,
  openaiClient,
  startTestServer,
} from "./support/harness.js";
import { writeEditedCatalog } from "./support/test-catalog.js";

const CONTEXT = 512;
const UPSTREAM_MODEL = "org/fake-model";

/** What the fake upstream received and how it answers next. */
const fake = {
  chatBodies: [] as Array<Record<string, unknown>>,
  /** Tokens `/tokenize` reports for any text. */
  tokenCount: 100,
  tokenizeCalls: 0,
  /** When set, the next chat stream sends its role chunk and then waits for this to resolve. */
  hold: null as null | { started: () => void; released: Promise<void> },
  closedEarly: 0,
};

function readBody(req: IncomingMessage): Promise<string> {
  return new Promise((resolve) => {
    let text = "";
    req.on("data", (c: Buffer) => (text += c.toString("utf8")));
    req.on("end", () => resolve(text));
  });
}

async function handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
  const body = await readBody(req);
  if (req.method === "GET" && req.url === "/v1/models") {
    res.writeHead(200, { "content-type": "application/json" });
    res.end(JSON.stringify({ object: "list", data: [{ id: UPSTREAM_MODEL, object: "model" }] }));
    return;
  }
  if (req.method === "POST" && req.url === "/tokenize") {
    fake.tokenizeCalls++;
    res.writeHead(200, { "content-type": "application/json" });
    res.end(JSON.stringify({ count: fake.tokenCount, tokens: [] }));
    return;
  }
  if (req.method === "POST" && req.url === "/v1/chat/completions") {
    const json = JSON.parse(body) as Record<string, unknown>;
    fake.chatBodies.push(json);
    res.writeHead(200, { "content-type": "text/event-stream" });
    const chunk = (delta: Record<string, unknown>, finish: string | null, usage?: unknown) =>
      `data: ${JSON.stringify({
        id: "c1",
        object: "chat.completion.chunk",
        created: 1,
        model: UPSTREAM_MODEL,
        choices: [{ index: 0, delta, finish_reason: finish }],
        ...(usage ? { usage } : {}),
      })}\n\n`;
    res.write(chunk({ role: "assistant", content: "" }, null));
    const hold = fake.hold;
    if (hold) {
      fake.hold = null;
      res.on("close", () => {
        if (!res.writableEnded) fake.closedEarly++;
      });
      hold.started();
      await hold.released;
      if (res.destroyed) return;
    }
    res.write(chunk({ content: "Once upon" }, null));
    res.write(chunk({ content: " a time." }, "stop"));
    res.write(
      `data: ${JSON.stringify({ id: "c1", object: "chat.completion.chunk", created: 1, model: UPSTREAM_MODEL, choices: [], usage: { prompt_tokens: 7, completion_tokens: 3, total_tokens: 10 } })}\n\n`,
    );
    res.end("data: [DONE]\n\n");
    return;
  }
  res.writeHead(404).end();
}

let upstream: http.Server;
let gateway: TestServer;
let key: string;

beforeAll(async () => {
  upstream = http.createServer((req, res) => void handle(req, res));
  await new Promise<void>((resolve) => upstream.listen(0, "127.0.0.1", resolve));
  const port = (upstream.address() as AddressInfo).port;
  const catalogPath = writeEditedCatalog((c) => {
    const chat = c.models.find((m) => m.id === CHAT_MODEL)!;
    c.models.push({
      ...structuredClone(chat),
      id: "fake-chat",
      display_name: "fake-chat",
      context_tokens: CONTEXT,
      pricing: { input_per_million_usd: 2, cached_input_per_million_usd: 1, output_per_million_usd: 5 },
      engine: { type: "openai_compatible", upstream_model: UPSTREAM_MODEL },
    });
  });
  gateway = await startTestServer({
    catalogPath,
    upstreams: [{ name: "fake", base_url: `http://127.0.0.1:${port}/v1`, models: [UPSTREAM_MODEL] }],
  });
  key = (await createTestCaller(gateway.url)).key;
}, 60_000);

afterAll(async () => {
  await gateway?.close();
  await new Promise((resolve) => upstream?.close(resolve));
});

const chat = (content: string, extra: Record<string, unknown> = {}) =>
  call(gateway.url, "POST", "/v1/chat/completions", {
    token: key,
    body: { model: "fake-chat", messages: [{ role: "user", content }], ...extra },
  });

describe("max_tokens sent upstream", () => {
  test("when the caller gives no max_tokens, then the rest of the context after the prompt bound is sent, and a caller's max_tokens is sent as given", async () => {
    const res = await chat("Hi");
    expect(res.status).toBe(200);
    // Bound: 2 bytes + 16 for the message + 16 for the template.
    expect(fake.chatBodies.at(-1)).toMatchObject({ max_tokens: CONTEXT - (2 + 32), stream: true });
    expect((await chat("Hi", { max_tokens: 9 })).status).toBe(200);
    expect(fake.chatBodies.at(-1)!.max_tokens).toBe(9);
    expect(fake.tokenizeCalls).toBe(0);
  });

  test("when the prompt's bytes reach the context, then the upstream's /tokenize count is the bound; over the context, 400 before any chat request", async () => {
    const long = "word ".repeat(200); // 1000 bytes
    fake.tokenCount = 100;
    const sent = fake.chatBodies.length;
    expect((await chat(long)).status).toBe(200);
    expect(fake.tokenizeCalls).toBe(1);
    expect(fake.chatBodies.at(-1)!.max_tokens).toBe(CONTEXT - (100 + 32));

    fake.tokenCount = 600;
    const refused = await chat(long);
    expectEnvelope(refused, 400);
    expect(refused.body.detail).toContain(`context is ${CONTEXT} tokens`);
    expect(refused.body.extra).toEqual([{ field: "messages", message: "context_length_exceeded" }]);
    expect(fake.chatBodies.length).toBe(sent + 1);
  });
});

describe("a caller who leaves a non-streamed request", () => {
  test("when the caller aborts while the upstream generates, then the upstream connection closes and the request is recorded cancelled and charged for its prompt", async () => {
    let started!: () => void;
    const startedP = new Promise<void>((r) => (started = r));
    let release!: () => void;
    fake.hold = { started, released: new Promise<void>((r) => (release = r)) };
    const controller = new AbortController();
    const customId = randomUUID();
    const pending = openaiClient(gateway.url, key)
      .chat.completions.create(
        {
          model: "fake-chat",
          messages: [{ role: "user", content: "A long story about a dragon" }],
          metadata: { custom_id: customId },
        } as never,
        { signal: controller.signal, maxRetries: 0 },
      )
      .catch((err: unknown) => err);
    await startedP;
    controller.abort();
    await pending;
    expect(await eventually(async () => fake.closedEarly === 1, 10_000)).toBe(true);
    release();
    const row = await activityByCustomId(gateway, customId);
    expect(row.status).toBe("cancelled");
    expect(row.prompt_tokens).toBeGreaterThan(0);
    expect(Number(row.cost_micros)).toBe(row.prompt_tokens * 2 + row.completion_tokens * 5);
    const [charge] = await gateway.db<{ amount: string }>(
      "SELECT amount_micros::text AS amount FROM credit_ledger WHERE type = 'usage' AND source_id = $1",
      [row.id],
    );
    expect(BigInt(charge.amount)).toBe(-BigInt(row.cost_micros));
  });
});
