/**
 * Outgoing mail (issue 8: password reset, invitations): every message is kept in `mail_outbox`;
 * with `SMTP_URL` set it is also sent over SMTP (`sent_at`, or `error` when the server refused it).
 */
import type { MigrationInterface, QueryRunner } from "typeorm";

/** Creates `mail_outbox` (`down` drops it). */
export class MailOutbox1764550000000 implements MigrationInterface {
  name = "MailOutbox1764550000000";

  async up(q: QueryRunner): Promise<void> {
    await q.query(`
      CREATE TABLE mail_outbox (
        id uuid PRIMARY KEY,
        -- What the message is for, e.g. password_reset, invitation.
        kind text NOT NULL,
        to_address text NOT NULL,
        subject text NOT NULL,
        body_text text NOT NULL,
        created_at timestamptz NOT NULL DEFAULT now(),
        sent_at timestamptz,
        error text
      )`);
    await q.query(`CREATE INDEX mail_outbox_to_idx ON mail_outbox (to_address, created_at DESC)`);
  }

  async down(q: QueryRunner): Promise<void> {
    await q.query(`DROP TABLE mail_outbox`);
  }
}
