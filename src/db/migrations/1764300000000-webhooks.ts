/**
 * Completion webhooks (issue 6, item 3; DESIGN §3 Webhooks): the delivery outbox written by the
 * metering group commit in the same transaction as the terminal status, every attempt made, and
 * the team's Standard Webhooks signing secret.
 */
import type { MigrationInterface, QueryRunner } from "typeorm";

/** Creates `webhook_deliveries`, `webhook_attempts` and `teams.webhook_signing_secret` (`down` drops them). */
export class Webhooks1764300000000 implements MigrationInterface {
  name = "Webhooks1764300000000";

  async up(q: QueryRunner): Promise<void> {
    await q.query(`ALTER TABLE teams ADD COLUMN webhook_signing_secret text`);
    await q.query(`
      CREATE TABLE webhook_deliveries (
        id uuid PRIMARY KEY,
        team_id uuid NOT NULL REFERENCES teams (id),
        response_id uuid NOT NULL UNIQUE,
        url text NOT NULL,
        token text,
        body jsonb NOT NULL,
        status text NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'delivered', 'failed')),
        attempts integer NOT NULL DEFAULT 0,
        next_attempt_at timestamptz NOT NULL DEFAULT now(),
        last_error text,
        created_at timestamptz NOT NULL DEFAULT now(),
        updated_at timestamptz NOT NULL DEFAULT now(),
        finished_at timestamptz
      )`);
    await q.query(
      `CREATE INDEX webhook_deliveries_due_idx ON webhook_deliveries (next_attempt_at) WHERE status = 'pending'`,
    );
    await q.query(`CREATE INDEX webhook_deliveries_team_idx ON webhook_deliveries (team_id, created_at)`);
    await q.query(`
      CREATE TABLE webhook_attempts (
        delivery_id uuid NOT NULL REFERENCES webhook_deliveries (id) ON DELETE CASCADE,
        attempt integer NOT NULL,
        status_code integer,
        latency_ms integer NOT NULL,
        error text,
        at timestamptz NOT NULL DEFAULT now(),
        PRIMARY KEY (delivery_id, attempt)
      )`);
  }

  async down(q: QueryRunner): Promise<void> {
    await q.query(`DROP TABLE webhook_attempts`);
    await q.query(`DROP TABLE webhook_deliveries`);
    await q.query(`ALTER TABLE teams DROP COLUMN webhook_signing_secret`);
  }
}
