/**
 * The Stripe payment provider (issue 10, items 5–6), through the official `stripe` SDK.
 *
 * - Top-up: a Checkout Session (`mode: payment`, one `usd` line of the amount in cents), with our
 *   session id as `client_reference_id` and in `metadata`, and `topup:<session id>` as the
 *   Stripe idempotency key (a retried create after a lost answer opens no second session; the
 *   session row is one per team and nonce, so the key is too, and stays short ASCII whatever the
 *   nonce holds).
 * - Crediting: `POST /control/v1/billing/stripe/webhook` verifies the `Stripe-Signature` header
 *   over the raw body with `webhooks.constructEvent` (config `stripeWebhookSecret`) and credits on
 *   `checkout.session.completed` with `payment_status: paid` when amount, currency and metadata
 *   match the session; refunds (`charge.refunded`) and disputes (`charge.dispute.created`) debit
 *   the ledger (BillingService).
 * - Calls are made with no database connection held by the caller (BillingService commits its
 *   row first); `customer()` runs two short statements of its own around the Stripe call.
 * - Invoice: the team's Stripe customer (made once, kept in `payment_customers`), a draft invoice
 *   (`pending_invoice_items_behavior: exclude`), one invoice item per model line in cents, then
 *   finalize and `pay` with `paid_out_of_band: true` (the usage was paid from prepaid credit).
 *
 * Config: `stripeSecretKey`, `stripeWebhookSecret`, `stripeApiBase` (tests point the SDK at a
 * local server through its `host`/`port`/`protocol` options).
 */
import Stripe from "stripe";
import type { DataSource } from "typeorm";
import type { Logger } from "pino";
import { queryRows } from "../../db/sql.js";
import { AppError, ErrorCode } from "../../shared/errors.js";
import type {
  CheckoutRequest,
  CheckoutSession,
  InvoiceRequest,
  PaymentProvider,
  ProviderInvoice,
} from "./payment-provider.js";

/** Settings of the Stripe provider. */
export interface StripeProviderOptions {
  secretKey: string;
  webhookSecret?: string;
  /** e.g. `http://127.0.0.1:12111`; default Stripe's own API. */
  apiBase?: string;
  /** Where Checkout returns the payer (built from config `publicUrl`). */
  publicUrl: string;
}

/** A verified Stripe event, as the webhook handler needs it. */
export type StripeEvent = Stripe.Event;

/** The Stripe provider (see the module header). */
export class StripePaymentProvider implements PaymentProvider {
  readonly name = "stripe" as const;
  private readonly stripe: Stripe;

  constructor(
    private readonly ds: DataSource,
    private readonly logger: Logger,
    private readonly opts: StripeProviderOptions,
  ) {
    const base = opts.apiBase ? new URL(opts.apiBase) : undefined;
    this.stripe = new Stripe(opts.secretKey, {
      maxNetworkRetries: 1,
      timeout: 30_000,
      telemetry: false,
      ...(base
        ? {
            host: base.hostname,
            port: base.port || (base.protocol === "https:" ? 443 : 80),
            protocol: base.protocol === "https:" ? "https" : "http",
          }
        : {}),
    });
  }

  async createCheckout(req: CheckoutRequest): Promise<CheckoutSession> {
    const session = await this.call("create a Checkout Session", () =>
      this.stripe.checkout.sessions.create(
        {
          mode: "payment",
          client_reference_id: req.sessionId,
          metadata: { switchyard_topup_id: req.sessionId, switchyard_team_id: req.teamId },
          // The payment (and so its charge, refunds and disputes) names the team too.
          payment_intent_data: { metadata: { switchyard_topup_id: req.sessionId, switchyard_team_id: req.teamId } },
          line_items: [
            {
              quantity: 1,
              price_data: {
                currency: "usd",
                unit_amount: req.amountCents,
                product_data: { name: "Switchyard credit" },
              },
            },
          ],
          success_url: `${this.opts.publicUrl}/billing/topups/success?session_id={CHECKOUT_SESSION_ID}`,
          cancel_url: `${this.opts.publicUrl}/billing/topups/cancelled`,
        },
        // The top-up row's id, one per (team, nonce) and kept when a lapsed claim is taken over:
        // a key from the caller's nonce (up to 255 characters of any text) could be longer than
        // Stripe's 255 or not fit in an HTTP header, and fail every time.
        { idempotencyKey: `topup:${req.sessionId}` },
      ),
    );
    if (!session.url) throw new AppError(ErrorCode.ProviderFailure, "Stripe answered a Checkout Session without a URL");
    return { externalId: session.id, checkoutUrl: session.url };
  }

  async createInvoice(req: InvoiceRequest): Promise<ProviderInvoice> {
    const customer = await this.customer(req.teamId, req.teamName);
    const idem = `invoice:${req.invoiceId}`;
    const draft = await this.call("create an invoice", () =>
      this.stripe.invoices.create(
        {
          customer,
          currency: "usd",
          collection_method: "send_invoice",
          days_until_due: 30,
          auto_advance: false,
          pending_invoice_items_behavior: "exclude",
          description: `Usage ${req.periodStart.toISOString()} – ${req.periodEnd.toISOString()}`,
          metadata: { switchyard_invoice_id: req.invoiceId, switchyard_team_id: req.teamId },
        },
        { idempotencyKey: `${idem}:create` },
      ),
    );
    const invoiceId = draft.id as string;
    for (const [i, line] of req.lines.entries()) {
      await this.call("add an invoice item", () =>
        this.stripe.invoiceItems.create(
          {
            customer,
            invoice: invoiceId,
            currency: "usd",
            amount: line.cents,
            description: `${line.model}: ${line.requests} requests, ${line.micros} micro-USD`,
            metadata: { model: line.model, micros: line.micros.toString() },
          },
          { idempotencyKey: `${idem}:item:${i}` },
        ),
      );
    }
    const finalized = await this.call("finalize the invoice", () =>
      this.stripe.invoices.finalizeInvoice(invoiceId, {}, { idempotencyKey: `${idem}:finalize` }),
    );
    // A zero invoice is paid when finalized; anything else was paid from prepaid credit.
    const paid =
      finalized.status === "paid"
        ? finalized
        : await this.call("mark the invoice paid", () =>
            this.stripe.invoices.pay(invoiceId, { paid_out_of_band: true }, { idempotencyKey: `${idem}:pay` }),
          );
    return {
      paymentInvoiceId: invoiceId,
      hostedInvoiceUrl: paid.hosted_invoice_url ?? finalized.hosted_invoice_url ?? "",
      status: paid.status ?? "open",
    };
  }

  /**
   * Verifies a webhook delivery's signature over its raw body and parses the event.
   * @throws AppError 404 when no webhook secret is configured; 400 for a missing or bad signature.
   */
  verifyWebhook(rawBody: Buffer, signature: string | undefined): StripeEvent {
    if (!this.opts.webhookSecret) throw AppError.notFound("Stripe webhooks are not configured");
    if (!signature)
      throw AppError.invalid("Missing Stripe-Signature header", [{ field: "stripe-signature", message: "required" }]);
    try {
      return this.stripe.webhooks.constructEvent(rawBody, signature, this.opts.webhookSecret);
    } catch (err) {
      throw AppError.invalid("Invalid Stripe webhook signature", [
        { field: "stripe-signature", message: (err as Error).message },
      ]);
    }
  }

  /** The team's Stripe customer id, created on first use. */
  private async customer(teamId: string, teamName: string): Promise<string> {
    const known = await queryRows<{ customer_id: string }>(
      this.ds,
      "SELECT customer_id FROM payment_customers WHERE team_id = $1 AND provider = 'stripe'",
      [teamId],
    );
    if (known[0]) return known[0].customer_id;
    const created = await this.call("create a customer", () =>
      this.stripe.customers.create(
        { name: teamName, metadata: { switchyard_team_id: teamId } },
        { idempotencyKey: `customer:${teamId}` },
      ),
    );
    // Two first invoices at once: the same idempotency key gave both the same customer.
    await this.ds.query(
      `INSERT INTO payment_customers (team_id, provider, customer_id) VALUES ($1, 'stripe', $2)
       ON CONFLICT (team_id, provider) DO NOTHING`,
      [teamId, created.id],
    );
    return created.id;
  }

  /** Runs one Stripe call; its failures become 502 `provider_failure` (details in the log only). */
  private async call<T>(what: string, op: () => Promise<T>): Promise<T> {
    try {
      return await op();
    } catch (err) {
      const e = err as { type?: string; code?: string; statusCode?: number; message?: string };
      this.logger.warn(
        { err: { type: e.type, code: e.code, status: e.statusCode, message: e.message } },
        `Stripe: could not ${what}`,
      );
      throw new AppError(ErrorCode.ProviderFailure, `The payment provider could not ${what}`);
    }
  }
}
