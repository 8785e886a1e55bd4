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
  /** false: `/tokenize` answers 404, as on servers without it. */
  tokenize: true,
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
  if (req.method === "POST" && req.url === "/tokenize" && fake.tokenize) {
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
    // The exact count plus the template's allowance: 8 a message and 16 once.
    expect(fake.chatBodies.at(-1)!.max_tokens).toBe(CONTEXT - (100 + 8 + 16));

    // Many short messages: a modest allowance each, so they still fit.
    fake.tokenCount = 30;
    const many = Array.from({ length: 40 }, () => ({ role: "user", content: "ok" }));
    const fits = await call(gateway.url, "POST", "/v1/chat/completions", {
      token: key,
      body: { model: "fake-chat", messages: many },
    });
    expect(fits.status).toBe(200);
    expect(fake.chatBodies.at(-1)!.max_tokens).toBe(CONTEXT - (30 + 8 * 40 + 16));

    fake.tokenCount = 600;
    const refused = await chat(long);
    expectEnvelope(refused, 400);
    expect(refused.body.detail).toContain(`context is ${CONTEXT} tokens`);
    expect(refused.body.extra).toEqual([{ field: "messages", message: "context_length_exceeded" }]);
    expect(fake.chatBodies.length).toBe(sent + 2);
  });
});

describe("a caller who leaves a non-streamed request", () => {
  test("when the caller aborts while the upstream generates, then the upstream connection closes and the request is recorded cancelled and charged for its prompt as the upstream counts it", async () => {
    fake.tokenCount = 10;
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
    // No usage came (it comes last): the /tokenize count plus the template's allowance.
    expect(row.prompt_tokens).toBe(10 + 8 + 16);
    expect(Number(row.cost_micros)).toBe(row.prompt_tokens * 2 + row.completion_tokens * 5);
    const [charge] = await gateway.db<{ amount: string }>(
      "SELECT amount_micros::text AS amount FROM credit_ledger WHERE type = 'usage' AND source_id = $1",
      [row.id],
    );
    expect(BigInt(charge.amount)).toBe(-BigInt(row.cost_micros));
  });
});

describe("an upstream without /tokenize", () => {
  test("when the prompt's bytes reach the context, then the byte bound is reserved uncapped and the whole context is sent as max_tokens", async () => {
    fake.tokenize = false;
    const long = "word ".repeat(200); // 1000 bytes, 1032 with the allowances
    const caller = await createTestCaller(gateway.url);
    // Credit for less than the uncapped bound at the input price (2 µUSD a token) plus the
    // context at the output price (5): the reservation refuses it before the upstream sees it.
    await gateway.db("UPDATE teams SET credit_balance_micros = $2 WHERE id = $1", [
      caller.teamId,
      2 * 600 + 5 * CONTEXT,
    ]);
    const sent = fake.chatBodies.length;
    const refused = await call(gateway.url, "POST", "/v1/chat/completions", {
      token: caller.key,
      body: { model: "fake-chat", messages: [{ role: "user", content: long }] },
    });
    expectEnvelope(refused, 402);
    expect(refused.body.extra.required_micros).toBe(2 * 1032 + 5 * CONTEXT);
    expect(fake.chatBodies.length).toBe(sent);

    expect((await chat(long)).status).toBe(200);
    expect(fake.chatBodies.at(-1)!.max_tokens).toBe(CONTEXT);
  });
});
