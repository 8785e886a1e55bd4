/**
 * Background responses (issue 6, item 2): the deadline of each, which worker process runs it
 * and when that process last said it is alive, and who asked (the worker meters as them).
 * pg-boss keeps its own tables in the `pgboss` schema and creates them itself at start.
 */
import type { MigrationInterface, QueryRunner } from "typeorm";

/** Adds `deadline_at`, `runner`, `runner_seen_at`, `principal_json` to `responses` (`down` drops them). */
export class BackgroundResponses1764100000000 implements MigrationInterface {
  name = "BackgroundResponses1764100000000";

  async up(q: QueryRunner): Promise<void> {
    await q.query(`
      ALTER TABLE responses
        ADD COLUMN deadline_at timestamptz,
        ADD COLUMN runner uuid,
        ADD COLUMN runner_seen_at timestamptz,
        ADD COLUMN principal_json jsonb`);
    await q.query(`CREATE INDEX responses_in_progress_idx ON responses (deadline_at) WHERE status = 'in_progress'`);
    // The reconciler's look for ended background responses that never got their activity record.
    await q.query(`CREATE INDEX responses_background_updated_idx ON responses (updated_at) WHERE background`);
  }

  async down(q: QueryRunner): Promise<void> {
    await q.query(`DROP INDEX responses_background_updated_idx`);
    await q.query(`DROP INDEX responses_in_progress_idx`);
    await q.query(`
      ALTER TABLE responses
        DROP COLUMN deadline_at, DROP COLUMN runner, DROP COLUMN runner_seen_at, DROP COLUMN principal_json`);
  }
}
