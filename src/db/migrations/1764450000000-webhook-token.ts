/**
 * Webhook tokens kept apart from stored requests (issue 6, item 3; DESIGN §3 Webhooks: the token
 * is a shared secret): `responses.webhook_token` holds a background response's token until its
 * record (and the outbox row that carries the token to deliveries) is written; the copies inside
 * `activity.body_json`, `responses.metadata` and `responses.request_json` become `"[redacted]"`.
 */
import type { MigrationInterface, QueryRunner } from "typeorm";

const REDACTED = `'"[redacted]"'::jsonb`;

/** Adds `responses.webhook_token` and redacts stored tokens (`down` drops the column; redacted tokens stay redacted). */
export class WebhookToken1764450000000 implements MigrationInterface {
  name = "WebhookToken1764450000000";

  async up(q: QueryRunner): Promise<void> {
    await q.query(`ALTER TABLE responses ADD COLUMN webhook_token text`);
    // Background responses still to be recorded keep what their delivery needs.
    await q.query(`
      UPDATE responses SET webhook_token = metadata ->> 'webhook_token'
       WHERE background AND status = 'in_progress' AND jsonb_typeof(metadata -> 'webhook_token') = 'string'
         AND metadata ->> 'webhook_token' <> ''`);
    await q.query(`
      UPDATE responses SET metadata = jsonb_set(metadata, '{webhook_token}', ${REDACTED})
       WHERE jsonb_typeof(metadata) = 'object' AND metadata ? 'webhook_token'`);
    for (const [table, column] of [
      ["responses", "request_json"],
      ["activity", "body_json"],
    ]) {
      await q.query(`
        UPDATE ${table} SET ${column} = jsonb_set(${column}, '{metadata,webhook_token}', ${REDACTED})
         WHERE jsonb_typeof(${column} -> 'metadata') = 'object' AND ${column} -> 'metadata' ? 'webhook_token'`);
    }
  }

  async down(q: QueryRunner): Promise<void> {
    await q.query(`ALTER TABLE responses DROP COLUMN webhook_token`);
  }
}
