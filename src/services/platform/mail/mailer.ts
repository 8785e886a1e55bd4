/**
 * Outgoing mail (issue 8, items 1 and 4: password reset, invitations). Every message is written to
 * the `mail_outbox` table (so an operator without SMTP can still read it, and tests can too) with
 * a log line naming its kind and recipient — never its body, which may hold a token. With
 * `SMTP_URL` set it is also sent through nodemailer; a refused send is recorded on the outbox row
 * and logged, and never fails the request that caused it (the answer must not reveal whether an
 * address exists or a mail server is up).
 */
import { randomUUID } from "node:crypto";
import nodemailer, { type Transporter } from "nodemailer";
import type { Logger } from "pino";
import type { Queryable } from "../../../db/sql.js";

/** One message: plain text only. */
export interface MailMessage {
  /** What it is for (`password_reset`, `invitation`, …); kept on the outbox row and logged. */
  kind: string;
  to: string;
  subject: string;
  text: string;
  /**
   * The body holds a credential (a password-reset or invitation token): once the SMTP server has accepted the
   * message, the outbox row drops its body, so the database does not keep a usable token. Without
   * SMTP, or when the send fails, the outbox row is the only copy and keeps it.
   */
  secret?: boolean;
}

/** What services need to send mail. */
export interface Mailer {
  /**
   * Records the message in the outbox and, when SMTP is configured, sends it. Resolves once it is
   * recorded and the send was attempted; never throws for a refused send.
   * @throws the database driver's error when the outbox row cannot be written.
   */
  send(message: MailMessage): Promise<void>;
}

export interface MailerOptions {
  /** `smtp://user:pass@host:port` or `smtps://…`; unset: outbox only. */
  smtpUrl?: string;
  /** The From header, e.g. `Switchyard <no-reply@switchyard.local>`. */
  from: string;
}

/** The outbox mailer, sending over SMTP too when `smtpUrl` is set. One per process. */
export class OutboxMailer implements Mailer {
  private readonly transport?: Transporter;

  constructor(
    private readonly db: Queryable,
    private readonly logger: Logger,
    private readonly opts: MailerOptions,
  ) {
    if (opts.smtpUrl) this.transport = nodemailer.createTransport(opts.smtpUrl);
  }

  async send(message: MailMessage): Promise<void> {
    const id = randomUUID();
    await this.db.query(
      `INSERT INTO mail_outbox (id, kind, to_address, subject, body_text) VALUES ($1, $2, $3, $4, $5)`,
      [id, message.kind, message.to, message.subject, message.text],
    );
    if (!this.transport) {
      this.logger.info({ mailId: id, kind: message.kind, to: message.to }, "mail written to the outbox (no SMTP_URL)");
      return;
    }
    try {
      await this.transport.sendMail({
        from: this.opts.from,
        to: message.to,
        subject: message.subject,
        text: message.text,
      });
      await this.db.query(
        message.secret
          ? `UPDATE mail_outbox SET sent_at = now(), body_text = '(not kept: it held a credential)' WHERE id = $1`
          : `UPDATE mail_outbox SET sent_at = now() WHERE id = $1`,
        [id],
      );
      this.logger.info({ mailId: id, kind: message.kind, to: message.to }, "mail sent");
    } catch (err) {
      const error = err instanceof Error ? err.message : String(err);
      await this.db.query(`UPDATE mail_outbox SET error = $2 WHERE id = $1`, [id, error.slice(0, 1000)]);
      this.logger.warn({ mailId: id, kind: message.kind, to: message.to, error }, "mail could not be sent");
    }
  }

  /** Closes the SMTP connection pool, if any. */
  close(): void {
    this.transport?.close();
  }
}
