/**
 * Benchmark (issue 12, item 4 "Database at scale"): on 10,000,000 activity rows and 1,000,000
 * completion events (`db-scale-data.ts`), the p50 and p99 over `BENCH_RUNS` (default 50) calls of
 * every control-plane read that scales with them, through the HTTP API of a started server (the
 * services' real queries): the activity list (page 1 and page 400, unfiltered and with each filter
 * of the spec), usage daily and summary (30 and 365 days), the billing summary (30 and 365 days)
 * and the completion events feed (REST newest page, REST history page, GraphQL). Target: p99 < 200
 * ms. Then the metering flush's latency alone and while the body retention (30 days) and the
 * events cleanup work through a backlog on the big table.
 *
 *   npm run bench:db-scale                       # generates once (~15 min), then measures
 *   BENCH_RUNS=100 npm run bench:db-scale
 *   BENCH_ROWS=1000000 BENCH_EVENTS=100000 BENCH_DB_DIR=/tmp/dbs-small npm run bench:db-scale
 *
 * The database is kept in `BENCH_DB_DIR` (default `.data/bench-db-scale`), so later runs skip the
 * generation (they apply new migrations first, as a deployment would). Prints a table and, last, a
 * `BENCH_JSON {...}` line the bench runner (`bench/run-all.ts`) collects.
 */
import path from "node:path";
import { loadConfig, packageRoot } from "../src/config/config.js";
import type { UsageRecord } from "../src/services/metering/metering.service.js";
import { RetentionService } from "../src/services/usage/retention.service.js";
import { startSwitchyard } from "../src/server.js";
import { type BenchWorld, ensureWorld, login, refreshInFlight } from "./db-scale-data.js";
import { type BenchFigure, percentile, printFigures, printJson } from "./report.js";

const ROWS = Number(process.env.BENCH_ROWS ?? 10_000_000);
const EVENTS = Number(process.env.BENCH_EVENTS ?? 1_000_000);
const RUNS = Number(process.env.BENCH_RUNS ?? 50);
const DIR = process.env.BENCH_DB_DIR ?? path.join(packageRoot, ".data", "bench-db-scale");
const TARGET_MS = 200;
/** Rows whose bodies the retention clears, and expired events the cleanup deletes, per run. */
const RETENTION_BACKLOG = Number(process.env.BENCH_RETENTION_BACKLOG ?? 50_000);

const log = (line: string) => console.log(`[db-scale] ${line}`);
const day = 86_400_000;

interface Read {
  name: string;
  path: string;
  /** GraphQL body (POST /graphql) instead of a GET. */
  graphql?: string;
  /** Authorise with the API key instead of the owner's access token. */
  apiKey?: boolean;
}

function reads(world: BenchWorld, cursors: { old: string }): Read[] {
  const iso = (msAgo: number) => new Date(Date.now() - msAgo).toISOString();
  const filters: Array<[string, string]> = [
    ["type=batch", "type=batch"],
    ["status=failed", "status=failed"],
    ["status=completed", "status=completed"],
    ["status=pending", "status=pending"],
    ["model", "model=bench-model-3"],
    ["created_after 30 d", `created_after=${iso(30 * day)}`],
    ["created_before 200 d", `created_before=${iso(200 * day)}`],
    ["created 100–90 d", `created_after=${iso(100 * day)}&created_before=${iso(90 * day)}`],
    ["api_key_id", `api_key_id=${world.keyIds[2]}`],
    ["user_id", `user_id=${world.userIds[3]}`],
    ["user_id+model+status", `user_id=${world.userIds[3]}&model=bench-model-0&status=completed`],
  ];
  const list: Read[] = [
    { name: "activity p1", path: "/control/v1/activity" },
    { name: "activity p400", path: "/control/v1/activity?page=400" },
  ];
  for (const [name, q] of filters) {
    list.push({ name: `activity p1 ${name}`, path: `/control/v1/activity?${q}` });
    list.push({ name: `activity p400 ${name}`, path: `/control/v1/activity?page=400&${q}` });
  }
  return [
    ...list,
    { name: "activity models", path: "/control/v1/activity/models" },
    { name: "usage daily 30 d", path: "/control/v1/usage/daily?days=30" },
    { name: "usage daily 365 d", path: "/control/v1/usage/daily?days=365" },
    { name: "usage summary 30 d", path: "/control/v1/usage/summary?days=30" },
    { name: "usage summary 365 d", path: "/control/v1/usage/summary?days=365" },
    { name: "usage summary 365 d user", path: `/control/v1/usage/summary?days=365&user_id=${world.userIds[3]}` },
    { name: "billing summary 30 d", path: "/control/v1/billing/summary?days=30" },
    { name: "billing summary 365 d", path: "/control/v1/billing/summary?days=365" },
    { name: "events feed newest (REST)", path: "/v1/responses/events?limit=100", apiKey: true },
    {
      name: "events feed history (REST)",
      path: `/v1/responses/events?limit=100&ending_before=${cursors.old}`,
      apiKey: true,
    },
    {
      name: "events feed after cursor (REST)",
      path: `/v1/responses/events?limit=100&starting_after=${cursors.old}`,
      apiKey: true,
    },
    {
      name: "events feed newest (GraphQL)",
      path: "/graphql",
      graphql: `{ completionEvents(limit: 100) { hasMore data { completionId status totalTokens costMicros completedAt } } }`,
    },
  ];
}

async function call(base: string, read: Read, token: string, key: string): Promise<number> {
  const t0 = performance.now();
  const res = await fetch(`${base}${read.path}`, {
    method: read.graphql ? "POST" : "GET",
    headers: {
      authorization: `Bearer ${read.apiKey ? key : token}`,
      ...(read.graphql ? { "content-type": "application/json" } : {}),
    },
    body: read.graphql ? JSON.stringify({ query: read.graphql }) : undefined,
  });
  const text = await res.text();
  const ms = performance.now() - t0;
  if (res.status !== 200 || (read.graphql && text.includes('"errors"'))) {
    throw new Error(`${read.name}: ${res.status} ${text.slice(0, 300)}`);
  }
  return ms;
}

/** One metering record of the big team, as the group commit gets it from a finished request. */
function record(world: BenchWorld, i: number): UsageRecord {
  const now = new Date();
  return {
    id: crypto.randomUUID(),
    principal: { userId: world.ownerId, teamId: world.teamId, role: "owner", email: world.email, apiKey: null },
    type: "standalone",
    status: "completed",
    endpoint: "/v1/chat/completions",
    model: `bench-model-${i % 3}`,
    customId: null,
    streamId: null,
    usage: { promptTokens: 20, completionTokens: 16, cachedPromptTokens: 0 },
    costMicros: 0n,
    bodyJson: { messages: [{ role: "user", content: "Once upon a time" }], max_tokens: 16 },
    resultJson: { choices: [{ message: { role: "assistant", content: "there was a bench" } }] },
    errorJson: null,
    engineMs: 7,
    createdAt: now,
    completedAt: now,
  };
}

async function main(): Promise<void> {
  const app = await startSwitchyard(
    loadConfig(process.env, {
      port: 0,
      host: "127.0.0.1",
      dataDir: DIR,
      modelsDir: process.env.SWITCHYARD_MODELS_DIR ?? path.resolve(packageRoot, "../shared/models"),
      logLevel: "warn",
      allowModelDownload: false,
    }),
  );
  const figures: BenchFigure[] = [];
  try {
    const db = app.dataSource;
    log(`database in ${DIR}`);
    const world = await ensureWorld(app.url, db, { rows: ROWS, events: EVENTS }, log);
    if (process.env.BENCH_GENERATE_ONLY) return;
    await refreshInFlight(db, world);
    const token = await login(app.url, world);
    const [old]: Array<{ id: string }> = await db.query(
      `SELECT completion_id AS id FROM completion_events WHERE team_id = $1 ORDER BY position LIMIT 1 OFFSET 1000`,
      [world.teamId],
    );
    const [{ n: rows }]: Array<{ n: string }> = await db.query(
      `SELECT reltuples::bigint::text AS n FROM pg_class WHERE relname = 'activity'`,
    );
    log(`activity ≈ ${rows} rows; measuring ${RUNS} calls per read`);

    const only = process.env.BENCH_ONLY ? new RegExp(process.env.BENCH_ONLY) : null;
    for (const read of reads(world, { old: old.id })) {
      if (only && !only.test(read.name)) continue;
      for (let i = 0; i < 3; i++) await call(app.url, read, token, world.apiKey); // warm-up
      const times: number[] = [];
      for (let i = 0; i < RUNS; i++) times.push(await call(app.url, read, token, world.apiKey));
      times.sort((x, y) => x - y);
      const p99 = percentile(times, 99);
      figures.push({
        figure: read.name,
        unit: "ms",
        p50: percentile(times, 50),
        value: p99,
        target: `p99 < ${TARGET_MS} ms`,
        met: p99 < TARGET_MS,
      });
      log(`${read.name}: p50 ${percentile(times, 50).toFixed(1)} p99 ${p99.toFixed(1)} ms`);
    }

    if (!process.env.BENCH_SKIP_RETENTION && (!only || only.test("flush")))
      figures.push(...(await retentionFigures(app, world)));
  } finally {
    await app.close();
  }
  if (figures.length) {
    printFigures(figures, ["figure", "p50 ms", "p99 ms", "target", "met"], (f) => [
      f.figure,
      f.p50 === undefined ? "—" : f.p50.toFixed(1),
      f.value.toFixed(1),
      f.target,
      f.met ? "yes" : "NO",
    ]);
    printJson("db-scale", figures);
  }
}

/**
 * The flush's latency (one record at a time, each awaited: one flush per record) idle, then while
 * the body retention and the events cleanup each work through `RETENTION_BACKLOG` rows of the big
 * table (seeded here: bodies on old rows, expired events of old rows).
 */
async function retentionFigures(
  app: Awaited<ReturnType<typeof startSwitchyard>>,
  world: BenchWorld,
): Promise<BenchFigure[]> {
  const db = app.dataSource;
  const flushes = async (until: () => boolean, min: number): Promise<number[]> => {
    const times: number[] = [];
    for (let i = 0; times.length < min || !until(); i++) {
      const t0 = performance.now();
      await app.metering.record(record(world, i));
      times.push(performance.now() - t0);
    }
    return times.sort((x, y) => x - y);
  };
  const idle = await flushes(() => true, 300);

  let t0 = Date.now();
  // The newest RETENTION_BACKLOG rows older than 40 days get bodies, 5,000 rows per statement as
  // the retention job clears them (one 50,000-row UPDATE ran for over 10 minutes: the statement
  // triggers' transition tables spill to disk and are read again and again).
  const [edge]: Array<{ at: Date }> = await db.query(
    `SELECT created_at AS at FROM activity WHERE team_id = $1 AND created_at < now() - interval '40 days'
      ORDER BY created_at DESC OFFSET $2 LIMIT 1`,
    [world.teamId, RETENTION_BACKLOG],
  );
  let upper: Date = ((await db.query(`SELECT now() - interval '40 days' AS at`)) as Array<{ at: Date }>)[0].at;
  while (upper > edge.at) {
    const [next]: Array<{ at: Date }> = await db.query(
      `SELECT created_at AS at FROM activity WHERE team_id = $1 AND created_at < $2
        ORDER BY created_at DESC OFFSET 5000 LIMIT 1`,
      [world.teamId, upper],
    );
    const lower = next && next.at > edge.at ? next.at : edge.at;
    await db.query(
      `UPDATE activity SET body_json = '{"messages":[{"role":"user","content":"Once upon a time"}]}',
                           result_json = '{"choices":[{"message":{"content":"there was"}}]}'
        WHERE team_id = $1 AND created_at < $2 AND created_at >= $3`,
      [world.teamId, upper, lower],
    );
    if (lower.getTime() === edge.at.getTime()) break;
    upper = lower;
  }
  await db.query(
    `INSERT INTO completion_events (completion_id, position, team_id, response_id, stream_id, completed_at)
     SELECT gen_random_uuid(), nextval('completion_events_position_seq'), team_id, id, stream_id, completed_at
       FROM activity WHERE team_id = $1 AND created_at < now() - interval '40 days'
        AND status IN ('completed', 'failed', 'cancelled')
      ORDER BY created_at DESC LIMIT $2
     ON CONFLICT DO NOTHING`,
    [world.teamId, RETENTION_BACKLOG],
  );
  await db.query(`VACUUM ANALYZE completion_events`);
  log(`seeded ${RETENTION_BACKLOG} bodies past retention and expired events in ${Date.now() - t0} ms`);

  const retention = new RetentionService(db, app.logger, { bodyRetentionDays: 30 });
  let done = false;
  t0 = Date.now();
  let bodiesMs = 0;
  let eventsMs = 0;
  const work = Promise.all([
    retention.runOnce().then((n) => ((bodiesMs = Date.now() - t0), n)),
    app.events.deleteExpired().then((n) => ((eventsMs = Date.now() - t0), n)),
  ]).finally(() => (done = true));
  const during = await flushes(() => done, 50);
  const [bodies, events] = await work;
  log(
    `retention cleared ${bodies} bodies in ${bodiesMs} ms; cleanup deleted ${events} events in ${eventsMs} ms; ` +
      `${during.length} flushes meanwhile (max ${during[during.length - 1].toFixed(1)} ms; idle max ${idle[idle.length - 1].toFixed(1)} ms)`,
  );
  const idleP99 = percentile(idle, 99);
  const duringP99 = percentile(during, 99);
  return [
    {
      figure: "flush idle",
      unit: "ms",
      p50: percentile(idle, 50),
      value: idleP99,
      target: `p99 < ${TARGET_MS} ms`,
      met: idleP99 < TARGET_MS,
    },
    {
      figure: `flush during retention (${bodies} bodies, ${events} events)`,
      unit: "ms",
      p50: percentile(during, 50),
      value: duringP99,
      baseline: idleP99,
      target: "p99 ≤ 3 × idle p99, max < 200 ms",
      met: duringP99 <= 3 * idleP99 && during[during.length - 1] < TARGET_MS,
    },
  ];
}

main().catch((err: unknown) => {
  console.error(err);
  process.exit(1);
});
