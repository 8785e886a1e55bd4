/**
 * Billing provider calls and reversals (issue 10 review, findings 1 and 2).
 *
 * - `topup_sessions.claimed_until`, `invoices.claimed_until`: a row is committed first (a top-up
 *   "opening", an invoice "draft") and the payment provider is called with no database
 *   connection held; the claim says a process is calling the provider for it until then. A row
 *   without its provider id whose claim is past (the caller died, or the call failed and let it
 *   go) is taken over by the next request for the same nonce or period.
 * - `topup_sessions.payment_id`: the provider's payment of a credited session (Stripe
 *   PaymentIntent `pi_…`), which refunds and disputes name.
 * - `payment_reversals`: money the provider took back from a paid top-up (a Stripe refund or
 *   dispute), once per provider source (`re_…`, `dp_…`): what was asked, what the ledger could
 *   debit (a `refund` entry whose source is the same id) and the shortfall the balance did not
 *   cover (kept here and logged; the ledger never goes below zero).
 */
import type { MigrationInterface, QueryRunner } from "typeorm";

export class BillingProviderCalls1764830000000 implements MigrationInterface {
  name = "BillingProviderCalls1764830000000";

  async up(q: QueryRunner): Promise<void> {
    await q.query(`ALTER TABLE topup_sessions ADD COLUMN claimed_until timestamptz`);
    await q.query(`ALTER TABLE invoices ADD COLUMN claimed_until timestamptz`);
    await q.query(`ALTER TABLE topup_sessions ADD COLUMN payment_id text`);
    // Sessions credited before this migration: their payment is on their `top_up` ledger entry.
    await q.query(
      `UPDATE topup_sessions s SET payment_id = l.external_payment_id
         FROM credit_ledger l
        WHERE l.type = 'top_up' AND l.source_id = s.id::text AND s.completed_at IS NOT NULL`,
    );
    await q.query(
      `CREATE INDEX topup_sessions_payment_idx ON topup_sessions (provider, payment_id) WHERE payment_id IS NOT NULL`,
    );
    await q.query(`
      CREATE TABLE payment_reversals (
        id uuid PRIMARY KEY,
        team_id uuid NOT NULL REFERENCES teams (id),
        provider text NOT NULL,
        kind text NOT NULL CHECK (kind IN ('refund', 'dispute', 'reinstated')),
        source_id text NOT NULL,
        payment_id text NOT NULL,
        amount_micros bigint NOT NULL CHECK (amount_micros >= 0),
        debited_micros bigint NOT NULL CHECK (debited_micros >= 0),
        shortfall_micros bigint NOT NULL CHECK (shortfall_micros >= 0),
        ledger_entry_id uuid,
        created_at timestamptz NOT NULL DEFAULT now(),
        CONSTRAINT payment_reversals_source_key UNIQUE (provider, source_id)
      )`);
    await q.query(`CREATE INDEX payment_reversals_payment_idx ON payment_reversals (provider, payment_id)`);
  }

  async down(q: QueryRunner): Promise<void> {
    await q.query(`DROP TABLE payment_reversals`);
    await q.query(`ALTER TABLE topup_sessions DROP COLUMN payment_id`);
    await q.query(`ALTER TABLE invoices DROP COLUMN claimed_until`);
    await q.query(`ALTER TABLE topup_sessions DROP COLUMN claimed_until`);
  }
}
