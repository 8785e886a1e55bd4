/**
 * Collecting reversal shortfalls (issue 10 review): a Stripe refund or dispute whose debit the
 * balance could not cover keeps the rest as `shortfall_micros`; `collected_micros` is how much of
 * it later top-ups have paid back (`services/billing/stripe-reversals.ts`, `collectShortfalls`).
 * A partial index finds the reversals still owed.
 */
import type { MigrationInterface, QueryRunner } from "typeorm";

/** Adds `collected_micros` (≤ `shortfall_micros`) and the index of reversals still owed. */
export class ShortfallCollection1764840000001 implements MigrationInterface {
  name = "ShortfallCollection1764840000001";

  async up(q: QueryRunner): Promise<void> {
    await q.query(`ALTER TABLE payment_reversals ADD COLUMN collected_micros bigint NOT NULL DEFAULT 0`);
    await q.query(
      `ALTER TABLE payment_reversals ADD CONSTRAINT payment_reversals_collected_check
         CHECK (collected_micros >= 0 AND collected_micros <= shortfall_micros)`,
    );
    await q.query(
      `CREATE INDEX payment_reversals_owed_idx ON payment_reversals (team_id, created_at)
        WHERE shortfall_micros > collected_micros`,
    );
  }

  async down(q: QueryRunner): Promise<void> {
    await q.query(`DROP INDEX payment_reversals_owed_idx`);
    await q.query(`ALTER TABLE payment_reversals DROP CONSTRAINT payment_reversals_collected_check`);
    await q.query(`ALTER TABLE payment_reversals DROP COLUMN collected_micros`);
  }
}
