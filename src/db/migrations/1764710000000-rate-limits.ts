/**
 * Per-team, per-model rate limits (issue 9, item 5; spec: Limits, "Per-model throughput"): one
 * row per (team, model) holding the current minute's request and token counts and the current
 * hour's request count (fixed windows, started by the database clock so every process agrees).
 */
import type { MigrationInterface, QueryRunner } from "typeorm";

/** Creates `rate_limit_windows` (`down` drops it). */
export class RateLimits1764710000000 implements MigrationInterface {
  name = "RateLimits1764710000000";

  async up(q: QueryRunner): Promise<void> {
    await q.query(`
      CREATE TABLE rate_limit_windows (
        team_id uuid NOT NULL REFERENCES teams (id),
        model text NOT NULL,
        minute_start timestamptz NOT NULL,
        minute_requests integer NOT NULL,
        minute_tokens bigint NOT NULL DEFAULT 0,
        hour_start timestamptz NOT NULL,
        hour_requests integer NOT NULL,
        PRIMARY KEY (team_id, model)
      )`);
  }

  async down(q: QueryRunner): Promise<void> {
    await q.query(`DROP TABLE rate_limit_windows`);
  }
}
