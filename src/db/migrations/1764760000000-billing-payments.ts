/**
 * Billing payments (issue 10, items 4–6): the ledger kind `top_up` (spec spelling; the initial
 * migration said `topup`, which nothing ever wrote), top-up sessions keyed by a per-team nonce,
 * invoices keyed by their period, and the payment provider's customer of a team.
 *
 * - `topup_sessions`: one row per `(team_id, nonce)`, kept for good (the spec asks ≥ 24 h; the
 *   row is also the record of the payment). `external_session_id` is the provider's id (Stripe
 *   Checkout Session `cs_…`; the local provider uses the row id). Crediting writes one `top_up`
 *   ledger row whose `source_id` is the row id, so a session is credited at most once.
 * - `invoices`: one row per `(team_id, period_start, period_end)`: asking again for the same
 *   period answers the same invoice.
 * - `payment_customers`: the provider's customer of a team (Stripe `cus_…`), made on first use.
 */
import type { MigrationInterface, QueryRunner } from "typeorm";

export class BillingPayments1764760000000 implements MigrationInterface {
  name = "BillingPayments1764760000000";

  async up(q: QueryRunner): Promise<void> {
    await q.query(`ALTER TABLE credit_ledger DROP CONSTRAINT credit_ledger_type_check`);
    await q.query(
      `ALTER TABLE credit_ledger ADD CONSTRAINT credit_ledger_type_check
         CHECK (type IN ('grant', 'usage', 'top_up', 'adjustment', 'refund'))`,
    );
    await q.query(`
      CREATE TABLE topup_sessions (
        id uuid PRIMARY KEY,
        team_id uuid NOT NULL REFERENCES teams (id),
        nonce text NOT NULL,
        amount_micros bigint NOT NULL CHECK (amount_micros > 0),
        provider text NOT NULL,
        external_session_id text,
        checkout_url text,
        created_by uuid,
        created_at timestamptz NOT NULL DEFAULT now(),
        completed_at timestamptz,
        CONSTRAINT topup_sessions_nonce_key UNIQUE (team_id, nonce)
      )`);
    await q.query(
      `CREATE UNIQUE INDEX topup_sessions_external_idx ON topup_sessions (provider, external_session_id)
        WHERE external_session_id IS NOT NULL`,
    );
    await q.query(`
      CREATE TABLE invoices (
        id uuid PRIMARY KEY,
        team_id uuid NOT NULL REFERENCES teams (id),
        provider text NOT NULL,
        period_start timestamptz NOT NULL,
        period_end timestamptz NOT NULL CHECK (period_end > period_start),
        amount_micros bigint NOT NULL,
        amount_cents bigint NOT NULL,
        currency text NOT NULL DEFAULT 'usd',
        line_items jsonb NOT NULL,
        payment_invoice_id text,
        hosted_invoice_url text,
        status text NOT NULL,
        created_at timestamptz NOT NULL DEFAULT now(),
        CONSTRAINT invoices_period_key UNIQUE (team_id, period_start, period_end)
      )`);
    await q.query(`
      CREATE TABLE payment_customers (
        team_id uuid NOT NULL REFERENCES teams (id),
        provider text NOT NULL,
        customer_id text NOT NULL,
        created_at timestamptz NOT NULL DEFAULT now(),
        PRIMARY KEY (team_id, provider)
      )`);
  }

  async down(q: QueryRunner): Promise<void> {
    await q.query(`DROP TABLE payment_customers`);
    await q.query(`DROP TABLE invoices`);
    await q.query(`DROP TABLE topup_sessions`);
    await q.query(`ALTER TABLE credit_ledger DROP CONSTRAINT credit_ledger_type_check`);
    await q.query(
      `ALTER TABLE credit_ledger ADD CONSTRAINT credit_ledger_type_check
         CHECK (type IN ('grant', 'usage', 'topup', 'adjustment', 'refund'))`,
    );
  }
}
