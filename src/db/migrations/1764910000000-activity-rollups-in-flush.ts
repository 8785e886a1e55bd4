/**
 * A lean metering write (issue 30, item 2): the activity roll-ups (`usage_daily`, 1764770000000
 * and 1764840000000; `activity_counts`, 1764880000000) keep their rules, with less work per
 * group commit. Measured in bench/NOTES.md (session 14): the four statement-level triggers were a
 * sixth of a one-row flush's PostgreSQL time, two of them (the update ones) fired by every flush
 * although it updates nothing (an `INSERT … ON CONFLICT DO UPDATE` fires them regardless).
 *
 * - One insert trigger (`activity_rollups_insert`) and one update trigger
 *   (`activity_rollups_update`) instead of two each: one trigger call, each function doing both
 *   roll-ups, the same statements as before.
 * - The update function returns at once when no row was updated (one cheap check instead of two
 *   joins and two upserts).
 * - The insert trigger skips the statement that set `switchyard.activity_rollups` to its own
 *   start time (`statement_timestamp()`): the metering group commit
 *   (`services/metering/group-commit-statement.ts`) rolls up the rows it inserts itself, set-based
 *   in its statement, with the same SQL (`usageRollUp`, `countsRollUp`). No other statement can
 *   match that tag (a later statement of the same transaction starts later), so every other
 *   writer — the early rows of requests in flight, a test's seed — is still rolled up by the
 *   trigger. The rows a flush updates (requests in flight ending) are rolled up by the update
 *   trigger, which alone sees their old values.
 * - The delete trigger (`activity_counts_delete`) is unchanged.
 */
import type { MigrationInterface, QueryRunner } from "typeorm";
import { NO_USER } from "./1764770000000-usage-daily.js";

/** The setting the metering group commit tags its statement with (see the module header). */
export const ROLLUPS_SETTING = "switchyard.activity_rollups";

/** Statuses `usage_daily` counts: ended requests. */
export const ENDED = `('completed', 'failed', 'cancelled')`;

const COUNTED = `team_id, user_id, created_at, model, service_tier, prompt_tokens, completion_tokens, total_tokens,
                 cached_prompt_tokens, cost_micros`;

const KEY = "team_id, user_id, api_key_id, model, type, status";

/**
 * Adds signed sums of `rows` (a query with the columns of `activity` that usage counts and a
 * `sign` column) to `usage_daily`, per team, user, UTC day, model and tier.
 */
export const usageRollUp = (rows: string) => `
  INSERT INTO usage_daily AS u (team_id, user_id, day, model, service_tier, prompt_tokens, completion_tokens,
                                total_tokens, cached_prompt_tokens, request_count, cost_micros)
  SELECT team_id, COALESCE(user_id, '${NO_USER}'), (created_at AT TIME ZONE 'UTC')::date, model, service_tier,
         sum(sign * prompt_tokens), sum(sign * completion_tokens), sum(sign * total_tokens),
         sum(sign * cached_prompt_tokens), sum(sign), sum(sign * cost_micros)
    FROM (${rows}) r
   GROUP BY 1, 2, 3, 4, 5
   -- One order for every statement's row locks: concurrent writers cannot deadlock on the roll-up.
   ORDER BY 1, 3, 2, 4, 5
  ON CONFLICT (team_id, day, user_id, model, service_tier) DO UPDATE SET
    prompt_tokens = u.prompt_tokens + EXCLUDED.prompt_tokens,
    completion_tokens = u.completion_tokens + EXCLUDED.completion_tokens,
    total_tokens = u.total_tokens + EXCLUDED.total_tokens,
    cached_prompt_tokens = u.cached_prompt_tokens + EXCLUDED.cached_prompt_tokens,
    request_count = u.request_count + EXCLUDED.request_count,
    cost_micros = u.cost_micros + EXCLUDED.cost_micros`;

/**
 * Adds signed counts of `rows` (a query with `team_id, user_id, api_key_id, model, type, status`,
 * ids nullable, and a `sign` column) to `activity_counts`.
 */
export const countsRollUp = (rows: string) => `
  INSERT INTO activity_counts AS c (${KEY}, n)
  SELECT team_id, COALESCE(user_id, '${NO_USER}'), COALESCE(api_key_id, '${NO_USER}'), model, type, status, sum(sign)
    FROM (${rows}) r
   GROUP BY 1, 2, 3, 4, 5, 6
   -- One order for every statement's row locks: concurrent writers cannot deadlock here.
   ORDER BY 1, 2, 3, 4, 5, 6
  ON CONFLICT (${KEY}) DO UPDATE SET n = c.n + EXCLUDED.n`;

/** Usage: new ended rows. */
const USAGE_ADDED = `SELECT ${COUNTED}, 1 AS sign FROM new_activity WHERE status IN ${ENDED}`;

/**
 * Usage: of the rows whose counted columns or ended-ness changed, the new figures on and the old
 * off (the retention job's updates, bodies only, drop out).
 */
const USAGE_CHANGED = `
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
   WHERE id IN (SELECT id FROM changed) AND status IN ${ENDED}`;

/** Counts: every new row. */
const COUNTS_ADDED = `SELECT ${KEY}, 1 AS sign FROM new_activity`;

/** Counts: rows whose counted columns changed (an in-flight row ending), the new on and the old off. */
const COUNTS_CHANGED = `
  WITH changed AS (
    SELECT n.id FROM new_activity n JOIN old_activity o ON o.id = n.id
     WHERE (n.team_id, n.user_id, n.api_key_id, n.model, n.type, n.status)
           IS DISTINCT FROM (o.team_id, o.user_id, o.api_key_id, o.model, o.type, o.status)
  )
  SELECT ${KEY}, 1 AS sign FROM new_activity WHERE id IN (SELECT id FROM changed)
  UNION ALL
  SELECT ${KEY}, -1 AS sign FROM old_activity WHERE id IN (SELECT id FROM changed)`;

const plpgsql = (name: string, body: string) => `
  CREATE FUNCTION ${name}() RETURNS trigger LANGUAGE plpgsql AS $$
  BEGIN
    ${body}
    RETURN NULL;
  END $$`;

/** Replaces the four roll-up triggers of `activity` on insert and update by two (module header). */
export class ActivityRollupsInFlush1764910000000 implements MigrationInterface {
  name = "ActivityRollupsInFlush1764910000000";

  async up(q: QueryRunner): Promise<void> {
    await q.query(`DROP TRIGGER activity_usage_daily ON activity`);
    await q.query(`DROP TRIGGER activity_usage_daily_update ON activity`);
    await q.query(`DROP TRIGGER activity_counts_insert ON activity`);
    await q.query(`DROP TRIGGER activity_counts_update ON activity`);
    for (const f of ["usage_daily_add", "usage_daily_change", "activity_counts_add", "activity_counts_change"]) {
      await q.query(`DROP FUNCTION ${f}()`);
    }
    await q.query(plpgsql("activity_rollups_add", `${usageRollUp(USAGE_ADDED)};\n${countsRollUp(COUNTS_ADDED)};`));
    await q.query(
      plpgsql(
        "activity_rollups_change",
        // An INSERT … ON CONFLICT DO UPDATE (every group commit) fires this even when it updated nothing.
        `IF NOT EXISTS (SELECT FROM new_activity) THEN RETURN NULL; END IF;
         ${usageRollUp(USAGE_CHANGED)};
         ${countsRollUp(COUNTS_CHANGED)};`,
      ),
    );
    await q.query(`
      CREATE TRIGGER activity_rollups_insert AFTER INSERT ON activity
        REFERENCING NEW TABLE AS new_activity FOR EACH STATEMENT
        WHEN (current_setting('${ROLLUPS_SETTING}', true) IS DISTINCT FROM statement_timestamp()::text)
        EXECUTE FUNCTION activity_rollups_add()`);
    await q.query(`
      CREATE TRIGGER activity_rollups_update AFTER UPDATE ON activity
        REFERENCING OLD TABLE AS old_activity NEW TABLE AS new_activity
        FOR EACH STATEMENT EXECUTE FUNCTION activity_rollups_change()`);
  }

  async down(q: QueryRunner): Promise<void> {
    await q.query(`DROP TRIGGER activity_rollups_update ON activity`);
    await q.query(`DROP TRIGGER activity_rollups_insert ON activity`);
    await q.query(`DROP FUNCTION activity_rollups_change()`);
    await q.query(`DROP FUNCTION activity_rollups_add()`);
    await q.query(plpgsql("usage_daily_add", `${usageRollUp(USAGE_ADDED)};`));
    await q.query(plpgsql("usage_daily_change", `${usageRollUp(USAGE_CHANGED)};`));
    await q.query(plpgsql("activity_counts_add", `${countsRollUp(COUNTS_ADDED)};`));
    await q.query(plpgsql("activity_counts_change", `${countsRollUp(COUNTS_CHANGED)};`));
    await q.query(`
      CREATE TRIGGER activity_usage_daily AFTER INSERT ON activity
        REFERENCING NEW TABLE AS new_activity FOR EACH STATEMENT EXECUTE FUNCTION usage_daily_add()`);
    await q.query(`
      CREATE TRIGGER activity_usage_daily_update AFTER UPDATE ON activity
        REFERENCING OLD TABLE AS old_activity NEW TABLE AS new_activity
        FOR EACH STATEMENT EXECUTE FUNCTION usage_daily_change()`);
    await q.query(`
      CREATE TRIGGER activity_counts_insert AFTER INSERT ON activity
        REFERENCING NEW TABLE AS new_activity FOR EACH STATEMENT EXECUTE FUNCTION activity_counts_add()`);
    await q.query(`
      CREATE TRIGGER activity_counts_update AFTER UPDATE ON activity
        REFERENCING OLD TABLE AS old_activity NEW TABLE AS new_activity
        FOR EACH STATEMENT EXECUTE FUNCTION activity_counts_change()`);
  }
}
