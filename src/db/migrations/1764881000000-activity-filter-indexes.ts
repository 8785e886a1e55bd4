/**
 * Indexes for the activity list's filters at scale (issue 12, item 4; plans before and after in
 * bench/NOTES.md). A page is `team_id = $1 AND <filters> ORDER BY created_at DESC, id DESC
 * OFFSET … LIMIT …`; without an index that leads with the filter, PostgreSQL walks the team's
 * rows newest first and throws away those that do not match, so page 400 of a filter that matches
 * 2 % of a team's 8.5 M rows read 500,000 rows. Each index here lets it start at the filter:
 *
 * - model: any model may be filtered, and the billing summary reads one model-day by it;
 * - API key: only rows made with a key (rows without one are never asked for by key);
 * - status and type: partial, only the rare values (`status <> 'completed'`, `type <>
 *   'standalone'`): the common value is most of the team's rows, so the team index already
 *   finds its pages at once, and the partial indexes stay small and cost the flush little.
 *
 * Created in the migration's transaction (a production table this size would take
 * `CREATE INDEX CONCURRENTLY` outside it; the bench database took about a minute).
 */
import type { MigrationInterface, QueryRunner } from "typeorm";

/** Creates the four filter indexes on `activity`. */
export class ActivityFilterIndexes1764881000000 implements MigrationInterface {
  name = "ActivityFilterIndexes1764881000000";

  async up(q: QueryRunner): Promise<void> {
    await q.query(`CREATE INDEX activity_team_model_created_idx ON activity (team_id, model, created_at DESC)`);
    await q.query(
      `CREATE INDEX activity_team_key_created_idx ON activity (team_id, api_key_id, created_at DESC)
        WHERE api_key_id IS NOT NULL`,
    );
    await q.query(
      `CREATE INDEX activity_team_status_created_idx ON activity (team_id, status, created_at DESC)
        WHERE status <> 'completed'`,
    );
    await q.query(
      `CREATE INDEX activity_team_type_created_idx ON activity (team_id, type, created_at DESC)
        WHERE type <> 'standalone'`,
    );
  }

  async down(q: QueryRunner): Promise<void> {
    await q.query(`DROP INDEX activity_team_type_created_idx`);
    await q.query(`DROP INDEX activity_team_status_created_idx`);
    await q.query(`DROP INDEX activity_team_key_created_idx`);
    await q.query(`DROP INDEX activity_team_model_created_idx`);
  }
}
