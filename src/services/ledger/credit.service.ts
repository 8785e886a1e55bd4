/**
 * Credit reservations: nothing is ever served unpaid (DESIGN §3 Money; issue 5, item 2).
 *
 * A create operation may start engine work only when its worst-case cost — the prompt at the
 * input price plus `max_tokens` (or, without one, the rest of the context) at the output price,
 * in micro-USD — is covered by the team's credit not already promised to other in-flight
 * requests, in every API process on the database. It then settles at its real cost (≤ the worst
 * case) and releases the rest.
 *
 * The protocol is the lease protocol of `lease-pool.ts` with a team's balance as the account:
 * leases live in `credit_leases` (one row per team and process), the invariant is
 *
 *     teams.credit_balance_micros ≥ Σ micros of the team's unexpired leases
 *
 * an acquire locks the team row (`FOR NO KEY UPDATE`, the lock the metering flush and the
 * ledger's other writers take), a short process asks the others to give back what they have not
 * promised over NOTIFY `credit-shrink:<team>`, and a refusal is 402 with the credit available to
 * the process (`extra.available_micros`: the balance less every other lease and less its own
 * promises). The metering group commit debits a request's real cost from the balance and from
 * the charging process's lease in the same statement; it caps a charge at the balance, so the
 * balance never goes below zero.
 */
import type { Logger } from "pino";
import type { DataSource } from "typeorm";
import { AppError, ErrorCode } from "../../shared/errors.js";
import type { CacheBus } from "../platform/cache-bus.js";
import { type CreditLeaseOptions, type LeaseKind, LeasePool } from "./lease-pool.js";

export type { CreditLeaseOptions, CreditReservation } from "./lease-pool.js";
export { jointReservation } from "./lease-pool.js";

/** A team's credit as a lease account. */
const TEAM_CREDIT: LeaseKind = {
  table: "credit_leases",
  column: "team_id",
  shrinkTopic: "credit-shrink",
  lockSql: "SELECT 1 FROM teams WHERE id = $1 FOR NO KEY UPDATE",
  freeSql: `SELECT t.id, GREATEST(0, t.credit_balance_micros - held.micros) AS micros, held.micros AS held,
                   NULL::jsonb AS info
              FROM teams t, held WHERE t.id = $1`,
  missing: "refused",
  refusal: (_teamId, worstMicros, available) =>
    new AppError(
      ErrorCode.InsufficientCredit,
      `Insufficient credit: this request may cost up to ${worstMicros} micro-USD (the prompt at the input ` +
        `price plus max_tokens, or the rest of the context, at the output price) and ${available} micro-USD ` +
        `is available; a smaller max_tokens may fit, or add credit`,
      { required_micros: Number(worstMicros), available_micros: Number(available) },
    ),
};

/** The per-process side of the credit lease protocol for teams (see the module header). */
export class CreditService extends LeasePool {
  constructor(ds: DataSource, bus: CacheBus, logger: Logger, opts: Partial<CreditLeaseOptions> = {}) {
    super(ds, bus, logger, TEAM_CREDIT, opts);
  }

  /**
   * Reserves `worstMicros` of the team's credit for one request.
   * @throws AppError 402 (`extra`: `required_micros`, `available_micros`) when the credit not
   *   promised to other in-flight requests, in every process, does not cover it; the database's
   *   error when the lease cannot be read.
   */
  override reserve(teamId: string, worstMicros: bigint) {
    return super.reserve(teamId, worstMicros);
  }
}
