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
 * inserted first under `UNIQUE (team_id, nonce)`, so of concurrent requests with one nonce one
 * inserts and opens the provider's session inside its transaction while the others wait on the
 * unique index and then read that row: same amount → the same session (201 again, no new
 * session, no credit), another amount → 409. A session is credited at most once: its ledger
 * `top_up` entry has the session id as its source.
 *
 * Invoices: the period is `[period_start, period_end)` (ISO 8601, UTC when no zone is given; both
 * or neither; at most 366 days; not ending in the future); default the previous calendar month
 * (UTC). Lines are the activity records' `cost_micros` by model in the period (what usage and the
 * billing summary sum). Rounding micro-USD → cents: the invoice total is rounded half up once
 * (`(Σ micros + 5000) / 10000`); line cents are allotted by largest remainder (each line gets its
 * floor, the cents left go to the lines with the largest remainders, ties by model name) so the
 * lines always sum to the total. One invoice per team and period: asking again answers it.
 */
import { v7 as uuidv7 } from "uuid";
import type { DataSource } from "typeorm";
import { z } from "zod";
import { queryRows } from "../../db/sql.js";
import { AppError, parseInput } from "../../shared/errors.js";
import { usdToMicros } from "../../shared/money.js";
import { isoDateTime } from "../activity.service.js";
import type { CacheBus } from "../cache-bus.js";
import type { RequestContext } from "../context.js";
import { authorize } from "../policy.js";
import { optionalQuery, pgText, queryInt } from "../validation.js";
import { appendLedgerCredit } from "./ledger.js";
import type { InvoiceLine, LocalPaymentProvider, PaymentProvider } from "./payment-provider.js";
import type { StripePaymentProvider } from "./stripe-provider.js";

/** spec "Billing" Transaction. */
export interface TransactionDto {
  id: string;
  created_at: string;
  type: string;
  amount_micros: number;
  balance_after_micros: number;
  description: string;
  external_provider: string | null;
  external_payment_id: string | null;
}

/** `GET /control/v1/billing/transactions` answer. */
export interface TransactionPageDto {
  items: TransactionDto[];
  next_starting_after: string | null;
}

/** spec "Billing" Top-up session. */
export interface TopUpSessionDto {
  payment_session_id: string;
  checkout_url: string;
}

/** What opening a local confirm link answers (the same on every open). */
export interface TopUpConfirmationDto {
  payment_session_id: string;
  status: "completed";
  amount_micros: number;
  transaction_id: string;
}

/** One invoice line (by model). */
export interface InvoiceLineDto {
  model: string;
  requests: number;
  amount_micros: number;
  amount_cents: number;
}

/** spec "Billing" Invoice result, with its lines. */
export interface InvoiceDto {
  id: string;
  payment_invoice_id: string;
  hosted_invoice_url: string;
  amount_cents: number;
  currency: "usd";
  period_start: string;
  period_end: string;
  status: string;
  line_items: InvoiceLineDto[];
}

/** `limit` 1–100 (default 25) and `starting_after` (spec: Limits). */
export const transactionsQuery = z.object({
  limit: optionalQuery(queryInt(1, 100)),
  starting_after: optionalQuery(z.uuid()),
});

/** `amount_usd`: a decimal string, at most two decimals, 1.00–10000.00 (DESIGN §3 Money). */
export const amountUsd = z
  .string()
  .regex(/^\d{1,5}(?:\.\d{1,2})?$/, 'must be a decimal string with at most two decimals, e.g. "25.00"')
  .transform((s) => usdToMicros(s))
  .refine((m) => m >= 1_000_000n && m <= 10_000_000_000n, "must be between 1.00 and 10000.00");

export const topUpQuery = z.object({ nonce: pgText().min(1).max(255) });
export const topUpBody = z.object({ amount_usd: amountUsd });
export const confirmQuery = z.object({ session: z.uuid(), signature: z.string().min(1).max(200) });
export const invoiceBody = z.object({
  period_start: isoDateTime.nullish(),
  period_end: isoDateTime.nullish(),
});

const DAY_MS = 86_400_000;
const MICROS_PER_CENT = 10_000n;

interface LedgerRow {
  id: string;
  created_at: Date;
  type: string;
  amount_micros: string;
  balance_after_micros: string;
  description: string;
  external_provider: string | null;
  external_payment_id: string | null;
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

/**
 * Micro-USD → cents for an invoice: the total rounded half up once, shared out over the lines by
 * largest remainder so the lines sum to it (see the module header).
 */
export function allotCents(lines: Array<{ model: string; micros: bigint }>): { total: number; cents: number[] } {
  const sum = lines.reduce((s, l) => s + l.micros, 0n);
  const total = (sum + MICROS_PER_CENT / 2n) / MICROS_PER_CENT;
  const cents = lines.map((l) => l.micros / MICROS_PER_CENT);
  let left = total - cents.reduce((s, c) => s + c, 0n);
  const order = lines
    .map((l, i) => ({ i, rem: l.micros % MICROS_PER_CENT, model: l.model }))
    .sort((a, b) => (a.rem === b.rem ? a.model.localeCompare(b.model) : a.rem > b.rem ? -1 : 1));
  for (const o of order) {
    if (left <= 0n) break;
    cents[o.i] += 1n;
    left -= 1n;
  }
  return { total: Number(total), cents: cents.map(Number) };
}

/** The previous calendar month in UTC, as `[start, end)`. */
export function previousMonthUtc(now: Date): { start: Date; end: Date } {
  const end = new Date(Date.UTC(now.getUTCFullYear(), now.getUTCMonth(), 1));
  const start = new Date(Date.UTC(now.getUTCFullYear(), now.getUTCMonth() - 1, 1));
  return { start, end };
}

/** Transactions, top-ups and invoices (see the module header). */
export class BillingService {
  constructor(
    private readonly ds: DataSource,
    /** Tells this process's caches the new balance at once (others hear the ledger's NOTIFY). */
    private readonly bus: CacheBus,
    /** The provider new sessions and invoices go through (config `paymentProvider`). */
    private readonly provider: PaymentProvider,
    /** Verifies the local confirm links (always present: links made before a switch stay valid). */
    private readonly local: LocalPaymentProvider,
    /** Verifies Stripe webhooks; absent when Stripe is not configured (the webhook answers 404). */
    private readonly stripe?: StripePaymentProvider,
  ) {}

  /**
   * The team's ledger, newest first, a page at a time.
   * @throws AppError 400 for a bad `limit` or a `starting_after` that is not a transaction of the
   *   caller's team; 401; 403 for members.
   */
  async transactions(ctx: RequestContext, query: unknown): Promise<TransactionPageDto> {
    const principal = authorize(ctx, "billing.manage");
    const q = parseInput(transactionsQuery, query ?? {});
    const limit = q.limit ?? 25;
    if (q.starting_after) {
      const known = await queryRows(this.ds, "SELECT 1 FROM credit_ledger WHERE id = $1 AND team_id = $2", [
        q.starting_after,
        principal.teamId,
      ]);
      if (known.length === 0) {
        throw AppError.invalid("Invalid request: starting_after", [
          { field: "starting_after", message: "is not a transaction of your team" },
        ]);
      }
    }
    const rows = await queryRows<LedgerRow>(
      this.ds,
      `SELECT id, created_at, type, amount_micros::text, balance_after_micros::text, description,
              external_provider, external_payment_id
         FROM credit_ledger
        WHERE team_id = $1
          AND ($2::uuid IS NULL OR (created_at, id) < (SELECT created_at, id FROM credit_ledger WHERE id = $2::uuid))
        ORDER BY created_at DESC, id DESC
        LIMIT $3`,
      [principal.teamId, q.starting_after ?? null, limit + 1],
    );
    const items = rows.slice(0, limit).map(transactionJson);
    return { items, next_starting_after: rows.length > limit ? items[items.length - 1].id : null };
  }

  /**
   * Opens (or, for a nonce seen before, answers again) a top-up session.
   * @throws AppError 400 for a bad nonce or amount; 401; 403 for members; 409 when the nonce was
   *   used with another amount; 502 when the provider fails (nothing is kept: the nonce is free).
   */
  async createTopUp(ctx: RequestContext, query: unknown, body: unknown): Promise<TopUpSessionDto> {
    const principal = authorize(ctx, "billing.manage");
    const { nonce } = parseInput(topUpQuery, query ?? {});
    const { amount_usd: amountMicros } = parseInput(topUpBody, body ?? {});
    return this.ds.transaction(async (em) => {
      const id = uuidv7();
      const inserted = await queryRows<{ id: string }>(
        em,
        `INSERT INTO topup_sessions (id, team_id, nonce, amount_micros, provider, created_by)
         VALUES ($1, $2, $3, $4, $5, $6)
         ON CONFLICT (team_id, nonce) DO NOTHING RETURNING id`,
        [id, principal.teamId, nonce, amountMicros.toString(), this.provider.name, principal.userId],
      );
      if (inserted.length === 0) {
        const [row] = await queryRows<SessionRow>(
          em,
          `SELECT id, team_id, amount_micros::text, provider, external_session_id, checkout_url
             FROM topup_sessions WHERE team_id = $1 AND nonce = $2`,
          [principal.teamId, nonce],
        );
        if (BigInt(row.amount_micros) !== amountMicros) {
          throw AppError.conflict("This nonce was already used for a top-up of another amount");
        }
        return { payment_session_id: row.external_session_id ?? row.id, checkout_url: row.checkout_url ?? "" };
      }
      const session = await this.provider.createCheckout({
        sessionId: id,
        teamId: principal.teamId,
        nonce,
        amountMicros,
        amountCents: Number(amountMicros / MICROS_PER_CENT),
      });
      await em.query("UPDATE topup_sessions SET external_session_id = $2, checkout_url = $3 WHERE id = $1", [
        id,
        session.externalId,
        session.checkoutUrl,
      ]);
      return { payment_session_id: session.externalId, checkout_url: session.checkoutUrl };
    });
  }

  /**
   * Opens a local confirm link: credits the session's amount once (later opens answer the same).
   * @throws AppError 400 when the link is malformed, forged or altered, or names no session.
   */
  async confirmLocalTopUp(query: unknown): Promise<TopUpConfirmationDto> {
    const q = parseInput(confirmQuery, query ?? {});
    const [row] = await queryRows<SessionRow>(
      this.ds,
      `SELECT id, team_id, amount_micros::text, provider, external_session_id, checkout_url
         FROM topup_sessions WHERE id = $1 AND provider = 'local'`,
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
   * A Stripe webhook delivery: verified over the raw body; `checkout.session.completed` (paid)
   * credits its session once; other events are acknowledged and ignored.
   * @throws AppError 404 when Stripe webhooks are not configured; 400 for a bad signature.
   */
  async stripeWebhook(rawBody: unknown, signature: string | undefined): Promise<{ received: true }> {
    if (!this.stripe) throw AppError.notFound("Stripe is not configured");
    const raw = Buffer.isBuffer(rawBody) ? rawBody : Buffer.alloc(0);
    const event = this.stripe.verifyWebhook(raw, signature);
    if (event.type === "checkout.session.completed" || event.type === "checkout.session.async_payment_succeeded") {
      const session = event.data.object;
      if (session.payment_status !== "paid") return { received: true };
      const [row] = await queryRows<SessionRow>(
        this.ds,
        `SELECT id, team_id, amount_micros::text, provider, external_session_id, checkout_url
           FROM topup_sessions WHERE provider = 'stripe' AND external_session_id = $1`,
        [session.id],
      );
      // A session this service did not open (another integration on the account): nothing to credit.
      const intent = session.payment_intent;
      const paymentId = typeof intent === "string" ? intent : (intent?.id ?? session.id);
      if (row) await this.credit(row, "stripe", paymentId);
    }
    return { received: true };
  }

  /**
   * Builds the invoice of a period from the team's usage (see the module header).
   * @throws AppError 400 for a bad period; 401; 403 for members; 502 when the provider fails.
   */
  async createInvoice(ctx: RequestContext, body: unknown): Promise<InvoiceDto> {
    const principal = authorize(ctx, "billing.manage");
    const b = parseInput(invoiceBody, body ?? {});
    let start: Date;
    let end: Date;
    if (b.period_start == null && b.period_end == null) ({ start, end } = previousMonthUtc(new Date()));
    else if (b.period_start == null || b.period_end == null) {
      const missing = b.period_start == null ? "period_start" : "period_end";
      throw AppError.invalid(`Invalid request: ${missing}`, [
        { field: missing, message: "give both period_start and period_end, or neither" },
      ]);
    } else {
      start = b.period_start;
      end = b.period_end;
      const issues = [];
      if (end <= start) issues.push({ field: "period_end", message: "must be after period_start" });
      else if (end.getTime() - start.getTime() > 366 * DAY_MS) {
        issues.push({ field: "period_end", message: "the period is at most 366 days" });
      }
      if (end.getTime() > Date.now()) issues.push({ field: "period_end", message: "must not be in the future" });
      if (issues.length > 0) throw AppError.invalid(`Invalid request: ${issues[0].field}`, issues);
    }
    return this.ds.transaction(async (em) => {
      const id = uuidv7();
      const usage = await queryRows<{ model: string; micros: string; requests: number }>(
        em,
        `SELECT model, sum(cost_micros)::text AS micros, count(*)::int AS requests
           FROM activity
          WHERE team_id = $1 AND created_at >= $2 AND created_at < $3 AND cost_micros > 0
          GROUP BY model ORDER BY model`,
        [principal.teamId, start, end],
      );
      const totalMicros = usage.reduce((s, u) => s + BigInt(u.micros), 0n);
      const { total, cents } = allotCents(usage.map((u) => ({ model: u.model, micros: BigInt(u.micros) })));
      const lines: InvoiceLine[] = usage.map((u, i) => ({
        model: u.model,
        requests: u.requests,
        micros: BigInt(u.micros),
        cents: cents[i],
      }));
      const lineJson: InvoiceLineDto[] = lines.map((l) => ({
        model: l.model,
        requests: l.requests,
        amount_micros: Number(l.micros),
        amount_cents: l.cents,
      }));
      // Concurrent requests for one period: one inserts, the others wait on the unique key, then read it.
      const inserted = await queryRows<{ id: string }>(
        em,
        `INSERT INTO invoices (id, team_id, provider, period_start, period_end, amount_micros, amount_cents,
                               line_items, status)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, 'draft')
         ON CONFLICT (team_id, period_start, period_end) DO NOTHING RETURNING id`,
        [id, principal.teamId, this.provider.name, start, end, totalMicros.toString(), total, JSON.stringify(lineJson)],
      );
      if (inserted.length === 0) {
        const [row] = await queryRows<InvoiceRow>(
          em,
          `SELECT id, period_start, period_end, amount_cents::text, line_items, payment_invoice_id,
                  hosted_invoice_url, status
             FROM invoices WHERE team_id = $1 AND period_start = $2 AND period_end = $3`,
          [principal.teamId, start, end],
        );
        return invoiceJson(row);
      }
      const [team] = await queryRows<{ name: string }>(em, "SELECT name FROM teams WHERE id = $1", [principal.teamId]);
      const issued = await this.provider.createInvoice({
        invoiceId: id,
        teamId: principal.teamId,
        teamName: team?.name ?? principal.teamId,
        periodStart: start,
        periodEnd: end,
        lines,
        amountCents: total,
      });
      const [row] = await queryRows<InvoiceRow>(
        em,
        `UPDATE invoices SET payment_invoice_id = $2, hosted_invoice_url = $3, status = $4 WHERE id = $1
         RETURNING id, period_start, period_end, amount_cents::text, line_items, payment_invoice_id,
                   hosted_invoice_url, status`,
        [id, issued.paymentInvoiceId, issued.hostedInvoiceUrl, issued.status],
      );
      return invoiceJson(row);
    });
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
      `SELECT id, period_start, period_end, amount_cents::text, line_items, payment_invoice_id, hosted_invoice_url,
              status
         FROM invoices WHERE id = $1 AND team_id = $2`,
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
        await em.query("UPDATE topup_sessions SET completed_at = now() WHERE id = $1", [row.id]);
      }
      return result;
    });
    // The NOTIFY reaches this process's listener a moment after the commit; a request the payer
    // sends right after the confirmation must already see the credit.
    if (result.applied) this.bus.deliverLocally("balance", `${row.team_id}=${result.balanceAfterMicros}`);
    return result;
  }
}
