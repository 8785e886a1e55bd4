/**
 * Password reset (issue 8, item 1; DESIGN §3 Account schemas: ForgotPasswordRequest,
 * ResetPasswordRequest). `forgotPassword` mails a single-use token valid 30 minutes to a known
 * address and answers the same for every address; `resetPassword` spends the token, sets the new
 * password (argon2id) and voids every access token issued before it.
 *
 * Tokens are 256 random bits (base64url); only their SHA-256 is stored (`password_reset_tokens`),
 * and the mail's outbox row drops its body once SMTP has taken it (without SMTP the outbox is the
 * mailbox, so there it stays until read).
 * Expired, spent and unknown tokens all answer the same 400 naming `token`.
 *
 * What a reset revokes: the user's access tokens (`users.tokens_valid_after`, checked by
 * `CredentialService`, whose caches in every process drop the user on the `user` NOTIFY sent in
 * the reset's transaction). API keys survive: DESIGN §3 names only access tokens, and keys are
 * the team's long-lived credentials for programs (revoking them would stop the team's services
 * because one person forgot a password); a user who fears a key leaked revokes it.
 */
import { createHash, randomBytes, randomUUID } from "node:crypto";
import type { Logger } from "pino";
import type { DataSource } from "typeorm";
import { z } from "zod";
import { queryRows } from "../../db/sql.js";
import { AppError, parseInput } from "../../shared/errors.js";
import { emailField, passwordField } from "./account.service.js";
import type { CacheBus } from "../platform/cache-bus.js";
import type { RequestContext } from "../platform/context.js";
import type { Mailer } from "../platform/mail/mailer.js";
import { hashPassword } from "./passwords.js";
import type { AuthThrottle } from "../platform/auth-throttle.js";
import { pgText } from "../platform/validation.js";

/** ForgotPasswordResponse / ResetPasswordResponse: `{message}`. */
export interface MessageDto {
  message: string;
}

/** DESIGN §3: the same answer for known and unknown emails. */
export const FORGOT_PASSWORD_MESSAGE = "If that email exists, a reset link was sent.";
export const RESET_PASSWORD_MESSAGE = "Password has been reset.";
/** The `kind` of the mail (kept on the `mail_outbox` row). */
export const PASSWORD_RESET_MAIL_KIND = "password_reset";
/** How long a mailed token works (DESIGN §3: 30 min). */
export const RESET_TOKEN_TTL_MINUTES = 30;

export const forgotPasswordInput = z.object({ email: emailField });
export type ForgotPasswordInput = z.input<typeof forgotPasswordInput>;

export const resetPasswordInput = z.object({
  token: pgText().min(1).max(512),
  password: passwordField,
});
export type ResetPasswordInput = z.input<typeof resetPasswordInput>;

export interface PasswordResetOptions {
  /** The page the mailed link opens; `?token=…` is added (config `passwordResetUrl`). */
  resetUrl: string;
}

/** SHA-256 of a reset token: the only form in which it is stored. */
function tokenHash(token: string): Buffer {
  return createHash("sha256").update(token).digest();
}

function invalidToken(): AppError {
  return AppError.invalid("Invalid or expired reset token", [
    { field: "token", message: "is invalid, expired or already used" },
  ]);
}

/** Forgot-password mail and the reset itself (DESIGN §3 Account schemas). */
export class PasswordResetService {
  /** Mail being prepared and sent after the answer went out (awaited by `drain`). */
  private readonly pending = new Set<Promise<void>>();

  constructor(
    private readonly ds: DataSource,
    private readonly mailer: Mailer,
    private readonly throttle: AuthThrottle,
    private readonly bus: CacheBus,
    private readonly logger: Logger,
    private readonly opts: PasswordResetOptions,
  ) {}

  /**
   * Mails a reset token when `email` belongs to an active user. The answer is the same for every
   * address, and so is its timing: the token and the mail are made after the answer, off the
   * request's path (a crash in between loses that mail; the user asks again).
   * @throws AppError 400 invalid input; 429 when the address or the client asked too often
   *   (counted before the lookup, for known and unknown emails alike).
   */
  async forgotPassword(ctx: RequestContext, raw: unknown): Promise<MessageDto> {
    const input = parseInput(forgotPasswordInput, raw);
    await this.throttle.forgotPassword(ctx, input.email);
    const [user] = await queryRows<{ id: string; email: string }>(
      this.ds,
      `SELECT id, email FROM users WHERE lower(email) = $1 AND is_active`,
      [input.email],
    );
    if (user) this.inBackground(this.mailToken(user));
    return { message: FORGOT_PASSWORD_MESSAGE };
  }

  /**
   * Spends `token`, sets `password` (argon2id) and voids the user's access tokens issued before
   * now, in one transaction; the user's other open reset tokens are spent too. API keys stay.
   * @throws AppError 400 for invalid input, and for a token that is unknown, expired or already
   *   used (`extra` names `token`; nothing changes).
   */
  async resetPassword(_ctx: RequestContext, raw: unknown): Promise<MessageDto> {
    const input = parseInput(resetPasswordInput, raw);
    const hash = tokenHash(input.token);
    // Refuse a bad token before spending argon2 time on its password.
    const open = await queryRows<{ user_id: string }>(
      this.ds,
      `SELECT user_id FROM password_reset_tokens WHERE token_hash = $1 AND used_at IS NULL AND expires_at > now()`,
      [hash],
    );
    if (open.length === 0) throw invalidToken();
    const passwordHash = await hashPassword(input.password);
    const userId = await this.ds.transaction(async (em) => {
      // The row lock makes a parallel reset with the same token wait here, then find it used.
      const [spent] = await queryRows<{ user_id: string }>(
        em,
        `UPDATE password_reset_tokens SET used_at = now()
          WHERE token_hash = $1 AND used_at IS NULL AND expires_at > now()
        RETURNING user_id`,
        [hash],
      );
      if (!spent) throw invalidToken();
      // Access tokens carry their issue time in milliseconds; the process clock issues them, so
      // it sets the cut-off too. (A login with the old password racing this very transaction,
      // between this statement and the commit, could still get a token: a millisecond window.)
      const [user] = await queryRows<{ id: string }>(
        em,
        `UPDATE users SET password_hash = $2, tokens_valid_after = greatest(tokens_valid_after, $3), updated_at = now()
          WHERE id = $1 AND is_active RETURNING id`,
        [spent.user_id, passwordHash, new Date()],
      );
      if (!user) throw invalidToken();
      await em.query(`UPDATE password_reset_tokens SET used_at = now() WHERE user_id = $1 AND used_at IS NULL`, [
        user.id,
      ]);
      // Every process drops its cached copy of the user (and of the user's keys) at commit.
      await this.bus.publish("user", user.id, em);
      return user.id;
    });
    this.bus.deliverLocally("user", userId);
    return { message: RESET_PASSWORD_MESSAGE };
  }

  /** Resolves when the mail started by earlier requests has been written (and sent). */
  async drain(): Promise<void> {
    await Promise.allSettled([...this.pending]);
  }

  /** Stores a new token's hash and mails the token. */
  private async mailToken(user: { id: string; email: string }): Promise<void> {
    const token = randomBytes(32).toString("base64url");
    await this.ds.query(
      `INSERT INTO password_reset_tokens (id, user_id, token_hash, expires_at)
       VALUES ($1, $2, $3, now() + make_interval(mins => $4))`,
      [randomUUID(), user.id, tokenHash(token), RESET_TOKEN_TTL_MINUTES],
    );
    const link = new URL(this.opts.resetUrl);
    link.searchParams.set("token", token);
    await this.mailer.send({
      kind: PASSWORD_RESET_MAIL_KIND,
      to: user.email,
      subject: "Reset your Switchyard password",
      secret: true,
      text: [
        `Someone (hopefully you) asked to reset the password of the Switchyard account ${user.email}.`,
        "",
        `To choose a new password, open this link within ${RESET_TOKEN_TTL_MINUTES} minutes:`,
        link.toString(),
        "",
        "Or send this token with your new password to POST /control/v1/auth/reset-password",
        `({"token": "…", "password": "…"}):`,
        token,
        "",
        "The token works once. Resetting the password signs you out everywhere; API keys keep working.",
        "If you did not ask for this, ignore this message: your password stays as it is.",
      ].join("\n"),
    });
  }

  private inBackground(work: Promise<void>): void {
    const tracked: Promise<void> = work
      .catch((err: unknown) => this.logger.error({ err }, "password reset mail could not be prepared"))
      .finally(() => this.pending.delete(tracked));
    this.pending.add(tracked);
  }
}
