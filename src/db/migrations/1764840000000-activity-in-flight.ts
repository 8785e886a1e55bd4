/**
 * Requests in flight in the activity list (issue 10, finding 6 of its review): a request that is
 * still waiting for an engine slot or running is shown `pending` or `running`
 * (`services/metering/in-flight-activity.ts` writes that row; its terminal record then updates it in the
 * group commit). Two changes here:
 *
 * - The `usage_daily` roll-up counts only ended requests (`completed`, `failed`, `cancelled`):
 *   the insert trigger skips rows in flight, and a new update trigger adds what an update changes
 *   of ended rows — an in-flight row becoming terminal adds its request and its usage; the
 *   retention job clearing bodies changes nothing counted and adds nothing. Usage is what ended:
 *   a request counts once it has an outcome, as before.
 * - A partial index of the rows in flight, for the sweep that ends rows left behind by a process
 *   that died (they would otherwise stay `running` for good).
 */
import type { MigrationInterface, QueryRunner } from "typeorm";
import { NO_USER } from "./1764770000000-usage-daily.js";

const ENDED = `('completed', 'failed', 'cancelled')`;

/** Adds signed sums of `rows` (a query with a `sign` column) to `usage_daily`. */
const rollUp = (rows: string) => `
  INSERT INTO usage_daily AS u (team_id, user_id, day, model, service_tier, prompt_tokens, completion_tokens,
                                total_tokens, cached_prompt_tokens, request_count, cost_micros)
  SELECT team_id, COALESCE(user_id, '${NO_USER}'), (created_at AT TIME ZONE 'UTC')::date, model, service_tier,
         sum(sign * prompt_tokens), sum(sign * completion_tokens), sum(sign * total_tokens),
         sum(sign * cached_prompt_tokens), sum(sign), sum(sign * cost_micros)
    FROM (${rows}) r
   GROUP BY 1, 2, 3, 4, 5
   -- One order for every statement's row locks: concurrent flushes cannot deadlock on the roll-up.
   ORDER BY 1, 3, 2, 4, 5
  ON CONFLICT (team_id, day, user_id, model, service_tier) DO UPDATE SET
    prompt_tokens = u.prompt_tokens + EXCLUDED.prompt_tokens,
    completion_tokens = u.completion_tokens + EXCLUDED.completion_tokens,
    total_tokens = u.total_tokens + EXCLUDED.total_tokens,
    cached_prompt_tokens = u.cached_prompt_tokens + EXCLUDED.cached_prompt_tokens,
    request_count = u.request_count + EXCLUDED.request_count,
    cost_micros = u.cost_micros + EXCLUDED.cost_micros`;

const COUNTED = `team_id, user_id, created_at, model, service_tier, prompt_tokens, completion_tokens, total_tokens,
                 cached_prompt_tokens, cost_micros`;

/** Rolls up ended rows only, on insert and on update. */
export class ActivityInFlight1764840000000 implements MigrationInterface {
  name = "ActivityInFlight1764840000000";

  async up(q: QueryRunner): Promise<void> {
    await q.query(`
      CREATE OR REPLACE FUNCTION usage_daily_add() RETURNS trigger LANGUAGE plpgsql AS $$
      BEGIN
        ${rollUp(`SELECT ${COUNTED}, 1 AS sign FROM new_activity WHERE status IN ${ENDED}`)};
        RETURN NULL;
      END $$`);
    // Only rows whose counted columns or ended-ness changed: the retention job's updates (bodies
    // only) join and drop out without touching the roll-up.
    await q.query(`
      CREATE FUNCTION usage_daily_change() RETURNS trigger LANGUAGE plpgsql AS $$
      BEGIN
        ${rollUp(`
          WITH changed AS (
            SELECT n.id FROM new_activity n JOIN old_activity o ON o.id = n.id
             WHERE (n.status IN ${ENDED}) IS DISTINCT FROM (o.status IN ${ENDED})
                OR (n.team_id, n.user_id, n.created_at, n.model, n.service_tier, n.prompt_tokens, n.completion_tokens,
                    n.total_tokens, n.cached_prompt_tokens, n.cost_micros)
                   IS DISTINCT FROM
                   (o.team_id, o.user_id, o.created_at, o.model, o.service_tier, o.prompt_tokens, o.completion_tokens,
                    o.total_tokens, o.cached_prompt_tokens, o.cost_micros)
          )
          SELECT ${COUNTED}, 1 AS sign FROM new_activity
           WHERE id IN (SELECT id FROM changed) AND status IN ${ENDED}
          UNION ALL
          SELECT ${COUNTED}, -1 AS sign FROM old_activity
           WHERE id IN (SELECT id FROM changed) AND status IN ${ENDED}`)};
        RETURN NULL;
      END $$`);
    await q.query(`
      CREATE TRIGGER activity_usage_daily_update AFTER UPDATE ON activity
        REFERENCING OLD TABLE AS old_activity NEW TABLE AS new_activity
        FOR EACH STATEMENT EXECUTE FUNCTION usage_daily_change()`);
    await q.query(
      `CREATE INDEX activity_in_flight_idx ON activity (created_at) WHERE status IN ('pending', 'running')`,
    );
  }

  async down(q: QueryRunner): Promise<void> {
    await q.query(`DROP INDEX activity_in_flight_idx`);
    await q.query(`DROP TRIGGER activity_usage_daily_update ON activity`);
    await q.query(`DROP FUNCTION usage_daily_change()`);
    await q.query(`
      CREATE OR REPLACE FUNCTION usage_daily_add() RETURNS trigger LANGUAGE plpgsql AS $$
      BEGIN
        ${rollUp(`SELECT ${COUNTED}, 1 AS sign FROM new_activity`)};
        RETURN NULL;
      END $$`);
  }
}
