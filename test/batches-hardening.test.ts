/**
 * Batches against hostile or unlucky input (issue 7, review findings): members of the body are
 * bounded and only the known ones kept, a repeated `requests` counts as JSON.parse would count it,
 * `custom_id` is echoed only when valid, metadata is bounded, and credit held by a batch's own
 * items in flight never fails a sibling with `insufficient_credit`.
 */
import { holdNextGeneration } from "./support/engine-faults.js";
import { writeTestCatalog } from "./support/test-catalog.js";
import {
  CHAT_MODEL,
  type TestServer,
  createTestCaller,
  eventually,
  expectEnvelope,
  expectInvalid,
  http,
  startTestServer,
} from "./support/harness.js";

let server: TestServer;

beforeAll(async () => {
  server = await startTestServer({
    batchConcurrency: 3,
    catalogPath: writeTestCatalog(CHAT_MODEL, { input: "1", cachedInput: "0.5", output: "2" }),
  });
}, 30_000);
afterAll(() => server.close());

function chatItem(customId: string | null, extra: Record<string, unknown> = {}) {
  return {
    custom_id: customId,
    body: { model: CHAT_MODEL, messages: [{ role: "user", content: "Once upon a time" }], max_tokens: 4, ...extra },
  };
}

function postRaw(key: string, body: string) {
  return http(server.url, "POST", "/v1/batches", { token: key, body });
}

async function batchesOf(teamId: string): Promise<any[]> {
  return server.db("SELECT id, metadata FROM batches WHERE team_id = $1", [teamId]);
}

test("when a member other than requests nests deeper than any JSON body may, then 400 naming it and nothing is stored", async () => {
  const fresh = await createTestCaller(server.url);
  const deep = `{"x":${"[".repeat(10_000)}${"]".repeat(10_000)},"requests":[${JSON.stringify(chatItem("d"))}]}`;
  expectInvalid(await postRaw(fresh.key, deep), "x");
  expect(await batchesOf(fresh.teamId)).toEqual([]);
});

test("when requests is given twice, then the last one counts (as JSON.parse reads it)", async () => {
  const fresh = await createTestCaller(server.url);
  expectInvalid(await postRaw(fresh.key, `{"requests":[${JSON.stringify(chatItem("a"))}],"requests":5}`), "requests");
  const res = await postRaw(fresh.key, `{"requests":5,"requests":[${JSON.stringify(chatItem("b"))}]}`);
  expect(res.status).toBe(201);
  expect(res.body.request_count).toBe(1);
});

test("when the body carries __proto__ or unknown members, then they are ignored and never reach the batch", async () => {
  const fresh = await createTestCaller(server.url);
  const res = await postRaw(
    fresh.key,
    `{"__proto__":{"metadata":{"leak":1},"window":"48h"},"extra":{"a":[1,2]},"requests":[${JSON.stringify(chatItem("p"))}]}`,
  );
  expect(res.status).toBe(201);
  expect(res.body.metadata).toBeNull();
  const [row] = await batchesOf(fresh.teamId);
  expect(row.metadata).toBeNull();
});

test("when a custom_id is too long, then the 400 names it without echoing it", async () => {
  const fresh = await createTestCaller(server.url);
  const long = "c".repeat(10_000);
  const res = await http(server.url, "POST", "/v1/batches", {
    token: fresh.key,
    body: { requests: [{ ...chatItem(long), url: 5, method: 7 }] },
  });
  expectEnvelope(res, 400);
  expect(res.text).not.toContain(long);
  for (const issue of res.body.extra) expect(issue.custom_id).toBeNull();
  expect(res.body.extra.map((i: any) => i.field)).toContain("requests[0].custom_id");
});

test("when batch metadata is over its bounds, then 400 names metadata and nothing is stored", async () => {
  const fresh = await createTestCaller(server.url);
  const many = Object.fromEntries(Array.from({ length: 17 }, (_, i) => [`k${i}`, "v"]));
  const big = { k: "v".repeat(20_000) };
  for (const metadata of [many, big, { ["k".repeat(65)]: "v" }]) {
    const res = await http(server.url, "POST", "/v1/batches", {
      token: fresh.key,
      body: { requests: [chatItem("m")], metadata },
    });
    expectEnvelope(res, 400);
    expect(res.body.extra[0].field).toMatch(/^metadata/);
  }
  expect(await batchesOf(fresh.teamId)).toEqual([]);
});

test("when the team's credit covers one item at a time, then siblings wait for it instead of failing with insufficient_credit", async () => {
  const poor = await createTestCaller(server.url);
  const probe = await http(server.url, "POST", "/v1/chat/completions", {
    token: poor.key,
    body: { model: CHAT_MODEL, messages: [{ role: "user", content: "Once upon a time" }], max_tokens: 1 },
  });
  // Worst case of one item: prompt at 1 µ$/token + 50 completion tokens at 2 µ$/token.
  const worst = (probe.body.usage.prompt_tokens as number) + 50 * 2;
  const balance = Math.floor(worst * 1.5);
  await server.db("UPDATE teams SET credit_balance_micros = $2 WHERE id = $1", [poor.teamId, balance]);
  await server.db("SELECT pg_notify('switchyard_cache', 'balance:' || $1::text || '=' || $2::text)", [
    poor.teamId,
    String(balance),
  ]);
  await new Promise((r) => setTimeout(r, 300));
  const held = await holdNextGeneration();
  try {
    const res = await http(server.url, "POST", "/v1/batches", {
      token: poor.key,
      // A stop at the first space keeps each real cost far below its worst case.
      body: { requests: [0, 1, 2].map((i) => chatItem(`r${i}`, { max_tokens: 50, stop: [" "] })) },
    });
    expect(res.status).toBe(201);
    await held.started;
    await new Promise((r) => setTimeout(r, 1500));
    held.release();
    let batch: any;
    await eventually(async () => {
      batch = (await http(server.url, "GET", `/v1/batches/${res.body.id}`, { token: poor.key })).body;
      return batch.status === "completed" || batch.status === "failed";
    }, 30_000);
    expect(batch.request_counts).toMatchObject({ completed: 3, failed: 0 });
  } finally {
    held.release();
  }
}, 60_000);

test("when a batch ended while a dead runner held items, then the reconciler ends them: from their record if one exists, else as the batch", async () => {
  const who = await createTestCaller(server.url);
  const res = await http(server.url, "POST", "/v1/batches", {
    token: who.key,
    body: { requests: [chatItem("s0"), chatItem("s1"), chatItem("s2")] },
  });
  const id = res.body.id as string;
  await eventually(async () => {
    const [b] = await server.db<any>("SELECT status FROM batches WHERE id = $1", [id]);
    return b.status === "completed";
  }, 20_000);
  // The state a SIGKILLed runner leaves behind a cancel: the batch ended, items still `running`,
  // untouched for a minute; item 0's record had committed, item 1's had not.
  await server.db(
    `UPDATE batches SET status = 'cancelled', runner = gen_random_uuid(), runner_seen_at = now() - interval '1 minute'
      WHERE id = $1`,
    [id],
  );
  await server.db(
    `UPDATE batch_items SET status = 'running', result_json = NULL, started_at = now() - interval '1 minute'
      WHERE batch_id = $1 AND idx IN (0, 1)`,
    [id],
  );
  await server.db(
    `DELETE FROM completion_events WHERE response_id = (SELECT request_id FROM batch_items WHERE batch_id = $1 AND idx = 1)`,
    [id],
  );
  await server.db(
    `DELETE FROM activity WHERE id = (SELECT request_id FROM batch_items WHERE batch_id = $1 AND idx = 1)`,
    [id],
  );
  let rows: any[] = [];
  const settled = await eventually(async () => {
    rows = await server.db("SELECT idx, status, result_json FROM batch_items WHERE batch_id = $1 ORDER BY idx", [id]);
    return rows.every((r) => r.status !== "running");
  }, 15_000);
  expect(settled).toBe(true);
  expect(rows.map((r) => r.status)).toEqual(["completed", "cancelled", "completed"]);
  expect(rows[0].result_json).toMatchObject({ object: "chat.completion" });
}, 60_000);

test("when a batch has more items than its runner's concurrency, then at most that many are in the engine at once", async () => {
  // Counted at the node-llama-cpp boundary (as `holdNextGeneration`): each generation is held
  // 40 ms so items overlap. The runner frees an item's slot once its engine work succeeded, before
  // its record commits (issue 30): that must never let more than `batchConcurrency` (3) in.
  const lib = await import("node-llama-cpp");
  const proto = lib.LlamaCompletion.prototype as unknown as { generateCompletionWithMeta: (...a: unknown[]) => any };
  const original = proto.generateCompletionWithMeta;
  let inEngine = 0;
  let most = 0;
  proto.generateCompletionWithMeta = async function counted(this: unknown, ...args: unknown[]) {
    inEngine++;
    most = Math.max(most, inEngine);
    try {
      await new Promise((r) => setTimeout(r, 40));
      return await original.apply(this, args);
    } finally {
      inEngine--;
    }
  };
  try {
    const who = await createTestCaller(server.url);
    const res = await http(server.url, "POST", "/v1/batches", {
      token: who.key,
      body: { requests: Array.from({ length: 12 }, (_, i) => chatItem(`c${i}`)) },
    });
    expect(res.status).toBe(201);
    let batch: any;
    await eventually(async () => {
      batch = (await http(server.url, "GET", `/v1/batches/${res.body.id}`, { token: who.key })).body;
      return batch.status === "completed" || batch.status === "failed";
    }, 30_000);
    expect(batch.request_counts).toMatchObject({ completed: 12, failed: 0 });
    expect(most).toBeGreaterThan(0);
    expect(most).toBeLessThanOrEqual(3);
  } finally {
    proto.generateCompletionWithMeta = original;
  }
}, 60_000);
