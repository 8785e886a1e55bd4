/**
 * Requests in flight in the activity list (DESIGN §3: activity `status` ∈ `pending`, `running`,
 * `completed`, `failed`, `cancelled`; issue 10, finding 6 of its review). A request still in
 * flight `SWITCHYARD_ACTIVITY_IN_FLIGHT_AFTER_MS` after admission shows `pending` while it waits
 * for an engine slot and `running` once it generates; its end updates that row and charges it
 * once; a request refused after waiting leaves no row; usage counts only ended requests; rows a
 * dead process left are ended by the sweep. The embedded engine has one sequence, and the test
 * holds generations at the node-llama-cpp boundary to keep requests in flight.
 */
import { randomUUID } from "node:crypto";
import pg from "pg";
import { holdNextGeneration, holdNextScorings } from "./support/engine-faults.js";
import { CHAT_MODEL, type TestServer, createTestCaller, eventually, http, startTestServer } from "./support/harness.js";
import { writeTestCatalog } from "./support/test-catalog.js";

let server: TestServer;
let caller: Awaited<ReturnType<typeof createTestCaller>>;

beforeAll(async () => {
  // Prices that make every token count (1 µUSD per prompt token, 10 per completion token).
  const catalogPath = writeTestCatalog(CHAT_MODEL, { input: "1", cachedInput: "0.5", output: "10" });
  server = await startTestServer({ catalogPath, engineSequences: 1, activityInFlightAfterMs: 200 });
  caller = await createTestCaller(server.url);
}, 60_000);
afterAll(async () => {
  await server?.close();
});

const chat = (customId: string, extra: Record<string, unknown> = {}) =>
  http(server.url, "POST", "/v1/chat/completions", {
    token: caller.key,
    body: {
      model: CHAT_MODEL,
      messages: [{ role: "user", content: "Once upon a time" }],
      max_tokens: 8,
      metadata: { custom_id: customId },
      ...extra,
    },
  });

/** The team's activity list items with `status` (the REST control plane, as a dashboard reads it). */
async function listed(status: string): Promise<any[]> {
  const res = await http(server.url, "GET", `/control/v1/activity?status=${status}&page_size=100`, {
    token: caller.token,
  });
  expect(res.status).toBe(200);
  return res.body.items;
}

const rowOf = async (customId: string) =>
  (await server.db<any>("SELECT * FROM activity WHERE custom_id = $1", [customId]))[0];

test("when a request waits for a slot and another generates, then the list shows them pending and running, and each ends completed, charged once, counted once in usage", async () => {
  const a = `run-${randomUUID()}`;
  const b = `wait-${randomUUID()}`;
  const held = await holdNextGeneration();
  const first = chat(a);
  let second: ReturnType<typeof chat> | undefined;
  try {
    await held.started;
    second = chat(b);
    expect(await eventually(async () => (await listed("running")).some((i) => i.custom_id === a), 5_000)).toBe(true);
    expect(await eventually(async () => (await listed("pending")).some((i) => i.custom_id === b), 5_000)).toBe(true);
    const running = (await listed("running")).find((i) => i.custom_id === a);
    expect(running).toMatchObject({ model: CHAT_MODEL, completed_at: null, cost_micros: 0, total_tokens: 0 });
    // Usage counts ended requests only: nothing yet.
    const [before] = await server.db<any>(
      "SELECT coalesce(sum(request_count), 0)::int AS n FROM usage_daily WHERE team_id = $1",
      [caller.teamId],
    );
    expect(before.n).toBe(0);
  } finally {
    held.release();
  }
  expect((await first).status).toBe(200);
  expect((await second!).status).toBe(200);
  await server.app.metering.drainAll();
  for (const id of [a, b]) {
    const row = await rowOf(id);
    expect(row.status).toBe("completed");
    expect(row.completed_at).not.toBeNull();
    expect(Number(row.cost_micros)).toBeGreaterThan(0);
    const charges = await server.db<any>(
      "SELECT amount_micros FROM credit_ledger WHERE type = 'usage' AND source_id = $1",
      [row.id],
    );
    expect(charges).toHaveLength(1);
    expect(BigInt(charges[0].amount_micros)).toBe(-BigInt(row.cost_micros));
  }
  expect(await listed("running")).toHaveLength(0);
  expect(await listed("pending")).toHaveLength(0);
  // The roll-up equals the activity rows: one request each, their tokens and costs.
  const [usage] = await server.db<any>(
    `SELECT sum(request_count)::int AS n, sum(total_tokens)::int AS tokens, sum(cost_micros)::text AS cost
       FROM usage_daily WHERE team_id = $1`,
    [caller.teamId],
  );
  const [activity] = await server.db<any>(
    "SELECT count(*)::int AS n, sum(total_tokens)::int AS tokens, sum(cost_micros)::text AS cost FROM activity WHERE team_id = $1",
    [caller.teamId],
  );
  expect(usage).toEqual(activity);
  expect(usage.n).toBe(2);
}, 60_000);

test("when a decision waits for a scoring context and two others score, then the list shows it pending and them running, and each ends completed (issue 11 re-review)", async () => {
  const ids = [`dec-run1-${randomUUID()}`, `dec-run2-${randomUUID()}`, `dec-wait-${randomUUID()}`];
  const decide = (customId: string) =>
    http(server.url, "POST", "/v1/decisions", {
      token: caller.key,
      body: { model: CHAT_MODEL, state: "x", questions: { q: { type: "noul" } }, metadata: { custom_id: customId } },
    });
  // The model has two scoring contexts: two decisions hold them, the third waits.
  const held = await holdNextScorings(2);
  const first = [decide(ids[0]), decide(ids[1])];
  let third: ReturnType<typeof decide> | undefined;
  try {
    await held.started;
    third = decide(ids[2]);
    expect(
      await eventually(async () => {
        const running = (await listed("running")).map((i) => i.custom_id);
        return running.includes(ids[0]) && running.includes(ids[1]);
      }, 5_000),
    ).toBe(true);
    expect(await eventually(async () => (await listed("pending")).some((i) => i.custom_id === ids[2]), 5_000)).toBe(
      true,
    );
  } finally {
    held.release();
  }
  for (const res of [...first, third!]) expect((await res).status).toBe(200);
  await server.app.metering.drainAll();
  for (const id of ids) expect((await rowOf(id)).status).toBe("completed");
  expect(await listed("pending")).toHaveLength(0);
  expect(await listed("running")).toHaveLength(0);
}, 60_000);

test("when a request that waited in the queue is refused with 429, then its pending row is gone and nothing is charged", async () => {
  const a = `hold-${randomUUID()}`;
  const b = `refused-${randomUUID()}`;
  const held = await holdNextGeneration();
  const first = chat(a);
  try {
    await held.started;
    const second = chat(b, { max_queue_wait_s: 5 });
    expect(await eventually(async () => (await listed("pending")).some((i) => i.custom_id === b), 5_000)).toBe(true);
    // Gone by the time the refusal is answered, not some time after: a lock on the row holds its
    // delete, and the 429 waits for it — but not for longer than END_WAIT_MS (a slow or locked
    // database must not hold load-shedding answers).
    const locker = new pg.Client({ connectionString: server.databaseUrl });
    await locker.connect();
    try {
      await locker.query("BEGIN");
      await locker.query("SELECT 1 FROM activity WHERE custom_id = $1 FOR UPDATE", [b]);
      let answered = false;
      const refused = second.then((res) => {
        answered = true;
        return res;
      });
      // The refusal came (queue wait over) and its delete now waits on the lock.
      const deleteWaits = async () =>
        (
          await server.db<{ n: number }>(
            `SELECT count(*)::int AS n FROM pg_stat_activity
              WHERE wait_event_type = 'Lock' AND query LIKE 'DELETE FROM activity WHERE id = $1%'`,
          )
        )[0].n > 0;
      expect(await eventually(deleteWaits, 15_000)).toBe(true);
      await new Promise((r) => setTimeout(r, 500));
      expect(answered).toBe(false); // held for the delete
      // Still locked: after END_WAIT_MS the answer goes anyway (unbounded, this would hang), the
      // row not yet deleted.
      expect((await refused).status).toBe(429);
      expect(await rowOf(b)).toBeDefined();
      await locker.query("COMMIT");
      // The delete goes on by itself once the lock is gone.
      expect(await eventually(async () => (await rowOf(b)) === undefined, 5_000)).toBe(true);
    } finally {
      await locker.end();
    }
  } finally {
    held.release();
  }
  expect((await first).status).toBe(200);
  await server.app.metering.drainAll();
  expect((await rowOf(a)).status).toBe("completed");
  const charged = await server.db<any>(
    "SELECT count(*)::int AS n FROM credit_ledger l JOIN activity a ON a.id::text = l.source_id WHERE a.custom_id = $1",
    [b],
  );
  expect(charged[0].n).toBe(0);
}, 60_000);

test("when a request ends quickly, then no early row is written (the hot path keeps one write)", async () => {
  const written = server.app.inFlight.stats.written;
  const res = await chat(`quick-${randomUUID()}`, { max_tokens: 1 });
  expect(res.status).toBe(200);
  expect(server.app.inFlight.stats.written).toBe(written);
});

test("when a background response is created, then its activity row says pending at once, and its end updates that row", async () => {
  const held = await holdNextGeneration();
  const res = await http(server.url, "POST", "/v1/responses", {
    token: caller.key,
    body: { model: CHAT_MODEL, input: "Once upon a time", background: true, max_output_tokens: 8 },
  });
  expect(res.status).toBe(200);
  const [row] = await server.db<any>("SELECT status, cost_micros FROM activity WHERE id = $1", [res.body.id]);
  try {
    expect(row).toMatchObject({ status: "pending" });
    await held.started;
    expect(await eventually(async () => (await listed("running")).some((i) => i.id === res.body.id), 5_000)).toBe(true);
  } finally {
    held.release();
  }
  expect(
    await eventually(async () => {
      const [end] = await server.db<any>("SELECT status FROM activity WHERE id = $1", [res.body.id]);
      return end.status === "completed";
    }, 10_000),
  ).toBe(true);
  const charges = await server.db<any>("SELECT 1 FROM credit_ledger WHERE type = 'usage' AND source_id = $1", [
    res.body.id,
  ]);
  expect(charges).toHaveLength(1);
}, 60_000);

test("when a row is left in flight by a process that stopped, then the sweep ends it failed with no charge after the stale age, and leaves young rows alone", async () => {
  const old = randomUUID();
  const young = randomUUID();
  for (const [id, age] of [
    [old, "7 hours"],
    [young, "1 minute"],
  ]) {
    await server.db(
      `INSERT INTO activity (id, team_id, user_id, type, status, endpoint, model, prompt_tokens, completion_tokens,
                             total_tokens, cached_prompt_tokens, cost_micros, created_at, service_tier)
       VALUES ($1, $2, $3, 'standalone', 'running', '/v1/chat/completions', $4, 0, 0, 0, 0, 0,
               now() - $5::interval, 'default')`,
      [id, caller.teamId, caller.userId, CHAT_MODEL, age],
    );
  }
  const [countBefore] = await server.db<any>(
    "SELECT coalesce(sum(request_count), 0)::int AS n FROM usage_daily WHERE team_id = $1",
    [caller.teamId],
  );
  expect(await server.app.inFlight.sweepStale()).toBe(1);
  const [o] = await server.db<any>("SELECT status, error_json, completed_at FROM activity WHERE id = $1", [old]);
  expect(o.status).toBe("failed");
  expect(o.error_json.code).toBe("server_error");
  expect(o.completed_at).not.toBeNull();
  const [y] = await server.db<any>("SELECT status FROM activity WHERE id = $1", [young]);
  expect(y.status).toBe("running");
  // The ended row counts as one request (of 7 hours ago), with no tokens and no charge.
  const [countAfter] = await server.db<any>(
    "SELECT coalesce(sum(request_count), 0)::int AS n FROM usage_daily WHERE team_id = $1",
    [caller.teamId],
  );
  expect(countAfter.n).toBe(countBefore.n + 1);
  expect(await server.db("SELECT 1 FROM credit_ledger WHERE source_id = $1", [old])).toHaveLength(0);
  await server.db("DELETE FROM activity WHERE id = $1", [young]);
});

test("when an ended row's counted columns change, then usage follows (the old figures come off, the new go on)", async () => {
  const [row] = await server.db<any>(
    "SELECT id FROM activity WHERE team_id = $1 AND status = 'completed' ORDER BY created_at LIMIT 1",
    [caller.teamId],
  );
  await server.db("UPDATE activity SET total_tokens = total_tokens + 5, cost_micros = cost_micros + 7 WHERE id = $1", [
    row.id,
  ]);
  const [usage] = await server.db<any>(
    `SELECT sum(request_count)::int AS n, sum(total_tokens)::int AS tokens, sum(cost_micros)::text AS cost
       FROM usage_daily WHERE team_id = $1`,
    [caller.teamId],
  );
  const [activity] = await server.db<any>(
    `SELECT count(*)::int AS n, sum(total_tokens)::int AS tokens, sum(cost_micros)::text AS cost
       FROM activity WHERE team_id = $1 AND status IN ('completed', 'failed', 'cancelled')`,
    [caller.teamId],
  );
  expect(usage).toEqual(activity);
});

test("when request bodies are cleared from ended rows, then usage does not change", async () => {
  const [before] = await server.db<any>(
    "SELECT sum(request_count)::int AS n, sum(total_tokens)::int AS t FROM usage_daily WHERE team_id = $1",
    [caller.teamId],
  );
  await server.db("UPDATE activity SET body_json = NULL, result_json = NULL WHERE team_id = $1", [caller.teamId]);
  const [after] = await server.db<any>(
    "SELECT sum(request_count)::int AS n, sum(total_tokens)::int AS t FROM usage_daily WHERE team_id = $1",
    [caller.teamId],
  );
  expect(after).toEqual(before);
});

describe("readers of activity rows tell an early row from a record of the end (review 10b)", () => {
  test("when a request is in flight, then the unfiltered list's total and the models list include it", async () => {
    const held = await holdNextGeneration();
    const pending = chat(`total-${randomUUID()}`);
    try {
      await held.started;
      expect(await eventually(async () => (await listed("running")).length === 1, 5_000)).toBe(true);
      for (const query of ["", `&model=${CHAT_MODEL}`]) {
        const res = await http(server.url, "GET", `/control/v1/activity?page_size=100${query}`, {
          token: caller.token,
        });
        expect(res.body.total).toBe(res.body.items.length);
      }
      const models = await http(server.url, "GET", "/control/v1/activity/models", { token: caller.token });
      expect(models.body).toEqual(expect.arrayContaining([CHAT_MODEL]));
    } finally {
      held.release();
    }
    expect((await pending).status).toBe(200);
  }, 60_000);

  test("when a background response ended by a cancel lost its runner before the record, then the reconciler records it (event included) over its early row", async () => {
    const held = await holdNextGeneration();
    const blocker = await http(server.url, "POST", "/v1/responses", {
      token: caller.key,
      body: { model: CHAT_MODEL, input: "Once upon a time", background: true, max_output_tokens: 4 },
    });
    let id = "";
    try {
      await held.started;
      const queued = await http(server.url, "POST", "/v1/responses", {
        token: caller.key,
        body: { model: CHAT_MODEL, input: "x", background: true, max_output_tokens: 2 },
      });
      id = queued.body.id as string;
      // What a cancel that found a live runner leaves when that runner then dies before recording.
      await server.db(
        `UPDATE responses SET status = 'cancelled', runner = $2, runner_seen_at = now() - interval '1 hour',
                updated_at = now() - interval '2 minutes', completed_at = now(),
                response_json = response_json || '{"status":"cancelled"}'::jsonb WHERE id = $1`,
        [id, randomUUID()],
      );
      await server.db("UPDATE activity SET status = 'running' WHERE id = $1", [id]);
    } finally {
      held.release();
    }
    expect(blocker.status).toBe(200);
    expect(
      await eventually(
        async () =>
          (await server.db<any>("SELECT status FROM activity WHERE id = $1", [id]))[0]?.status === "cancelled",
        25_000,
      ),
    ).toBe(true);
    const events = await server.db("SELECT 1 FROM completion_events WHERE response_id = $1", [id]);
    expect(events).toHaveLength(1);
  }, 60_000);

  test("when a background response is older than the stale age and was cancelled while its runner aborts, then the sweep leaves it and the runner's record is charged", async () => {
    const held = await holdNextGeneration();
    const bg = await http(server.url, "POST", "/v1/responses", {
      token: caller.key,
      body: { model: CHAT_MODEL, input: "Once upon a time", background: true, max_output_tokens: 8 },
    });
    const id = bg.body.id as string;
    try {
      await held.started;
      await server.db("UPDATE activity SET created_at = created_at - interval '7 hours' WHERE id = $1", [id]);
      expect((await http(server.url, "POST", `/v1/responses/${id}/cancel`, { token: caller.key })).status).toBe(200);
      await server.app.inFlight.sweepStale();
      const [row] = await server.db<any>("SELECT status FROM activity WHERE id = $1", [id]);
      expect(row.status).not.toBe("failed");
    } finally {
      held.release();
    }
    expect(
      await eventually(
        async () =>
          (await server.db<any>("SELECT status FROM activity WHERE id = $1", [id]))[0]?.status === "cancelled",
        15_000,
      ),
    ).toBe(true);
    const events = await server.db("SELECT 1 FROM completion_events WHERE response_id = $1", [id]);
    expect(events).toHaveLength(1);
  }, 60_000);

  test("when a batch runner dies with an item in flight, then the item runs again and ends with its result, not failed from the early row", async () => {
    const req = (i: number) => ({
      custom_id: `item-${i}`,
      method: "POST",
      url: "/v1/chat/completions",
      body: { model: CHAT_MODEL, messages: [{ role: "user", content: "hi" }], max_tokens: 2 },
    });
    const created = await http(server.url, "POST", "/v1/batches", {
      token: caller.key,
      body: { requests: [req(0), req(1)] },
    });
    expect(created.status).toBeLessThan(300);
    const id = created.body.id as string;
    const status = async () => (await http(server.url, "GET", `/v1/batches/${id}`, { token: caller.key })).body.status;
    expect(await eventually(async () => (await status()) === "completed", 30_000)).toBe(true);
    const items = await server.db<any>("SELECT idx, request_id FROM batch_items WHERE batch_id = $1 ORDER BY idx", [
      id,
    ]);
    // The state a SIGKILLed runner leaves: the batch running under a silent runner, both items
    // running; item 0 was in flight long enough for its early row, item 1 not.
    await server.db(
      `UPDATE batches SET status = 'running', runner = $2, runner_seen_at = now() - interval '1 hour', nudged_at = NULL,
              completed_at = NULL WHERE id = $1`,
      [id, randomUUID()],
    );
    await server.db(
      `UPDATE batch_items SET status = 'running', started_at = now() - interval '1 minute', result_json = NULL,
              completed_at = NULL WHERE batch_id = $1`,
      [id],
    );
    await server.db("UPDATE activity SET status = 'running', completed_at = NULL, result_json = NULL WHERE id = $1", [
      items[0].request_id,
    ]);
    await server.db("DELETE FROM activity WHERE id = $1", [items[1].request_id]);
    // A request that never ended was never charged and has no completion event: take the first
    // run's off (the append-only ledger's trigger set aside for this one statement).
    await server.db(
      `ALTER TABLE credit_ledger DISABLE TRIGGER USER;
       DELETE FROM credit_ledger WHERE type = 'usage' AND source_id IN ('${items[0].request_id}', '${items[1].request_id}');
       ALTER TABLE credit_ledger ENABLE TRIGGER USER;
       DELETE FROM completion_events WHERE response_id IN ('${items[0].request_id}', '${items[1].request_id}');`,
    );
    expect(
      await eventually(async () => {
        const rows = await server.db<any>(
          "SELECT count(*)::int AS n FROM batch_items WHERE batch_id = $1 AND status IN ('running', 'pending')",
          [id],
        );
        return rows[0].n === 0;
      }, 45_000),
    ).toBe(true);
    const after = await server.db<any>(
      "SELECT idx, status, result_json IS NOT NULL AS has_result FROM batch_items WHERE batch_id = $1 ORDER BY idx",
      [id],
    );
    expect(after).toEqual([
      { idx: 0, status: "completed", has_result: true },
      { idx: 1, status: "completed", has_result: true },
    ]);
  }, 90_000);
});
