/**
 * Billing: the transaction list, top-ups and invoices (issue 10, items 4–6; spec "Billing" and
 * "Control plane: activity, usage, billing"; DESIGN §3 Money and Roles). Owners and admins only
 * (`billing.manage`); the confirm link and the Stripe webhook carry their own proof instead.
 *
 * Transactions: newest first (`created_at DESC, id DESC`, the ledger index), `limit` 1–100
 * (default 25); `starting_after` is a transaction id of the caller's team and the page holds what
 * comes after it; `next_starting_after` is the last item's id, or null on the last page. A cursor
 * that is not a transaction of the caller's team (unknown, or another team's) is a 400 naming
 * `starting_after` — the same answer for both, so other teams' ids cannot be probed.
 *
 * Top-ups: `amount_usd` is a decimal string with at most two decimals, 1.00–10000.00. The nonce
 * (1–255 characters) is per team and kept for good (the spec asks ≥ 24 h): the session row is
 * committed first under `UNIQUE (team_id, nonce)` with a claim (`claimed_until`), and the
 * provider is called with no database connection held (review finding 1: a hanging provider must
 * not drain the pool). Of concurrent requests with one nonce, one claims and calls the provider;
 * the others join it (same process) or wait for it (another process; 409 "retry" after
 * `WAIT_MS`): same amount → the same session (201 again, no new session, no credit), another
 * amount → 409. A claim that lapsed or whose call failed is taken over by the next request with
 * the nonce. Provider calls are bounded per team and per process (`ProviderGate`: 429 beyond).
 * A session is credited at most once: its ledger `top_up` entry has the session id as its source.
 * Stripe refunds and disputes debit `refund` entries whose sources are the refund and dispute ids.
 *
 * Invoices: the period is `[period_start, period_end)` (ISO 8601, UTC when no zone is given; both
 * or neither; at most 366 days; ended at least 25 h ago, `INVOICE_SETTLE_MS`, so its usage is all
 * recorded); default the previous calendar month (UTC). A period that overlaps another invoice of
 * the team is refused (409), so no usage is invoiced twice. Lines are the activity records' `cost_micros` by model in the period (what usage and the
 * billing summary sum). Rounding micro-USD → cents: the invoice total is rounded half up once
 * (`(Σ micros + 5000) / 10000`); line cents are allotted by largest remainder (each line gets its
 * floor, the cents left go to the lines with the largest remainders, ties by model name) so the
 * lines always sum to the total. One invoice per team and period: asking again answers it. The
 * draft (with its lines) is committed before the provider is called, as for top-ups.
 */
import { setTimeout as sleep } from "node:timers/promises";
import type { Logger } from "pino";
import { v7 as uuidv7 } from "uuid";
import type { DataSource } from "typeorm";
import { z } from "zod";
import { queryRows } from "../../db/sql.js";
import { AppError, parseInput } from "../../shared/errors.js";
import type { CacheBus } from "../platform/cache-bus.js";
import type { RequestContext } from "../platform/context.js";
import { authorize } from "../platform/policy.js";
import {
  type InvoiceDto,
  type InvoiceLineDto,
  type TopUpConfirmationDto,
  type TopUpSessionDto,
  type TransactionDto,
  type TransactionPageDto,
  confirmQuery,
  invoiceBody,
  topUpBody,
  topUpQuery,
  transactionsQuery,
} from "./billing.dto.js";
import { MICROS_PER_CENT, allotCents, invoicePeriod } from "./invoice-period.js";
import { appendLedgerCredit, type LedgerRow, isLedgerEntryOf, ledgerPage } from "../ledger/ledger.js";
import type { CheckoutSession, LocalPaymentProvider, PaymentProvider, ProviderInvoice } from "./payment-provider.js";
import { DEFAULT_PROVIDER_GATE_LIMITS, ProviderGate, type ProviderGateLimits } from "./provider-gate.js";
import {
  type StripeChargeObject,
  type StripeDisputeObject,
  StripeReversals,
  collectShortfalls,
} from "./stripe-reversals.js";
import type { StripePaymentProvider } from "./stripe-provider.js";

/** spec "Billing" Transaction. */
/**
 * How long a request may call the provider for a row it claimed (Stripe: a 30 s timeout and one
 * retry, ≈ 62 s at worst); a claim older than this is taken over by the next request.
 */
const CLAIM_MS = 90_000;
/** How long a request waits for another process opening the same top-up or invoice (then 409). */
const WAIT_MS = 10_000;
const POLL_MS = 200;

const SESSION_COLUMNS = "id, team_id, amount_micros::text, provider, external_session_id, checkout_url";
const INVOICE_COLUMNS =
  "id, period_start, period_end, amount_cents::text, line_items, payment_invoice_id, hosted_invoice_url, status";

/** The fields of a Stripe Checkout Session the webhook reads. */
interface StripeSessionObject {
  id: string;
  payment_status?: string;
  amount_total?: number | null;
  currency?: string | null;
  metadata?: Record<string, string> | null;
  payment_intent?: string | { id?: string } | null;
}

interface SessionRow {
  id: string;
  team_id: string;
  amount_micros: string;
  provider: string;
  external_session_id: string | null;
  checkout_url: string | null;
}

interface InvoiceRow {
  id: string;
  period_start: Date;
  period_end: Date;
  amount_cents: string;
  line_items: InvoiceLineDto[];
  payment_invoice_id: string | null;
  hosted_invoice_url: string | null;
  status: string;
}

function transactionJson(r: LedgerRow): TransactionDto {
  return {
    id: r.id,
    created_at: r.created_at.toISOString(),
    type: r.type,
    amount_micros: Number(r.amount_micros),
    balance_after_micros: Number(r.balance_after_micros),
    description: r.description,
    external_provider: r.external_provider,
    external_payment_id: r.external_payment_id,
  };
}

function invoiceJson(r: InvoiceRow): InvoiceDto {
  return {
    id: r.id,
    payment_invoice_id: r.payment_invoice_id ?? "",
    hosted_invoice_url: r.hosted_invoice_url ?? "",
    amount_cents: Number(r.amount_cents),
    currency: "usd",
    period_start: r.period_start.toISOString(),
    period_end: r.period_end.toISOString(),
    status: r.status,
    line_items: r.line_items,
  };
}

/** Transactions, top-ups and invoices (see the module header). */
export class BillingService {
  constructor(
    private readonly ds: DataSource,
    /** Tells this process's caches the new balance at once (others hear the ledger's NOTIFY). */
    private readonly bus: CacheBus,
    /** The provider new sessions and invoices go through (config `paymentProvider`). */
    private readonly provider: PaymentProvider,
    /** Verifies the local confirm links (honoured only while `provider` is the local one). */
    private readonly local: LocalPaymentProvider,
    private readonly logger: Logger,
    /** Verifies Stripe webhooks; absent when Stripe is not configured (the webhook answers 404). */
    private readonly stripe?: StripePaymentProvider,
    /** Bounds of concurrent provider calls (per team, per process). */
    gateLimits: ProviderGateLimits = DEFAULT_PROVIDER_GATE_LIMITS,
  ) {
    this.gate = new ProviderGate(gateLimits);
    this.reversals = new StripeReversals(ds, bus, logger);
  }

  private readonly gate: ProviderGate;
  private readonly reversals: StripeReversals;

  /**
   * The team's ledger, newest first, a page at a time.
   * @throws AppError 400 for a bad `limit` or a `starting_after` that is not a transaction of the
   *   caller's team; 401; 403 for members.
   */
  async transactions(ctx: RequestContext, query: unknown): Promise<TransactionPageDto> {
    const principal = authorize(ctx, "billing.manage");
    const q = parseInput(transactionsQuery, query ?? {});
    const limit = q.limit ?? 25;
    if (q.starting_after && !(await isLedgerEntryOf(this.ds, q.starting_after, principal.teamId))) {
      throw AppError.invalid("Invalid request: starting_after", [
        { field: "starting_after", message: "is not a transaction of your team" },
      ]);
    }
    const rows = await ledgerPage(this.ds, principal.teamId, q.starting_after ?? null, limit + 1);
    const items = rows.slice(0, limit).map(transactionJson);
    return { items, next_starting_after: rows.length > limit ? items[items.length - 1].id : null };
  }

  /**
   * Opens (or, for a nonce seen before, answers again) a top-up session. The session row is
   * committed first and claimed for `CLAIM_MS`; the provider is called with no database
   * connection held (review finding 1); then its answer is stored. A request for a nonce whose
   * session another request is opening joins it (this process) or waits up to `WAIT_MS` for it
   * (another process), then answers 409 "retry". A claim that ran out, or that a failed call let
   * go, is taken over by the next request with the nonce (the provider's idempotency key makes
   * the retried call answer the same session).
   * @throws AppError 400 for a bad nonce or amount; 401; 403 for members; 409 when the nonce was
   *   used with another amount, or its session is still being opened elsewhere; 429 when the team
   *   (or this process) has too many provider calls in progress; 502 when the provider fails
   *   (the nonce keeps its amount; the same request may be sent again).
   */
  async createTopUp(ctx: RequestContext, query: unknown, body: unknown): Promise<TopUpSessionDto> {
    const principal = authorize(ctx, "billing.manage");
    const { nonce } = parseInput(topUpQuery, query ?? {});
    const { amount_usd: amountMicros } = parseInput(topUpBody, body ?? {});
    const teamId = principal.teamId;
    const key = `topup:${teamId}:${nonce}`;
    const deadline = Date.now() + WAIT_MS;
    for (;;) {
      // The same nonce in flight in this process: its answer (or its failure) is ours too.
      const joined = this.gate.inFlight(key);
      if (joined) await joined;
      const [row] = await queryRows<SessionRow & { claim_over: boolean }>(
        this.ds,
        `SELECT ${SESSION_COLUMNS}, (claimed_until IS NULL OR claimed_until < now()) AS claim_over
           FROM topup_sessions WHERE team_id = $1 AND nonce = $2`,
        [teamId, nonce],
      );
      if (row && BigInt(row.amount_micros) !== amountMicros) {
        throw AppError.conflict("This nonce was already used for a top-up of another amount");
      }
      if (row?.external_session_id) {
        return { payment_session_id: row.external_session_id, checkout_url: row.checkout_url ?? "" };
      }
      if (!row || row.claim_over) {
        const opened = await this.gate.run(teamId, key, () =>
          this.openTopUp(teamId, principal.userId, nonce, amountMicros, row?.id),
        );
        if (opened) return opened;
      }
      if (Date.now() >= deadline) {
        throw AppError.conflict(
          "This top-up is still being opened at the payment provider; send the same request again shortly",
        );
      }
      await sleep(POLL_MS);
    }
  }

  /**
   * Claims the session row (inserting it, or taking over a lapsed claim), calls the provider with
   * no connection held and stores its answer. Answers undefined when another request holds the
   * claim.
   */
  private async openTopUp(
    teamId: string,
    userId: string | null,
    nonce: string,
    amountMicros: bigint,
    existingId: string | undefined,
  ): Promise<TopUpSessionDto | undefined> {
    const id = existingId ?? uuidv7();
    const claimed = existingId
      ? await queryRows<{ id: string }>(
          this.ds,
          `UPDATE topup_sessions SET claimed_until = now() + make_interval(secs => $2), provider = $3
            WHERE id = $1 AND external_session_id IS NULL AND (claimed_until IS NULL OR claimed_until < now())
           RETURNING id`,
          [id, CLAIM_MS / 1000, this.provider.name],
        )
      : await queryRows<{ id: string }>(
          this.ds,
          `INSERT INTO topup_sessions (id, team_id, nonce, amount_micros, provider, created_by, claimed_until)
           VALUES ($1, $2, $3, $4, $5, $6, now() + make_interval(secs => $7))
           ON CONFLICT (team_id, nonce) DO NOTHING RETURNING id`,
          [id, teamId, nonce, amountMicros.toString(), this.provider.name, userId, CLAIM_MS / 1000],
        );
    if (claimed.length === 0) return undefined;
    let session: CheckoutSession;
    try {
      session = await this.provider.createCheckout({
        sessionId: id,
        teamId,
        nonce,
        amountMicros,
        amountCents: Number(amountMicros / MICROS_PER_CENT),
      });
    } catch (err) {
      // Let the claim go: the next request with this nonce tries the provider again at once.
      await this.release("topup_sessions", id);
      throw err;
    }
    await this.ds.query(
      `UPDATE topup_sessions SET external_session_id = $2, checkout_url = $3, claimed_until = NULL WHERE id = $1`,
      [id, session.externalId, session.checkoutUrl],
    );
    return { payment_session_id: session.externalId, checkout_url: session.checkoutUrl };
  }

  /** Lets a failed provider call's claim go (best effort: a lapsed claim is taken over anyway). */
  private async release(table: "topup_sessions" | "invoices", id: string): Promise<void> {
    try {
      await this.ds.query(`UPDATE ${table} SET claimed_until = NULL WHERE id = $1`, [id]);
    } catch (err) {
      this.logger.warn({ err, table, id }, "billing: could not release a provider-call claim; it lapses by itself");
    }
  }

  /**
   * Opens a local confirm link: credits the session's amount once (later opens answer the same).
   * Only while the local provider is the configured one: a link made before a switch to Stripe
   * credits nothing afterwards (review finding 5).
   * @throws AppError 400 when the link is malformed, forged or altered, or names no session; 404
   *   when the configured provider is not `local`.
   */
  async confirmLocalTopUp(query: unknown): Promise<TopUpConfirmationDto> {
    if (this.provider.name !== "local") throw AppError.notFound("Local payments are not enabled");
    const q = parseInput(confirmQuery, query ?? {});
    const [row] = await queryRows<SessionRow>(
      this.ds,
      `SELECT ${SESSION_COLUMNS} FROM topup_sessions WHERE id = $1 AND provider = 'local'`,
      [q.session],
    );
    if (!row || !this.local.verify(row.id, row.team_id, BigInt(row.amount_micros), q.signature)) {
      throw AppError.invalid("Invalid confirm link", [{ field: "signature", message: "does not match this session" }]);
    }
    const credit = await this.credit(row, "local", row.id);
    return {
      payment_session_id: row.id,
      status: "completed",
      amount_micros: Number(row.amount_micros),
      transaction_id: credit.entryId,
    };
  }

  /**
   * A Stripe webhook delivery, verified over the raw body:
   * - `checkout.session.completed` / `async_payment_succeeded` (paid) credits its session once,
   *   when its `amount_total`, `currency` and metadata (team, session) match the stored session;
   *   a mismatch credits nothing and is logged as an error;
   * - `charge.refunded` debits what was newly refunded (`amount_refunded` less what is already
   *   debited for the payment), source the newest refund id (review finding 2);
   * - `charge.dispute.created` debits the disputed amount, source the dispute id;
   *   `charge.dispute.funds_reinstated` (a dispute won) credits back what that debited;
   * - other events are acknowledged and ignored.
   * Debits never take the balance below the credit leased to requests in flight: what the
   * balance cannot cover is recorded as a shortfall in `payment_reversals` and logged, and the
   * team's next top-up pays it back first (`collectShortfalls`).
   * @throws AppError 404 when Stripe webhooks are not configured; 400 for a bad signature; 409
   *   for a refund of one of our top-ups that is not credited yet (Stripe delivers it again).
   */
  async stripeWebhook(rawBody: unknown, signature: string | undefined): Promise<{ received: true }> {
    if (!this.stripe) throw AppError.notFound("Stripe is not configured");
    const raw = Buffer.isBuffer(rawBody) ? rawBody : Buffer.alloc(0);
    const event = this.stripe.verifyWebhook(raw, signature);
    const object = event.data.object as unknown as Record<string, unknown>;
    switch (event.type) {
      case "checkout.session.completed":
      case "checkout.session.async_payment_succeeded":
        await this.stripeSessionPaid(object as unknown as StripeSessionObject);
        break;
      case "charge.refunded":
        await this.reversals.refunded(object as unknown as StripeChargeObject);
        break;
      case "charge.dispute.created":
      case "charge.dispute.funds_reinstated":
        await this.reversals.disputed(
          object as unknown as StripeDisputeObject,
          event.type === "charge.dispute.created",
        );
        break;
      default:
        break;
    }
    return { received: true };
  }

  private async stripeSessionPaid(session: StripeSessionObject): Promise<void> {
    if (session.payment_status !== "paid") return;
    const [row] = await queryRows<SessionRow>(
      this.ds,
      `SELECT ${SESSION_COLUMNS} FROM topup_sessions WHERE provider = 'stripe' AND external_session_id = $1`,
      [session.id],
    );
    // A session this service did not open (another integration on the account): nothing to credit.
    if (!row) return;
    const cents = Number(BigInt(row.amount_micros) / MICROS_PER_CENT);
    const problems: string[] = [];
    if (session.amount_total !== cents)
      problems.push(`amount_total ${String(session.amount_total)}, expected ${cents}`);
    if (session.currency !== "usd") problems.push(`currency ${String(session.currency)}, expected usd`);
    if (session.metadata?.switchyard_team_id !== row.team_id || session.metadata?.switchyard_topup_id !== row.id) {
      problems.push("metadata does not name this session's team and top-up");
    }
    if (problems.length > 0) {
      this.logger.error(
        { stripeSession: session.id, topUpId: row.id, teamId: row.team_id, problems },
        "Stripe: a paid Checkout Session does not match its top-up; not credited",
      );
      return;
    }
    const intent = session.payment_intent;
    const paymentId = typeof intent === "string" ? intent : (intent?.id ?? session.id);
    await this.credit(row, "stripe", paymentId);
  }

  /**
   * Builds the invoice of a period from the team's usage (see the module header). The draft row
   * is committed (with its lines) before the provider is called with no connection held, as for
   * top-ups; a draft whose call failed or lapsed is issued by the next request for the period.
   * @throws AppError 400 for a bad period (incl. one that ended less than `INVOICE_SETTLE_MS`
   *   ago); 401; 403 for members; 409 when the period overlaps another invoice of the team, or
   *   its invoice is still being issued elsewhere; 429 as for top-ups; 502 when the provider fails.
   */
  async createInvoice(ctx: RequestContext, body: unknown): Promise<InvoiceDto> {
    const principal = authorize(ctx, "billing.manage");
    const { start, end } = invoicePeriod(parseInput(invoiceBody, body ?? {}), new Date());
    const teamId = principal.teamId;
    const key = `invoice:${teamId}:${start.toISOString()}:${end.toISOString()}`;
    const deadline = Date.now() + WAIT_MS;
    for (;;) {
      const joined = this.gate.inFlight(key);
      if (joined) await joined;
      const [row] = await queryRows<InvoiceRow & { claim_over: boolean }>(
        this.ds,
        `SELECT ${INVOICE_COLUMNS}, (claimed_until IS NULL OR claimed_until < now()) AS claim_over
           FROM invoices WHERE team_id = $1 AND period_start = $2 AND period_end = $3`,
        [teamId, start, end],
      );
      if (row?.payment_invoice_id) return invoiceJson(row);
      if (!row || row.claim_over) {
        const issued = await this.gate.run(teamId, key, () => this.issueInvoice(teamId, start, end, row?.id));
        if (issued) return issued;
      }
      if (Date.now() >= deadline) {
        throw AppError.conflict(
          "This invoice is still being issued at the payment provider; send the request again shortly",
        );
      }
      await sleep(POLL_MS);
    }
  }

  /**
   * Claims the period's draft (inserting it with its lines under the team's invoice lock, where
   * an overlapping period is refused, or taking over a lapsed claim), calls the provider with no
   * connection held and stores its answer. Answers undefined when another request holds it.
   */
  private async issueInvoice(
    teamId: string,
    start: Date,
    end: Date,
    existingId: string | undefined,
  ): Promise<InvoiceDto | undefined> {
    const draft = existingId
      ? await this.claimDraft(existingId)
      : await this.ds.transaction(async (em) => {
          // One writer of a team's invoices at a time, so two overlapping periods cannot both pass.
          await em.query("SELECT pg_advisory_xact_lock(hashtextextended('invoices:' || $1, 0))", [teamId]);
          const overlapping = await queryRows<{ id: string; period_start: Date; period_end: Date }>(
            em,
            `SELECT id, period_start, period_end FROM invoices
              WHERE team_id = $1 AND period_start < $3 AND period_end > $2
              ORDER BY period_start LIMIT 1`,
            [teamId, start, end],
          );
          const other = overlapping[0];
          if (other) {
            if (other.period_start.getTime() === start.getTime() && other.period_end.getTime() === end.getTime()) {
              return undefined; // the same period, written meanwhile: answer that one
            }
            throw AppError.conflict(
              `The period overlaps invoice ${other.id} of your team ` +
                `(${other.period_start.toISOString()} – ${other.period_end.toISOString()}); ` +
                "usage is invoiced once: ask for a period that does not overlap it",
            );
          }
          const usage = await queryRows<{ model: string; micros: string; requests: number }>(
            em,
            `SELECT model, sum(cost_micros)::text AS micros, count(*)::int AS requests
               FROM activity
              WHERE team_id = $1 AND created_at >= $2 AND created_at < $3 AND cost_micros > 0
              GROUP BY model ORDER BY model`,
            [teamId, start, end],
          );
          const totalMicros = usage.reduce((s, u) => s + BigInt(u.micros), 0n);
          const { total, cents } = allotCents(usage.map((u) => ({ model: u.model, micros: BigInt(u.micros) })));
          const lineJson: InvoiceLineDto[] = usage.map((u, i) => ({
            model: u.model,
            requests: u.requests,
            amount_micros: Number(u.micros),
            amount_cents: cents[i],
          }));
          const id = uuidv7();
          await em.query(
            `INSERT INTO invoices (id, team_id, provider, period_start, period_end, amount_micros, amount_cents,
                                   line_items, status, claimed_until)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, 'draft', now() + make_interval(secs => $9))`,
            [
              id,
              teamId,
              this.provider.name,
              start,
              end,
              totalMicros.toString(),
              total,
              JSON.stringify(lineJson),
              CLAIM_MS / 1000,
            ],
          );
          return { id, amountCents: total, lines: lineJson };
        });
    if (!draft) return undefined;
    const [team] = await queryRows<{ name: string }>(this.ds, "SELECT name FROM teams WHERE id = $1", [teamId]);
    let issued: ProviderInvoice;
    try {
      issued = await this.provider.createInvoice({
        invoiceId: draft.id,
        teamId,
        teamName: team?.name ?? teamId,
        periodStart: start,
        periodEnd: end,
        lines: draft.lines.map((l) => ({
          model: l.model,
          requests: l.requests,
          micros: BigInt(l.amount_micros),
          cents: l.amount_cents,
        })),
        amountCents: draft.amountCents,
      });
    } catch (err) {
      await this.release("invoices", draft.id);
      throw err;
    }
    const [row] = await queryRows<InvoiceRow>(
      this.ds,
      `UPDATE invoices SET payment_invoice_id = $2, hosted_invoice_url = $3, status = $4, claimed_until = NULL
        WHERE id = $1 RETURNING ${INVOICE_COLUMNS}`,
      [draft.id, issued.paymentInvoiceId, issued.hostedInvoiceUrl, issued.status],
    );
    return invoiceJson(row);
  }

  /** Takes over a draft invoice whose claim lapsed; undefined when another request holds it. */
  private async claimDraft(
    id: string,
  ): Promise<{ id: string; amountCents: number; lines: InvoiceLineDto[] } | undefined> {
    const [row] = await queryRows<{ id: string; amount_cents: string; line_items: InvoiceLineDto[] }>(
      this.ds,
      `UPDATE invoices SET claimed_until = now() + make_interval(secs => $2), provider = $3
        WHERE id = $1 AND payment_invoice_id IS NULL AND (claimed_until IS NULL OR claimed_until < now())
       RETURNING id, amount_cents::text, line_items`,
      [id, CLAIM_MS / 1000, this.provider.name],
    );
    return row ? { id: row.id, amountCents: Number(row.amount_cents), lines: row.line_items } : undefined;
  }

  /**
   * One invoice of the caller's team (the local provider's hosted URL).
   * @throws AppError 400 for an id that is not a UUID; 401; 403 for members; 404 when it is not the team's.
   */
  async invoice(ctx: RequestContext, invoiceId: string): Promise<InvoiceDto> {
    const principal = authorize(ctx, "billing.manage");
    const id = parseInput(z.object({ invoice_id: z.uuid() }), { invoice_id: invoiceId }).invoice_id;
    const [row] = await queryRows<InvoiceRow>(
      this.ds,
      `SELECT ${INVOICE_COLUMNS} FROM invoices WHERE id = $1 AND team_id = $2`,
      [id, principal.teamId],
    );
    if (!row) throw AppError.notFound("Invoice not found");
    return invoiceJson(row);
  }

  /** Credits a top-up session once (its id is the `top_up` entry's source) and marks it completed. */
  private async credit(row: SessionRow, provider: "local" | "stripe", paymentId: string) {
    const result = await this.ds.transaction(async (em) => {
      const result = await appendLedgerCredit(em, {
        teamId: row.team_id,
        type: "top_up",
        amountMicros: BigInt(row.amount_micros),
        sourceId: row.id,
        description: `Top-up (${provider})`,
        externalProvider: provider,
        externalPaymentId: paymentId,
      });
      if (result.applied) {
        await em.query("UPDATE topup_sessions SET completed_at = now(), payment_id = $2 WHERE id = $1", [
          row.id,
          paymentId,
        ]);
        // What earlier refunds or disputes could not debit is paid back from this credit first.
        const collected = await collectShortfalls(em, row.team_id, row.id);
        if (collected?.applied) return { ...result, balanceAfterMicros: collected.balanceAfterMicros };
      }
      return result;
    });
    // The NOTIFY reaches this process's listener a moment after the commit; a request the payer
    // sends right after the confirmation must already see the credit.
    if (result.applied) this.bus.deliverLocally("balance", `${row.team_id}=${result.balanceAfterMicros}`);
    return result;
  }
}
