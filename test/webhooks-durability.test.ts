/**
 * Webhook durability (issue 6, item 3; DESIGN §3 Webhooks): the outbox row commits in the same
 * transaction as the request's record, any number of processes share the outbox (each delivery
 * sent by one of them, SKIP LOCKED), and a delivery left behind by a process that died (committed
 * but never sent, or leased and never finished) is sent by the survivors.
 */
import { v7 as uuidv7 } from "uuid";
import { CHAT_MODEL, type TestServer, createTestCaller, eventually, http, startTestServer } from "./support/harness.js";
import { type WebhookReceiver, startWebhookReceiver } from "./support/webhook-receiver.js";

const WEBHOOK_CONFIG = { webhookAllowPrivate: true, webhookRetryDelaysMs: "50,50,50", webhookTimeoutMs: 2000 };
let a: TestServer;
let b: TestServer;
let receiver: WebhookReceiver;
let caller: Awaited<ReturnType<typeof createTestCaller>>;

beforeAll(async () => {
  a = await startTestServer(WEBHOOK_CONFIG);
  b = await startTestServer(WEBHOOK_CONFIG, a);
  receiver = await startWebhookReceiver();
  caller = await createTestCaller(a.url);
});
afterAll(async () => {
  await b.close();
  await a.close();
  await receiver.close();
});

test("when two processes share the outbox, then every finished request is delivered exactly once", async () => {
  const ids: string[] = [];
  await Promise.all(
    Array.from({ length: 12 }, async (_, i) => {
      const res = await http(i % 2 ? a.url : b.url, "POST", "/v1/responses", {
        token: caller.key,
        body: {
          model: CHAT_MODEL,
          input: "Sam",
          max_output_tokens: 4,
          metadata: { completion_webhook: `${receiver.url}/shared` },
        },
      });
      expect(res.status).toBe(200);
      ids.push(res.body.id);
    }),
  );
  expect(
    await eventually(async () => {
      const rows = await a.db("SELECT 1 FROM webhook_deliveries WHERE response_id = ANY($1) AND status = 'delivered'", [
        ids,
      ]);
      return rows.length === ids.length;
    }, 15_000),
  ).toBe(true);
  const got = receiver.on("/shared").map((r) => String(r.headers["webhook-id"]));
  expect(got.sort()).toEqual([...ids].sort());
});

test("when a process died after committing a delivery, or in the middle of an attempt, then a surviving process sends it", async () => {
  const committed = uuidv7();
  const leased = uuidv7();
  for (const [responseId, attempts, due] of [
    [committed, 0, "now()"],
    // Leased by a dead process for its first attempt; the lease has run out.
    [leased, 1, "now() - interval '1 second'"],
  ] as const) {
    await a.db(
      `INSERT INTO webhook_deliveries (id, team_id, response_id, url, token, body, attempts, next_attempt_at)
       VALUES ($1, $2, $3, $4, 'tk', $5, $6, ${due})`,
      [
        uuidv7(),
        caller.teamId,
        responseId,
        `${receiver.url}/orphans`,
        JSON.stringify({ id: responseId, status: "completed" }),
        attempts,
      ],
    );
  }
  await a.db("SELECT pg_notify('switchyard_cache', 'webhook:')");
  expect(await eventually(async () => receiver.on("/orphans").length === 2, 10_000)).toBe(true);
  const byId = Object.fromEntries(receiver.on("/orphans").map((r) => [r.headers["webhook-id"], r]));
  expect(JSON.parse(byId[committed].body)).toEqual({ id: committed, status: "completed" });
  expect(byId[leased].headers.authorization).toBe("Bearer tk");
  // An attempt is recorded once its answer came back, a moment after the receiver saw it.
  let attempts: Array<{ response_id: string; attempt: number }> = [];
  await eventually(async () => {
    attempts = await a.db<{ response_id: string; attempt: number }>(
      `SELECT d.response_id, a.attempt FROM webhook_attempts a JOIN webhook_deliveries d ON d.id = a.delivery_id
        WHERE d.response_id = ANY($1) ORDER BY d.response_id`,
      [[committed, leased]],
    );
    return attempts.length === 2;
  }, 10_000);
  expect(Object.fromEntries(attempts.map((r) => [r.response_id, r.attempt]))).toEqual({ [committed]: 1, [leased]: 2 });
});

test("when the outbox write is refused, then the request's record is refused with it (one transaction)", async () => {
  await a.db(`CREATE OR REPLACE FUNCTION refuse_for_test() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN RAISE EXCEPTION 'refused by the test'; END $$`);
  await a.db(
    `CREATE TRIGGER refuse_webhooks BEFORE INSERT ON webhook_deliveries FOR EACH ROW EXECUTE FUNCTION refuse_for_test()`,
  );
  try {
    const customId = `atomic-${uuidv7()}`;
    const res = await http(a.url, "POST", "/v1/chat/completions", {
      token: caller.key,
      body: {
        model: CHAT_MODEL,
        messages: [{ role: "user", content: "Sam" }],
        max_tokens: 4,
        metadata: { completion_webhook: `${receiver.url}/atomic`, custom_id: customId },
      },
    });
    expect(res.status).toBe(503);
    expect(await a.db("SELECT 1 FROM activity WHERE custom_id = $1", [customId])).toHaveLength(0);
    // Without a webhook the same request is recorded: only the outbox refused.
    const plain = await http(a.url, "POST", "/v1/chat/completions", {
      token: caller.key,
      body: {
        model: CHAT_MODEL,
        messages: [{ role: "user", content: "Sam" }],
        max_tokens: 4,
        metadata: { custom_id: `${customId}-plain` },
      },
    });
    expect(plain.status).toBe(200);
    expect(await a.db("SELECT 1 FROM activity WHERE custom_id = $1", [`${customId}-plain`])).toHaveLength(1);
  } finally {
    await a.db("DROP TRIGGER refuse_webhooks ON webhook_deliveries");
  }
  expect(receiver.on("/atomic")).toHaveLength(0);
});

describe("terminal records written outside the synchronous path (background workers)", () => {
  function record(status: string, responseStatus: string, path: string) {
    const id = uuidv7();
    const now = new Date();
    return {
      id,
      principal: {
        userId: caller.userId,
        teamId: caller.teamId,
        role: "owner" as const,
        email: caller.email,
        apiKey: null,
      },
      type: "standalone" as const,
      status: status as "failed",
      endpoint: "/v1/responses",
      model: CHAT_MODEL,
      customId: null,
      streamId: null,
      usage: { promptTokens: 0, completionTokens: 0, cachedPromptTokens: 0 },
      costMicros: 0n,
      bodyJson: null,
      resultJson: null,
      errorJson: { code: "timeout", message: "deadline passed" },
      engineMs: null,
      createdAt: now,
      completedAt: now,
      response: {
        status: responseStatus,
        background: true,
        metadata: { completion_webhook: `${receiver.url}${path}`, webhook_token: "bg" },
        requestJson: {},
        responseJson: {
          id,
          object: "response",
          status: responseStatus,
          error: responseStatus === "failed" ? { code: "timeout", message: "deadline passed" } : null,
        },
      },
    };
  }

  test("when a record stores a terminal Response whose metadata names a webhook, then that Response is delivered", async () => {
    const r = record("failed", "failed", "/background");
    await a.app.metering.record(r);
    expect(await eventually(async () => receiver.on("/background").length === 1, 10_000)).toBe(true);
    const [got] = receiver.on("/background");
    expect(JSON.parse(got.body)).toEqual(r.response.responseJson);
    expect(got.headers["webhook-id"]).toBe(r.id);
    expect(got.headers.authorization).toBe("Bearer bg");
  });

  test("when a record stores a Response still in progress, then nothing is delivered", async () => {
    const r = record("running", "in_progress", "/still-running");
    await a.app.metering.record(r as never);
    expect(await a.db("SELECT 1 FROM webhook_deliveries WHERE response_id = $1", [r.id])).toHaveLength(0);
  });
});
