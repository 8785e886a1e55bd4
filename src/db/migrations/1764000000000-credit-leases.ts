/**
 * Credit leases (issue 5, item 2): the slice of a team's balance each API process has reserved
 * for its in-flight requests. See `services/ledger/credit.service.ts` for the protocol.
 */
import type { MigrationInterface, QueryRunner } from "typeorm";

/** Creates `credit_leases` (`down` drops it). */
export class CreditLeases1764000000000 implements MigrationInterface {
  name = "CreditLeases1764000000000";

  async up(q: QueryRunner): Promise<void> {
    await q.query(`
      CREATE TABLE credit_leases (
        team_id uuid NOT NULL REFERENCES teams (id),
        holder uuid NOT NULL,
        micros bigint NOT NULL CHECK (micros >= 0),
        expires_at timestamptz NOT NULL,
        updated_at timestamptz NOT NULL DEFAULT now(),
        PRIMARY KEY (team_id, holder)
      )`);
    await q.query(`CREATE INDEX credit_leases_holder_idx ON credit_leases (holder)`);
  }

  async down(q: QueryRunner): Promise<void> {
    await q.query(`DROP TABLE credit_leases`);
  }
}
