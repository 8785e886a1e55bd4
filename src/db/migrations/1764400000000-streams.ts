/**
 * Streams (issue 6, item 4; DESIGN §3 "Streams"): named groups of requests of one team. Requests
 * name a stream through `metadata.stream_id`; the counters are computed from activity and
 * responses rows, so this table holds only the stream's own fields.
 */
import type { MigrationInterface, QueryRunner } from "typeorm";

/** Creates `streams` (`down` drops it). */
export class Streams1764400000000 implements MigrationInterface {
  name = "Streams1764400000000";

  async up(q: QueryRunner): Promise<void> {
    await q.query(`
      CREATE TABLE streams (
        id uuid PRIMARY KEY,
        team_id uuid NOT NULL REFERENCES teams (id) ON DELETE CASCADE,
        name text NOT NULL,
        "window" text NOT NULL DEFAULT '24h' CHECK ("window" IN ('24h')),
        status text NOT NULL DEFAULT 'open' CHECK (status IN ('open', 'archived', 'cancelled')),
        created_at timestamptz NOT NULL DEFAULT now(),
        updated_at timestamptz NOT NULL DEFAULT now(),
        cancelled_at timestamptz,
        archived_at timestamptz
      )`);
    await q.query(`CREATE INDEX streams_team_idx ON streams (team_id, id DESC)`);
    // The counters of `GET /v1/streams/{id}` read a stream's activity and unfinished responses.
    await q.query(`CREATE INDEX activity_stream_idx ON activity (team_id, stream_id) WHERE stream_id IS NOT NULL`);
    await q.query(
      `CREATE INDEX responses_stream_open_idx ON responses (team_id, stream_id)
        WHERE stream_id IS NOT NULL AND status = 'in_progress'`,
    );
  }

  async down(q: QueryRunner): Promise<void> {
    await q.query(`DROP INDEX responses_stream_open_idx`);
    await q.query(`DROP INDEX activity_stream_idx`);
    await q.query(`DROP TABLE streams`);
  }
}
