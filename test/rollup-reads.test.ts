/**
 * Reads served from roll-ups (issue 12, item 4): the billing summary (from `usage_daily`, with
 * `activity` only for days on which a price changed after midnight and for requests in flight)
 * and the activity list's `total` (from the roll-ups) must equal the plain answers over
 * `activity` — the queries they replaced, kept here as the oracle — on generated data spanning
 * 400 days: several users, keys, types, statuses (requests in flight included), service tiers,
 * models with a price change after midnight, one exactly at midnight, one with no price, and rows
 * that change after they are written (an in-flight row ending, a row deleted).
 */
import { randomUUID } from "node:crypto";
import { type TestServer, createTestCaller, http, startTestServer } from "./support/harness.js";
import { joinTeam } from "./support/teams.js";

let server: TestServer;

beforeAll(async () => {
  server = await startTestServer();
}, 30_000);
afterAll(() => server.close());

/** The billing summary query before the roll-up (the oracle): one scan of `activity` joined to the versions. */
const ORACLE = `
  WITH all_versions AS (
    SELECT model_id, effective_from, input_per_million_micros, output_per_million_micros,
           lead(effective_from) OVER (PARTITION BY model_id ORDER BY effective_from) AS effective_to
      FROM model_prices),
  start AS (SELECT date_trunc('day', now() AT TIME ZONE 'UTC') AT TIME ZONE 'UTC' - make_interval(days => $2::int - 1) AS at)
  SELECT a.model, a.service_tier, v.effective_from, v.input_per_million_micros::text AS input,
         v.output_per_million_micros::text AS output, sum(a.prompt_tokens)::int AS p, sum(a.completion_tokens)::int AS c,
         sum(a.total_tokens)::int AS t, sum(a.cached_prompt_tokens)::int AS cached, count(*)::int AS n,
         sum(a.cost_micros)::int AS cost
    FROM activity a
    LEFT JOIN all_versions v
      ON v.model_id = a.model AND a.created_at >= v.effective_from AND (v.effective_to IS NULL OR a.created_at < v.effective_to)
   WHERE a.team_id = $1 AND a.created_at >= (SELECT at FROM start)
   GROUP BY 1, 2, 3, 4, 5
   ORDER BY a.model, a.service_tier, v.effective_from NULLS FIRST`;

const DAY = 86_400_000;

describe("billing summary and activity totals from the roll-ups", () => {
  test("when a team's history spans 400 days with price changes, rows in flight and rows that change, then the billing summary and every total equal the plain answers over activity", async () => {
    const owner = await createTestCaller(server.url);
    const member = await joinTeam(server.url, owner, "member");
    const [{ today }] = await server.db<{ today: Date }>(
      "SELECT date_trunc('day', now() AT TIME ZONE 'UTC') AT TIME ZONE 'UTC' AS today",
    );
    const midnight = new Date(today).getTime();
    const m = (i: number) => `rollup-${i}-${randomUUID().slice(0, 8)}`;
    const models = [m(0), m(1), m(2), m(3)];
    // models[0]: a version from the epoch, one 200 days ago and one 3 days ago, both after midnight;
    // models[1]: one exactly at midnight 10 days ago; models[2]: its first version 5 days ago at noon
    // (before it: no price); models[3]: none at all.
    const versions: Array<[string, number]> = [
      [models[0], 0],
      [models[0], midnight - 200 * DAY + 7_200_000 + 1],
      [models[0], midnight - 3 * DAY + 54_000_000],
      [models[1], 0],
      [models[1], midnight - 10 * DAY],
      [models[2], midnight - 5 * DAY + 43_200_000],
    ];
    for (const [i, [model, at]] of versions.entries()) {
      await server.db(
        `INSERT INTO model_prices (model_id, effective_from, input_per_million_micros,
                                   cached_input_per_million_micros, output_per_million_micros)
         VALUES ($1, $2, $3, $3, $4)`,
        [model, new Date(at), (i + 1) * 1_000_000, (i + 1) * 3_000_000],
      );
    }
    const users = [owner.userId, member.userId, null];
    const keys = [owner.keyId, null];
    const types = ["standalone", "batch", "stream"];
    const statuses = ["completed", "completed", "failed", "cancelled", "pending", "running"];
    const rows: unknown[] = [];
    // Dense around the price changes and the window edges, spread over 400 days otherwise.
    const instants: number[] = [];
    for (let d = 0; d < 400; d += 3) instants.push(midnight - d * DAY + ((d * 7_919_000) % DAY));
    for (const [, at] of versions) if (at > 0) for (const off of [-1, 0, 1, 3_600_000]) instants.push(at + off);
    for (const days of [1, 2, 7, 30, 365]) instants.push(midnight - (days - 1) * DAY, midnight - (days - 1) * DAY - 1);
    for (const [i, at] of instants.entries()) {
      if (at > Date.now() - 1000) continue;
      for (let j = 0; j < 3; j++) {
        const k = i * 3 + j;
        rows.push({
          at: new Date(at).toISOString(),
          model: models[k % 4],
          user: users[k % 3],
          key: keys[(k >> 1) % 2],
          type: types[k % 3],
          status: statuses[(k * 5) % 6],
          tier: k % 4 === 1 ? "flex" : "default",
          p: 10 + (k % 13),
          c: k % 7,
          cached: k % 3,
          cost: (k * 37) % 1000,
        });
      }
    }
    await server.db(
      `INSERT INTO activity (id, team_id, user_id, api_key_id, type, status, endpoint, model, service_tier,
                             prompt_tokens, completion_tokens, total_tokens, cached_prompt_tokens, cost_micros,
                             created_at, completed_at)
       SELECT gen_random_uuid(), $1, r."user", r.key, r.type, r.status, '/v1/chat/completions', r.model, r.tier,
              r.p, r.c, r.p + r.c, r.cached, r.cost, r.at, r.at
         FROM jsonb_to_recordset($2::jsonb)
           AS r(at timestamptz, model text, "user" uuid, key uuid, type text, status text, tier text, p int, c int,
                cached int, cost bigint)`,
      [owner.teamId, JSON.stringify(rows)],
    );
    // Rows change after they are written: in-flight rows end (some with usage), one row is deleted.
    await server.db(
      `UPDATE activity SET status = 'completed', prompt_tokens = 5, total_tokens = 5, cost_micros = 9
        WHERE id IN (SELECT id FROM activity WHERE team_id = $1 AND status = 'running' ORDER BY created_at LIMIT 5)`,
      [owner.teamId],
    );
    await server.db(
      `DELETE FROM activity WHERE id IN (SELECT id FROM activity WHERE team_id = $1 AND status = 'pending' LIMIT 2)`,
      [owner.teamId],
    );

    for (const days of [1, 2, 4, 7, 11, 30, 201, 365]) {
      const res = await http(server.url, "GET", `/control/v1/billing/summary?days=${days}`, { token: owner.token });
      expect(res.status).toBe(200);
      const oracle = await server.db<any>(ORACLE, [owner.teamId, days]);
      expect(oracle.length).toBeGreaterThan(0);
      expect({ days, by_model: res.body.by_model }).toEqual({
        days,
        by_model: oracle.map((o) => ({
          model: o.model,
          service_tier: o.service_tier,
          prompt_tokens: o.p,
          completion_tokens: o.c,
          total_tokens: o.t,
          cached_prompt_tokens: o.cached,
          total_requests: o.n,
          cost_micros: o.cost,
          pricing:
            o.effective_from === null
              ? null
              : {
                  model: o.model,
                  prompt_token_price_micros: Number(o.input),
                  completion_token_price_micros: Number(o.output),
                  effective_from: new Date(o.effective_from).toISOString(),
                },
        })),
      });
      expect(res.body.summary.total_requests).toBe(oracle.reduce((s, o) => s + o.n, 0));
      expect(res.body.summary.estimated_cost_micros).toBe(oracle.reduce((s, o) => s + o.cost, 0));
    }

    // Activity totals: every filter alone and in combinations, against count(*) over activity.
    const iso = (ms: number) => new Date(ms).toISOString();
    const filters: Array<Record<string, string>> = [
      {},
      { type: "batch" },
      { status: "completed" },
      { status: "pending" },
      { status: "running" },
      { model: models[0] },
      { api_key_id: owner.keyId },
      { user_id: member.userId },
      { created_after: iso(midnight - 30 * DAY + 12_345) },
      { created_before: iso(midnight - 200 * DAY + 7_200_001) },
      { created_after: iso(midnight - 100 * DAY - 1), created_before: iso(midnight - 10 * DAY) },
      { created_after: iso(midnight - 5 * DAY + 43_200_000), created_before: iso(midnight - 5 * DAY + 43_200_001) },
      { created_after: iso(midnight - 100 * DAY), model: models[1], user_id: owner.userId },
      { created_after: iso(midnight - 60 * DAY), status: "failed" },
      { created_before: iso(midnight - 60 * DAY), type: "stream", api_key_id: owner.keyId },
      { user_id: owner.userId, model: models[2], status: "cancelled", type: "standalone" },
    ];
    for (const f of filters) {
      const res = await http(server.url, "GET", `/control/v1/activity?${new URLSearchParams(f)}`, {
        token: owner.token,
      });
      expect(res.status).toBe(200);
      const [{ n }] = await server.db<{ n: number }>(
        `SELECT count(*)::int AS n FROM activity
          WHERE team_id = $1 AND ($2::text IS NULL OR type = $2) AND ($3::text IS NULL OR status = $3)
            AND ($4::text IS NULL OR model = $4) AND ($5::uuid IS NULL OR api_key_id = $5)
            AND ($6::uuid IS NULL OR user_id = $6) AND ($7::timestamptz IS NULL OR created_at > $7)
            AND ($8::timestamptz IS NULL OR created_at < $8)`,
        [
          owner.teamId,
          f.type ?? null,
          f.status ?? null,
          f.model ?? null,
          f.api_key_id ?? null,
          f.user_id ?? null,
          f.created_after ?? null,
          f.created_before ?? null,
        ],
      );
      expect({ f, total: res.body.total }).toEqual({ f, total: n });
    }
    // A member's own total (scoped to their rows without naming themselves).
    const mine = await http(server.url, "GET", "/control/v1/activity", { token: member.token });
    const [{ n: memberRows }] = await server.db<{ n: number }>(
      "SELECT count(*)::int AS n FROM activity WHERE team_id = $1 AND user_id = $2",
      [owner.teamId, member.userId],
    );
    expect(mine.body.total).toBe(memberRows);
  });
});
