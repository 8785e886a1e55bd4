/**
 * Usage roll-up (issue 10, item 2: usage that answers "well under a second" on a 1,000,000-row
 * activity table): `usage_daily` holds, per team, user, UTC day, model and service tier, the sums
 * of the activity rows. A statement-level trigger on `activity` adds each statement's new rows
 * (activity rows are only ever inserted, once: `ON CONFLICT DO NOTHING` leaves duplicates out of
 * the transition table), so every way a row is written — the group commit, a test's seed — is
 * counted, in the same transaction. Existing rows are rolled up here.
 *
 * Measured on 900,000 rows of one team (bench:activity): the 365-day summary read 1.2 s from
 * `activity` (index-only scan); from the roll-up it reads a few thousand rows.
 */
import type { MigrationInterface, QueryRunner } from "typeorm";

/** A user id for activity rows without one (the roll-up's key has no nulls). */
export const NO_USER = "00000000-0000-0000-0000-000000000000";

/** Creates `usage_daily`, its trigger on `activity`, rolls up the existing rows, and drops the covering index it replaces. */
export class UsageDaily1764770000000 implements MigrationInterface {
  name = "UsageDaily1764770000000";

  async up(q: QueryRunner): Promise<void> {
    await q.query(`
      CREATE TABLE usage_daily (
        team_id uuid NOT NULL,
        user_id uuid NOT NULL,
        day date NOT NULL,
        model text NOT NULL,
        service_tier text NOT NULL,
        prompt_tokens bigint NOT NULL,
        completion_tokens bigint NOT NULL,
        total_tokens bigint NOT NULL,
        cached_prompt_tokens bigint NOT NULL,
        request_count bigint NOT NULL,
        cost_micros bigint NOT NULL,
        PRIMARY KEY (team_id, day, user_id, model, service_tier)
      )`);
    const rollUp = (from: string) => `
      INSERT INTO usage_daily AS u (team_id, user_id, day, model, service_tier, prompt_tokens, completion_tokens,
                                    total_tokens, cached_prompt_tokens, request_count, cost_micros)
      SELECT team_id, COALESCE(user_id, '${NO_USER}'), (created_at AT TIME ZONE 'UTC')::date, model, service_tier,
             sum(prompt_tokens), sum(completion_tokens), sum(total_tokens), sum(cached_prompt_tokens), count(*),
             sum(cost_micros)
        FROM ${from}
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
    await q.query(`
      CREATE FUNCTION usage_daily_add() RETURNS trigger LANGUAGE plpgsql AS $$
      BEGIN
        ${rollUp("new_activity")};
        RETURN NULL;
      END $$`);
    await q.query(`
      CREATE TRIGGER activity_usage_daily AFTER INSERT ON activity
        REFERENCING NEW TABLE AS new_activity FOR EACH STATEMENT EXECUTE FUNCTION usage_daily_add()`);
    await q.query(rollUp("activity"));
    // The covering index of 1764730000000 served the aggregates over `activity`; the roll-up
    // answers them now, and every activity insert no longer pays for it.
    await q.query(`DROP INDEX IF EXISTS activity_usage_idx`);
  }

  async down(q: QueryRunner): Promise<void> {
    await q.query(
      `CREATE INDEX activity_usage_idx ON activity (team_id, created_at)
         INCLUDE (user_id, model, service_tier, prompt_tokens, completion_tokens, total_tokens,
                  cached_prompt_tokens, cost_micros)`,
    );
    await q.query(`DROP TRIGGER activity_usage_daily ON activity`);
    await q.query(`DROP FUNCTION usage_daily_add()`);
    await q.query(`DROP TABLE usage_daily`);
  }
}
