/**
 * The completion events feed (issue 6, item 6; DESIGN §3 "Completion events feed"): one row per
 * finished inference request, written by the metering group commit. The row holds the feed's
 * keys (`completion_id`, the commit-ordered `position`, team, stream, time); tokens, cost, status,
 * result and error are read from the request's activity row, so they always equal it. See
 * `services/events/completion-events.service.ts` for why `position` exists.
 */
import type { MigrationInterface, QueryRunner } from "typeorm";

/** Creates `completion_events` and its position sequence (`down` drops them). */
export class CompletionEvents1764200000000 implements MigrationInterface {
  name = "CompletionEvents1764200000000";

  async up(q: QueryRunner): Promise<void> {
    await q.query(`CREATE SEQUENCE completion_events_position_seq AS bigint`);
    await q.query(`
      CREATE TABLE completion_events (
        completion_id uuid PRIMARY KEY,
        position bigint NOT NULL UNIQUE,
        team_id uuid NOT NULL,
        response_id uuid NOT NULL UNIQUE REFERENCES activity (id) ON DELETE CASCADE,
        stream_id uuid,
        completed_at timestamptz NOT NULL
      )`);
    await q.query(`CREATE INDEX completion_events_team_idx ON completion_events (team_id, position)`);
    await q.query(
      `CREATE INDEX completion_events_stream_idx ON completion_events (team_id, stream_id, position)
        WHERE stream_id IS NOT NULL`,
    );
    await q.query(`CREATE INDEX completion_events_completed_idx ON completion_events (completed_at)`);
  }

  async down(q: QueryRunner): Promise<void> {
    await q.query(`DROP TABLE completion_events`);
    await q.query(`DROP SEQUENCE completion_events_position_seq`);
  }
}
