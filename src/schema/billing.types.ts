/**
 * GraphQL types of billing (issue 10, items 4–6): transactions, top-up sessions and invoices under
 * the REST field names in camelCase (micro-USD and cents as Floats that are integers).
 */
import { Field, Float, ID, Int, ObjectType } from "type-graphql";
import type {
  InvoiceDto,
  InvoiceLineDto,
  TopUpSessionDto,
  TransactionDto,
  TransactionPageDto,
} from "../services/billing/billing.dto.js";

@ObjectType("BillingTransaction", { description: "One ledger entry (spec: Billing, Transaction)." })
export class TransactionType implements TransactionDto {
  @Field(() => ID) id!: string;
  @Field({ name: "createdAt", description: "ISO 8601 (UTC)." }) created_at!: string;
  @Field({ description: "grant, top_up, usage, refund or adjustment." }) type!: string;
  @Field(() => Float, { name: "amountMicros", description: "Signed micro-USD: positive credits." })
  amount_micros!: number;
  @Field(() => Float, { name: "balanceAfterMicros" }) balance_after_micros!: number;
  @Field() description!: string;
  @Field(() => String, { name: "externalProvider", nullable: true }) external_provider!: string | null;
  @Field(() => String, { name: "externalPaymentId", nullable: true }) external_payment_id!: string | null;
}

@ObjectType("BillingTransactionPage", { description: "Newest first; pass nextStartingAfter for the next page." })
export class TransactionPageType implements TransactionPageDto {
  @Field(() => [TransactionType]) items!: TransactionDto[];
  @Field(() => String, { name: "nextStartingAfter", nullable: true }) next_starting_after!: string | null;
}

@ObjectType("TopUpSession", { description: "Where to pay a top-up (spec: Billing, Top-up session)." })
export class TopUpSessionType implements TopUpSessionDto {
  @Field({ name: "paymentSessionId" }) payment_session_id!: string;
  @Field({ name: "checkoutUrl" }) checkout_url!: string;
}

@ObjectType("InvoiceLine", { description: "A model's usage in the invoice period." })
export class InvoiceLineType implements InvoiceLineDto {
  @Field() model!: string;
  @Field(() => Int) requests!: number;
  @Field(() => Float, { name: "amountMicros" }) amount_micros!: number;
  @Field(() => Int, { name: "amountCents" }) amount_cents!: number;
}

@ObjectType("Invoice", { description: "An invoice of usage (spec: Billing, Invoice result)." })
export class InvoiceType implements InvoiceDto {
  @Field(() => ID) id!: string;
  @Field({ name: "paymentInvoiceId" }) payment_invoice_id!: string;
  @Field({ name: "hostedInvoiceUrl" }) hosted_invoice_url!: string;
  @Field(() => Int, { name: "amountCents" }) amount_cents!: number;
  @Field() currency!: "usd";
  @Field({ name: "periodStart" }) period_start!: string;
  @Field({ name: "periodEnd" }) period_end!: string;
  @Field() status!: string;
  @Field(() => [InvoiceLineType], { name: "lineItems" }) line_items!: InvoiceLineDto[];
}
