/**
 * Zero data retention (issue 8, item 3): with `zero_data_retention_enabled` on, request and result
 * bodies are not stored — responses cannot be read after they complete (404), activity rows have
 * null `body_json`/`result_json` — while tokens, cost and the charge are recorded as for any team.
 */
import { holdNextGeneration } from "./support/engine-faults.js";
import {
  CHAT_MODEL,
  type TestServer,
  activityByCustomId,
  createTestCaller,
  eventually,
  expectEnvelope,
  http,
  openaiClient,
  startTestServer,
} from "./support/harness.js";
import { writeTestCatalog } from "./support/test-catalog.js";

type Caller = Awaited<ReturnType<typeof createTestCaller>>;

let server: TestServer;

// Priced so that every request costs something the ledger shows.
const catalogPath = writeTestCatalog(CHAT_MODEL, { input: "1", cachedInput: "1", output: "1" });

beforeAll(async () => {
  server = await startTestServer({ catalogPath });
}, 30_000);
afterAll(() => server.close());

async function zdrCaller(on = true): Promise<Caller> {
  const caller = await createTestCaller(server.url);
  const res = await http(server.url, "PATCH", "/control/v1/teams/me", {
    token: caller.token,
    body: { zero_data_retention_enabled: on },
  });
  expect(res.status).toBe(200);
  expect(res.body.zero_data_retention_enabled).toBe(on);
  return caller;
}

/** The usage charge of request `id`, micro-USD (negative), or undefined. */
async function charge(id: string): Promise<string | undefined> {
  const [row] = await server.db<{ amount: string }>(
    "SELECT amount_micros::text AS amount FROM credit_ledger WHERE type = 'usage' AND source_id = $1",
    [id],
  );
  return row?.amount;
}

test("when the team has zero data retention, then a stored response is 404 after completion and its activity keeps tokens and cost but no bodies", async () => {
  const caller = await zdrCaller();
  const client = openaiClient(server.url, caller.key);
  const response = await client.responses.create({
    model: CHAT_MODEL,
    input: "Once upon a time",
    max_output_tokens: 8,
    metadata: { custom_id: "zdr-response" },
  });
  expect(["completed", "incomplete"]).toContain(response.status);
  expect(response.output_text.length).toBeGreaterThan(0);
  const activity = await activityByCustomId(server, "zdr-response");
  expect(activity).toMatchObject({ id: response.id, body_json: null, result_json: null });
  expect(activity.prompt_tokens).toBeGreaterThan(0);
  expect(activity.completion_tokens).toBeGreaterThan(0);
  expect(Number(activity.cost_micros)).toBeGreaterThan(0);
  expect(await charge(response.id)).toBe(`-${activity.cost_micros}`);
  expectEnvelope(await http(server.url, "GET", `/v1/responses/${response.id}`, { token: caller.key }), 404);
  expect(await server.db("SELECT 1 FROM responses WHERE id = $1", [response.id])).toHaveLength(0);
  const list = await http(server.url, "GET", "/v1/responses", { token: caller.key });
  expect(list.body.data).toEqual([]);
});

test("when the team has zero data retention, then chat completion activity has no bodies but its tokens and cost", async () => {
  const caller = await zdrCaller();
  const completion = await openaiClient(server.url, caller.key).chat.completions.create({
    model: CHAT_MODEL,
    messages: [{ role: "user", content: "Tell me a story" }],
    max_tokens: 8,
    metadata: { custom_id: "zdr-chat" },
  } as never);
  expect(completion.choices[0].message.content?.length).toBeGreaterThan(0);
  const activity = await activityByCustomId(server, "zdr-chat");
  expect(activity).toMatchObject({ body_json: null, result_json: null, status: "completed" });
  expect(activity.total_tokens).toBe(activity.prompt_tokens + activity.completion_tokens);
  expect(activity.completion_tokens).toBeGreaterThan(0);
  expect(await charge(activity.id)).toBe(`-${activity.cost_micros}`);
});

test("when a background response of a zero-data-retention team completes, then it was readable while in progress and is 404 after", async () => {
  const caller = await zdrCaller();
  const held = await holdNextGeneration();
  const created = await http(server.url, "POST", "/v1/responses", {
    token: caller.key,
    body: {
      model: CHAT_MODEL,
      input: "Once",
      background: true,
      max_output_tokens: 8,
      metadata: { custom_id: "zdr-bg" },
    },
  });
  expect(created.status).toBe(200);
  expect(created.body.status).toBe("in_progress");
  await held.started;
  const running = await http(server.url, "GET", `/v1/responses/${created.body.id}`, { token: caller.key });
  expect(running.status).toBe(200);
  expect(running.body.status).toBe("in_progress");
  held.release();
  const gone = await eventually(
    async () =>
      (await http(server.url, "GET", `/v1/responses/${created.body.id}`, { token: caller.key })).status === 404,
    30_000,
  );
  expect(gone).toBe(true);
  const activity = await activityByCustomId(server, "zdr-bg");
  expect(activity).toMatchObject({ id: created.body.id, body_json: null, result_json: null });
  expect(activity.completion_tokens).toBeGreaterThan(0);
  expect(await charge(activity.id)).toBe(`-${activity.cost_micros}`);
});

test("when zero data retention is off (the default, or turned off again), then bodies are stored and responses readable", async () => {
  const caller = await zdrCaller(false);
  const client = openaiClient(server.url, caller.key);
  const response = await client.responses.create({
    model: CHAT_MODEL,
    input: "Once upon a time",
    max_output_tokens: 4,
    metadata: { custom_id: "kept-response" },
  });
  expect((await http(server.url, "GET", `/v1/responses/${response.id}`, { token: caller.key })).status).toBe(200);
  const activity = await activityByCustomId(server, "kept-response");
  expect(activity.body_json).not.toBeNull();
  expect(activity.result_json).toMatchObject({ id: response.id });
});

test("when the team has zero data retention, then a batch (bodies stored by nature) is refused with 403 and nothing is stored; turned off, it is accepted", async () => {
  const caller = await zdrCaller();
  const batch = {
    requests: [
      {
        custom_id: "zdr-b1",
        url: "/v1/chat/completions",
        body: { model: CHAT_MODEL, messages: [{ role: "user", content: "Hi" }], max_tokens: 2 },
      },
    ],
  };
  const batches = async () =>
    (await server.db<{ n: string }>("SELECT count(*) AS n FROM batches WHERE team_id = $1", [caller.teamId]))[0].n;
  const refused = await http(server.url, "POST", "/v1/batches", { token: caller.key, body: batch });
  expectEnvelope(refused, 403);
  expect(refused.body.detail).toMatch(/zero data retention/);
  expect(await batches()).toBe("0");

  const off = await http(server.url, "PATCH", "/control/v1/teams/me", {
    token: caller.token,
    body: { zero_data_retention_enabled: false },
  });
  expect(off.status).toBe(200);
  expect((await http(server.url, "POST", "/v1/batches", { token: caller.key, body: batch })).status).toBe(201);
  expect(await batches()).toBe("1");
});
