/**
 * Streams (issue 6, item 4; DESIGN §3 Streams): create/list/get/patch, counters from the stream's
 * finished requests and unfinished background responses, cancelling a stream cancels its
 * unfinished requests, activity `type: "stream"`, and another team's stream is a 404 everywhere.
 */
import { holdNextGeneration } from "./support/engine-faults.js";
import {
  CHAT_MODEL,
  EMBED_MODEL,
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

function chatBody(metadata: Record<string, unknown>, key: string) {
  return {
    token: key,
    body: { model: CHAT_MODEL, messages: [{ role: "user", content: "Once upon a time" }], max_tokens: 4, metadata },
  };
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

  test("when a cancelled stream is PATCHed to archived, then it stays cancelled; an archived one may still be cancelled", async () => {
    const s = await createStream(caller.key);
    await http(server.url, "PATCH", `/v1/streams/${s.id}`, { token: caller.key, body: { status: "cancelled" } });
    const flipped = await http(server.url, "PATCH", `/v1/streams/${s.id}`, {
      token: caller.key,
      body: { status: "archived" },
    });
    expect(flipped.status).toBe(200);
    expect(flipped.body).toMatchObject({ status: "cancelled", archived_at: null });
    const a = await createStream(caller.key);
    await http(server.url, "PATCH", `/v1/streams/${a.id}`, { token: caller.key, body: { status: "archived" } });
    const cancelled = await http(server.url, "PATCH", `/v1/streams/${a.id}`, {
      token: caller.key,
      body: { status: "cancelled" },
    });
    expect(cancelled.body.status).toBe("cancelled");
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

describe("closed streams", () => {
  /** One request of each create operation (and a background response) naming `streamId`, on `base`. */
  function everyCreate(base: string, key: string, streamId: string, tag: string) {
    const metadata = (op: string) => ({ stream_id: streamId, custom_id: `${tag}-${op}` });
    const post = (path: string, body: Record<string, unknown>) => http(base, "POST", path, { token: key, body });
    return Promise.all([
      post("/v1/responses", { model: CHAT_MODEL, input: "Once", max_output_tokens: 4, metadata: metadata("resp") }),
      post("/v1/responses", {
        model: CHAT_MODEL,
        input: "Once",
        max_output_tokens: 4,
        background: true,
        metadata: metadata("bg"),
      }),
      post("/v1/chat/completions", {
        model: CHAT_MODEL,
        messages: [{ role: "user", content: "Once" }],
        max_tokens: 4,
        metadata: metadata("chat"),
      }),
      post("/v1/embeddings", { model: EMBED_MODEL, input: "Once", metadata: metadata("embed") }),
      post("/v1/messages", {
        model: CHAT_MODEL,
        max_tokens: 4,
        messages: [{ role: "user", content: "Once" }],
        metadata: metadata("msg"),
      }),
    ]);
  }

  test.each(["cancelled", "archived"])(
    "when a request of any create operation names the team's %s stream, then 400 names metadata.stream_id and nothing runs or is stored",
    async (status) => {
      const s = await createStream(caller.key);
      // Used once while open, so this process has it cached as open.
      expect((await chat(caller.key, { stream_id: s.id })).status).toBe(200);
      const patched = await http(server.url, "PATCH", `/v1/streams/${s.id}`, { token: caller.key, body: { status } });
      expect(patched.body.status).toBe(status);
      const before = await server.db<{ n: number }>("SELECT count(*)::int AS n FROM activity WHERE stream_id = $1", [
        s.id,
      ]);
      for (const res of await everyCreate(server.url, caller.key, s.id, `closed-${status}`)) {
        expectInvalid(res, "metadata.stream_id");
      }
      expect(await server.db("SELECT custom_id FROM activity WHERE custom_id LIKE $1", [`closed-${status}-%`])).toEqual(
        [],
      );
      expect(await server.db("SELECT id FROM responses WHERE stream_id = $1", [s.id])).toEqual([]);
      const after = await server.db<{ n: number }>("SELECT count(*)::int AS n FROM activity WHERE stream_id = $1", [
        s.id,
      ]);
      expect(after).toEqual(before);
      // The official client sees the same 400.
      await expect(
        openaiClient(server.url, caller.key).chat.completions.create({
          model: CHAT_MODEL,
          messages: [{ role: "user", content: "Once" }],
          metadata: { stream_id: s.id },
        }),
      ).rejects.toMatchObject({ status: 400 });
    },
  );

  test("when a stream is closed on one process, then another process that used it refuses new requests naming it", async () => {
    const b = await startTestServer({}, server);
    try {
      const s = await createStream(caller.key);
      // b caches the stream as open.
      expect(
        (await http(b.url, "POST", "/v1/chat/completions", chatBody({ stream_id: s.id }, caller.key))).status,
      ).toBe(200);
      await http(server.url, "PATCH", `/v1/streams/${s.id}`, { token: caller.key, body: { status: "cancelled" } });
      let res: Awaited<ReturnType<typeof http>> | undefined;
      expect(
        await eventually(
          async () =>
            (res = await http(b.url, "POST", "/v1/chat/completions", chatBody({ stream_id: s.id }, caller.key)))
              .status === 400,
        ),
      ).toBe(true);
      expectInvalid(res!, "metadata.stream_id");
      for (const r of await everyCreate(b.url, caller.key, s.id, "closed-b")) expectInvalid(r, "metadata.stream_id");
    } finally {
      await b.close();
    }
  }, 30_000);

  test("when a stream is archived after a background response in it was accepted, then that response still runs to its end", async () => {
    const api = await startTestServer({ role: "api" });
    let worker: TestServer | undefined;
    try {
      const c = await createTestCaller(api.url);
      const s = (await http(api.url, "POST", "/v1/streams", { token: c.key, body: { name: "late" } })).body;
      const bg = await http(api.url, "POST", "/v1/responses", {
        token: c.key,
        body: {
          model: CHAT_MODEL,
          input: "Once",
          background: true,
          max_output_tokens: 4,
          metadata: { stream_id: s.id },
        },
      });
      expect(bg.body.status).toBe("in_progress");
      // No worker yet: it waits, accepted; then the stream is archived, then a worker starts.
      await http(api.url, "PATCH", `/v1/streams/${s.id}`, { token: c.key, body: { status: "archived" } });
      worker = await startTestServer({ role: "worker" }, api);
      let body: any;
      await eventually(async () => {
        body = (await http(api.url, "GET", `/v1/responses/${bg.body.id}`, { token: c.key })).body;
        return body.status !== "in_progress";
      }, 15_000);
      expect(body.status).toBe("incomplete");
    } finally {
      await worker?.close();
      await api.close();
    }
  }, 45_000);
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

  const CREATE = `mutation($name: String!, $window: String) { createStream(name: $name, window: $window) {
    id name window status createdAt updatedAt } }`;
  const UPDATE = `mutation($id: ID!, $name: String, $status: String) { updateStream(id: $id, name: $name, status: $status) {
    id name status archivedAt cancelledAt totalItems } }`;

  test("when createStream and updateStream are called, then they create, rename, archive and cancel as REST does", async () => {
    const created = await gql(CREATE, { name: "via gql" }, caller.key);
    expect(created.errors).toBeUndefined();
    expect(created.data.createStream).toEqual({
      id: expect.stringMatching(/^[0-9a-f-]{36}$/),
      name: "via gql",
      window: "24h",
      status: "open",
      createdAt: expect.stringMatching(ISO),
      updatedAt: expect.stringMatching(ISO),
    });
    const id = created.data.createStream.id;
    const rest = await streamOf(caller.key, id);
    expect(rest).toMatchObject({ id, name: "via gql", status: "open" });

    const renamed = await gql(UPDATE, { id, name: "renamed", status: "archived" }, caller.key);
    expect(renamed.errors).toBeUndefined();
    expect(renamed.data.updateStream).toMatchObject({ id, name: "renamed", status: "archived", cancelledAt: null });
    expect(renamed.data.updateStream.archivedAt).toMatch(ISO);
    expect((await streamOf(caller.key, id)).status).toBe("archived");
    // A closed stream takes no new requests, whichever surface closed it.
    expectInvalid(await chat(caller.key, { stream_id: id }), "metadata.stream_id");

    // Cancelling through GraphQL cancels the stream's running background response.
    const live = (await gql(CREATE, { name: "to cancel" }, caller.key)).data.createStream.id;
    const held = await holdNextGeneration();
    const bg = await http(server.url, "POST", "/v1/responses", {
      token: caller.key,
      body: { model: CHAT_MODEL, input: "Once", background: true, max_output_tokens: 8, metadata: { stream_id: live } },
    });
    await held.started;
    const cancelled = await gql(UPDATE, { id: live, status: "cancelled" }, caller.key);
    held.release();
    expect(cancelled.data.updateStream).toMatchObject({ id: live, status: "cancelled" });
    expect((await http(server.url, "GET", `/v1/responses/${bg.body.id}`, { token: caller.key })).body.status).toBe(
      "cancelled",
    );
  });

  test("when createStream or updateStream get bad input, no caller or another team's stream, then 400, UNAUTHENTICATED or NOT_FOUND", async () => {
    const fields = (res: { errors?: Array<{ extensions: Record<string, any> }> }) => {
      expect(res.errors?.[0].extensions.status_code).toBe(400);
      return (res.errors![0].extensions.extra as Array<{ field: string }>).map((i) => i.field);
    };
    expect(fields(await gql(CREATE, { name: "" }, caller.key))).toContain("name");
    expect(fields(await gql(CREATE, { name: "x".repeat(257) }, caller.key))).toContain("name");
    expect(fields(await gql(CREATE, { name: "ok", window: "7d" }, caller.key))).toContain("window");
    const s = await createStream(caller.key, { name: "mine" });
    expect(fields(await gql(UPDATE, { id: s.id, status: "open" }, caller.key))).toContain("status");
    expect(fields(await gql(UPDATE, { id: s.id, name: "" }, caller.key))).toContain("name");
    expect(fields(await gql(UPDATE, { id: "not-a-uuid", name: "x" }, caller.key))).toContain("stream_id");
    expect((await streamOf(caller.key, s.id)).name).toBe("mine");

    const anonymous = await http(server.url, "POST", "/graphql", { body: { query: CREATE, variables: { name: "x" } } });
    expect(anonymous.body.errors[0].extensions.code).toBe("UNAUTHENTICATED");
    const anonymousUpdate = await http(server.url, "POST", "/graphql", {
      body: { query: UPDATE, variables: { id: s.id, name: "x" } },
    });
    expect(anonymousUpdate.body.errors[0].extensions.code).toBe("UNAUTHENTICATED");

    const theirs = await gql(UPDATE, { id: s.id, status: "cancelled" }, other.key);
    expect(theirs.errors?.[0].extensions.code).toBe("NOT_FOUND");
    expect((await streamOf(caller.key, s.id)).status).toBe("open");
  });

  test("when a page of completion events asks for each event's stream, then the streams are read in one query", async () => {
    const c = await createTestCaller(server.url);
    const streams: Array<{ id: string; name: string }> = [];
    for (const name of ["a", "b", "c"]) streams.push(await createStream(c.key, { name }));
    const label = "0190b7a4-7c1e-7000-8000-0000000000bb"; // a stream id no stream was created for
    const requests: Array<ReturnType<typeof chat>> = [];
    for (let i = 0; i < 12; i++) requests.push(chat(c.key, { stream_id: streams[i % 3].id, custom_id: `dl-${i}` }));
    requests.push(chat(c.key, { stream_id: label, custom_id: "dl-label" }));
    requests.push(chat(c.key, { custom_id: "dl-none" }));
    for (const r of await Promise.all(requests)) expect(r.status).toBe(200);
    await activityByCustomId(server, "dl-none");

    // Counts the statements that read streams while the page resolves (every service query goes through here).
    const ds = server.app.dataSource as unknown as { query: (text: string, params?: unknown) => Promise<unknown> };
    const query = ds.query;
    const streamQueries: string[] = [];
    ds.query = function counting(this: unknown, text: string, params?: unknown) {
      if (/FROM streams/.test(text)) streamQueries.push(text);
      return query.call(this, text, params);
    };
    let page: any;
    try {
      page = await gql(
        `{ completionEvents(limit: 100) { data { responseId streamId stream { id name status } } } }`,
        {},
        c.key,
      );
    } finally {
      ds.query = query;
    }
    expect(page.errors).toBeUndefined();
    const events = page.data.completionEvents.data as Array<{ streamId: string | null; stream: any }>;
    expect(events).toHaveLength(14);
    for (const e of events) {
      const own = streams.find((s) => s.id === e.streamId);
      expect(e.stream).toEqual(own ? { id: own.id, name: own.name, status: "open" } : null);
    }
    expect(events.filter((e) => e.streamId === label)).toEqual([
      { responseId: expect.any(String), streamId: label, stream: null },
    ]);
    expect(streamQueries).toHaveLength(1);

    // Another team's page never shows this team's streams.
    const theirs = await gql(`{ completionEvents(limit: 100) { data { stream { id } } } }`, {}, other.key);
    expect(
      theirs.data.completionEvents.data.every(
        (e: any) => e.stream === null || !streams.some((s) => s.id === e.stream.id),
      ),
    ).toBe(true);
  });
});
