/**
 * The payment-provider interface of top-ups and invoices (issue 10, items 5–6), and the local
 * provider (the default). Providers move money and answer the provider's ids; the ledger, nonces
 * and amounts are `BillingService`'s.
 *
 * Local provider: no money moves. A top-up's checkout URL is a confirm link on this service,
 * `<publicUrl>/control/v1/billing/topups/local/confirm?session=<id>&signature=<sig>`, where `sig`
 * is base64url HMAC-SHA256 over `topup:<session id>:<team id>:<amount micros>` with a key derived
 * from the configured secret (HMAC-SHA256(jwtSecret, "switchyard/local-payments/v1")). The link is
 * built from configuration (`publicUrl`), never from a request's Host header (DESIGN §3). Opening it
 * credits the ledger once. Invoices get the id `local_<invoice id>` and a hosted URL that reads
 * the invoice back (`GET /control/v1/billing/invoices/{id}`); they are `paid` (see below).
 *
 * Invoices are statements of usage already paid from prepaid credit (top-ups), so a provider
 * records them as paid: Stripe's invoice is finalized and marked `paid_out_of_band` (the customer
 * is never asked to pay twice).
 */
import { createHmac, timingSafeEqual } from "node:crypto";

/** A top-up checkout to open at the provider. */
export interface CheckoutRequest {
  /** Our top-up session id (`topup_sessions.id`), also the ledger source of its credit. */
  sessionId: string;
  teamId: string;
  nonce: string;
  amountMicros: bigint;
  /** `amountMicros` in cents (top-up amounts have at most 2 decimals, so exact). */
  amountCents: number;
}

/** What the provider opened: its session id (spec `payment_session_id`) and where to pay. */
export interface CheckoutSession {
  externalId: string;
  checkoutUrl: string;
}

/** One invoice line: a model's usage in the period. */
export interface InvoiceLine {
  model: string;
  requests: number;
  micros: bigint;
  /** This line's share of the invoice's cents (the lines sum to `amountCents`). */
  cents: number;
}

/** An invoice to issue at the provider. */
export interface InvoiceRequest {
  /** Our invoice id (`invoices.id`). */
  invoiceId: string;
  teamId: string;
  teamName: string;
  periodStart: Date;
  periodEnd: Date;
  lines: InvoiceLine[];
  amountCents: number;
}

/** What the provider issued (spec "Invoice result": `payment_invoice_id`, `hosted_invoice_url`, `status`). */
export interface ProviderInvoice {
  paymentInvoiceId: string;
  hostedInvoiceUrl: string;
  status: string;
}

/** A payment provider: the local one or Stripe. */
export interface PaymentProvider {
  /** Stored as `external_provider` on ledger entries and as `provider` on sessions and invoices. */
  readonly name: "local" | "stripe";
  /**
   * Opens a checkout for a top-up.
   * @throws AppError 502 (`provider_failure`) when the provider cannot be reached or refuses.
   */
  createCheckout(req: CheckoutRequest): Promise<CheckoutSession>;
  /**
   * Issues an invoice for usage already paid from credit.
   * @throws AppError 502 (`provider_failure`) when the provider cannot be reached or refuses.
   */
  createInvoice(req: InvoiceRequest): Promise<ProviderInvoice>;
}

/** Path of the local provider's confirm link (a REST route). */
export const LOCAL_CONFIRM_PATH = "/control/v1/billing/topups/local/confirm";

/** The local provider (see the module header). */
export class LocalPaymentProvider implements PaymentProvider {
  readonly name = "local" as const;
  private readonly key: Buffer;

  /**
   * @param secret the configured secret (`jwtSecret`); the signing key is derived from it.
   * @param publicUrl the configured public base URL (no trailing slash).
   */
  constructor(
    secret: string,
    private readonly publicUrl: string,
  ) {
    this.key = createHmac("sha256", secret).update("switchyard/local-payments/v1").digest();
  }

  createCheckout(req: CheckoutRequest): Promise<CheckoutSession> {
    const url = new URL(this.publicUrl + LOCAL_CONFIRM_PATH);
    url.searchParams.set("session", req.sessionId);
    url.searchParams.set("signature", this.sign(req.sessionId, req.teamId, req.amountMicros));
    return Promise.resolve({ externalId: req.sessionId, checkoutUrl: url.toString() });
  }

  createInvoice(req: InvoiceRequest): Promise<ProviderInvoice> {
    return Promise.resolve({
      paymentInvoiceId: `local_${req.invoiceId}`,
      hostedInvoiceUrl: `${this.publicUrl}/control/v1/billing/invoices/${req.invoiceId}`,
      status: "paid",
    });
  }

  /** True when `signature` is this provider's signature of the session (constant time). */
  verify(sessionId: string, teamId: string, amountMicros: bigint, signature: string): boolean {
    const expected = Buffer.from(this.sign(sessionId, teamId, amountMicros));
    const given = Buffer.from(signature);
    return given.length === expected.length && timingSafeEqual(given, expected);
  }

  private sign(sessionId: string, teamId: string, amountMicros: bigint): string {
    return createHmac("sha256", this.key).update(`topup:${sessionId}:${teamId}:${amountMicros}`).digest("base64url");
  }
}

/** True when `publicUrl`'s host is a loopback name or address (`localhost`, `127.x.x.x`, `::1`). */
export function isLoopbackUrl(publicUrl: string): boolean {
  let host: string;
  try {
    host = new URL(publicUrl).hostname.toLowerCase();
  } catch {
    return false;
  }
  return (
    host === "localhost" ||
    host.endsWith(".localhost") ||
    /^127(?:\.\d{1,3}){3}$/.test(host) ||
    host === "[::1]" ||
    host === "::1"
  );
}

/**
 * Warns loudly at start (review finding 5) when the local provider — whose confirm links credit
 * without any money moving — serves a public URL that is not loopback: on a reachable deployment
 * every owner or admin can give their team free credit. The local provider stays the default so
 * the README quick start (on `localhost`) tops up without a payment account.
 */
export function warnOfLocalPayments(
  logger: { warn(obj: object, msg: string): void },
  providerName: string,
  publicUrl: string,
): boolean {
  if (providerName !== "local" || isLoopbackUrl(publicUrl)) return false;
  logger.warn(
    { paymentProvider: "local", publicUrl },
    "PAYMENTS ARE NOT REAL: the local payment provider credits top-ups without any payment, and this server's " +
      "public URL is not loopback — any team owner or admin can add free credit. Set SWITCHYARD_PAYMENT_PROVIDER=stripe " +
      "for a deployment others can reach.",
  );
  return true;
}
