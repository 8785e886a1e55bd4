/**
 * Streams (issue 6, item 4; DESIGN §3 Streams): create/list/get/patch, counters from the stream's
 * finished requests and unfinished background responses, cancelling a stream cancels its
 * unfinished requests, activity `type: "stream"`, and another team's stream is a 404 everywhere.
 */
import { holdNextGeneration } from "./support/engine-faults.js";
import {
  CHAT_MODEL,
  type TestServer,
  activityByCustomId,
  createTestCaller,
  eventually,
  expectEnvelope,
  expectInvalid,
  http,
  openaiClient,
  startTestServer,
} from "./support/harness.js";

type Caller = Awaited<ReturnType<typeof createTestCaller>>;

let server: TestServer;
let caller: Caller;
let other: Caller;

beforeAll(async () => {
  server = await startTestServer();
  caller = await createTestCaller(server.url);
  other = await createTestCaller(server.url);
}, 30_000);
afterAll(() => server.close());

const ISO = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$/;

async function createStream(key: string, body: Record<string, unknown> = { name: "nightly" }) {
  const res = await http(server.url, "POST", "/v1/streams", { token: key, body });
  expect(res.status).toBe(201);
  return res.body;
}

function chat(key: string, metadata: Record<string, unknown>) {
  return http(server.url, "POST", "/v1/chat/completions", {
    token: key,
    body: { model: CHAT_MODEL, messages: [{ role: "user", content: "Once upon a time" }], max_tokens: 4, metadata },
  });
}

async function streamOf(key: string, id: string): Promise<any> {
  const res = await http(server.url, "GET", `/v1/streams/${id}`, { token: key });
  expect(res.status).toBe(200);
  return res.body;
}

describe("create, list, get, patch", () => {
  test("when a stream is created, then it answers 201 open with ISO times and the 24h window", async () => {
    const res = await http(server.url, "POST", "/v1/streams", { token: caller.key, body: { name: "batch A" } });
    expect(res.status).toBe(201);
    expect(res.body).toEqual({
      id: expect.stringMatching(/^[0-9a-f-]{36}$/),
      name: "batch A",
      window: "24h",
      status: "open",
      created_at: expect.stringMatching(ISO),
      updated_at: expect.stringMatching(ISO),
    });
    const explicit = await createStream(caller.key, { name: "w", window: "24h" });
    expect(explicit.window).toBe("24h");
  });

  test("when streams are listed, then the team's own come newest first and other teams' never", async () => {
    const first = await createStream(caller.key, { name: "first" });
    const second = await createStream(caller.key, { name: "second" });
    const theirs = await createStream(other.key, { name: "theirs" });
    const res = await http(server.url, "GET", "/v1/streams", { token: caller.key });
    expect(res.status).toBe(200);
    const ids = (res.body.items as Array<{ id: string }>).map((s) => s.id);
    expect(ids.indexOf(second.id)).toBeLessThan(ids.indexOf(first.id));
    expect(ids.indexOf(first.id)).toBeGreaterThanOrEqual(0);
    expect(ids).not.toContain(theirs.id);
  });

  test("when a new stream is read, then it has zero counters and null state times", async () => {
    const s = await createStream(caller.key);
    expect(await streamOf(caller.key, s.id)).toEqual({
      ...s,
      cancelled_at: null,
      archived_at: null,
      total_items: 0,
      pending_items: 0,
      running_items: 0,
      completed_items: 0,
      failed_items: 0,
      cancelled_items: 0,
      completion_ratio: 0,
      total_prompt_tokens: 0,
      total_completion_tokens: 0,
      total_tokens: 0,
      total_cost_micros: 0,
      last_completion_at: null,
      latest_completion_id: null,
    });
  });

  test("when a stream is renamed and archived, then PATCH answers 200 with the change and archived_at", async () => {
    const s = await createStream(caller.key);
    const res = await http(server.url, "PATCH", `/v1/streams/${s.id}`, {
      token: caller.key,
      body: { name: "renamed", status: "archived" },
    });
    expect(res.status).toBe(200);
    expect(res.body).toMatchObject({ id: s.id, name: "renamed", status: "archived", cancelled_at: null });
    expect(res.body.archived_at).toMatch(ISO);
    expect((await streamOf(caller.key, s.id)).name).toBe("renamed");
  });
});

describe("requests in a stream", () => {
  test("when chat completions and a background response run in a stream, then the counters add them up", async () => {
    const s = await createStream(caller.key);
    const customIds = ["s-chat-1", "s-chat-2"];
    for (const id of customIds) expect((await chat(caller.key, { stream_id: s.id, custom_id: id })).status).toBe(200);
    const bg = await http(server.url, "POST", "/v1/responses", {
      token: caller.key,
      body: { model: CHAT_MODEL, input: "Once", background: true, max_output_tokens: 4, metadata: { stream_id: s.id } },
    });
    expect(bg.status).toBe(200);
    const rows = await Promise.all(customIds.map((id) => activityByCustomId(server, id)));
    expect(rows.map((r) => r.type)).toEqual(["stream", "stream"]);
    let body: any;
    await eventually(async () => (body = await streamOf(caller.key, s.id)).completed_items === 3, 15_000);
    const [sums] = await server.db<any>(
      `SELECT sum(prompt_tokens)::int AS p, sum(completion_tokens)::int AS c, sum(total_tokens)::int AS t,
              sum(cost_micros)::text AS cost, count(*)::int AS n, count(*) FILTER (WHERE type = 'stream')::int AS typed
         FROM activity WHERE stream_id = $1`,
      [s.id],
    );
    expect(sums.n).toBe(3);
    expect(sums.typed).toBe(3);
    expect(body).toMatchObject({
      total_items: 3,
      pending_items: 0,
      running_items: 0,
      completed_items: 3,
      failed_items: 0,
      cancelled_items: 0,
      completion_ratio: 1,
      total_prompt_tokens: sums.p,
      total_completion_tokens: sums.c,
      total_tokens: sums.t,
      total_cost_micros: Number(sums.cost),
    });
    expect(body.total_tokens).toBeGreaterThan(0);
    expect(body.last_completion_at).toMatch(ISO);
    const [latest] = await server.db<any>(
      "SELECT completion_id FROM completion_events WHERE stream_id = $1 ORDER BY position DESC LIMIT 1",
      [s.id],
    );
    expect(body.latest_completion_id).toBe(latest.completion_id);
  });

  test("when a request names a UUID no stream was created for, then it runs as a standalone labelled request", async () => {
    const label = "0190b8f5-0000-7000-8000-000000000001";
    expect((await chat(caller.key, { stream_id: label, custom_id: "s-label" })).status).toBe(200);
    const row = await activityByCustomId(server, "s-label");
    expect(row.type).toBe("standalone");
    expect(row.stream_id).toBe(label);
  });

  test("when a request carries no stream_id, then its activity type stays standalone", async () => {
    const client = openaiClient(server.url, caller.key);
    await client.chat.completions.create({
      model: CHAT_MODEL,
      messages: [{ role: "user", content: "Hi" }],
      max_tokens: 2,
      metadata: { custom_id: "s-none" },
    } as never);
    expect((await activityByCustomId(server, "s-none")).type).toBe("standalone");
  });

  test("when a stream is cancelled, then its running background response ends cancelled and the counters show it", async () => {
    const s = await createStream(caller.key);
    const held = await holdNextGeneration();
    const bg = await http(server.url, "POST", "/v1/responses", {
      token: caller.key,
      body: {
        model: CHAT_MODEL,
        input: "Once",
        background: true,
        max_output_tokens: 64,
        metadata: { stream_id: s.id },
      },
    });
    expect(bg.status).toBe(200);
    await held.started;
    await eventually(async () => (await streamOf(caller.key, s.id)).running_items === 1, 5_000);
    expect(await streamOf(caller.key, s.id)).toMatchObject({ total_items: 1, running_items: 1, completion_ratio: 0 });
    const res = await http(server.url, "PATCH", `/v1/streams/${s.id}`, {
      token: caller.key,
      body: { status: "cancelled" },
    });
    held.release();
    expect(res.status).toBe(200);
    expect(res.body.status).toBe("cancelled");
    expect(res.body.cancelled_at).toMatch(ISO);
    expect((await http(server.url, "GET", `/v1/responses/${bg.body.id}`, { token: caller.key })).body.status).toBe(
      "cancelled",
    );
    let body: any;
    await eventually(async () => (body = await streamOf(caller.key, s.id)).cancelled_items === 1, 10_000);
    expect(body).toMatchObject({ total_items: 1, running_items: 0, pending_items: 0, cancelled_items: 1 });
  });
});

describe("other teams and bad input", () => {
  test("when another team reads, patches, or names a stream in metadata, then 404 and nothing runs", async () => {
    const s = await createStream(caller.key);
    expectEnvelope(await http(server.url, "GET", `/v1/streams/${s.id}`, { token: other.key }), 404);
    expectEnvelope(
      await http(server.url, "PATCH", `/v1/streams/${s.id}`, { token: other.key, body: { status: "cancelled" } }),
      404,
    );
    expectEnvelope(await chat(other.key, { stream_id: s.id, custom_id: "s-intruder" }), 404);
    expectEnvelope(
      await http(server.url, "POST", "/v1/responses", {
        token: other.key,
        body: { model: CHAT_MODEL, input: "x", background: true, metadata: { stream_id: s.id } },
      }),
      404,
    );
    expect((await streamOf(caller.key, s.id)).status).toBe("open");
    expect(await server.db("SELECT 1 FROM activity WHERE custom_id = 's-intruder'")).toEqual([]);
    expect(await server.db("SELECT 1 FROM responses WHERE stream_id = $1", [s.id])).toEqual([]);
    expectEnvelope(
      await http(server.url, "GET", "/v1/streams/0190b8f5-0000-7000-8000-00000000dead", { token: caller.key }),
      404,
    );
  });

  test("when create or patch breaks a rule, then 400 names the field", async () => {
    const post = (body: unknown) => http(server.url, "POST", "/v1/streams", { token: caller.key, body });
    expectInvalid(await post({}), "name");
    expectInvalid(await post({ name: "" }), "name");
    expectInvalid(await post({ name: "x".repeat(257) }), "name");
    expectInvalid(await post({ name: "nul\u0000" }), "name");
    expectInvalid(await post({ name: "ok", window: "7d" }), "window");
    expect((await post({ name: "x".repeat(256) })).status).toBe(201);
    const s = await createStream(caller.key);
    const patch = (body: unknown) => http(server.url, "PATCH", `/v1/streams/${s.id}`, { token: caller.key, body });
    expectInvalid(await patch({ status: "open" }), "status");
    expectInvalid(await patch({ status: "deleted" }), "status");
    expectInvalid(await patch({ name: "" }), "name");
    expectInvalid(await http(server.url, "GET", "/v1/streams/not-a-uuid", { token: caller.key }), "stream_id");
    expectInvalid(
      await http(server.url, "PATCH", "/v1/streams/not-a-uuid", { token: caller.key, body: { name: "x" } }),
      "stream_id",
    );
    expectInvalid(await chat(caller.key, { stream_id: "not-a-uuid" }), "metadata.stream_id");
  });

  test("when no credentials are sent, then every streams endpoint answers 401", async () => {
    const s = await createStream(caller.key);
    expectEnvelope(await http(server.url, "POST", "/v1/streams", { body: { name: "x" } }), 401);
    expectEnvelope(await http(server.url, "GET", "/v1/streams"), 401);
    expectEnvelope(await http(server.url, "GET", `/v1/streams/${s.id}`), 401);
    expectEnvelope(await http(server.url, "PATCH", `/v1/streams/${s.id}`, { body: { name: "x" } }), 401);
  });
});

describe("GraphQL", () => {
  async function gql(query: string, variables: Record<string, unknown>, token: string) {
    const res = await http(server.url, "POST", "/graphql", { body: { query, variables }, token });
    return res.body as { data: any; errors?: Array<{ extensions: Record<string, any> }> };
  }

  test("when stream and streams are queried, then they answer what REST answers, scoped to the team", async () => {
    const s = await createStream(caller.key, { name: "gql" });
    expect((await chat(caller.key, { stream_id: s.id, custom_id: "s-gql" })).status).toBe(200);
    await activityByCustomId(server, "s-gql");
    const rest = await streamOf(caller.key, s.id);
    const one = await gql(
      `query($id: ID!) { stream(id: $id) { id name window status createdAt completedItems totalItems
         totalTokens totalCostMicros latestCompletionId cancelledAt } }`,
      { id: s.id },
      caller.key,
    );
    expect(one.errors).toBeUndefined();
    expect(one.data.stream).toEqual({
      id: s.id,
      name: "gql",
      window: "24h",
      status: "open",
      createdAt: s.created_at,
      completedItems: rest.completed_items,
      totalItems: rest.total_items,
      totalTokens: rest.total_tokens,
      totalCostMicros: rest.total_cost_micros,
      latestCompletionId: rest.latest_completion_id,
      cancelledAt: null,
    });
    expect(one.data.stream.completedItems).toBe(1);
    const list = await gql(`{ streams { id name } }`, {}, caller.key);
    expect(list.data.streams[0]).toEqual({ id: s.id, name: "gql" });
    const theirs = await gql(`query($id: ID!) { stream(id: $id) { id } }`, { id: s.id }, other.key);
    expect(theirs.errors?.[0].extensions.code).toBe("NOT_FOUND");
    expect((await gql(`{ streams { id } }`, {}, other.key)).data.streams.map((x: any) => x.id)).not.toContain(s.id);
  });
});
