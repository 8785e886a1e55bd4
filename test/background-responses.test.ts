/**
 * Background responses (issue 6, item 2): `background: true` answers at once `in_progress`, a
 * worker (pg-boss job) runs the generation through the same metering, and the stored row reaches
 * its terminal status; cancel, DELETE-cancels, deadlines, roles, and `completion_window`.
 */
import { failNextGeneration, holdNextGeneration } from "./support/engine-faults.js";
import {
  CHAT_MODEL,
  type TestServer,
  createTestCaller,
  eventually,
  expectEnvelope,
  expectInvalid,
  http,
  openaiClient,
  startTestServer,
} from "./support/harness.js";
import { writeTestCatalog } from "./support/test-catalog.js";

type Caller = Awaited<ReturnType<typeof createTestCaller>>;

/**
 * Slows the next generation down (a busy `msPerToken` in node-llama-cpp's `onToken`, the library
 * boundary; nothing in Switchyard is patched), so a cancel lands while it is producing tokens.
 * Resolves `firstToken` when the first token is out.
 */
async function slowNextGeneration(msPerToken: number): Promise<{ firstToken: Promise<void> }> {
  const lib = await import("node-llama-cpp");
  const proto = lib.LlamaCompletion.prototype as unknown as { generateCompletionWithMeta: (...a: any[]) => any };
  const original = proto.generateCompletionWithMeta;
  let markFirst!: () => void;
  const firstToken = new Promise<void>((r) => (markFirst = r));
  proto.generateCompletionWithMeta = function slowOnce(this: unknown, tokens: unknown, options: any) {
    proto.generateCompletionWithMeta = original;
    const onToken = options.onToken as (t: unknown[]) => void;
    return original.call(this, tokens, {
      ...options,
      onToken: (t: unknown[]) => {
        onToken(t);
        markFirst();
        for (const until = Date.now() + msPerToken; Date.now() < until;);
      },
    });
  };
  return { firstToken };
}

/**
 * Makes the next generation produce tokens slowly and, once it has returned (aborted or not),
 * hold its result until `release()`: an aborted generation that takes long to come back and record.
 */
async function slowToReturnNextGeneration(
  msPerToken: number,
): Promise<{ firstToken: Promise<void>; returned: Promise<void>; release: () => void }> {
  const lib = await import("node-llama-cpp");
  const proto = lib.LlamaCompletion.prototype as unknown as { generateCompletionWithMeta: (...a: any[]) => any };
  const original = proto.generateCompletionWithMeta;
  let markFirst!: () => void;
  const firstToken = new Promise<void>((r) => (markFirst = r));
  let markReturned!: () => void;
  const returned = new Promise<void>((r) => (markReturned = r));
  let release!: () => void;
  const gate = new Promise<void>((r) => (release = r));
  proto.generateCompletionWithMeta = async function slowReturnOnce(this: unknown, tokens: unknown, options: any) {
    proto.generateCompletionWithMeta = original;
    const onToken = options.onToken as (t: unknown[]) => void;
    const result = await original.call(this, tokens, {
      ...options,
      onToken: (t: unknown[]) => {
        onToken(t);
        markFirst();
        for (const until = Date.now() + msPerToken; Date.now() < until;);
      },
    });
    markReturned();
    await gate;
    return result;
  };
  return { firstToken, returned, release };
}

let server: TestServer;
let caller: Caller;
let other: Caller;

// Priced so that a prompt alone costs something: a cancelled generation is charged for its prompt.
const catalogPath = writeTestCatalog(CHAT_MODEL, { input: "1", cachedInput: "1", output: "1" });

beforeAll(async () => {
  server = await startTestServer({ catalogPath });
  caller = await createTestCaller(server.url);
  other = await createTestCaller(server.url);
}, 30_000);
afterAll(() => server.close());

const TERMINAL = ["completed", "incomplete", "failed", "cancelled"];

function create(base: string, key: string, body: Record<string, unknown>) {
  return http(base, "POST", "/v1/responses", {
    token: key,
    body: { model: CHAT_MODEL, input: "Once upon a time", background: true, ...body },
  });
}

/** Polls `GET /v1/responses/{id}` until it is terminal; returns the last object. */
async function untilTerminal(base: string, key: string, id: string, timeoutMs = 15_000): Promise<any> {
  let body: any;
  await eventually(async () => {
    body = (await http(base, "GET", `/v1/responses/${id}`, { token: key })).body;
    return TERMINAL.includes(body?.status);
  }, timeoutMs);
  return body;
}

/**
 * The activity record of a response id's end (its row once no longer `pending`/`running`: a
 * background response has one from its create) and its usage charges.
 */
async function recorded(s: TestServer, id: string) {
  const activity = await s.db<{ status: string; cost_micros: string; completion_tokens: number; error_json: any }>(
    "SELECT status, cost_micros::text, completion_tokens, error_json FROM activity WHERE id = $1 AND status NOT IN ('pending', 'running')",
    [id],
  );
  const charges = await s.db<{ amount_micros: string }>(
    "SELECT amount_micros::text FROM credit_ledger WHERE type = 'usage' AND source_id = $1",
    [id],
  );
  return { activity, charges };
}

describe("background responses", () => {
  test("when a background response is created, then it answers in_progress at once and a worker completes it, recorded and charged once", async () => {
    const res = await create(server.url, caller.key, { max_output_tokens: 16, metadata: { custom_id: "bg-1" } });
    expect(res.status).toBe(200);
    expect(res.body).toMatchObject({ object: "response", status: "in_progress", output: [], usage: null, error: null });
    const [row] = await server.db<{ background: boolean }>("SELECT background FROM responses WHERE id = $1", [
      res.body.id,
    ]);
    expect(row.background).toBe(true);
    const done = await untilTerminal(server.url, caller.key, res.body.id);
    expect(done.status).toBe("incomplete");
    expect(done.incomplete_details).toEqual({ reason: "max_output_tokens" });
    expect(done.usage.output_tokens).toBe(16);
    const { activity, charges } = await recorded(server, res.body.id);
    expect(activity).toHaveLength(1);
    expect(activity[0].status).toBe("completed");
    expect(charges).toEqual([{ amount_micros: `-${activity[0].cost_micros}` }]);
    // The list shows it with its terminal status.
    const list = await http(server.url, "GET", "/v1/responses", { token: caller.key });
    expect(list.body.data.find((r: any) => r.id === res.body.id)?.status).toBe("incomplete");
  });

  test("when the official client creates a background response, then it can read it back until completed", async () => {
    const client = openaiClient(server.url, caller.key);
    const created = await client.responses.create({
      model: CHAT_MODEL,
      input: "Sam",
      background: true,
      temperature: 0,
    });
    expect(created.status).toBe("in_progress");
    const done = await untilTerminal(server.url, caller.key, created.id);
    expect(done.status).toBe("completed");
    expect(done.output[0].content[0].text.length).toBeGreaterThan(0);
  });

  test("when a background response is still generating, then GET shows it in_progress", async () => {
    const held = await holdNextGeneration();
    const res = await create(server.url, caller.key, { max_output_tokens: 8 });
    await held.started;
    const read = await http(server.url, "GET", `/v1/responses/${res.body.id}`, { token: caller.key });
    expect(read.body.status).toBe("in_progress");
    held.release();
    expect((await untilTerminal(server.url, caller.key, res.body.id)).status).toBe("incomplete");
  });

  test("when background is combined with store: false, stream or max_queue_wait_s, then 400 names the field", async () => {
    expectInvalid(await create(server.url, caller.key, { store: false }), "store");
    expectInvalid(await create(server.url, caller.key, { stream: true }), "stream");
    expectInvalid(await create(server.url, caller.key, { max_queue_wait_s: 10 }), "max_queue_wait_s");
    expectInvalid(await create(server.url, caller.key, { timeout_s: 0 }), "timeout_s");
    expectInvalid(await create(server.url, caller.key, { timeout_s: 86_401 }), "timeout_s");
  });

  test("when the team has no credit, then a background create answers 402 at once and stores nothing", async () => {
    const poor = await createTestCaller(server.url);
    await server.db("UPDATE teams SET credit_balance_micros = 0 WHERE id = $1", [poor.teamId]);
    await server.db("SELECT pg_notify('switchyard_cache', 'balance:' || $1::text || '=0')", [poor.teamId]);
    let res = await create(server.url, poor.key, {});
    await eventually(async () => (res = await create(server.url, poor.key, {})).status === 402, 5_000);
    expectEnvelope(res, 402);
    const rows = await server.db("SELECT id FROM responses WHERE team_id = $1", [poor.teamId]);
    expect(rows).toEqual([]);
  });

  test("when background responses carry metadata.stream_id, then the list's stream_id filter finds them", async () => {
    const streamId = "0190b7a4-7c1e-7000-8000-0000000000aa";
    const res = await create(server.url, caller.key, { max_output_tokens: 4, metadata: { stream_id: streamId } });
    const list = await http(server.url, "GET", `/v1/responses?stream_id=${streamId}`, { token: caller.key });
    expect(list.body.data.map((r: any) => r.id)).toEqual([res.body.id]);
    await untilTerminal(server.url, caller.key, res.body.id);
  });

  test("when the engine fails a background generation, then the response ends failed with the error, recorded once, uncharged", async () => {
    await failNextGeneration();
    const res = await create(server.url, caller.key, { max_output_tokens: 8 });
    const ended = await untilTerminal(server.url, caller.key, res.body.id);
    expect(ended).toMatchObject({ status: "failed", error: { code: expect.any(String), message: expect.any(String) } });
    const rec = await recorded(server, res.body.id);
    expect(rec.activity).toEqual([expect.objectContaining({ status: "failed" })]);
    expect(rec.charges).toEqual([]);
  });

  test("when a background create has no credentials, then 401", async () => {
    expectEnvelope(await create(server.url, "sk-not-a-key", {}), 401);
  });

  test("when a synchronous request carries metadata.completion_window 24h, then it is accepted and ignored", async () => {
    const res = await http(server.url, "POST", "/v1/responses", {
      token: caller.key,
      body: { model: CHAT_MODEL, input: "Tom", max_output_tokens: 4, metadata: { completion_window: "24h" } },
    });
    expect(res.status).toBe(200);
    expect(res.body.status).toBe("incomplete");
    expectInvalid(
      await create(server.url, caller.key, { metadata: { completion_window: "48h" } }),
      "metadata.completion_window",
    );
  });
});

describe("cancel", () => {
  test("when a running background response is cancelled, then it ends cancelled, is kept, and is charged for what it generated", async () => {
    const slow = await slowNextGeneration(20);
    const res = await create(server.url, caller.key, { max_output_tokens: 200, temperature: 0 });
    await slow.firstToken;
    const cancelled = await http(server.url, "POST", `/v1/responses/${res.body.id}/cancel`, { token: caller.key });
    expect(cancelled.status).toBe(200);
    expect(cancelled.body).toMatchObject({ id: res.body.id, status: "cancelled" });
    let rec = await recorded(server, res.body.id);
    await eventually(async () => (rec = await recorded(server, res.body.id)).activity.length > 0, 10_000);
    expect(rec.activity).toHaveLength(1);
    expect(rec.activity[0].status).toBe("cancelled");
    // Stopped part-way, and charged for what it generated, once.
    expect(rec.activity[0].completion_tokens).toBeGreaterThan(0);
    expect(rec.activity[0].completion_tokens).toBeLessThan(200);
    expect(BigInt(rec.activity[0].cost_micros)).toBeGreaterThan(0n);
    expect(rec.charges).toEqual([{ amount_micros: `-${rec.activity[0].cost_micros}` }]);
    // Kept: reads show it cancelled; cancelling again answers the same.
    expect((await http(server.url, "GET", `/v1/responses/${res.body.id}`, { token: caller.key })).body.status).toBe(
      "cancelled",
    );
    const again = await http(server.url, "POST", `/v1/responses/${res.body.id}/cancel`, { token: caller.key });
    expect(again.body.status).toBe("cancelled");
  });

  test("when a running background response is cancelled, then its stored object keeps the text generated before the abort", async () => {
    const slow = await slowNextGeneration(20);
    const res = await create(server.url, caller.key, {
      max_output_tokens: 200,
      temperature: 0,
      metadata: { custom_id: "bg-partial" },
    });
    await slow.firstToken;
    const cancelled = await http(server.url, "POST", `/v1/responses/${res.body.id}/cancel`, { token: caller.key });
    expect(cancelled.body.status).toBe("cancelled");
    let rec = await recorded(server, res.body.id);
    await eventually(async () => (rec = await recorded(server, res.body.id)).activity.length > 0, 10_000);
    const generated = rec.activity[0].completion_tokens;
    expect(generated).toBeGreaterThan(0);

    const read = await http(server.url, "GET", `/v1/responses/${res.body.id}`, { token: caller.key });
    expect(read.body).toMatchObject({
      id: res.body.id,
      status: "cancelled",
      error: null,
      incomplete_details: null,
      output: [
        {
          type: "message",
          role: "assistant",
          status: "incomplete",
          content: [{ type: "output_text", text: expect.any(String), annotations: [] }],
        },
      ],
      usage: { output_tokens: generated },
    });
    expect(read.body.output[0].content[0].text.length).toBeGreaterThan(0);
    // The activity result and the completion event say what GET says.
    const [activity] = await server.db<{ result_json: unknown }>("SELECT result_json FROM activity WHERE id = $1", [
      res.body.id,
    ]);
    expect(activity.result_json).toEqual(read.body);
    const feed = await http(server.url, "GET", "/v1/responses/events?limit=100", { token: caller.key });
    expect(feed.body.data.find((e: any) => e.response_id === res.body.id)?.result).toEqual(read.body);
    // GraphQL shows the text so far too.
    const gql = await http(server.url, "POST", "/graphql", {
      token: caller.key,
      body: { query: "query ($id: ID!) { response(id: $id) { status outputText } }", variables: { id: res.body.id } },
    });
    expect(gql.body.data.response).toEqual({ status: "cancelled", outputText: read.body.output[0].content[0].text });
  });

  test("when DELETE reaches a running response, then it is cancelled and kept; a second DELETE deletes it", async () => {
    const held = await holdNextGeneration();
    const res = await create(server.url, caller.key, { max_output_tokens: 64 });
    await held.started;
    const first = await http(server.url, "DELETE", `/v1/responses/${res.body.id}`, { token: caller.key });
    expect(first.status).toBe(200);
    expect(first.body.status).toBe("cancelled");
    held.release();
    expect((await http(server.url, "GET", `/v1/responses/${res.body.id}`, { token: caller.key })).body.status).toBe(
      "cancelled",
    );
    const second = await http(server.url, "DELETE", `/v1/responses/${res.body.id}`, { token: caller.key });
    expect(second.body.status).toBe("cancelled");
    expectEnvelope(await http(server.url, "GET", `/v1/responses/${res.body.id}`, { token: caller.key }), 404);
  });

  test("when another team cancels, deletes or reads a background response, then 404 and it runs on", async () => {
    const res = await create(server.url, caller.key, { max_output_tokens: 8 });
    const path = `/v1/responses/${res.body.id}`;
    expectEnvelope(await http(server.url, "POST", `${path}/cancel`, { token: other.key }), 404);
    expectEnvelope(await http(server.url, "DELETE", path, { token: other.key }), 404);
    expectEnvelope(await http(server.url, "GET", path, { token: other.key }), 404);
    expect((await untilTerminal(server.url, caller.key, res.body.id)).status).toBe("incomplete");
  });

  test("when cancel names no response, a bad id, or comes without credentials, then 404, 400, 401", async () => {
    expectEnvelope(
      await http(server.url, "POST", "/v1/responses/0190b7a4-7c1e-7000-8000-000000000000/cancel", {
        token: caller.key,
      }),
      404,
    );
    expectInvalid(await http(server.url, "POST", "/v1/responses/nope/cancel", { token: caller.key }), "response_id");
    expectEnvelope(
      await http(server.url, "POST", "/v1/responses/0190b7a4-7c1e-7000-8000-000000000000/cancel", {}),
      401,
    );
  });
});

describe("deadline", () => {
  test("when timeout_s elapses while the generation runs, then it ends failed with error.code timeout, recorded once", async () => {
    const held = await holdNextGeneration();
    const res = await create(server.url, caller.key, { max_output_tokens: 64, timeout_s: 1 });
    await held.started;
    const ended = await untilTerminal(server.url, caller.key, res.body.id, 10_000);
    held.release();
    expect(ended.status).toBe("failed");
    expect(ended.error).toEqual({ code: "timeout", message: expect.any(String) });
    let rec = await recorded(server, res.body.id);
    await eventually(async () => (rec = await recorded(server, res.body.id)).activity.length > 0, 10_000);
    expect(rec.activity).toHaveLength(1);
    expect(rec.activity[0].status).toBe("failed");
    expect(rec.charges.length).toBeLessThanOrEqual(1);
  });
});

describe("reconciler", () => {
  test("when a response was cancelled but its worker died before recording it, then the reconciler writes its one activity record, uncharged", async () => {
    const res = await create(server.url, caller.key, { max_output_tokens: 8 });
    await untilTerminal(server.url, caller.key, res.body.id);
    // A copy of it as a dead worker would leave it: ended by a cancel, claimed, never recorded.
    const [copy] = await server.db<{ id: string }>(
      `INSERT INTO responses (id, team_id, user_id, api_key_id, model, status, background, metadata, request_json,
                              response_json, created_at, completed_at, updated_at, deadline_at, runner,
                              runner_seen_at, principal_json)
       SELECT gen_random_uuid(), team_id, user_id, api_key_id, model, 'cancelled', true, metadata, request_json,
              response_json || '{"status": "cancelled"}', created_at, now() - interval '1 minute',
              now() - interval '1 minute', deadline_at, gen_random_uuid(), now() - interval '1 minute', principal_json
         FROM responses WHERE id = $1
       RETURNING id`,
      [res.body.id],
    );
    let rec = await recorded(server, copy.id);
    await eventually(async () => (rec = await recorded(server, copy.id)).activity.length > 0, 40_000);
    expect(rec.activity).toEqual([expect.objectContaining({ status: "cancelled", cost_micros: "0" })]);
    expect(rec.charges).toEqual([]);
  }, 60_000);
});

describe("heartbeats after an abort", () => {
  test("when a cancelled generation takes long to return, then its runner keeps heartbeating it and its own charged record is the one written", async () => {
    const slow = await slowToReturnNextGeneration(20);
    const res = await create(server.url, caller.key, { max_output_tokens: 200, temperature: 0 });
    await slow.firstToken;
    const cancelled = await http(server.url, "POST", `/v1/responses/${res.body.id}/cancel`, { token: caller.key });
    expect(cancelled.body.status).toBe("cancelled");
    await slow.returned; // aborted; its record waits until release
    // As if the aborted generation had been coming back for a minute: ended a minute ago, runner
    // last seen then (past the reconciler's 30 s).
    await server.db(
      `UPDATE responses SET updated_at = now() - interval '1 minute', runner_seen_at = now() - interval '1 minute'
        WHERE id = $1`,
      [res.body.id],
    );
    // The runner is alive and still runs it: its heartbeat says so.
    const heartbeat = await eventually(async () => {
      const [row] = await server.db<{ fresh: boolean }>(
        "SELECT runner_seen_at > now() - interval '10 seconds' AS fresh FROM responses WHERE id = $1",
        [res.body.id],
      );
      return row.fresh;
    }, 6_000);
    expect(heartbeat).toBe(true);
    // Long enough for the reconciler's look for ended, unrecorded responses (every 10 s) to run.
    await new Promise((r) => setTimeout(r, 11_000));
    expect((await recorded(server, res.body.id)).activity).toEqual([]);
    slow.release();
    let rec = await recorded(server, res.body.id);
    await eventually(async () => (rec = await recorded(server, res.body.id)).activity.length > 0, 10_000);
    // The generation's own record: cancelled, charged for what it generated, once.
    expect(rec.activity).toHaveLength(1);
    expect(rec.activity[0].status).toBe("cancelled");
    expect(rec.activity[0].completion_tokens).toBeGreaterThan(0);
    expect(BigInt(rec.activity[0].cost_micros)).toBeGreaterThan(0n);
    expect(rec.charges).toEqual([{ amount_micros: `-${rec.activity[0].cost_micros}` }]);
  }, 40_000);
});

describe("roles", () => {
  test("when only an api process runs, then background responses wait, and a missed deadline still ends them failed/timeout", async () => {
    const api = await startTestServer({ catalogPath, role: "api" });
    try {
      const c = await createTestCaller(api.url);
      const res = await create(api.url, c.key, { max_output_tokens: 8, timeout_s: 1 });
      expect(res.body.status).toBe("in_progress");
      const ended = await untilTerminal(api.url, c.key, res.body.id, 10_000);
      expect(ended).toMatchObject({ status: "failed", error: { code: "timeout" } });
      const rec = await recorded(api, res.body.id);
      expect(rec.activity).toHaveLength(1);
      expect(rec.activity[0].status).toBe("failed");
      expect(rec.charges).toHaveLength(0);
    } finally {
      await api.close();
    }
  }, 30_000);

  test("when an api process and a worker process share a database, then the worker runs it and a cancel on the api aborts it across processes", async () => {
    const api = await startTestServer({ catalogPath, role: "api" });
    const worker = await startTestServer({ catalogPath, role: "worker" }, api);
    try {
      const c = await createTestCaller(api.url);
      const plain = await create(api.url, c.key, { max_output_tokens: 8 });
      expect((await untilTerminal(api.url, c.key, plain.body.id)).status).toBe("incomplete");

      const slow = await slowNextGeneration(20);
      const res = await create(api.url, c.key, { max_output_tokens: 200, temperature: 0 });
      await slow.firstToken;
      const [row] = await api.db<{ runner: string }>("SELECT runner FROM responses WHERE id = $1", [res.body.id]);
      expect(row.runner).not.toBeNull();
      const cancelled = await http(api.url, "POST", `/v1/responses/${res.body.id}/cancel`, { token: c.key });
      expect(cancelled.body.status).toBe("cancelled");
      let rec = await recorded(api, res.body.id);
      await eventually(async () => (rec = await recorded(api, res.body.id)).activity.length > 0, 10_000);
      // Aborted by the NOTIFY: it stopped part-way, and is charged for what it generated.
      expect(rec.activity[0].status).toBe("cancelled");
      expect(rec.activity[0].completion_tokens).toBeGreaterThan(0);
      expect(rec.activity[0].completion_tokens).toBeLessThan(200);
      expect(rec.charges).toEqual([{ amount_micros: `-${rec.activity[0].cost_micros}` }]);
      expect((await http(api.url, "GET", `/v1/responses/${res.body.id}`, { token: c.key })).body.status).toBe(
        "cancelled",
      );
    } finally {
      await worker.close();
      await api.close();
    }
  }, 60_000);
});

describe("GraphQL", () => {
  const gql = (query: string, variables: Record<string, unknown>, token?: string) =>
    http(server.url, "POST", "/graphql", { body: { query, variables }, token });
  const RESPONSE = "id status outputText incompleteReason error { code } usage { outputTokens }";

  test("when cancelResponse names a running response, then it ends cancelled and response/responses show it", async () => {
    const slow = await slowNextGeneration(20);
    const res = await create(server.url, caller.key, { max_output_tokens: 200, temperature: 0 });
    await slow.firstToken;
    const cancelled = await gql(
      `mutation ($id: ID!) { cancelResponse(id: $id) { ${RESPONSE} } }`,
      { id: res.body.id },
      caller.key,
    );
    expect(cancelled.body.errors).toBeUndefined();
    expect(cancelled.body.data.cancelResponse).toMatchObject({ id: res.body.id, status: "cancelled" });
    const read = await gql(`query ($id: ID!) { response(id: $id) { ${RESPONSE} } }`, { id: res.body.id }, caller.key);
    expect(read.body.data.response.status).toBe("cancelled");
    const list = await gql(`{ responses(limit: 100) { data { id status } hasMore } }`, {}, caller.key);
    expect(list.body.data.responses.data).toContainEqual({ id: res.body.id, status: "cancelled" });
  });

  test("when another team or no caller uses response or cancelResponse, then NOT_FOUND or UNAUTHENTICATED", async () => {
    const res = await create(server.url, caller.key, { max_output_tokens: 8 });
    const cancel = await gql(`mutation ($id: ID!) { cancelResponse(id: $id) { id } }`, { id: res.body.id }, other.key);
    expect(cancel.body.errors[0].extensions.code).toBe("NOT_FOUND");
    const read = await gql(`query ($id: ID!) { response(id: $id) { id } }`, { id: res.body.id }, other.key);
    expect(read.body.errors[0].extensions.code).toBe("NOT_FOUND");
    const anonymous = await gql(`query ($id: ID!) { response(id: $id) { id } }`, { id: res.body.id });
    expect(anonymous.body.errors[0].extensions.code).toBe("UNAUTHENTICATED");
    const bad = await gql(`query { response(id: "nope") { id } }`, {}, caller.key);
    expect(bad.body.errors[0].extensions.status_code).toBe(400);
    const done = await untilTerminal(server.url, caller.key, res.body.id);
    const again = await gql(`query ($id: ID!) { response(id: $id) { ${RESPONSE} } }`, { id: res.body.id }, caller.key);
    expect(again.body.data.response).toMatchObject({
      status: done.status,
      incompleteReason: "max_output_tokens",
      usage: { outputTokens: 8 },
    });
    expect(again.body.data.response.outputText.length).toBeGreaterThan(0);
  });
});
