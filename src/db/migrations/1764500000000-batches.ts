/**
 * Batches (issue 7; DESIGN §3 "Batches"): a batch and its items. An item's `request_id` is the
 * id of its activity record (and ledger source), fixed at create, so an item can be recorded and
 * charged at most once however often a crashed runner retries it; the activity record is the
 * truth an item's row is finalised from. Totals are summed from the activity records of the batch.
 */
import type { MigrationInterface, QueryRunner } from "typeorm";

/** Creates `batches` and `batch_items` and indexes activity by batch (`down` drops them). */
export class Batches1764500000000 implements MigrationInterface {
  name = "Batches1764500000000";

  async up(q: QueryRunner): Promise<void> {
    await q.query(`
      CREATE TABLE batches (
        id uuid PRIMARY KEY,
        team_id uuid NOT NULL REFERENCES teams (id) ON DELETE CASCADE,
        user_id uuid,
        api_key_id uuid,
        -- Who asked: the runner meters each item as them.
        principal_json jsonb NOT NULL,
        status text NOT NULL DEFAULT 'pending'
          CHECK (status IN ('pending', 'running', 'completed', 'failed', 'cancelled')),
        "window" text NOT NULL DEFAULT '24h' CHECK ("window" IN ('24h')),
        metadata jsonb,
        request_count integer NOT NULL,
        created_at timestamptz NOT NULL DEFAULT now(),
        updated_at timestamptz NOT NULL DEFAULT now(),
        completed_at timestamptz,
        cancelled_at timestamptz,
        expires_at timestamptz NOT NULL,
        -- The worker process running it and its last heartbeat (a silent runner is replaced).
        runner uuid,
        runner_seen_at timestamptz,
        -- When the reconciler last re-sent its run job.
        nudged_at timestamptz
      )`);
    await q.query(`CREATE INDEX batches_team_idx ON batches (team_id, id DESC)`);
    await q.query(`CREATE INDEX batches_open_idx ON batches (expires_at) WHERE status IN ('pending', 'running')`);
    await q.query(`
      CREATE TABLE batch_items (
        batch_id uuid NOT NULL REFERENCES batches (id) ON DELETE CASCADE,
        idx integer NOT NULL,
        request_id uuid NOT NULL UNIQUE,
        custom_id text,
        url text NOT NULL,
        body_json jsonb NOT NULL,
        status text NOT NULL DEFAULT 'pending'
          CHECK (status IN ('pending', 'running', 'completed', 'failed', 'cancelled')),
        result_json jsonb,
        error_json jsonb,
        started_at timestamptz,
        completed_at timestamptz,
        PRIMARY KEY (batch_id, idx)
      )`);
    await q.query(
      `CREATE INDEX batch_items_open_idx ON batch_items (batch_id, idx) WHERE status IN ('pending', 'running')`,
    );
    await q.query(`CREATE INDEX activity_batch_idx ON activity (batch_id) WHERE batch_id IS NOT NULL`);
  }

  async down(q: QueryRunner): Promise<void> {
    await q.query(`DROP INDEX activity_batch_idx`);
    await q.query(`DROP TABLE batch_items`);
    await q.query(`DROP TABLE batches`);
  }
}
