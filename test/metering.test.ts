/**
 * Metering by group commit against the real database: many requests share a flush, every
 * request is recorded and charged exactly once, and the ledger never goes below zero.
 */
import { v7 as uuidv7 } from "uuid";
import type { Principal } from "../src/services/platform/context.js";
import { AppError, ErrorCode } from "../src/shared/errors.js";
import type { UsageRecord } from "../src/services/metering/metering.service.js";
import { type TestServer, createTestCaller, startTestServer } from "./support/harness.js";
import { principalOf, usageRecordFor } from "./support/records.js";
import { inFlightInsert } from "../src/services/metering/in-flight-activity.js";
import { queryPrepared } from "../src/db/sql.js";
import type { EventEmitter } from "node:events";
import { DataSource } from "typeorm";

const NO_USER = "00000000-0000-0000-0000-000000000000";
const ZERO = { promptTokens: 0, completionTokens: 0, cachedPromptTokens: 0 };

let server: TestServer;
beforeAll(async () => {
  server = await startTestServer();
});
afterAll(() => server.close());

async function principalFor(): Promise<Principal> {
  return principalOf(await createTestCaller(server.url));
}

function record(principal: Principal, costMicros: bigint, id = uuidv7()): UsageRecord {
  return usageRecordFor(principal, { id, costMicros, bodyJson: { hello: "world" }, engineMs: 3 });
}

test("when 200 requests finish at once, then few flushes write them all and the ledger adds up", async () => {
  const principal = await principalFor();
  const metering = server.app.metering;
  const flushesBefore = metering.stats.flushes;
  const records = Array.from({ length: 200 }, (_, i) => record(principal, BigInt(1000 + i)));
  const charges = await Promise.all(records.map((r) => metering.record(r)));
  expect(metering.stats.flushes - flushesBefore).toBeLessThan(20);

  const total = records.reduce((sum, r) => sum + r.costMicros, 0n);
  expect(charges.reduce((sum, c) => sum + c.chargedMicros, 0n)).toBe(total);
  const [activity] = await server.db<any>("SELECT count(*)::int AS n FROM activity WHERE team_id = $1", [
    principal.teamId,
  ]);
  expect(activity.n).toBe(200);
  const ledger = await server.db<any>(
    "SELECT amount_micros, balance_after_micros FROM credit_ledger WHERE team_id = $1 AND type = 'usage' ORDER BY balance_after_micros DESC",
    [principal.teamId],
  );
  expect(ledger).toHaveLength(200);
  expect(ledger.reduce((sum: bigint, r: any) => sum + BigInt(r.amount_micros), 0n)).toBe(-total);
  // Each balance_after is the previous one minus that row's charge: a single serial history.
  let balance = 5_000_000n;
  for (const row of ledger) {
    balance += BigInt(row.amount_micros);
    expect(BigInt(row.balance_after_micros)).toBe(balance);
  }
  const [team] = await server.db<any>("SELECT credit_balance_micros FROM teams WHERE id = $1", [principal.teamId]);
  expect(BigInt(team.credit_balance_micros)).toBe(5_000_000n - total);
  const [key] = await server.db<any>("SELECT last_used_at FROM api_keys WHERE id = $1", [principal.apiKey!.id]);
  expect(key.last_used_at).not.toBeNull();
});

test("when the same request id is recorded twice, then it is stored and charged once", async () => {
  const principal = await principalFor();
  const id = uuidv7();
  const first = await server.app.metering.record(record(principal, 700n, id));
  const second = await server.app.metering.record(record(principal, 700n, id));
  expect(first.chargedMicros).toBe(700n);
  expect(second.chargedMicros).toBe(0n);
  const rows = await server.db<any>("SELECT count(*)::int AS n FROM credit_ledger WHERE source_id = $1", [id]);
  expect(rows[0].n).toBe(1);
});

test("when a charge exceeds the balance, then it is capped at zero and the next create gets 402", async () => {
  const principal = await principalFor();
  const charge = await server.app.metering.record(record(principal, 9_000_000n));
  expect(charge).toEqual({ chargedMicros: 5_000_000n, balanceAfterMicros: 0n });
  const [row] = await server.db<any>(
    "SELECT description, balance_after_micros FROM credit_ledger WHERE type = 'usage' AND team_id = $1",
    [principal.teamId],
  );
  expect(row.balance_after_micros).toBe("0");
  expect(row.description).toMatch(/capped/);
  const err = await server.app.metering.assertCredit(principal.teamId).catch((e: unknown) => e);
  expect(err).toBeInstanceOf(AppError);
  expect((err as AppError).code).toBe(ErrorCode.InsufficientCredit);
});

test("when anything tries to change a ledger row, then the database refuses", async () => {
  const principal = await principalFor();
  await expect(
    server.db("UPDATE credit_ledger SET amount_micros = 0 WHERE team_id = $1", [principal.teamId]),
  ).rejects.toThrow(/append-only/);
  await expect(server.db("DELETE FROM credit_ledger WHERE team_id = $1", [principal.teamId])).rejects.toThrow(
    /append-only/,
  );
});

test("when another transaction holds a foreign-key lock on the team, then a flush charging that team is not blocked by it", async () => {
  // Another process's flush inserting a row that references the team holds FOR KEY SHARE on it
  // until it commits. The flush must lock the team in a mode compatible with that (FOR NO KEY
  // UPDATE); FOR UPDATE would wait here, and two processes doing this crosswise deadlock.
  const principal = await principalFor();
  const { default: pg } = await import("pg");
  const other = new pg.Client({ connectionString: server.databaseUrl });
  await other.connect();
  try {
    await other.query("BEGIN");
    await other.query(
      `INSERT INTO activity (id, team_id, type, status, endpoint, model, created_at)
       VALUES ($1, $2, 'standalone', 'failed', '/v1/chat/completions', 'tinystories-260k', now())`,
      [uuidv7(), principal.teamId],
    );
    const flushed = server.app.metering.record(record(principal, 100n)).then(() => "flushed");
    const outcome = await Promise.race([flushed, new Promise((r) => setTimeout(() => r("blocked"), 5_000))]);
    expect(outcome).toBe("flushed");
  } finally {
    await other.query("COMMIT");
    await other.end();
  }
});

test("when the same request id is queued twice in one flush, then it is recorded and charged once", async () => {
  const principal = await principalFor();
  const id = uuidv7();
  const flushes = server.app.metering.stats.flushes;
  await Promise.all([
    server.app.metering.record(record(principal, 300n, id)),
    server.app.metering.record(record(principal, 300n, id)),
  ]);
  expect(server.app.metering.stats.flushes - flushes).toBe(1); // one statement, no retry one by one
  const ledger = await server.db<any>(
    "SELECT amount_micros FROM credit_ledger WHERE type = 'usage' AND source_id = $1",
    [id],
  );
  expect(ledger).toEqual([{ amount_micros: "-300" }]);
  const [team] = await server.db<any>("SELECT credit_balance_micros FROM teams WHERE id = $1", [principal.teamId]);
  expect(team.credit_balance_micros).toBe(String(5_000_000 - 300));
});

test("when one flush writes new rows and ends rows in flight (and a seed inserts rows directly), then usage_daily and activity_counts equal the sums over activity", async () => {
  // The flush rolls up the rows it inserts in its statement and the update trigger the rows in
  // flight it ends (migration 1764910000000); any other insert is rolled up by the insert trigger.
  const principal = await principalFor();
  const team = principal.teamId;
  const keyless = { ...principal, apiKey: null };
  const inFlight = [0, 1, 2].map(() => uuidv7());
  await inFlightInsert(server.app.dataSource, [
    usageRecordFor(principal, { id: inFlight[0], status: "pending", usage: ZERO }),
    usageRecordFor(principal, { id: inFlight[1], status: "running", usage: ZERO }),
    usageRecordFor(keyless, { id: inFlight[2], status: "running", usage: ZERO, model: "other-model" }),
  ]);
  const ended = await server.db<{ id: string }>("SELECT id FROM activity WHERE id = $1", [inFlight[2]]);
  expect(ended).toHaveLength(1);
  const records = [
    ...inFlight.map((id, i) => record(i === 2 ? keyless : principal, BigInt(100 + i), id)),
    record(principal, 7n),
    record(keyless, 8n),
    { ...record(principal, 9n), status: "failed" as const },
    { ...record(principal, 10n), status: "cancelled" as const, model: "other-model" },
  ];
  const flushes = server.app.metering.stats.flushes;
  await Promise.all(records.map((r) => server.app.metering.record(r)));
  expect(server.app.metering.stats.flushes - flushes).toBe(1);
  // A seed straight into activity (not the group commit): the insert trigger rolls it up.
  await server.db(
    `INSERT INTO activity (id, team_id, type, status, endpoint, model, prompt_tokens, completion_tokens, total_tokens,
                           cost_micros, created_at)
     VALUES ($1, $2, 'standalone', 'completed', '/v1/chat/completions', 'seeded', 1, 2, 3, 4, now() - interval '2 days')`,
    [uuidv7(), team],
  );
  const usage = await server.db(
    `SELECT day::text, user_id, model, service_tier, prompt_tokens::int AS p, completion_tokens::int AS c,
            total_tokens::int AS t, request_count::int AS n, cost_micros::int AS cost
       FROM usage_daily WHERE team_id = $1 ORDER BY 1, 2, 3, 4`,
    [team],
  );
  const usageOracle = await server.db(
    `SELECT (created_at AT TIME ZONE 'UTC')::date::text AS day, COALESCE(user_id, '${NO_USER}') AS user_id, model,
            service_tier, sum(prompt_tokens)::int AS p, sum(completion_tokens)::int AS c, sum(total_tokens)::int AS t,
            count(*)::int AS n, sum(cost_micros)::int AS cost
       FROM activity WHERE team_id = $1 AND status IN ('completed', 'failed', 'cancelled')
      GROUP BY 1, 2, 3, 4 ORDER BY 1, 2, 3, 4`,
    [team],
  );
  expect(usage).toEqual(usageOracle);
  expect(usage.reduce((n, u: any) => n + u.n, 0)).toBe(8);
  const counts = await server.db(
    `SELECT user_id, api_key_id, model, type, status, n::int FROM activity_counts WHERE team_id = $1 AND n <> 0
      ORDER BY 1, 2, 3, 4, 5`,
    [team],
  );
  const countsOracle = await server.db(
    `SELECT COALESCE(user_id, '${NO_USER}') AS user_id, COALESCE(api_key_id, '${NO_USER}') AS api_key_id, model, type,
            status, count(*)::int AS n
       FROM activity WHERE team_id = $1 GROUP BY 1, 2, 3, 4, 5 ORDER BY 1, 2, 3, 4, 5`,
    [team],
  );
  expect(counts).toEqual(countsOracle);
  expect(counts.reduce((n, c: any) => n + c.n, 0)).toBe(8);
});

test("when group commits follow one another while other queries use the pool, then they run on one connection (queryPrepared keeps it: the statement is planned there only)", async () => {
  const ds = server.app.dataSource;
  const pids = new Set<number>();
  for (let i = 0; i < 20; i++) {
    // Other work holds pool connections meanwhile (a connection taken per call would move around).
    const others = Array.from({ length: 3 }, () => ds.query("SELECT pg_sleep(0.005)"));
    const [row] = await queryPrepared<{ pid: number }>(ds, "backend_pid", "SELECT pg_backend_pid() AS pid", []);
    pids.add(row.pid);
    await Promise.all(others);
  }
  expect(pids.size).toBe(1);
});

test("when PostgreSQL ends the kept connection while it is idle, then the process lives on and the next group commit takes a new one", async () => {
  const ds = server.app.dataSource;
  const crashes: unknown[] = [];
  const onCrash = (err: unknown) => crashes.push(err);
  process.on("uncaughtException", onCrash);
  try {
    const [first] = await queryPrepared<{ pid: number }>(ds, "backend_pid", "SELECT pg_backend_pid() AS pid", []);
    // The termination notice and then the socket's end: two errors on the idle kept connection.
    await server.db("SELECT pg_terminate_backend($1)", [first.pid]);
    await new Promise((r) => setTimeout(r, 300));
    const [next] = await queryPrepared<{ pid: number }>(ds, "backend_pid", "SELECT pg_backend_pid() AS pid", []);
    expect(next.pid).not.toBe(first.pid);
    expect(crashes).toEqual([]);
  } finally {
    process.off("uncaughtException", onCrash);
  }
});

test("when PostgreSQL reports an error on the kept connection after the pool ended (a shutdown), then it is the pool's to hear and nothing is released twice", async () => {
  // A pool of its own, ended here as at shutdown, while PostgreSQL stops too: its termination
  // notice reaches the connection after the kept one went back. Before the fix the second release
  // threw inside node-postgres's event handler and ended the process (seen at a bench's end).
  const ds = new DataSource({ type: "postgres", url: server.databaseUrl });
  await ds.initialize();
  const pool = (ds.driver as unknown as { master: { _clients: EventEmitter[] } }).master;
  await queryPrepared(ds, "one", "SELECT 1 AS one", []);
  const [connection] = pool._clients;
  const destroyed = ds.destroy();
  expect(() =>
    connection.emit("error", new Error("terminating connection due to administrator command")),
  ).not.toThrow();
  await destroyed;
});

describe("background responses ended before their record lands", () => {
  function backgroundRecord(principal: Principal, id: string): UsageRecord {
    return {
      ...record(principal, 13n, id),
      endpoint: "/v1/responses",
      resultJson: { id, object: "response", status: "completed", output: ["late text"] },
      response: {
        status: "completed",
        background: true,
        metadata: null,
        requestJson: { model: "tinystories-260k", input: "x", background: true },
        responseJson: { id, object: "response", status: "completed", output: ["late text"] },
      },
    };
  }

  test("when a cancel ended the response first, then its record says cancelled, keeps what was generated before the abort, and the tokens are charged", async () => {
    const principal = await principalFor();
    const id = uuidv7();
    const cancelled = { id, object: "response", status: "cancelled", output: [] };
    await server.db(
      `INSERT INTO responses (id, team_id, model, status, background, request_json, response_json, created_at,
                              completed_at)
       VALUES ($1, $2, 'tinystories-260k', 'cancelled', true, '{}', $3, now(), '2026-01-01T00:00:00Z')`,
      [id, principal.teamId, JSON.stringify(cancelled)],
    );
    await server.app.metering.record(backgroundRecord(principal, id));
    const [activity] = await server.db<any>("SELECT status, result_json, cost_micros FROM activity WHERE id = $1", [
      id,
    ]);
    // The record's object (the text so far) under the cancel's status, everywhere.
    const kept = { ...cancelled, output: ["late text"], incomplete_details: null, error: null };
    expect(activity).toEqual({ status: "cancelled", result_json: kept, cost_micros: "13" });
    const [stored] = await server.db<any>("SELECT status, response_json, completed_at FROM responses WHERE id = $1", [
      id,
    ]);
    expect(stored).toEqual({
      status: "cancelled",
      response_json: kept,
      completed_at: new Date("2026-01-01T00:00:00Z"), // when the cancel ended it
    });
  });

  test("when the deadline ended the response first, then its record says failed and shows the stored object", async () => {
    const principal = await principalFor();
    const id = uuidv7();
    const failed = {
      id,
      object: "response",
      status: "failed",
      output: [],
      error: { code: "timeout", message: "late" },
    };
    await server.db(
      `INSERT INTO responses (id, team_id, model, status, background, request_json, response_json, created_at)
       VALUES ($1, $2, 'tinystories-260k', 'failed', true, '{}', $3, now())`,
      [id, principal.teamId, JSON.stringify(failed)],
    );
    await server.app.metering.record(backgroundRecord(principal, id));
    const [activity] = await server.db<any>("SELECT status, result_json, error_json FROM activity WHERE id = $1", [id]);
    expect(activity).toEqual({ status: "failed", result_json: failed, error_json: failed.error });
    const [stored] = await server.db<any>("SELECT status, response_json FROM responses WHERE id = $1", [id]);
    expect(stored).toEqual({ status: "failed", response_json: failed });
  });

  test("when the response was deleted meanwhile, then its record does not bring it back", async () => {
    const principal = await principalFor();
    const id = uuidv7();
    await server.app.metering.record(backgroundRecord(principal, id));
    expect(await server.db("SELECT 1 FROM responses WHERE id = $1", [id])).toEqual([]);
    expect(await server.db("SELECT 1 FROM activity WHERE id = $1", [id])).toHaveLength(1);
  });
});
