/**
 * Billing resolver (issue 10, items 4–6): thin over `BillingService`. REST and GraphQL call the
 * same methods; GraphQL arguments are handed on as the REST query or body would carry them, so
 * both surfaces validate alike. The local confirm link and the Stripe webhook are REST only: a
 * browser opens the one, Stripe calls the other, neither has a caller.
 */
import { Arg, Ctx, ID, Int, Mutation, Query, Resolver } from "type-graphql";
import { InvoiceType, TopUpSessionType, TransactionPageType } from "../schema/billing.types.js";
import type { BillingService } from "../services/billing/billing.service.js";
import type {
  InvoiceDto,
  TopUpConfirmationDto,
  TopUpSessionDto,
  TransactionPageDto,
} from "../services/billing/billing.dto.js";
import type { RequestContext } from "../services/platform/context.js";

@Resolver()
export class BillingResolver {
  constructor(private readonly billing: BillingService) {}

  @Query(() => TransactionPageType, {
    description: "The team's credit ledger, newest first (owners and admins); limit 1–100 (25).",
  })
  billingTransactions(
    @Ctx() ctx: RequestContext,
    @Arg("limit", () => Int, { nullable: true }) limit?: number | null,
    @Arg("startingAfter", () => ID, { nullable: true }) startingAfter?: string | null,
  ): Promise<TransactionPageDto> {
    const query: Record<string, string> = {};
    if (limit != null) query.limit = String(limit);
    if (startingAfter != null) query.starting_after = startingAfter;
    return this.transactions(query, ctx);
  }

  /** `GET /control/v1/billing/transactions`. */
  transactions(query: unknown, ctx: RequestContext): Promise<TransactionPageDto> {
    return this.billing.transactions(ctx, query);
  }

  @Mutation(() => TopUpSessionType, {
    description: "Opens a top-up checkout; the same nonce and amount answer the same session (owners and admins).",
  })
  createTopUp(
    @Arg("nonce") nonce: string,
    @Arg("amountUsd", { description: 'Decimal string, at most two decimals, "1.00"–"10000.00".' }) amountUsd: string,
    @Ctx() ctx: RequestContext,
  ): Promise<TopUpSessionDto> {
    return this.topUp({ nonce }, { amount_usd: amountUsd }, ctx);
  }

  /** `POST /control/v1/billing/topups?nonce=…`. */
  topUp(query: unknown, body: unknown, ctx: RequestContext): Promise<TopUpSessionDto> {
    return this.billing.createTopUp(ctx, query, body);
  }

  /** `GET /control/v1/billing/topups/local/confirm` (the local provider's signed link; no caller). */
  confirmLocalTopUp(query: unknown): Promise<TopUpConfirmationDto> {
    return this.billing.confirmLocalTopUp(query);
  }

  /** `POST /control/v1/billing/stripe/webhook` (raw body, `Stripe-Signature`; no caller). */
  stripeWebhook(rawBody: unknown, signature: string | undefined): Promise<{ received: true }> {
    return this.billing.stripeWebhook(rawBody, signature);
  }

  @Mutation(() => InvoiceType, {
    description:
      "Invoices the usage of [periodStart, periodEnd) (ISO 8601; default the previous calendar month, UTC) " +
      "by model; one invoice per period, which must have ended at least 25 h ago and not overlap another " +
      "invoice of the team (owners and admins).",
  })
  createInvoice(
    @Ctx() ctx: RequestContext,
    @Arg("periodStart", () => String, { nullable: true }) periodStart?: string | null,
    @Arg("periodEnd", () => String, { nullable: true }) periodEnd?: string | null,
  ): Promise<InvoiceDto> {
    return this.invoices({ period_start: periodStart, period_end: periodEnd }, ctx);
  }

  /** `POST /control/v1/billing/invoices`. */
  invoices(body: unknown, ctx: RequestContext): Promise<InvoiceDto> {
    return this.billing.createInvoice(ctx, body);
  }

  @Query(() => InvoiceType, { description: "One invoice of the team (owners and admins; NOT_FOUND otherwise)." })
  invoice(@Arg("id", () => ID) id: string, @Ctx() ctx: RequestContext): Promise<InvoiceDto> {
    return this.billing.invoice(ctx, id);
  }
}
