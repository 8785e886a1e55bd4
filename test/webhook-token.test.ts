/**
 * The webhook token at rest (issue 6, item 3; spec: Events rule 1; DESIGN §3 Webhooks): the
 * token a create request sends in `metadata.webhook_token` reaches the receiver as
 * `Authorization: Bearer …`, but is never stored with the request (activity `body_json`,
 * `responses.metadata`, `responses.request_json` hold `"[redacted]"`) nor readable back through
 * any API. A background response keeps it apart (`responses.webhook_token`) only until its record
 * is written. Rows are read straight from the database, and through the API.
 */
import { createDataSource } from "../src/db/data-source.js";
import { WebhookToken1764450000000 } from "../src/db/migrations/1764450000000-webhook-token.js";
import { holdNextGeneration } from "./support/engine-faults.js";
import {
  CHAT_MODEL,
  EMBED_MODEL,
  type TestServer,
  createTestCaller,
  createTestDatabase,
  eventually,
  http,
  startTestServer,
} from "./support/harness.js";
import { type WebhookReceiver, startWebhookReceiver } from "./support/webhook-receiver.js";

const WEBHOOKS = { webhookAllowPrivate: true, webhookRetryDelaysMs: "50,50,50", webhookTimeoutMs: 2_000 };

let server: TestServer;
let receiver: WebhookReceiver;
let caller: Awaited<ReturnType<typeof createTestCaller>>;

beforeAll(async () => {
  server = await startTestServer(WEBHOOKS);
  receiver = await startWebhookReceiver();
  caller = await createTestCaller(server.url);
});
afterAll(async () => {
  await server.close();
  await receiver.close();
});

/** The first delivery that reached `path` (waits for it). */
async function deliveredTo(path: string) {
  expect(await eventually(async () => receiver.on(path).length > 0, 15_000)).toBe(true);
  return receiver.on(path)[0];
}

/** Every stored row of a request (by activity custom_id, and its response row by id), as text and as JSON. */
async function storedRows(s: TestServer, customId: string) {
  let activity: { id: string; body_json: any; text: string } | undefined;
  await eventually(async () => {
    [activity] = await s.db<{ id: string; body_json: any; text: string }>(
      "SELECT a.id, a.body_json, a::text AS text FROM activity a WHERE custom_id = $1",
      [customId],
    );
    return activity !== undefined;
  }, 10_000);
  const [response] = await s.db<{ metadata: any; request_json: any; webhook_token: string | null; text: string }>(
    "SELECT metadata, request_json, webhook_token, r::text AS text FROM responses r WHERE id = $1",
    [activity!.id],
  );
  return { activity: activity!, response };
}

describe("the webhook token is delivered but never stored with the request", () => {
  const creates: Array<[string, string, (metadata: Record<string, unknown>) => Record<string, unknown>]> = [
    ["/v1/responses", "responses", (metadata) => ({ model: CHAT_MODEL, input: "Sam", max_output_tokens: 4, metadata })],
    [
      "/v1/chat/completions",
      "chat",
      (metadata) => ({ model: CHAT_MODEL, messages: [{ role: "user", content: "Sam" }], max_tokens: 4, metadata }),
    ],
    ["/v1/embeddings", "embeddings", (metadata) => ({ model: EMBED_MODEL, input: "Sam", metadata })],
    [
      "/v1/messages",
      "messages",
      (metadata) => ({ model: CHAT_MODEL, messages: [{ role: "user", content: "Sam" }], max_tokens: 4, metadata }),
    ],
  ];

  test.each(creates)(
    "when %s carries webhook_token, then the receiver gets it and no stored row or API answer holds it",
    async (path, name, body) => {
      const token = `tok-${name}-7c1e9f`;
      const hook = `/at-rest-${name}`;
      const customId = `at-rest-${name}`;
      const res = await http(server.url, "POST", path, {
        token: caller.key,
        body: body({ completion_webhook: `${receiver.url}${hook}`, webhook_token: token, custom_id: customId }),
      });
      expect(res.status).toBe(200);
      expect((await deliveredTo(hook)).headers.authorization).toBe(`Bearer ${token}`);

      const { activity, response } = await storedRows(server, customId);
      expect(activity.body_json.metadata).toMatchObject({ webhook_token: "[redacted]", custom_id: customId });
      expect(activity.text).not.toContain(token);
      if (path === "/v1/responses") {
        expect(response.metadata.webhook_token).toBe("[redacted]");
        expect(response.request_json.metadata.webhook_token).toBe("[redacted]");
        expect(response.webhook_token).toBeNull();
        expect(response.text).not.toContain(token);
        const read = await http(server.url, "GET", `/v1/responses/${activity.id}`, { token: caller.key });
        expect(read.status).toBe(200);
        expect(read.text).not.toContain(token);
      } else {
        expect(response).toBeUndefined();
      }
      // The events feed (REST and GraphQL) carries the request's result, never its metadata.
      const feed = await http(server.url, "GET", "/v1/responses/events?limit=100", { token: caller.key });
      expect(feed.body.data.map((e: any) => e.response_id)).toContain(activity.id);
      expect(feed.text).not.toContain(token);
      const gql = await http(server.url, "POST", "/graphql", {
        token: caller.key,
        body: { query: "{ completionEvents(limit: 100) { data { responseId result error } } }" },
      });
      expect(gql.body.data.completionEvents.data.map((e: any) => e.responseId)).toContain(activity.id);
      expect(gql.text).not.toContain(token);
    },
  );

  test("when a background response carries webhook_token, then it is kept apart until the record is written, and delivered", async () => {
    const token = "tok-background-51d0aa";
    const held = await holdNextGeneration();
    const res = await http(server.url, "POST", "/v1/responses", {
      token: caller.key,
      body: {
        model: CHAT_MODEL,
        input: "Sam",
        background: true,
        max_output_tokens: 4,
        metadata: { completion_webhook: `${receiver.url}/at-rest-bg`, webhook_token: token, custom_id: "at-rest-bg" },
      },
    });
    expect(res.status).toBe(200);
    expect(res.text).not.toContain(token);
    await held.started;
    // While it runs: the stored request is redacted; only the column kept apart has the token.
    const [running] = await server.db<{ metadata: any; request_json: any; webhook_token: string; stored: string }>(
      `SELECT metadata, request_json, webhook_token,
              (to_jsonb(r) - 'webhook_token')::text AS stored FROM responses r WHERE id = $1`,
      [res.body.id],
    );
    expect(running.metadata.webhook_token).toBe("[redacted]");
    expect(running.request_json.metadata.webhook_token).toBe("[redacted]");
    expect(running.webhook_token).toBe(token);
    expect(running.stored).not.toContain(token);
    const inProgress = await http(server.url, "GET", `/v1/responses/${res.body.id}`, { token: caller.key });
    expect(inProgress.body.status).toBe("in_progress");
    expect(inProgress.text).not.toContain(token);
    held.release();

    const got = await deliveredTo("/at-rest-bg");
    expect(got.headers.authorization).toBe(`Bearer ${token}`);
    expect(JSON.parse(got.body)).toMatchObject({ id: res.body.id, status: "incomplete" });
    // Once the record is written, the outbox row alone carries the token (and drops it when delivered).
    expect(await eventually(async () => (await storedRows(server, "at-rest-bg")).response.webhook_token === null)).toBe(
      true,
    );
    const { activity, response } = await storedRows(server, "at-rest-bg");
    expect(activity.text).not.toContain(token);
    expect(response.text).not.toContain(token);
    const list = await http(server.url, "GET", "/v1/responses", { token: caller.key });
    expect(list.text).not.toContain(token);
  });

  test("when a background response that no worker runs is cancelled, then its cancelled Response is delivered with the token, and the token is dropped", async () => {
    const api = await startTestServer({ ...WEBHOOKS, role: "api" });
    try {
      const c = await createTestCaller(api.url);
      const token = "tok-cancelled-93be02";
      const res = await http(api.url, "POST", "/v1/responses", {
        token: c.key,
        body: {
          model: CHAT_MODEL,
          input: "Sam",
          background: true,
          metadata: { completion_webhook: `${receiver.url}/at-rest-cancel`, webhook_token: token, custom_id: "bg-x" },
        },
      });
      const cancelled = await http(api.url, "POST", `/v1/responses/${res.body.id}/cancel`, { token: c.key });
      expect(cancelled.body.status).toBe("cancelled");
      expect(cancelled.text).not.toContain(token);
      const got = await deliveredTo("/at-rest-cancel");
      expect(got.headers.authorization).toBe(`Bearer ${token}`);
      expect(JSON.parse(got.body)).toMatchObject({ id: res.body.id, status: "cancelled" });
      const { activity, response } = await storedRows(api, "bg-x");
      expect(activity.text).not.toContain(token);
      expect(response.webhook_token).toBeNull();
      expect(response.text).not.toContain(token);
    } finally {
      await api.close();
    }
  }, 30_000);

  test("when a webhook_token is sent without credentials or with a bad body, then nothing is stored", async () => {
    const token = "tok-refused-0a0a0a";
    const unauthenticated = await http(server.url, "POST", "/v1/responses", {
      body: { model: CHAT_MODEL, input: "Sam", metadata: { webhook_token: token } },
    });
    expect(unauthenticated.status).toBe(401);
    const invalid = await http(server.url, "POST", "/v1/responses", {
      token: caller.key,
      body: { model: CHAT_MODEL, input: "Sam", temperature: 9, metadata: { webhook_token: token } },
    });
    expect(invalid.status).toBe(400);
    expect(invalid.text).not.toContain(token);
    const rows = await server.db("SELECT 1 FROM responses r WHERE r::text LIKE $1", [`%${token}%`]);
    expect(rows).toEqual([]);
  });
});

describe("migration", () => {
  test("when tokens were stored before the migration, then it redacts them and keeps an unfinished background response's token apart", async () => {
    const db = await createTestDatabase();
    const ds = createDataSource(db.url, 1);
    await ds.initialize();
    const runner = ds.createQueryRunner();
    const migration = new WebhookToken1764450000000();
    try {
      await migration.down(runner);
      const [team] = await db.query<{ id: string }>(
        "INSERT INTO teams (id, name) VALUES (gen_random_uuid(), 't') RETURNING id",
      );
      const body = (token: string) =>
        JSON.stringify({
          model: CHAT_MODEL,
          input: "x",
          metadata: { completion_webhook: "https://e.x/h", webhook_token: token },
        });
      const meta = (token: string) => JSON.stringify({ completion_webhook: "https://e.x/h", webhook_token: token });
      await db.query(
        `INSERT INTO responses (id, team_id, model, status, background, metadata, request_json, response_json, created_at)
         VALUES ('0190b7a4-7c1e-7000-8000-000000000001', $1, 'm', 'in_progress', true, $2, $3, '{}', now()),
                ('0190b7a4-7c1e-7000-8000-000000000002', $1, 'm', 'completed', false, $4, $5, '{}', now()),
                ('0190b7a4-7c1e-7000-8000-000000000003', $1, 'm', 'completed', false, NULL, '"not an object"', '{}', now())`,
        [team.id, meta("old-running"), body("old-running"), meta("old-done"), body("old-done")],
      );
      await db.query(
        `INSERT INTO activity (id, team_id, type, status, endpoint, model, body_json, created_at)
         VALUES ('0190b7a4-7c1e-7000-8000-000000000002', $1, 'standalone', 'completed', '/v1/responses', 'm', $2, now())`,
        [team.id, body("old-done")],
      );
      await migration.up(runner);
      const responses = await db.query<{ id: string; webhook_token: string | null; metadata: any; request_json: any }>(
        "SELECT id, webhook_token, metadata, request_json FROM responses ORDER BY id",
      );
      expect(responses.map((r) => r.webhook_token)).toEqual(["old-running", null, null]);
      expect(responses[0].metadata.webhook_token).toBe("[redacted]");
      expect(responses[0].request_json.metadata.webhook_token).toBe("[redacted]");
      expect(responses[1].metadata).toEqual({ completion_webhook: "https://e.x/h", webhook_token: "[redacted]" });
      expect(responses[1].request_json.metadata.webhook_token).toBe("[redacted]");
      expect(responses[2].request_json).toBe("not an object");
      const [activity] = await db.query<{ body_json: any }>("SELECT body_json FROM activity");
      expect(activity.body_json.metadata.webhook_token).toBe("[redacted]");
      expect(activity.body_json.model).toBe(CHAT_MODEL);
    } finally {
      await runner.release();
      await ds.destroy();
      await db.close();
    }
  });
});
