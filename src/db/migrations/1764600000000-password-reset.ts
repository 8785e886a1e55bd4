/**
 * Password reset and sign-in throttling (issue 8, items 1 and 5).
 *
 * `password_reset_tokens`: one row per mailed reset token; only the SHA-256 of the token is kept
 * (the token itself is 256 random bits, so a fast hash is enough: it cannot be guessed offline).
 * `used_at` is set by the reset that spends it (and on the user's other open tokens then).
 *
 * `auth_throttle`: fixed-window attempt counters shared by every process (login failures and
 * forgot-password requests, per client address and per account). UNLOGGED: counters need no crash
 * safety or replication — after a crash PostgreSQL empties the table, which only forgives the
 * attempts of the current minute — and skipping the WAL keeps the write on every login cheap.
 */
import type { MigrationInterface, QueryRunner } from "typeorm";

/** Creates `password_reset_tokens` and `auth_throttle` (`down` drops both). */
export class PasswordReset1764600000000 implements MigrationInterface {
  name = "PasswordReset1764600000000";

  async up(q: QueryRunner): Promise<void> {
    await q.query(`
      CREATE TABLE password_reset_tokens (
        id uuid PRIMARY KEY,
        user_id uuid NOT NULL REFERENCES users (id) ON DELETE CASCADE,
        -- SHA-256 of the token as mailed.
        token_hash bytea NOT NULL UNIQUE,
        created_at timestamptz NOT NULL DEFAULT now(),
        expires_at timestamptz NOT NULL,
        used_at timestamptz
      )`);
    await q.query(`CREATE INDEX password_reset_tokens_user_idx ON password_reset_tokens (user_id)`);
    await q.query(`
      CREATE UNLOGGED TABLE auth_throttle (
        -- SHA-256 of "<rule>:<key>" (no addresses or emails stored in the clear).
        bucket bytea PRIMARY KEY,
        window_start timestamptz NOT NULL,
        hits integer NOT NULL
      )`);
    await q.query(`CREATE INDEX auth_throttle_window_idx ON auth_throttle (window_start)`);
  }

  async down(q: QueryRunner): Promise<void> {
    await q.query(`DROP TABLE auth_throttle`);
    await q.query(`DROP TABLE password_reset_tokens`);
  }
}
