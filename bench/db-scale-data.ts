/**
 * The generated database of the database-at-scale bench (issue 12, item 4; `db-scale.bench.ts`):
 * 10,000,000 activity rows and 1,000,000 completion events, written once into a kept data folder
 * and reused by later runs.
 *
 * Shape (all generated in SQL with `generate_series`, in chunks of 500,000 rows per statement, so
 * the `usage_daily` insert trigger of production rolls every chunk up as the group commit would;
 * nothing is disabled):
 * - one big team with 85 % of the rows (10 users, the owner with 40 %; 5 API keys of 5 users; 20 %
 *   of rows without a key, as from the dashboard), 20 other teams share the rest;
 * - spread over 400 days with a growing rate (age = 400 d × u², u uniform): a quarter of the rows
 *   are in the last 30 days;
 * - 8 models (`bench-model-0` has a third of the rows), types standalone 90 % / batch 7 % /
 *   stream 3 %, statuses completed 97.5 % / failed 2 % / cancelled 0.5 %, service tier flex 1 in 7;
 * - price versions: `bench-model-0` changed price 200 days ago and 20 days ago (not at
 *   midnight), `bench-model-1` 100 days ago at midnight, `bench-model-7` has no version;
 * - completion events for the newest 1,000,000 ended rows (positions in time order);
 * - 30 rows in flight (pending, running), replaced at every run (`refreshInFlight`) so the worker's
 *   6 h sweep never ends them between runs.
 *
 * Progress is kept in `bench_db_scale` (a bench-only table), so an interrupted generation resumes
 * at its next chunk.
 */
import type { DataSource } from "typeorm";

export const BIG_SHARE = 0.85;
export const OTHER_TEAMS = 20;
export const MODELS = 8;
const CHUNK = 500_000;
const DAYS = 400;

export interface BenchWorld {
  rows: number;
  events: number;
  email: string;
  password: string;
  teamId: string;
  ownerId: string;
  userIds: string[];
  keyIds: string[];
  apiKey: string;
}

interface Meta extends BenchWorld {
  chunksDone: number;
  eventsDone: boolean;
  complete: boolean;
}

async function readMeta(db: DataSource): Promise<Meta | null> {
  await db.query(`CREATE TABLE IF NOT EXISTS bench_db_scale (key text PRIMARY KEY, value jsonb NOT NULL)`);
  const rows: Array<{ value: Meta }> = await db.query(`SELECT value FROM bench_db_scale WHERE key = 'world'`);
  return rows[0]?.value ?? null;
}

async function writeMeta(db: DataSource, meta: Meta): Promise<void> {
  await db.query(
    `INSERT INTO bench_db_scale (key, value) VALUES ('world', $1)
     ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value`,
    [JSON.stringify(meta)],
  );
}

async function post<T>(base: string, p: string, body: unknown, token?: string): Promise<T> {
  const res = await fetch(`${base}${p}`, {
    method: "POST",
    headers: { "content-type": "application/json", ...(token ? { authorization: `Bearer ${token}` } : {}) },
    body: JSON.stringify(body),
  });
  const json = (await res.json()) as T;
  if (res.status >= 300) throw new Error(`${p} answered ${res.status}: ${JSON.stringify(json)}`);
  return json;
}

/** Logs the world's owner in: an access token for the control plane. */
export async function login(base: string, world: BenchWorld): Promise<string> {
  const res = await post<{ access_token: string }>(base, "/control/v1/auth/login", {
    email: world.email,
    password: world.password,
  });
  return res.access_token;
}

/**
 * Returns the generated world, generating (or finishing) it first when needed.
 * @param log progress lines.
 */
export async function ensureWorld(
  base: string,
  db: DataSource,
  want: { rows: number; events: number },
  log: (line: string) => void,
): Promise<BenchWorld> {
  let meta = await readMeta(db);
  if (meta?.complete) {
    if (meta.rows !== want.rows || meta.events !== want.events) {
      throw new Error(
        `the kept bench database holds ${meta.rows} rows / ${meta.events} events, not ${want.rows} / ${want.events}: ` +
          `delete its folder (BENCH_DB_DIR) to generate anew`,
      );
    }
    return meta;
  }
  const started = Date.now();
  if (!meta) {
    const email = `db-scale-owner@example.com`;
    const password = "bench-password-db-scale";
    const signup = await post<{ access_token: string; user: { id: string; team_id: string } }>(
      base,
      "/control/v1/auth/signup",
      { email, password },
    );
    const token = signup.access_token;
    const teamId = signup.user.team_id;
    const ownerId = signup.user.id;
    const members: Array<{ id: string }> = await db.query(
      `INSERT INTO users (id, email, team_id, role, name)
       SELECT gen_random_uuid(), 'db-scale-user-' || i || '@example.com', $1, 'member', 'bench user ' || i
         FROM generate_series(1, 9) i RETURNING id`,
      [teamId],
    );
    const keys: Array<{ id: string; plaintext: string }> = [];
    for (let i = 0; i < 5; i++)
      keys.push(
        await post<{ id: string; plaintext: string }>(base, "/control/v1/auth/api-keys", { name: `bench ${i}` }, token),
      );
    await db.query(
      `INSERT INTO teams (id, name) SELECT gen_random_uuid(), 'db-scale other ' || i FROM generate_series(1, $1) i`,
      [OTHER_TEAMS],
    );
    // Price versions of the generated models (see the header).
    await db.query(
      `INSERT INTO model_prices (model_id, effective_from, input_per_million_micros, cached_input_per_million_micros,
                                 output_per_million_micros)
       SELECT 'bench-model-' || m, 'epoch'::timestamptz, 1000000 * (m + 1), 500000 * (m + 1), 2000000 * (m + 1)
         FROM generate_series(0, 6) m
       UNION ALL SELECT 'bench-model-0', date_trunc('day', now()) - interval '200 days' + interval '7 hours 13 minutes',
                        1500000, 700000, 3000000
       UNION ALL SELECT 'bench-model-0', date_trunc('day', now()) - interval '20 days' + interval '15 hours 2 minutes 3.5 seconds',
                        1700000, 800000, 3500000
       UNION ALL SELECT 'bench-model-1', date_trunc('day', now() AT TIME ZONE 'UTC') AT TIME ZONE 'UTC' - interval '100 days',
                        2500000, 1000000, 5000000
       ON CONFLICT DO NOTHING`,
    );
    meta = {
      rows: want.rows,
      events: want.events,
      email,
      password,
      teamId,
      ownerId,
      userIds: [ownerId, ...members.map((m) => m.id)],
      keyIds: keys.map((k) => k.id),
      apiKey: keys[0].plaintext,
      chunksDone: 0,
      eventsDone: false,
      complete: false,
    };
    await writeMeta(db, meta);
  }
  const others: Array<{ id: string }> = await db.query(
    `SELECT id FROM teams WHERE name LIKE 'db-scale other %' ORDER BY name`,
  );
  const chunks = Math.ceil(want.rows / CHUNK);
  for (let c = meta.chunksDone; c < chunks; c++) {
    const t0 = Date.now();
    const from = c * CHUNK + 1;
    const to = Math.min(want.rows, (c + 1) * CHUNK);
    // Rows are written oldest first, as production writes them (row i is 400 d × (1 − i/N)² old),
    // and each row's team, user, key, model, type and status come from a multiplicative hash of i.
    await db.query(
      `INSERT INTO activity (id, team_id, user_id, api_key_id, api_key_name, api_key_prefix, type, status, endpoint,
                             model, prompt_tokens, completion_tokens, total_tokens, cached_prompt_tokens, cost_micros,
                             engine_ms, created_at, completed_at, service_tier)
       SELECT gen_random_uuid(), g.team_id, g.user_id, g.key_id,
              CASE WHEN g.key_id IS NOT NULL THEN 'bench key' END, CASE WHEN g.key_id IS NOT NULL THEN 'sk-bench' END,
              CASE WHEN g.h / 7 % 100 < 90 THEN 'standalone' WHEN g.h / 7 % 100 < 97 THEN 'batch' ELSE 'stream' END,
              CASE WHEN g.h / 11 % 200 = 7 THEN 'cancelled' WHEN g.h / 11 % 50 = 3 THEN 'failed' ELSE 'completed' END,
              '/v1/chat/completions', 'bench-model-' || (CASE WHEN g.h / 13 % 12 < 4 THEN 0 ELSE g.h / 13 % 12 - 4 END),
              20 + i % 100, i % 64, 20 + i % 100 + i % 64, i % 10, (i % 997) * 3, 5 + i % 40,
              g.at, g.at + (5 + i % 40) * interval '1 millisecond',
              CASE WHEN g.h / 17 % 7 = 0 THEN 'flex' ELSE 'default' END
         FROM generate_series($1::bigint, $2::bigint) i
        CROSS JOIN LATERAL (SELECT (i * 2654435761) % 4294967296 AS h) r
        CROSS JOIN LATERAL (
          SELECT r.h,
                 CASE WHEN r.h % 100 < $3 THEN $4::uuid ELSE ($6::uuid[])[1 + r.h / 3 % $7] END AS team_id,
                 CASE WHEN r.h % 100 >= $3 THEN NULL
                      WHEN r.h / 5 % 10 < 4 THEN ($5::uuid[])[1] ELSE ($5::uuid[])[1 + r.h / 5 % 10] END AS user_id,
                 -- the first 5 users use their own key for 80 % of their requests
                 CASE WHEN r.h % 100 < $3 AND r.h / 5 % 10 < 5 AND r.h / 19 % 5 <> 4
                      THEN ($8::uuid[])[1 + r.h / 5 % 10 % 5] END AS key_id,
                 now() - interval '10 seconds' - ${DAYS} * interval '1 day' * power(1 - i::float8 / $9, 2) AS at
        ) g`,
      [
        from,
        to,
        Math.round(BIG_SHARE * 100),
        meta.teamId,
        meta.userIds,
        others.map((o) => o.id),
        others.length,
        meta.keyIds,
        want.rows,
      ],
    );
    meta.chunksDone = c + 1;
    await writeMeta(db, meta);
    log(`activity chunk ${c + 1}/${chunks} (${to} rows) in ${Date.now() - t0} ms`);
  }
  if (!meta.eventsDone) {
    const t0 = Date.now();
    await db.query(
      `INSERT INTO completion_events (completion_id, position, team_id, response_id, stream_id, completed_at)
       SELECT gen_random_uuid(), nextval('completion_events_position_seq'), team_id, id, stream_id, completed_at
         FROM (SELECT team_id, id, stream_id, completed_at FROM activity
                WHERE status IN ('completed', 'failed', 'cancelled')
                ORDER BY completed_at DESC LIMIT $1) newest
        ORDER BY completed_at`,
      [want.events],
    );
    meta.eventsDone = true;
    await writeMeta(db, meta);
    log(`completion events: ${want.events} in ${Date.now() - t0} ms`);
  }
  const t0 = Date.now();
  await db.query(`VACUUM ANALYZE activity`);
  await db.query(`VACUUM ANALYZE completion_events`);
  await db.query(`VACUUM ANALYZE usage_daily`);
  log(`VACUUM ANALYZE in ${Date.now() - t0} ms`);
  meta.complete = true;
  await writeMeta(db, meta);
  log(`generated in ${((Date.now() - started) / 1000).toFixed(0)} s`);
  return meta;
}

/** Replaces the big team's 30 bench rows in flight (20 pending, 10 running) with fresh ones. */
export async function refreshInFlight(db: DataSource, world: BenchWorld): Promise<void> {
  await db.query(
    `DELETE FROM activity WHERE team_id = $1 AND status IN ('pending', 'running') AND endpoint = '/bench'`,
    [world.teamId],
  );
  await db.query(
    `INSERT INTO activity (id, team_id, user_id, type, status, endpoint, model, created_at)
     SELECT gen_random_uuid(), $1, ($2::uuid[])[1 + i % 10], 'standalone',
            CASE WHEN i <= 20 THEN 'pending' ELSE 'running' END, '/bench', 'bench-model-' || (i % 3),
            now() - i * interval '1 second'
       FROM generate_series(1, 30) i`,
    [world.teamId, world.userIds],
  );
}
