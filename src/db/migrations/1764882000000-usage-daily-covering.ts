/**
 * A covering index of `usage_daily` for the usage and billing reads at scale (issue 12, item 4):
 * a 365-day read of a big team sums some 40,000 roll-up rows (day × user × model × tier); with
 * other teams' rows in the same table the planner read the whole table (sequential scan, 120–200
 * ms on the loaded bench machine). This index holds every column those reads use in the order
 * they group by (team, day, model), so they are index-only range scans of the team's window.
 * The flush's roll-up upserts were already mostly not HOT (measured: 266 of 5,914), so an index
 * that includes the summed columns costs them little more. Plans in bench/NOTES.md.
 */
import type { MigrationInterface, QueryRunner } from "typeorm";

/** Creates `usage_daily_team_day_model_idx`. */
export class UsageDailyCovering1764882000000 implements MigrationInterface {
  name = "UsageDailyCovering1764882000000";

  async up(q: QueryRunner): Promise<void> {
    await q.query(
      `CREATE INDEX usage_daily_team_day_model_idx ON usage_daily (team_id, day, model)
         INCLUDE (user_id, service_tier, prompt_tokens, completion_tokens, total_tokens, cached_prompt_tokens,
                  request_count, cost_micros)`,
    );
  }

  async down(q: QueryRunner): Promise<void> {
    await q.query(`DROP INDEX usage_daily_team_day_model_idx`);
  }
}
