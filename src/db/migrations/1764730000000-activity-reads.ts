/**
 * Activity and usage reads (issue 10, items 1 and 2): the service tier each request was served at
 * (usage `by_model`), and indexes for the control plane's filters and aggregates: a member's own
 * rows newest first, and a covering index over the team's rows by time that lets the daily and
 * summary aggregates run as index-only scans (activity rows are written once and never updated).
 */
import type { MigrationInterface, QueryRunner } from "typeorm";

/** Adds `activity.service_tier` and two indexes (`down` drops them). */
export class ActivityReads1764730000000 implements MigrationInterface {
  name = "ActivityReads1764730000000";

  async up(q: QueryRunner): Promise<void> {
    await q.query(`ALTER TABLE activity ADD COLUMN service_tier text NOT NULL DEFAULT 'default'`);
    await q.query(`CREATE INDEX activity_team_user_created_idx ON activity (team_id, user_id, created_at DESC)`);
    await q.query(
      `CREATE INDEX activity_usage_idx ON activity (team_id, created_at)
         INCLUDE (user_id, model, service_tier, prompt_tokens, completion_tokens, total_tokens,
                  cached_prompt_tokens, cost_micros)`,
    );
  }

  async down(q: QueryRunner): Promise<void> {
    await q.query(`DROP INDEX activity_usage_idx`);
    await q.query(`DROP INDEX activity_team_user_created_idx`);
    await q.query(`ALTER TABLE activity DROP COLUMN service_tier`);
  }
}
