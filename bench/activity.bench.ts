/**
 * Benchmark (issue 10, Checks): activity list and usage latency on 1,000,000 activity rows.
 * Generates the rows in SQL (one team holds 90 % of them, spread over 400 days and 6 models;
 * the rest belong to 50 other teams), runs VACUUM ANALYZE as autovacuum would, then times each
 * control-plane read through the HTTP API (the owner's access token) and, as the baseline from
 * the same run, the execution time PostgreSQL reports for the same read done the plain way over
 * `activity` (EXPLAIN ANALYZE): for the list, its page query (the API also counts the total); for
 * usage, the aggregate straight over `activity` that the `usage_daily` roll-up replaces.
 *
 *   npm run bench:activity                     # 1,000,000 rows, 20 calls per read
 *   BENCH_ROWS=200000 BENCH_CALLS=50 npm run bench:activity
 *
 * Uses DATABASE_URL when set, else an embedded PostgreSQL in a temp folder; model files from
 * SWITCHYARD_MODELS_DIR (default ../shared/models).
 */
import { mkdtempSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { loadConfig, packageRoot } from "../src/config/config.js";
import { startSwitchyard } from "../src/server.js";
import { type BenchFigure, printJson } from "./report.js";

const ROWS = Number(process.env.BENCH_ROWS ?? 1_000_000);
const CALLS = Number(process.env.BENCH_CALLS ?? 20);

function percentile(sorted: number[], p: number): number {
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))];
}

async function main(): Promise<void> {
  const app = await startSwitchyard(
    loadConfig(process.env, {
      port: 0,
      host: "127.0.0.1",
      dataDir: mkdtempSync(path.join(os.tmpdir(), "switchyard-bench-")),
      modelsDir: process.env.SWITCHYARD_MODELS_DIR ?? path.resolve(packageRoot, "../shared/models"),
      logLevel: "warn",
      allowModelDownload: false,
    }),
  );
  try {
    const signup = (await fetch(`${app.url}/control/v1/auth/signup`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ email: `bench-${Date.now()}@example.com`, password: "bench-password" }),
    }).then((r) => r.json())) as { access_token: string; user: { id: string; team_id: string } };
    const teamId = signup.user.team_id;
    const userId = signup.user.id;
    const db = app.dataSource;

    const started = Date.now();
    await db.query(
      `INSERT INTO teams (id, name) SELECT gen_random_uuid(), 'bench other ' || i FROM generate_series(1, 50) i`,
    );
    const others: Array<{ id: string }> = await db.query(`SELECT id FROM teams WHERE name LIKE 'bench other %'`);
    const mine = Math.floor(ROWS * 0.9);
    // One team's rows over 400 days (newest first in time), then the other teams' rows.
    await db.query(
      `INSERT INTO activity (id, team_id, user_id, type, status, endpoint, model, prompt_tokens, completion_tokens,
                             total_tokens, cached_prompt_tokens, cost_micros, created_at, completed_at, service_tier)
       SELECT gen_random_uuid(), $1, $2, 'standalone', CASE WHEN i % 50 = 0 THEN 'failed' ELSE 'completed' END,
              '/v1/chat/completions', 'model-' || (i % 6), 20 + i % 100, i % 64, 20 + i % 100 + i % 64, i % 10,
              i % 997, now() - (i::float8 / $3 * 400) * interval '1 day',
              now() - (i::float8 / $3 * 400) * interval '1 day', CASE WHEN i % 7 = 0 THEN 'flex' ELSE 'default' END
         FROM generate_series(1, $3) i`,
      [teamId, userId, mine],
    );
    await db.query(
      `INSERT INTO activity (id, team_id, type, status, endpoint, model, prompt_tokens, completion_tokens,
                             total_tokens, cached_prompt_tokens, cost_micros, created_at, completed_at)
       SELECT gen_random_uuid(), ($1::uuid[])[1 + i % 50], 'standalone', 'completed', '/v1/chat/completions',
              'model-' || (i % 6), 10, 10, 20, 0, 5, now() - (i % 400) * interval '1 day', now()
         FROM generate_series(1, $2) i`,
      [others.map((o) => o.id), ROWS - mine],
    );
    await db.query(`VACUUM ANALYZE activity`);
    console.log(`generated ${ROWS} activity rows (${mine} in the measured team) in ${Date.now() - started} ms`);

    const auth = { authorization: `Bearer ${signup.access_token}` };
    const reads: Array<{ name: string; path: string; sql: string; params: unknown[] }> = [
      {
        name: "activity, page 1",
        path: "/control/v1/activity",
        sql: `SELECT * FROM activity WHERE team_id = $1 ORDER BY created_at DESC, id DESC LIMIT 25`,
        params: [teamId],
      },
      {
        name: "activity, page 1 filtered (model, status)",
        path: "/control/v1/activity?model=model-3&status=completed",
        sql: `SELECT * FROM activity WHERE team_id = $1 AND model = 'model-3' AND status = 'completed'
               ORDER BY created_at DESC, id DESC LIMIT 25`,
        params: [teamId],
      },
      {
        name: "activity, page 400 of user",
        path: `/control/v1/activity?page=400&user_id=${userId}`,
        sql: `SELECT * FROM activity WHERE team_id = $1 AND user_id = $2
               ORDER BY created_at DESC, id DESC LIMIT 25 OFFSET 9975`,
        params: [teamId, userId],
      },
      {
        name: "usage summary, 30 days",
        path: "/control/v1/usage/summary?days=30",
        sql: `SELECT model, service_tier, sum(prompt_tokens), sum(completion_tokens), sum(total_tokens),
                     sum(cached_prompt_tokens), count(*), sum(cost_micros)
                FROM activity WHERE team_id = $1 AND created_at >= now() - interval '29 days'
               GROUP BY 1, 2`,
        params: [teamId],
      },
      {
        name: "usage summary, 365 days",
        path: "/control/v1/usage/summary?days=365",
        sql: `SELECT model, service_tier, sum(prompt_tokens), sum(completion_tokens), sum(total_tokens),
                     sum(cached_prompt_tokens), count(*), sum(cost_micros)
                FROM activity WHERE team_id = $1 AND created_at >= now() - interval '364 days'
               GROUP BY 1, 2`,
        params: [teamId],
      },
      {
        name: "usage daily, 365 days",
        path: "/control/v1/usage/daily?days=365",
        sql: `SELECT to_char(created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD'), model, sum(prompt_tokens), count(*),
                     sum(cost_micros)
                FROM activity WHERE team_id = $1 AND created_at >= now() - interval '364 days'
               GROUP BY 1, 2`,
        params: [teamId],
      },
      { name: "activity models", path: "/control/v1/activity/models", sql: "", params: [] },
    ];

    const table: string[][] = [["read", "API p50 ms", "API p99 ms", "plain SQL p50 ms", "API / plain SQL"]];
    const figures: BenchFigure[] = [];
    for (const read of reads) {
      const api: number[] = [];
      for (let i = 0; i < CALLS; i++) {
        const t0 = performance.now();
        const res = await fetch(`${app.url}${read.path}`, { headers: auth });
        await res.arrayBuffer();
        if (res.status !== 200) throw new Error(`${read.path} answered ${res.status}`);
        api.push(performance.now() - t0);
      }
      const sql: number[] = [];
      if (read.sql) {
        for (let i = 0; i < CALLS; i++) {
          const plan: Array<{ "QUERY PLAN": Array<{ "Execution Time": number }> }> = await db.query(
            `EXPLAIN (ANALYZE, FORMAT JSON) ${read.sql}`,
            read.params,
          );
          sql.push(plan[0]["QUERY PLAN"][0]["Execution Time"]);
        }
      }
      api.sort((x, y) => x - y);
      sql.sort((x, y) => x - y);
      const apiP50 = percentile(api, 50);
      const sqlP50 = sql.length ? percentile(sql, 50) : NaN;
      figures.push({
        figure: `${read.name} (${ROWS} rows) p99`,
        unit: "ms",
        p50: apiP50,
        value: percentile(api, 99),
        ...(Number.isNaN(sqlP50) ? {} : { baseline: sqlP50 }),
        target: "well under 1 s (issue 10)",
        met: percentile(api, 99) < 1000,
      });
      table.push([
        read.name,
        apiP50.toFixed(1),
        percentile(api, 99).toFixed(1),
        Number.isNaN(sqlP50) ? "—" : sqlP50.toFixed(1),
        Number.isNaN(sqlP50) ? "—" : (apiP50 / sqlP50).toFixed(2),
      ]);
    }
    const widths = table[0].map((_, c) => Math.max(...table.map((r) => r[c].length)));
    for (const [i, row] of table.entries()) {
      console.log(`| ${row.map((cell, c) => cell.padEnd(widths[c])).join(" | ")} |`);
      if (i === 0) console.log(`|${widths.map((w) => "-".repeat(w + 2)).join("|")}|`);
    }
    printJson("activity", figures);
  } finally {
    await app.close();
  }
}

main().catch((err: unknown) => {
  console.error(err);
  process.exit(1);
});
