/**
 * API key policy (issue 29, item 1; `services/accounts/api-key.service.ts` sets it,
 * `services/metering/key-limits.service.ts` and `services/ledger/key-budget.service.ts` enforce it):
 * - on `api_keys`, the limits an owner gives a key: `budget_micros` per `budget_period`
 *   (`day`, `week`, `month` in UTC, or `total`), `rpm_limit`, `tpm_limit` and `allowed_models`
 *   (null: every model), beside the `expires_at` it already had;
 * - `api_key_spend`: what a key with a budget has spent in its current window (one row per such
 *   key; the metering group commit adds every charge of the key to it, in the statement that
 *   writes the charge to the ledger);
 * - `api_key_leases`: the part of a key's remaining budget each API process has set aside for its
 *   requests in flight (the team-credit lease protocol of `credit_leases`, per key);
 * - `api_key_rate_windows`: each limited key's requests and tokens in the current minute,
 *   counted in the database so every process shares one count;
 * - `api_key_budget_window(period, at)` / `api_key_budget_reset(period, at)`: where the window of
 *   `period` holding `at` starts and ends (UTC; `-infinity` / `infinity` for `total`).
 */
import type { MigrationInterface, QueryRunner } from "typeorm";

/** Adds the policy columns, the three tables and the two window functions (`down` drops them). */
export class ApiKeyPolicy1764905000000 implements MigrationInterface {
  name = "ApiKeyPolicy1764905000000";

  async up(q: QueryRunner): Promise<void> {
    await q.query(`
      ALTER TABLE api_keys
        ADD COLUMN budget_micros bigint CHECK (budget_micros >= 0),
        ADD COLUMN budget_period text CHECK (budget_period IN ('day', 'week', 'month', 'total')),
        ADD COLUMN rpm_limit integer CHECK (rpm_limit > 0),
        ADD COLUMN tpm_limit integer CHECK (tpm_limit > 0),
        ADD COLUMN allowed_models text[],
        ADD CONSTRAINT api_keys_budget_has_period CHECK ((budget_micros IS NULL) = (budget_period IS NULL))`);
    await q.query(`
      CREATE FUNCTION api_key_budget_window(period text, at timestamptz) RETURNS timestamptz
        LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
          SELECT CASE period
                   WHEN 'day' THEN date_trunc('day', at AT TIME ZONE 'UTC') AT TIME ZONE 'UTC'
                   WHEN 'week' THEN date_trunc('week', at AT TIME ZONE 'UTC') AT TIME ZONE 'UTC'
                   WHEN 'month' THEN date_trunc('month', at AT TIME ZONE 'UTC') AT TIME ZONE 'UTC'
                   ELSE '-infinity'::timestamptz
                 END
        $$`);
    await q.query(`
      CREATE FUNCTION api_key_budget_reset(period text, at timestamptz) RETURNS timestamptz
        LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
          SELECT CASE period
                   WHEN 'day' THEN (date_trunc('day', at AT TIME ZONE 'UTC') + interval '1 day') AT TIME ZONE 'UTC'
                   WHEN 'week' THEN (date_trunc('week', at AT TIME ZONE 'UTC') + interval '7 days') AT TIME ZONE 'UTC'
                   WHEN 'month' THEN (date_trunc('month', at AT TIME ZONE 'UTC') + interval '1 month') AT TIME ZONE 'UTC'
                   ELSE 'infinity'::timestamptz
                 END
        $$`);
    await q.query(`
      CREATE TABLE api_key_spend (
        key_id uuid PRIMARY KEY REFERENCES api_keys (id) ON DELETE CASCADE,
        window_start timestamptz NOT NULL,
        spent_micros bigint NOT NULL DEFAULT 0 CHECK (spent_micros >= 0)
      )`);
    await q.query(`
      CREATE TABLE api_key_leases (
        key_id uuid NOT NULL REFERENCES api_keys (id) ON DELETE CASCADE,
        holder uuid NOT NULL,
        micros bigint NOT NULL CHECK (micros >= 0),
        expires_at timestamptz NOT NULL,
        updated_at timestamptz NOT NULL DEFAULT now(),
        PRIMARY KEY (key_id, holder)
      )`);
    await q.query(`CREATE INDEX api_key_leases_holder_idx ON api_key_leases (holder)`);
    await q.query(`
      CREATE TABLE api_key_rate_windows (
        key_id uuid PRIMARY KEY REFERENCES api_keys (id) ON DELETE CASCADE,
        minute_start timestamptz NOT NULL,
        minute_requests integer NOT NULL,
        minute_tokens bigint NOT NULL DEFAULT 0
      )`);
  }

  async down(q: QueryRunner): Promise<void> {
    await q.query(`DROP TABLE api_key_rate_windows`);
    await q.query(`DROP TABLE api_key_leases`);
    await q.query(`DROP TABLE api_key_spend`);
    await q.query(`DROP FUNCTION api_key_budget_reset(text, timestamptz)`);
    await q.query(`DROP FUNCTION api_key_budget_window(text, timestamptz)`);
    await q.query(`
      ALTER TABLE api_keys
        DROP CONSTRAINT api_keys_budget_has_period,
        DROP COLUMN budget_micros,
        DROP COLUMN budget_period,
        DROP COLUMN rpm_limit,
        DROP COLUMN tpm_limit,
        DROP COLUMN allowed_models`);
  }
}
