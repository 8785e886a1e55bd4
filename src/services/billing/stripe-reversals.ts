/**
 * Stripe refunds and disputes against the ledger (issue 10 review, finding 2; DESIGN §3 Money),
 * called by `BillingService.stripeWebhook` with verified events.
 *
 * - The top-up is found by its payment (`topup_sessions.payment_id`, the PaymentIntent), credited
 *   and in USD; a charge whose metadata names another team is refused. Not ours, another
 *   currency, another team: nothing is applied, and a mismatch is logged as an error.
 * - Each reversal applies once per provider source (`payment_reversals` `UNIQUE (provider,
 *   source_id)`): a refund id or `<charge>:refunded:<cents>`, a dispute id. Refunds are
 *   cumulative (`amount_refunded`), so late or repeated deliveries apply only what is new.
 *   Reversals of a payment never exceed its top-up.
 * - The debit is a negative `refund` ledger entry (source the same id) under the team row lock,
 *   never below the credit leased to requests in flight: the rest is a shortfall, kept in
 *   `payment_reversals` and logged (warn). A won dispute (`funds_reinstated`) credits back what it
 *   debited as an `adjustment` (source `<dispute>:reinstated`), with what later top-ups collected of
 *   its shortfall; the rest of its shortfall is no longer owed.
 * - A shortfall is owed until collected: the next top-up credited to the team pays it back first
 *   (`collectShortfalls`, in the top-up's transaction: one negative `refund` entry, source
 *   `collect:<top-up id>`, as far as the balance less leased credit covers it; oldest first).
 * - A refund that arrives before the top-up it reverses is credited (Stripe does not order its
 *   events) is answered 409, so Stripe delivers it again later, when the top-up is there.
 */
import type { Logger } from "pino";
import { v7 as uuidv7 } from "uuid";
import type { DataSource, EntityManager } from "typeorm";
import { queryRows } from "../../db/sql.js";
import { AppError } from "../../shared/errors.js";
import type { CacheBus } from "../platform/cache-bus.js";
import { type LedgerCreditResult, appendLedgerCredit } from "../ledger/ledger.js";

const MICROS_PER_CENT = 10_000n;
const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

/** The fields of a Stripe Charge (`charge.refunded`) the webhook reads. */
export interface StripeChargeObject {
  id: string;
  amount_refunded?: number;
  currency?: string;
  metadata?: Record<string, string> | null;
  payment_intent?: string | { id?: string } | null;
  refunds?: { data?: Array<{ id: string }> } | null;
}

/** The fields of a Stripe Dispute the webhook reads. */
export interface StripeDisputeObject {
  id: string;
  amount?: number;
  currency?: string;
  payment_intent?: string | { id?: string } | null;
}

/** A credited Stripe top-up, as refunds and disputes find it. */
interface PaidTopUp {
  topUpId: string;
  teamId: string;
  /** Stripe PaymentIntent id. */
  paymentId: string;
  amountMicros: bigint;
}

const minBig = (a: bigint, b: bigint) => (a < b ? a : b);
const maxBig = (a: bigint, b: bigint) => (a > b ? a : b);

/** Locks the team row (the ledger writers' lock) and reads its balance and the credit leased out. */
async function lockedBalance(em: EntityManager, teamId: string): Promise<{ balance: bigint; leased: bigint }> {
  const locked = await queryRows<{ balance: string }>(
    em,
    "SELECT credit_balance_micros::text AS balance FROM teams WHERE id = $1 FOR NO KEY UPDATE",
    [teamId],
  );
  if (locked.length === 0) throw AppError.notFound("Team not found");
  const [leases] = await queryRows<{ leased: string }>(
    em,
    "SELECT coalesce(sum(micros), 0)::text AS leased FROM credit_leases WHERE team_id = $1 AND expires_at > now()",
    [teamId],
  );
  return { balance: BigInt(locked[0].balance), leased: BigInt(leases.leased) };
}

/** Refunds and disputes of Stripe payments (see the module header). */
export class StripeReversals {
  constructor(
    private readonly ds: DataSource,
    /** Tells this process's caches the new balance at once (others hear the ledger's NOTIFY). */
    private readonly bus: CacheBus,
    private readonly logger: Logger,
  ) {}

  /**
   * `charge.refunded`: debits what was newly refunded (`amount_refunded` less what is already
   * debited for the payment), source the newest refund id (else `<charge>:refunded:<cents>`).
   */
  async refunded(charge: StripeChargeObject): Promise<void> {
    const topUp = await this.stripeTopUp(
      charge.payment_intent,
      charge.currency,
      charge.metadata,
      `charge ${charge.id}`,
    );
    if (!topUp) return;
    const refunded = BigInt(Math.max(0, Math.trunc(Number(charge.amount_refunded) || 0))) * MICROS_PER_CENT;
    const newest = charge.refunds?.data?.[0]?.id;
    await this.reverse(topUp, {
      kind: "refund",
      sourceId: newest ?? `${charge.id}:refunded:${refunded / MICROS_PER_CENT}`,
      // Cumulative: what this payment's refunds total now, less what is already debited for them.
      total: refunded,
      description: `Refund of Stripe payment ${topUp.paymentId}`,
    });
  }

  /**
   * `charge.dispute.created` (`opened`): debits the disputed amount, source the dispute id;
   * `charge.dispute.funds_reinstated`: credits back what that debited.
   */
  async disputed(dispute: StripeDisputeObject, opened: boolean): Promise<void> {
    const topUp = await this.stripeTopUp(dispute.payment_intent, dispute.currency, undefined, `dispute ${dispute.id}`);
    if (!topUp) return;
    if (opened) {
      const amount = BigInt(Math.max(0, Math.trunc(Number(dispute.amount) || 0))) * MICROS_PER_CENT;
      await this.reverse(topUp, {
        kind: "dispute",
        sourceId: dispute.id,
        amount,
        description: `Dispute of Stripe payment ${topUp.paymentId}`,
      });
    } else {
      await this.reinstate(topUp, dispute.id);
    }
  }

  /**
   * The credited top-up a Stripe payment (PaymentIntent id) paid for, or undefined (logged) when
   * it is not ours, not in USD, or its metadata names another team.
   */
  private async stripeTopUp(
    intent: string | { id?: string } | null | undefined,
    currency: unknown,
    metadata: Record<string, string> | null | undefined,
    what: string,
  ): Promise<PaidTopUp | undefined> {
    const paymentId = typeof intent === "string" ? intent : intent?.id;
    if (!paymentId) return undefined;
    const [row] = await queryRows<{ id: string; team_id: string; amount_micros: string }>(
      this.ds,
      `SELECT id, team_id, amount_micros::text FROM topup_sessions
        WHERE provider = 'stripe' AND payment_id = $1 AND completed_at IS NOT NULL`,
      [paymentId],
    );
    if (!row) {
      // A top-up of ours whose completion Stripe has not delivered yet: refuse for now (non-2xx),
      // so Stripe retries this event once the top-up is credited (its retries span days).
      const topUpId = metadata?.switchyard_topup_id;
      if (topUpId && UUID.test(topUpId)) {
        const pending = await queryRows(
          this.ds,
          `SELECT 1 FROM topup_sessions WHERE id = $1 AND provider = 'stripe' AND completed_at IS NULL`,
          [topUpId],
        );
        if (pending.length > 0) {
          throw AppError.conflict(`The top-up ${what} reverses is not credited yet; deliver this event again later`);
        }
      }
      // A payment this service did not credit (another integration on the account): nothing to do.
      return undefined;
    }
    const problems: string[] = [];
    if (currency !== "usd") problems.push(`currency ${String(currency)}, expected usd`);
    if (metadata?.switchyard_team_id !== undefined && metadata.switchyard_team_id !== row.team_id) {
      problems.push("metadata names another team");
    }
    if (problems.length > 0) {
      this.logger.error(
        { stripe: what, paymentId, topUpId: row.id, teamId: row.team_id, problems },
        "Stripe: a reversal does not match its top-up; not applied",
      );
      return undefined;
    }
    return { topUpId: row.id, teamId: row.team_id, paymentId, amountMicros: BigInt(row.amount_micros) };
  }

  /**
   * Debits a refund or dispute once per source, under the team row lock: never more than the
   * top-up was, never below the credit leased to requests in flight; the rest is a shortfall
   * (kept in `payment_reversals`, logged).
   */
  private async reverse(
    topUp: PaidTopUp,
    r: { kind: "refund" | "dispute"; sourceId: string; total?: bigint; amount?: bigint; description: string },
  ): Promise<void> {
    const done = await this.ds.transaction(async (em) => {
      const team = await lockedBalance(em, topUp.teamId);
      const seen = await queryRows(em, "SELECT 1 FROM payment_reversals WHERE provider = 'stripe' AND source_id = $1", [
        r.sourceId,
      ]);
      if (seen.length > 0) return undefined;
      const [prior] = await queryRows<{ micros: string }>(
        em,
        `SELECT coalesce(sum(amount_micros), 0)::text AS micros FROM payment_reversals
          WHERE provider = 'stripe' AND payment_id = $1 AND kind = $2`,
        [topUp.paymentId, r.kind],
      );
      const already = BigInt(prior.micros);
      const cap = topUp.amountMicros - already;
      const wanted = r.total !== undefined ? minBig(r.total, topUp.amountMicros) - already : (r.amount ?? 0n);
      const amount = minBig(wanted, cap);
      if (amount <= 0n) return undefined;
      const available = maxBig(0n, team.balance - team.leased);
      const debit = minBig(amount, available);
      const shortfall = amount - debit;
      let entry: LedgerCreditResult | undefined;
      if (debit > 0n) {
        entry = await appendLedgerCredit(em, {
          teamId: topUp.teamId,
          type: "refund",
          amountMicros: -debit,
          sourceId: r.sourceId,
          description: shortfall > 0n ? `${r.description} (${shortfall} micro-USD not covered)` : r.description,
          externalProvider: "stripe",
          externalPaymentId: topUp.paymentId,
        });
      }
      await em.query(
        `INSERT INTO payment_reversals (id, team_id, provider, kind, source_id, payment_id, amount_micros,
                                        debited_micros, shortfall_micros, ledger_entry_id)
         VALUES ($1, $2, 'stripe', $3, $4, $5, $6, $7, $8, $9)`,
        [
          uuidv7(),
          topUp.teamId,
          r.kind,
          r.sourceId,
          topUp.paymentId,
          amount.toString(),
          debit.toString(),
          shortfall.toString(),
          entry?.entryId ?? null,
        ],
      );
      return { amount, debit, shortfall, after: entry?.balanceAfterMicros };
    });
    if (!done) return;
    if (done.after !== undefined) this.bus.deliverLocally("balance", `${topUp.teamId}=${done.after}`);
    if (done.shortfall > 0n) {
      this.logger.warn(
        {
          teamId: topUp.teamId,
          topUpId: topUp.topUpId,
          paymentId: topUp.paymentId,
          source: r.sourceId,
          kind: r.kind,
          amountMicros: done.amount.toString(),
          debitedMicros: done.debit.toString(),
          shortfallMicros: done.shortfall.toString(),
        },
        `Stripe ${r.kind}: the team's balance did not cover it; the shortfall is recorded in payment_reversals`,
      );
    }
  }

  /** A dispute won: credits back what its `dispute` reversal debited, once (an `adjustment`). */
  private async reinstate(topUp: PaidTopUp, disputeId: string): Promise<void> {
    const after = await this.ds.transaction(async (em) => {
      await lockedBalance(em, topUp.teamId);
      // What the dispute took: its debit and what top-ups have collected of its shortfall since.
      const [debited] = await queryRows<{ debited: string }>(
        em,
        `SELECT (debited_micros + collected_micros)::text AS debited FROM payment_reversals
          WHERE provider = 'stripe' AND source_id = $1 AND kind = 'dispute' AND team_id = $2`,
        [disputeId, topUp.teamId],
      );
      const sourceId = `${disputeId}:reinstated`;
      const seen = await queryRows(em, "SELECT 1 FROM payment_reversals WHERE provider = 'stripe' AND source_id = $1", [
        sourceId,
      ]);
      if (!debited || seen.length > 0) return undefined;
      const amount = BigInt(debited.debited);
      const entry =
        amount > 0n
          ? await appendLedgerCredit(em, {
              teamId: topUp.teamId,
              type: "adjustment",
              amountMicros: amount,
              sourceId,
              description: `Dispute won: Stripe payment ${topUp.paymentId}`,
              externalProvider: "stripe",
              externalPaymentId: topUp.paymentId,
            })
          : undefined;
      await em.query(
        `INSERT INTO payment_reversals (id, team_id, provider, kind, source_id, payment_id, amount_micros,
                                        debited_micros, shortfall_micros, ledger_entry_id)
         VALUES ($1, $2, 'stripe', 'reinstated', $3, $4, $5, 0, 0, $6)`,
        [uuidv7(), topUp.teamId, sourceId, topUp.paymentId, amount.toString(), entry?.entryId ?? null],
      );
      return entry?.balanceAfterMicros;
    });
    if (after !== undefined) this.bus.deliverLocally("balance", `${topUp.teamId}=${after}`);
  }
}

/**
 * Pays back, from credit just added to the team (a top-up), the shortfalls of earlier reversals:
 * what Stripe took back that the balance could not cover then (module header). Oldest first, as
 * far as the balance less the credit leased to requests in flight covers; a dispute since won is
 * no longer owed. Must run in the transaction that added the credit (the team row locked).
 * @param creditSourceId the top-up session id: the collection's ledger source is
 *   `collect:<creditSourceId>`, so it applies once.
 * @returns the collection's ledger entry, or undefined when nothing was owed or could be taken.
 */
export async function collectShortfalls(
  em: EntityManager,
  teamId: string,
  creditSourceId: string,
): Promise<LedgerCreditResult | undefined> {
  const owed = await queryRows<{ id: string; owed: string }>(
    em,
    `SELECT p.id, (p.shortfall_micros - p.collected_micros)::text AS owed FROM payment_reversals p
      WHERE p.team_id = $1 AND p.shortfall_micros > p.collected_micros
        AND NOT (p.kind = 'dispute' AND EXISTS (
              SELECT FROM payment_reversals r WHERE r.provider = p.provider AND r.source_id = p.source_id || ':reinstated'))
      ORDER BY p.created_at, p.id
        FOR UPDATE`,
    [teamId],
  );
  if (owed.length === 0) return undefined;
  const team = await lockedBalance(em, teamId);
  const total = minBig(
    owed.reduce((sum, r) => sum + BigInt(r.owed), 0n),
    maxBig(0n, team.balance - team.leased),
  );
  if (total <= 0n) return undefined;
  const entry = await appendLedgerCredit(em, {
    teamId,
    type: "refund",
    amountMicros: -total,
    sourceId: `collect:${creditSourceId}`,
    description: `Shortfall of earlier Stripe refunds or disputes, collected from top-up ${creditSourceId}`,
  });
  if (!entry.applied) return entry;
  let left = total;
  for (const r of owed) {
    if (left <= 0n) break;
    const take = minBig(left, BigInt(r.owed));
    await em.query("UPDATE payment_reversals SET collected_micros = collected_micros + $2 WHERE id = $1", [
      r.id,
      take.toString(),
    ]);
    left -= take;
  }
  return entry;
}
