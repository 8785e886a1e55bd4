/**
 * Manual webhook redelivery (issue 27, item 6; `services/events/webhooks/webhook-deliveries.service.ts`).
 * A failed delivery used to drop its body and token at once, leaving nothing to send again; now a
 * failed delivery of a team without zero data retention keeps its body, and its webhook token
 * sealed (AES-256-GCM under a key derived from the service secret, never in plaintext), until
 * `kept_until`; the dispatcher's sweep drops both then. A redelivery resets the same row to
 * `pending` (one delivery per response stays the outbox's dedup key) and remembers in
 * `attempts_before` how many attempts came before it, so its retry budget starts afresh while the
 * attempt numbers go on (the earlier attempts stay in `webhook_attempts`).
 */
import type { MigrationInterface, QueryRunner } from "typeorm";

/** Adds `attempts_before`, `token_sealed`, `kept_until` and the sweep's partial index (`down` drops them). */
export class WebhookRedelivery1764890000000 implements MigrationInterface {
  name = "WebhookRedelivery1764890000000";

  async up(q: QueryRunner): Promise<void> {
    await q.query(`
      ALTER TABLE webhook_deliveries
        ADD COLUMN attempts_before integer NOT NULL DEFAULT 0,
        ADD COLUMN token_sealed bytea,
        ADD COLUMN kept_until timestamptz`);
    await q.query(
      `CREATE INDEX webhook_deliveries_kept_idx ON webhook_deliveries (kept_until) WHERE kept_until IS NOT NULL`,
    );
  }

  async down(q: QueryRunner): Promise<void> {
    await q.query(`DROP INDEX webhook_deliveries_kept_idx`);
    await q.query(`
      ALTER TABLE webhook_deliveries
        DROP COLUMN attempts_before,
        DROP COLUMN token_sealed,
        DROP COLUMN kept_until`);
  }
}
