/**
 * Benchmark (issue 12, item 1; issue 30, item 2): what one metering group commit costs, by the way
 * it is sent. Starts Switchyard (embedded PostgreSQL, fsync on, as `npm start` runs), meters two
 * real chat completions to capture the flush statement of the common batch shape (a chat
 * completion, no stored response, no webhook, no key's last_used_at due) and its parameters, then
 * runs that statement (with fresh request ids each time, so every run inserts and charges new requests)
 * the ways below, interleaved call by call:
 *
 * - plain: parsed and planned by PostgreSQL on every call (the code before issue 12), one round trip
 * - prepared: a named prepared statement, one round trip (the statement's own cost)
 * - plain + async commit, prepared + async commit: the statement of the `process` durability
 *   (`synchronous_commit = off` for the flush's own transaction, `SWITCHYARD_DURABILITY=process`)
 * - service path: what `MeteringService` does, `queryPrepared` on the service's own (guarded)
 *   pool: the statement, then its commit once its answer is back (`db/commit-after-answer.ts`)
 * - prepared ×20, service path ×20: a batch of 20 requests in one flush
 *
 * The plain and prepared ways run on one connection of the bench's own. Prints p50/p90 latency per
 * way with the ratio to the plain one (the baseline, measured in the same run), and the
 * `BENCH_JSON` line for `npm run bench`.
 *
 *   npm run bench:flush
 *   BENCH_CALLS=1000 npm run bench:flush
 *   BENCH_EXPLAIN=1 npm run bench:flush   # also prints one flush's plan with each node's time
 *   BENCH_EXPLAIN_ROWS=20 BENCH_EXPLAIN=1 npm run bench:flush   # … of a batch of 20
 */
import os from "node:os";
import pg from "pg";
import { v7 as uuidv7 } from "uuid";
import { queryPrepared } from "../src/db/sql.js";
import { groupCommitStatement } from "../src/services/metering/group-commit-statement.js";
import { startSwitchyard } from "../src/server.js";
import { benchConfig } from "./in-process.js";
import { type BenchFigure, percentile, printFigures, printJson } from "./report.js";

const CALLS = Number(process.env.BENCH_CALLS ?? 500);

interface Captured {
  text: string;
  values: unknown[];
}

async function main(): Promise<void> {
  const config = benchConfig("switchyard-bench-flush-");
  const app = await startSwitchyard(config);
  // The service's own pool (its connection settings for a client of the bench's own).
  const pool = (
    app.dataSource.driver as unknown as {
      master: {
        options: pg.ClientConfig;
        connect: (callback?: (...a: unknown[]) => void) => Promise<{ query: (...a: unknown[]) => unknown }>;
      };
    }
  ).master;
  const client = new pg.Client(pool.options);
  try {
    // The flush statement, as the metering service sends it (on a connection taken from the pool:
    // db/sql.ts `queryPrepared`), caught on the connections the pool hands out.
    const captured: Captured[] = [];
    const originalConnect = pool.connect;
    const wrapped = new WeakSet<object>();
    const wrap = (client: { query: (...a: unknown[]) => unknown }) => {
      if (wrapped.has(client)) return client;
      wrapped.add(client);
      const query = client.query;
      client.query = (cfg: unknown, ...rest: unknown[]) => {
        const c = cfg as { name?: string; text?: string; values?: unknown[] };
        if (c?.name?.startsWith("switchyard_group_commit_")) captured.push({ text: c.text!, values: c.values! });
        return query.call(client, cfg, ...rest);
      };
      return client;
    };
    pool.connect = function capture(this: unknown, callback?: (...a: unknown[]) => void) {
      if (!callback) return originalConnect.call(this).then(wrap);
      return originalConnect.call(this, (...a: unknown[]) =>
        callback(a[0], a[1] ? wrap(a[1] as { query: (...q: unknown[]) => unknown }) : a[1], a[2]),
      );
    } as typeof pool.connect;
    const json = (r: Response) => r.json() as Promise<Record<string, string>>;
    const post = (url: string, body: unknown, token?: string) =>
      fetch(`${app.url}${url}`, {
        method: "POST",
        headers: { "content-type": "application/json", ...(token ? { authorization: `Bearer ${token}` } : {}) },
        body: JSON.stringify(body),
      });
    const signup = await post("/control/v1/auth/signup", {
      email: `bench-${Date.now()}@example.com`,
      password: "bench-password",
    }).then(json);
    const key = await post("/control/v1/auth/api-keys", { name: "bench" }, signup.access_token).then(json);
    const model = app.catalog.all()[0].id;
    // Two requests: the first flush also refreshes the key's last_used_at, the second is the common shape.
    for (let i = 0; i < 2; i++) {
      const chat = await post(
        "/v1/chat/completions",
        { model, messages: [{ role: "user", content: "Once upon a time" }], max_tokens: 8 },
        key.plaintext,
      );
      const chatText = await chat.text();
      if (chat.status !== 200) throw new Error(`chat: ${chat.status} ${chatText}`);
      await app.metering.drainAll();
    }
    pool.connect = originalConnect;
    if (captured.length !== 2) throw new Error(`${captured.length} group commits seen, not 2`);
    // The second flush's statement with the first one's request (charged: the second may cost 0
    // micro-USD, its prompt cached by the engine).
    const flush = { text: captured[1].text, values: [captured[0].values[0], ...captured[1].values.slice(1)] };
    if ((flush.values[0] as string).includes('"cost_micros":"0"')) throw new Error("the captured request is free");
    const shape = { responses: false, webhooks: false, asyncCommit: false };
    if (flush.text !== groupCommitStatement(shape).text) throw new Error("the flush seen is not the common shape");
    const asyncText = groupCommitStatement({ ...shape, asyncCommit: true }).text;

    await client.connect();
    /** The captured parameters with `n` copies of the request, each with fresh ids. */
    const fresh = (n = 1): unknown[] => {
      const rows = JSON.parse(flush.values[0] as string) as Array<Record<string, unknown>>;
      const renewed = Array.from({ length: n }, () =>
        rows.map((r) => ({ ...r, id: uuidv7(), ledger_id: uuidv7(), completion_id: uuidv7() })),
      )
        .flat()
        .sort((a, b) => ((a.id as string) < (b.id as string) ? -1 : 1));
      return [JSON.stringify(renewed), ...flush.values.slice(1)];
    };
    const service = (n: number) => () => queryPrepared(app.dataSource, "switchyard_group_commit", flush.text, fresh(n));
    const ways: Array<{ name: string; run: () => Promise<unknown> }> = [
      { name: "plain", run: () => client.query(flush.text, fresh()) },
      { name: "prepared", run: () => client.query({ name: "flush", text: flush.text, values: fresh() }) },
      { name: "plain + async commit", run: () => client.query(asyncText, fresh()) },
      {
        name: "prepared + async commit",
        run: () => client.query({ name: "flush_async", text: asyncText, values: fresh() }),
      },
      { name: "service path", run: service(1) },
      { name: "prepared ×20", run: () => client.query({ name: "flush", text: flush.text, values: fresh(20) }) },
      { name: "service path ×20", run: service(20) },
    ];
    if (process.env.BENCH_EXPLAIN === "1") {
      // Where one flush's time goes, node by node (issue 30, item 1): after a warm-up, one call
      // under EXPLAIN ANALYZE, rolled back so the numbers below are unchanged by it.
      for (let i = 0; i < 50; i++) await ways[1].run();
      await client.query("BEGIN");
      const rows = Number(process.env.BENCH_EXPLAIN_ROWS ?? 1);
      const plan = await client.query(`EXPLAIN (ANALYZE, BUFFERS, VERBOSE off) ${flush.text}`, fresh(rows));
      await client.query("ROLLBACK");
      console.log(plan.rows.map((r: Record<string, string>) => r["QUERY PLAN"]).join("\n"));
    }
    // Interleaved (one call of each way in turn), so a change in the machine's load falls on
    // every way alike.
    for (let i = 0; i < 20; i++) for (const way of ways) await way.run();
    const ms: number[][] = ways.map(() => []);
    for (let i = 0; i < CALLS; i++) {
      for (const [w, way] of ways.entries()) {
        const t0 = performance.now();
        await way.run();
        ms[w].push(performance.now() - t0);
      }
    }
    const results = ways.map((way, w) => {
      const sorted = ms[w].sort((a, b) => a - b);
      return { name: way.name, p50: percentile(sorted, 50), p90: percentile(sorted, 90) };
    });
    const base = results[0];
    console.log(
      `\nOne group commit of one request (×20: of twenty), ${CALLS} calls per way, ${os.cpus().length} cores\n`,
    );
    printFigures(results, ["way", "p50 ms", "p90 ms", "p50 vs plain"], (r) => [
      r.name,
      r.p50.toFixed(2),
      r.p90.toFixed(2),
      r.name.endsWith("×20") ? "—" : (r.p50 / base.p50).toFixed(2),
    ]);
    const figures: BenchFigure[] = results.slice(1).map((r) => ({
      figure: `group commit p50, ${r.name} (vs plain, one request)`,
      unit: "ms",
      baseline: base.p50,
      value: r.p50,
      ratio: r.p50 / base.p50,
      target: "—",
      met: null,
    }));
    printJson("flush", figures);
  } finally {
    await client.end().catch(() => undefined);
    await app.close();
  }
}

main().catch((err: unknown) => {
  console.error(err);
  process.exit(1);
});
