/**
 * Credit-side ledger entries (issue 10, item 4; DESIGN §3 Money): `top_up`, `refund`,
 * `adjustment` (and `grant`). The ledger is append-only (a trigger refuses UPDATE and DELETE);
 * usage charges are written by the metering group commit (`MeteringService.write`), signup
 * grants by `AccountService.openAccount`.
 *
 * Rules, as the group commit keeps them for `usage`:
 * - Nothing applies twice: every entry has a source unique per kind (`UNIQUE (type, source_id)`),
 *   e.g. the top-up session id. Appending an entry whose source is already in the ledger changes
 *   nothing and answers the entry that is there (`applied: false`).
 * - One writer per team at a time: the team row is locked (`FOR NO KEY UPDATE`, the lock the
 *   group commit and the credit leases take), so `balance_after_micros` is the balance after this
 *   entry in commit order, and the balance on `teams` moves in the same transaction.
 * - Never below zero: a negative entry (a refund paid back to the customer, a downward
 *   adjustment) must be covered by the balance less the credit leased to in-flight requests
 *   (`CreditService`'s invariant `balance ≥ Σ leases`); otherwise 409 and nothing is written.
 * - Every process learns the new balance through the same NOTIFY the group commit sends
 *   (`balance:<team>=<micros>` on the cache bus), so a team that was out of credit is served again
 *   (the caller may also tell its own process at once: `BillingService` does after a top-up).
 */
import { v7 as uuidv7 } from "uuid";
import type { EntityManager } from "typeorm";
import type { LedgerEntryType } from "../../entities/ledger-entry.entity.js";
import { queryRows } from "../../db/sql.js";
import { AppError } from "../../shared/errors.js";
import { CACHE_CHANNEL } from "../platform/cache-bus.js";

/** One entry to append. Amounts are signed micro-USD (positive credits). */
export interface LedgerCreditInput {
  teamId: string;
  type: Exclude<LedgerEntryType, "usage">;
  amountMicros: bigint;
  /** Unique per `type`: the top-up session id, a refund's provider id, … */
  sourceId: string;
  description: string;
  externalProvider?: string | null;
  externalPaymentId?: string | null;
}

/** What the ledger holds for the source after the call. */
export interface LedgerCreditResult {
  /** The ledger entry's id (the existing one when the source was already applied). */
  entryId: string;
  balanceAfterMicros: bigint;
  /** False when the source was already in the ledger (nothing changed). */
  applied: boolean;
}

/**
 * Appends one entry and moves the team's balance, once per `(type, sourceId)`.
 * Must run inside a transaction (`em` from `DataSource.transaction`); the team row stays locked
 * until it commits.
 * @throws AppError 404 when the team does not exist; 409 when a negative amount is not covered by
 *   the credit not leased to in-flight requests.
 */
export async function appendLedgerCredit(em: EntityManager, input: LedgerCreditInput): Promise<LedgerCreditResult> {
  const locked = await queryRows<{ id: string }>(em, "SELECT id FROM teams WHERE id = $1 FOR NO KEY UPDATE", [
    input.teamId,
  ]);
  if (locked.length === 0) throw AppError.notFound("Team not found");
  // New statements from here: fresh snapshots that see every commit made before the lock.
  const existing = await queryRows<{ id: string; balance_after_micros: string }>(
    em,
    "SELECT id, balance_after_micros::text FROM credit_ledger WHERE type = $1 AND source_id = $2",
    [input.type, input.sourceId],
  );
  if (existing[0]) {
    return { entryId: existing[0].id, balanceAfterMicros: BigInt(existing[0].balance_after_micros), applied: false };
  }
  const [team] = await queryRows<{ balance: string; leased: string }>(
    em,
    `SELECT t.credit_balance_micros::text AS balance,
            (SELECT coalesce(sum(micros), 0) FROM credit_leases WHERE team_id = t.id AND expires_at > now())::text AS leased
       FROM teams t WHERE t.id = $1`,
    [input.teamId],
  );
  const balance = BigInt(team.balance);
  const after = balance + input.amountMicros;
  if (input.amountMicros < 0n && after < BigInt(team.leased)) {
    throw AppError.conflict(
      `This entry (${input.amountMicros} micro-USD) would take the balance (${balance} micro-USD, ` +
        `${team.leased} of it promised to requests in flight) below zero`,
    );
  }
  const entryId = uuidv7();
  await em.query(
    `INSERT INTO credit_ledger (id, team_id, type, amount_micros, balance_after_micros, source_id, description,
                                external_provider, external_payment_id)
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)`,
    [
      entryId,
      input.teamId,
      input.type,
      input.amountMicros.toString(),
      after.toString(),
      input.sourceId,
      input.description,
      input.externalProvider ?? null,
      input.externalPaymentId ?? null,
    ],
  );
  await em.query(
    `UPDATE teams SET credit_balance_micros = $2, updated_at = now() WHERE id = $1
     RETURNING pg_notify('${CACHE_CHANNEL}', 'balance:' || id || '=' || credit_balance_micros)`,
    [input.teamId, after.toString()],
  );
  return { entryId, balanceAfterMicros: after, applied: true };
}
