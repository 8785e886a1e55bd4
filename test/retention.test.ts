/**
 * Retention (issue 12, item 4): with `SWITCHYARD_BODY_RETENTION_DAYS`, activity rows older than
 * that lose their request and result bodies, in batches, and keep everything else (tokens, cost,
 * status, usage); newer rows keep theirs; without the setting nothing is cleared. Completion
 * events older than 30 days are deleted, also in batches.
 */
import { randomUUID } from "node:crypto";
import {
  CHAT_MODEL,
  type TestServer,
  activityByCustomId,
  createTestCaller,
  http,
  startTestServer,
} from "./support/harness.js";

let server: TestServer;

beforeAll(async () => {
  // A long interval: the test runs the job itself.
  server = await startTestServer({ bodyRetentionDays: 7 });
}, 60_000);
afterAll(() => server.close());

async function chat(key: string): Promise<any> {
  const customId = randomUUID();
  const res = await http(server.url, "POST", "/v1/chat/completions", {
    token: key,
    body: {
      model: CHAT_MODEL,
      messages: [{ role: "user", content: "Tom" }],
      max_tokens: 2,
      metadata: { custom_id: customId },
    },
  });
  expect(res.status).toBe(200);
  return activityByCustomId(server, customId);
}

test("when activity rows are older than the body retention, then their bodies are cleared and everything else stays; newer rows keep theirs", async () => {
  const caller = await createTestCaller(server.url);
  const old = [await chat(caller.key), await chat(caller.key), await chat(caller.key)];
  const fresh = await chat(caller.key);
  expect(old[0].body_json).not.toBeNull();
  await server.db("UPDATE activity SET created_at = now() - interval '8 days' WHERE id = ANY($1)", [
    old.map((r) => r.id),
  ]);
  const [usageBefore] = await server.db<{ tokens: string }>(
    "SELECT sum(prompt_tokens + completion_tokens)::text AS tokens FROM usage_daily WHERE team_id = $1",
    [caller.teamId],
  );

  const cleared = await server.app.retention.runOnce();
  expect(cleared).toBeGreaterThanOrEqual(3);
  const rows = await server.db<any>(
    "SELECT id, body_json, result_json, prompt_tokens, cost_micros::text AS cost, status FROM activity WHERE id = ANY($1)",
    [[...old, fresh].map((r) => r.id)],
  );
  for (const r of old) {
    const now = rows.find((x) => x.id === r.id);
    expect(now).toMatchObject({ body_json: null, result_json: null, prompt_tokens: r.prompt_tokens, status: r.status });
    expect(now.cost).toBe(String(r.cost_micros));
  }
  expect(rows.find((x) => x.id === fresh.id).body_json).not.toBeNull();
  const [usageAfter] = await server.db<{ tokens: string }>(
    "SELECT sum(prompt_tokens + completion_tokens)::text AS tokens FROM usage_daily WHERE team_id = $1",
    [caller.teamId],
  );
  expect(usageAfter).toEqual(usageBefore);
  // The detail answers without a body.
  const detail = await http(server.url, "GET", `/control/v1/activity/${old[0].id}`, { token: caller.token });
  expect(detail.status).toBe(200);
  expect(detail.body.body_json ?? null).toBeNull();
});

test("when completion events are older than 30 days, then the cleanup deletes them and keeps the rest", async () => {
  const caller = await createTestCaller(server.url);
  const rows = [await chat(caller.key), await chat(caller.key), await chat(caller.key)];
  const events = async () =>
    (
      await server.db<{ response_id: string }>("SELECT response_id FROM completion_events WHERE team_id = $1", [
        caller.teamId,
      ])
    ).map((e) => e.response_id);
  expect((await events()).sort()).toEqual(rows.map((r) => r.id).sort());
  await server.db(
    "UPDATE completion_events SET completed_at = now() - interval '31 days' WHERE response_id = ANY($1)",
    [[rows[0].id, rows[1].id]],
  );
  expect(await server.app.events.deleteExpired()).toBeGreaterThanOrEqual(2);
  expect(await events()).toEqual([rows[2].id]);
});
