/**
 * Batches (issue 7; DESIGN §3 Batches): create validates every item up front, items run through
 * the synchronous endpoints' path (activity `type: batch`, one charge, a completion event with
 * `custom_id` and `batch_id`), totals equal the activity records, results in input order as JSON
 * and NDJSON, cancel mid-run, expiry, per-item failures, limits, and the usual 400/401/404.
 */
import nodeHttp from "node:http";
import { holdNextGeneration, releaseAllHolds } from "./support/engine-faults.js";
import { writeTestCatalog } from "./support/test-catalog.js";
import {
  CHAT_MODEL,
  EMBED_MODEL,
  type TestServer,
  createTestCaller,
  eventually,
  expectEnvelope,
  expectInvalid,
  http,
  startTestServer,
} from "./support/harness.js";

type Caller = Awaited<ReturnType<typeof createTestCaller>>;

let server: TestServer;
let caller: Caller;
let other: Caller;

beforeAll(async () => {
  // One item at a time, so tests can hold the first and reason about the rest.
  server = await startTestServer({
    batchConcurrency: 1,
    batchMaxBytes: 256 * 1024,
    batchMaxItems: 100,
    // Prices that make every chat item cost micro-USD (the shipped ones round short requests to 0).
    catalogPath: writeTestCatalog(CHAT_MODEL, { input: "1", cachedInput: "0.5", output: "2" }),
  });
  caller = await createTestCaller(server.url);
  other = await createTestCaller(server.url);
}, 30_000);
afterAll(() => server.close());
// A test that fails while it holds the engine must not stall the ones after it.
afterEach(releaseAllHolds);

const ISO = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$/;

function chatItem(customId: string | null, extra: Record<string, unknown> = {}) {
  return {
    custom_id: customId,
    body: { model: CHAT_MODEL, messages: [{ role: "user", content: "Once upon a time" }], max_tokens: 4, ...extra },
  };
}

async function createBatch(key: string, requests: unknown[], extra: Record<string, unknown> = {}) {
  return http(server.url, "POST", "/v1/batches", { token: key, body: { requests, ...extra } });
}

async function untilStatus(key: string, id: string, statuses: string[], timeoutMs = 30_000): Promise<any> {
  let batch: any;
  await eventually(async () => {
    batch = (await http(server.url, "GET", `/v1/batches/${id}`, { token: key })).body;
    return statuses.includes(batch.status);
  }, timeoutMs);
  return batch;
}

async function jsonl(key: string, id: string): Promise<any[]> {
  const res = await http(server.url, "GET", `/v1/batches/${id}/results.jsonl`, { token: key });
  expect(res.status).toBe(200);
  expect(res.headers.get("content-type")).toMatch(/^application\/x-ndjson/);
  expect(res.text.endsWith("\n")).toBe(true);
  return res.text
    .split("\n")
    .filter((line) => line !== "")
    .map((line) => JSON.parse(line));
}

describe("a batch that runs to the end", () => {
  let batch: any;
  let ended: any;

  beforeAll(async () => {
    const res = await createBatch(caller.key, [
      chatItem("chat-1"),
      {
        custom_id: "resp-1",
        url: "/v1/responses",
        body: { model: CHAT_MODEL, input: "The cat", max_output_tokens: 3 },
      },
      { custom_id: "emb-1", url: "/v1/embeddings", body: { model: EMBED_MODEL, input: "hello" } },
      {
        custom_id: "msg-1",
        url: "/v1/messages",
        body: { model: CHAT_MODEL, max_tokens: 3, messages: [{ role: "user", content: "Hi" }] },
      },
      chatItem(null),
    ]);
    expect(res.status).toBe(201);
    batch = res.body;
    ended = await untilStatus(caller.key, batch.id, ["completed", "failed"]);
  }, 60_000);

  test("when created, then it answers 201 pending with the spec's fields, the window and an absolute output_url", () => {
    expect(batch).toMatchObject({
      id: expect.stringMatching(/^[0-9a-f-]{36}$/),
      object: "batch",
      status: expect.stringMatching(/^(pending|running)$/),
      window: "24h",
      request_count: 5,
      created_at: expect.stringMatching(ISO),
      updated_at: expect.stringMatching(ISO),
      completed_at: null,
      total_prompt_tokens: expect.any(Number),
      total_completion_tokens: expect.any(Number),
      total_tokens: expect.any(Number),
      total_cost_micros: expect.any(Number),
      output_url: `${server.url}/v1/batches/${batch.id}/results.jsonl`,
    });
  });

  test("when every item ended, then the batch is completed with completed_at and counts by status", () => {
    expect(ended).toMatchObject({
      status: "completed",
      completed_at: expect.stringMatching(ISO),
      request_counts: { total: 5, completed: 5, failed: 0, cancelled: 0, pending: 0, running: 0 },
    });
    expect(Date.parse(ended.updated_at)).toBeGreaterThanOrEqual(Date.parse(batch.updated_at));
  });

  test("when it ended, then the totals equal the sums over its activity records", async () => {
    const [sums] = await server.db<any>(
      `SELECT count(*)::int AS n, sum(prompt_tokens)::int AS p, sum(completion_tokens)::int AS c,
              sum(total_tokens)::int AS t, sum(cost_micros)::int AS cost
         FROM activity WHERE batch_id = $1`,
      [batch.id],
    );
    expect(sums.n).toBe(5);
    expect(sums.p).toBeGreaterThan(0);
    expect(ended).toMatchObject({
      total_prompt_tokens: sums.p,
      total_completion_tokens: sums.c,
      total_tokens: sums.t,
      total_cost_micros: sums.cost,
    });
  });

  test("when items ran, then each is one activity record of type batch with batch_id and custom_id, charged once", async () => {
    const rows = await server.db<any>(
      `SELECT a.type, a.batch_id, a.custom_id, a.endpoint, a.status,
              (SELECT count(*)::int FROM credit_ledger l WHERE l.source_id = a.id::text) AS charges,
              (a.cost_micros > 0)::int AS billable
         FROM activity a WHERE a.batch_id = $1 ORDER BY a.custom_id NULLS LAST`,
      [batch.id],
    );
    expect(rows.map((r) => [r.custom_id, r.endpoint])).toEqual([
      ["chat-1", "/v1/chat/completions"],
      ["emb-1", "/v1/embeddings"],
      ["msg-1", "/v1/messages"],
      // A Responses body ran as the chat completion it was converted to at create time.
      ["resp-1", "/v1/chat/completions"],
      [null, "/v1/chat/completions"],
    ]);
    for (const r of rows) {
      // Charged once when it cost anything (a 2-token embedding rounds to 0 micro-USD: no ledger row).
      expect(r).toMatchObject({ type: "batch", batch_id: batch.id, status: "completed", charges: r.billable });
    }
    expect(rows.filter((r) => r.charges === 1).length).toBe(4);
  });

  test("when items finished, then each is a completion event carrying its custom_id and batch_id", async () => {
    const res = await http(server.url, "GET", "/v1/responses/events?limit=100", { token: caller.key });
    const mine = res.body.data.filter((e: any) => e.batch_id === batch.id);
    expect(mine.map((e: any) => e.custom_id).sort()).toEqual(["chat-1", "emb-1", "msg-1", "resp-1", null].sort());
  });

  test("when results are read, then one row per item in input order with each operation's body", async () => {
    const res = await http(server.url, "GET", `/v1/batches/${batch.id}/results`, { token: caller.key });
    expect(res.status).toBe(200);
    expect(res.body).toMatchObject({
      batch_id: batch.id,
      status: "completed",
      output_url: batch.output_url,
      completed_at: ended.completed_at,
    });
    const results = res.body.results;
    expect(results.map((r: any) => r.custom_id)).toEqual(["chat-1", "resp-1", "emb-1", "msg-1", null]);
    for (const r of results)
      expect(Object.keys(r).sort()).toEqual(["custom_id", "error_json", "result_json", "status"]);
    expect(results[0]).toMatchObject({
      status: "completed",
      error_json: null,
      result_json: { object: "chat.completion" },
    });
    expect(results[1].result_json).toMatchObject({ object: "chat.completion" });
    expect(results[2].result_json).toMatchObject({ object: "list", data: [{ object: "embedding" }] });
    expect(results[3].result_json).toMatchObject({ type: "message", role: "assistant" });
  });

  test("when results.jsonl is read, then each line parses to the same rows, in input order", async () => {
    const lines = await jsonl(caller.key, batch.id);
    const res = await http(server.url, "GET", `/v1/batches/${batch.id}/results`, { token: caller.key });
    expect(lines).toEqual(res.body.results);
  });

  test("when the batch is listed or read over GraphQL, then it shows with its progress", async () => {
    const list = await http(server.url, "GET", "/v1/batches", { token: caller.key });
    expect(list.status).toBe(200);
    expect(list.body.items.map((b: any) => b.id)).toContain(batch.id);
    const gql = await http(server.url, "POST", "/graphql", {
      token: caller.key,
      body: {
        query: `query($id: ID!) { batch(id: $id) { id status requestCount requestCounts { completed total } totalTokens }
                                  batches { id } }`,
        variables: { id: batch.id },
      },
    });
    expect(gql.body.errors).toBeUndefined();
    expect(gql.body.data.batch).toEqual({
      id: batch.id,
      status: "completed",
      requestCount: 5,
      requestCounts: { completed: 5, total: 5 },
      totalTokens: ended.total_tokens,
    });
    expect(gql.body.data.batches.map((b: any) => b.id)).toContain(batch.id);
  });
});

describe("bad input", () => {
  async function teamBatches(teamId: string): Promise<number> {
    const [row] = await server.db<any>("SELECT count(*)::int AS n FROM batches WHERE team_id = $1", [teamId]);
    return row.n;
  }

  test("when some items are bad, then 400 names each requests[i] with its custom_id and nothing is stored", async () => {
    const fresh = await createTestCaller(server.url);
    const res = await createBatch(fresh.key, [
      chatItem("good-1"),
      chatItem("bad-model", { model: "no-such-model" }),
      chatItem("good-2"),
      chatItem("bad-bg", { background: true }),
      { custom_id: "bad-url", url: "/v1/nowhere", body: {} },
      { custom_id: "no-body" },
      chatItem("bad-temp", { temperature: 7 }),
    ]);
    expectEnvelope(res, 400);
    const extra = res.body.extra as Array<{ field: string; custom_id: string | null }>;
    const named = (i: number) => extra.filter((e) => e.field.startsWith(`requests[${i}]`));
    expect(named(0)).toEqual([]);
    expect(named(1)[0]).toMatchObject({ field: "requests[1].body.model", custom_id: "bad-model" });
    expect(named(2)).toEqual([]);
    expect(named(3)[0]).toMatchObject({ field: "requests[3].body.background", custom_id: "bad-bg" });
    expect(named(4)[0]).toMatchObject({ field: "requests[4].url", custom_id: "bad-url" });
    expect(named(5)[0]).toMatchObject({ field: "requests[5].body", custom_id: "no-body" });
    expect(named(6)[0]).toMatchObject({ field: "requests[6].body.temperature", custom_id: "bad-temp" });
    expect(await teamBatches(fresh.teamId)).toBe(0);
  });

  test("when the body is not a batch, then 400 names the field and nothing is stored", async () => {
    const fresh = await createTestCaller(server.url);
    expectInvalid(await createBatch(fresh.key, []), "requests");
    expectInvalid(await http(server.url, "POST", "/v1/batches", { token: fresh.key, body: {} }), "requests");
    expectInvalid(
      await http(server.url, "POST", "/v1/batches", { token: fresh.key, body: { requests: "x" } }),
      "requests",
    );
    expectInvalid(await createBatch(fresh.key, [chatItem("a")], { window: "48h" }), "window");
    expectInvalid(await createBatch(fresh.key, [chatItem("a")], { completion_window: "1h" }), "completion_window");
    expectInvalid(await createBatch(fresh.key, [chatItem("a", { stream: true })]), "requests[0].body.stream");
    expectInvalid(await createBatch(fresh.key, [{ custom_id: 5, body: chatItem("x").body }]), "requests[0].custom_id");
    expectInvalid(await createBatch(fresh.key, ["not an object"]), "requests[0]");
    // A decisions item is checked as POST /v1/decisions checks its body (issue 11).
    expectInvalid(
      await createBatch(fresh.key, [{ url: "/v1/decisions", body: { model: CHAT_MODEL } }]),
      "requests[0].body.questions",
    );
    for (const raw of ['{"requests": [', '{"requests": [{"body": {}} {"body": {}}]}', "[1]", '{"requests": []} x']) {
      const res = await http(server.url, "POST", "/v1/batches", { token: fresh.key, body: raw });
      expectEnvelope(res, 400);
    }
    expect(await teamBatches(fresh.teamId)).toBe(0);
  });

  test("when the body is over the size limit or holds too many items, then 413 and nothing is stored", async () => {
    const fresh = await createTestCaller(server.url);
    const big = await createBatch(fresh.key, [
      chatItem("a", { messages: [{ role: "user", content: "x".repeat(300_000) }] }),
    ]);
    expectEnvelope(big, 413);
    const many = await createBatch(
      fresh.key,
      Array.from({ length: 101 }, (_, i) => chatItem(`m${i}`)),
    );
    expectEnvelope(many, 413);
    expect(await teamBatches(fresh.teamId)).toBe(0);
  });

  test("when the body arrives in pieces, with or without Content-Length, then it is read whole", async () => {
    const fresh = await createTestCaller(server.url);
    const requests = Array.from({ length: 40 }, (_, i) => chatItem(`c${i}`));
    const bytes = Buffer.from(JSON.stringify({ requests }));
    const cuts = [0, 7, 1000, 1001, 5000, bytes.length];
    for (const declared of [true, false]) {
      // Pauses between pieces make them arrive as separate chunks.
      const created = await new Promise<{ status: number; body: any }>((resolve, reject) => {
        const req = nodeHttp.request(
          `${server.url}/v1/batches`,
          {
            method: "POST",
            headers: {
              authorization: `Bearer ${fresh.key}`,
              "content-type": "application/json",
              ...(declared ? { "content-length": bytes.length } : {}),
            },
          },
          (res) => {
            let text = "";
            res.on("data", (c) => (text += c));
            res.on("end", () => resolve({ status: res.statusCode!, body: JSON.parse(text) }));
          },
        );
        req.on("error", reject);
        void (async () => {
          for (let i = 0; i + 1 < cuts.length; i++) {
            req.write(bytes.subarray(cuts[i], cuts[i + 1]));
            await new Promise((r) => setTimeout(r, 30));
          }
          req.end();
        })();
      });
      expect(created.status).toBe(201);
      expect(created.body.request_count).toBe(40);
      const rows = await server.db<any>(
        "SELECT custom_id, body_json FROM batch_items WHERE batch_id = $1 ORDER BY idx",
        [created.body.id],
      );
      expect(rows.map((r) => r.custom_id)).toEqual(requests.map((r) => r.custom_id));
      expect(rows.every((r) => r.body_json.messages[0].content === "Once upon a time")).toBe(true);
      // Not run: the tests after this one need the runner's only slot.
      await http(server.url, "POST", `/v1/batches/${created.body.id}/cancel`, { token: fresh.key });
    }
  });

  test("when ids or list parameters are bad, then 400", async () => {
    expectInvalid(await http(server.url, "GET", "/v1/batches/not-a-uuid", { token: caller.key }), "batch_id");
    expectInvalid(await http(server.url, "POST", "/v1/batches/not-a-uuid/cancel", { token: caller.key }), "batch_id");
    expectInvalid(await http(server.url, "GET", "/v1/batches/nope/results", { token: caller.key }), "batch_id");
    expectInvalid(await http(server.url, "GET", "/v1/batches/nope/results.jsonl", { token: caller.key }), "batch_id");
    expectInvalid(await http(server.url, "GET", "/v1/batches?limit=0", { token: caller.key }), "limit");
    expectInvalid(await http(server.url, "GET", "/v1/batches?after=x", { token: caller.key }), "after");
  });

  test("when the team has no credit, then create answers 402 and stores nothing", async () => {
    const poor = await createTestCaller(server.url);
    await server.db("UPDATE teams SET credit_balance_micros = 0 WHERE id = $1", [poor.teamId]);
    await server.db("SELECT pg_notify('switchyard_cache', 'balance:' || $1::text || '=0')", [poor.teamId]);
    let res = await createBatch(poor.key, [chatItem("a")]);
    await eventually(async () => (res = await createBatch(poor.key, [chatItem("a")])).status === 402, 5_000);
    expectEnvelope(res, 402);
    expect(await teamBatches(poor.teamId)).toBe(0);
  });
});

describe("credentials and teams", () => {
  let id: string;
  beforeAll(async () => {
    id = (await createBatch(caller.key, [chatItem("auth-1")])).body.id;
    await untilStatus(caller.key, id, ["completed"]);
  }, 30_000);

  test("when no credentials come, then every batch route answers 401", async () => {
    for (const [method, path] of [
      ["POST", "/v1/batches"],
      ["GET", "/v1/batches"],
      ["GET", `/v1/batches/${id}`],
      ["POST", `/v1/batches/${id}/cancel`],
      ["GET", `/v1/batches/${id}/results`],
      ["GET", `/v1/batches/${id}/results.jsonl`],
    ]) {
      expectEnvelope(
        await http(server.url, method, path, { body: method === "POST" ? { requests: [] } : undefined }),
        401,
      );
    }
  });

  test("when another team names the batch, then 404 everywhere and it is not listed", async () => {
    for (const [method, path] of [
      ["GET", `/v1/batches/${id}`],
      ["POST", `/v1/batches/${id}/cancel`],
      ["GET", `/v1/batches/${id}/results`],
      ["GET", `/v1/batches/${id}/results.jsonl`],
    ]) {
      expectEnvelope(await http(server.url, method, path, { token: other.key }), 404);
    }
    const list = await http(server.url, "GET", "/v1/batches", { token: other.key });
    expect(list.body.items.map((b: any) => b.id)).not.toContain(id);
    const gql = await http(server.url, "POST", "/graphql", {
      token: other.key,
      body: { query: `mutation($id: ID!) { cancelBatch(id: $id) { id } }`, variables: { id } },
    });
    expect(gql.body.errors[0].extensions.code).toBe("NOT_FOUND");
    const [row] = await server.db<any>("SELECT status FROM batches WHERE id = $1", [id]);
    expect(row.status).toBe("completed");
  });
});

describe("cancel, failures and paging", () => {
  test("when a running batch is cancelled, then it is cancelled at once, the running item keeps its result and the rest never run", async () => {
    const held = await holdNextGeneration();
    const res = await createBatch(caller.key, [chatItem("c-0"), chatItem("c-1"), chatItem("c-2")]);
    await held.started;
    const cancelled = await http(server.url, "POST", `/v1/batches/${res.body.id}/cancel`, { token: caller.key });
    expect(cancelled.status).toBe(200);
    expect(cancelled.body).toMatchObject({ status: "cancelled", completed_at: expect.stringMatching(ISO) });
    held.release();
    // Until the running item ends, results stay null and results.jsonl lists only ended items.
    const early = await http(server.url, "GET", `/v1/batches/${res.body.id}/results`, { token: caller.key });
    expect(early.body.results).toBeNull();
    let lines: any[] = [];
    await eventually(async () => {
      lines = await jsonl(caller.key, res.body.id);
      return lines.length === 3;
    }, 10_000);
    expect(lines.map((l) => [l.custom_id, l.status])).toEqual([
      ["c-0", "completed"],
      ["c-1", "cancelled"],
      ["c-2", "cancelled"],
    ]);
    expect(lines[0].result_json).toMatchObject({ object: "chat.completion" });
    const rows = await server.db<any>("SELECT custom_id FROM activity WHERE batch_id = $1", [res.body.id]);
    expect(rows.map((r) => r.custom_id)).toEqual(["c-0"]);
    // Still cancelled, and cancelling again changes nothing.
    const again = await http(server.url, "POST", `/v1/batches/${res.body.id}/cancel`, { token: caller.key });
    expect(again.body).toMatchObject({ status: "cancelled", completed_at: cancelled.body.completed_at });
  }, 30_000);

  test("when a pending batch is cancelled, then it is cancelled and none of its items ever runs", async () => {
    // The runner runs one item at a time: while another batch's item is held, this batch waits.
    const held = await holdNextGeneration();
    const blocker = await createBatch(caller.key, [chatItem("b-0")]);
    await held.started;
    const res = await createBatch(caller.key, [chatItem("q-0"), chatItem("q-1")]);
    expect(res.body.status).toBe("pending");
    const cancelled = await http(server.url, "POST", `/v1/batches/${res.body.id}/cancel`, { token: caller.key });
    expect(cancelled.body).toMatchObject({
      status: "cancelled",
      cancelled_at: expect.stringMatching(ISO),
      request_counts: { cancelled: 2, pending: 0 },
    });
    held.release();
    await untilStatus(caller.key, blocker.body.id, ["completed"]);
    await new Promise((r) => setTimeout(r, 300));
    const ran = await server.db<any>("SELECT id FROM activity WHERE batch_id = $1", [res.body.id]);
    expect(ran).toEqual([]);
    const results = await http(server.url, "GET", `/v1/batches/${res.body.id}/results`, { token: caller.key });
    expect(results.body.results.map((r: any) => r.status)).toEqual(["cancelled", "cancelled"]);
  }, 30_000);

  test("when an item cannot run (prompt too long) the others still complete and the batch is completed", async () => {
    const long = "Once upon a time ".repeat(400);
    const res = await createBatch(caller.key, [
      chatItem("ok-1"),
      chatItem("long", { messages: [{ role: "user", content: long }] }),
    ]);
    const ended = await untilStatus(caller.key, res.body.id, ["completed", "failed"]);
    expect(ended.status).toBe("completed");
    const lines = await jsonl(caller.key, res.body.id);
    expect(lines[1]).toMatchObject({
      custom_id: "long",
      status: "failed",
      result_json: null,
      error_json: { code: "invalid_request" },
    });
  }, 30_000);

  test("when credit runs out mid-batch, then later items fail with insufficient_credit and the batch still completes", async () => {
    const poor = await createTestCaller(server.url);
    const held = await holdNextGeneration();
    const res = await createBatch(poor.key, [chatItem("p-0"), chatItem("p-1"), chatItem("p-2")]);
    await held.started;
    await server.db("UPDATE teams SET credit_balance_micros = 0 WHERE id = $1", [poor.teamId]);
    await server.db("SELECT pg_notify('switchyard_cache', 'balance:' || $1::text || '=0')", [poor.teamId]);
    await new Promise((r) => setTimeout(r, 200));
    held.release();
    const ended = await untilStatus(poor.key, res.body.id, ["completed", "failed"]);
    expect(ended.status).toBe("completed");
    const lines = await jsonl(poor.key, res.body.id);
    expect(lines.map((l) => l.status)).toEqual(["completed", "failed", "failed"]);
    expect(lines[1].error_json).toMatchObject({ code: "insufficient_credit" });
    expect(lines[2].error_json).toMatchObject({ code: "insufficient_credit" });
  }, 30_000);

  test("when no item completes, then the batch is failed", async () => {
    const long = "Once upon a time ".repeat(400);
    const res = await createBatch(caller.key, [chatItem("l-1", { messages: [{ role: "user", content: long }] })]);
    const ended = await untilStatus(caller.key, res.body.id, ["completed", "failed"]);
    expect(ended).toMatchObject({ status: "failed", request_counts: { failed: 1 } });
  }, 30_000);

  test("when results are read before the batch ends, then results is null", async () => {
    const held = await holdNextGeneration();
    const res = await createBatch(caller.key, [chatItem("r-0")]);
    await held.started;
    const early = await http(server.url, "GET", `/v1/batches/${res.body.id}/results`, { token: caller.key });
    expect(early.body).toMatchObject({ batch_id: res.body.id, status: "running", results: null, completed_at: null });
    held.release();
    await untilStatus(caller.key, res.body.id, ["completed"]);
  }, 30_000);

  test("when an item carries a webhook token, then the token is never stored and no per-item webhook is sent", async () => {
    const metadata = { completion_webhook: "http://127.0.0.1:9/hook", webhook_token: "tok-secret-4711" };
    const res = await createBatch(caller.key, [chatItem("wh-1", { metadata })]);
    await untilStatus(caller.key, res.body.id, ["completed"]);
    const stored = await server.db<any>(
      `SELECT i.body_json::text AS item, a.body_json::text AS activity,
              (SELECT count(*)::int FROM webhook_deliveries w WHERE w.response_id = i.request_id) AS deliveries
         FROM batch_items i JOIN activity a ON a.id = i.request_id WHERE i.batch_id = $1`,
      [res.body.id],
    );
    expect(stored).toHaveLength(1);
    expect(stored[0].item).not.toContain("tok-secret-4711");
    expect(stored[0].activity).not.toContain("tok-secret-4711");
    expect(stored[0].deliveries).toBe(0);
  }, 30_000);

  test("when the list is paged with limit and after, then pages follow newest first without overlap", async () => {
    const pager = await createTestCaller(server.url);
    const ids: string[] = [];
    for (let i = 0; i < 3; i++) ids.push((await createBatch(pager.key, [chatItem(`pg-${i}`)])).body.id);
    const first = await http(server.url, "GET", "/v1/batches?limit=2", { token: pager.key });
    expect(first.body.items.map((b: any) => b.id)).toEqual([ids[2], ids[1]]);
    expect(first.body.has_more).toBe(true);
    const second = await http(server.url, "GET", `/v1/batches?limit=2&after=${ids[1]}`, { token: pager.key });
    expect(second.body.items.map((b: any) => b.id)).toEqual([ids[0]]);
    expect(second.body.has_more).toBe(false);
    for (const id of ids) await untilStatus(pager.key, id, ["completed"]);
  }, 30_000);
});

describe("expiry", () => {
  let short: TestServer;
  beforeAll(async () => {
    short = await startTestServer({ batchConcurrency: 1, batchWindowS: 2 });
  }, 30_000);
  afterAll(() => short.close());

  test("when the window passes, then unfinished items fail as expired, finished ones keep results, and the batch is failed", async () => {
    const who = await createTestCaller(short.url);
    const held = await holdNextGeneration();
    const res = await http(short.url, "POST", "/v1/batches", {
      token: who.key,
      body: { requests: [chatItem("e-0"), chatItem("e-1"), chatItem("e-2")] },
    });
    expect(res.status).toBe(201);
    await held.started;
    let batch: any;
    await eventually(async () => {
      batch = (await http(short.url, "GET", `/v1/batches/${res.body.id}`, { token: who.key })).body;
      return batch.status === "failed";
    }, 10_000);
    expect(batch).toMatchObject({ status: "failed", completed_at: expect.stringMatching(ISO) });
    held.release();
    const lines = (await http(short.url, "GET", `/v1/batches/${res.body.id}/results.jsonl`, { token: who.key })).text
      .trim()
      .split("\n")
      .map((l) => JSON.parse(l));
    for (const line of lines) {
      expect(line).toMatchObject({ status: "failed", error_json: { code: "expired" } });
    }
    // Items that never started never ran.
    await new Promise((r) => setTimeout(r, 300));
    const ran = await short.db<any>("SELECT custom_id FROM activity WHERE batch_id = $1", [res.body.id]);
    expect(ran.map((r) => r.custom_id).filter((c) => c !== "e-0")).toEqual([]);
  }, 30_000);
});
