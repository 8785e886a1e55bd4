/**
 * Request-body retention (issue 12, item 4): the activity rows that still hold a request or
 * result body, by age, so the retention job (`services/usage/retention.service.ts`) finds the next
 * batch past the cutoff without scanning the table; rows leave the index once their bodies are
 * cleared.
 */
import type { MigrationInterface, QueryRunner } from "typeorm";

/** Indexes activity rows that hold bodies by `created_at`. */
export class BodyRetention1764820000000 implements MigrationInterface {
  name = "BodyRetention1764820000000";

  async up(q: QueryRunner): Promise<void> {
    await q.query(
      `CREATE INDEX activity_bodies_created_idx ON activity (created_at)
        WHERE body_json IS NOT NULL OR result_json IS NOT NULL`,
    );
  }

  async down(q: QueryRunner): Promise<void> {
    await q.query(`DROP INDEX activity_bodies_created_idx`);
  }
}
