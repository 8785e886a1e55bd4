/**
 * The billing domain's request and answer shapes (spec: Transaction, Top-up, Invoice): the DTOs
 * REST and GraphQL present, and the zod schemas of query strings and bodies (amounts in USD on the
 * wire, micro-USD inside).
 */
import { z } from "zod";
import { usdToMicros } from "../../shared/money.js";
import { isoDateTime, optionalQuery, pgText, queryInt } from "../platform/validation.js";

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
  .refine((m) => m >= 1_000_000n && m <= 10_000_000_000n, "must be between 1.00 and 10000.00")
  // Both rules as one pattern for the OpenAPI document (issue 28, item 5).
  .meta({
    pattern: "^(?=\\d{1,5}(?:\\.\\d{1,2})?$)0*(?:[1-9]\\d{0,3}(?:\\.\\d{1,2})?|10000(?:\\.00?)?)$",
    description: 'USD as a decimal string with at most two decimals, 1.00–10000.00, e.g. "25.00".',
  });

export const topUpQuery = z.object({ nonce: pgText().min(1).max(255) });
export const topUpBody = z.object({ amount_usd: amountUsd });
export const confirmQuery = z.object({ session: z.uuid(), signature: z.string().min(1).max(200) });
export const invoiceBody = z
  .object({
    period_start: isoDateTime.nullish(),
    period_end: isoDateTime.nullish(),
  })
  // Both or neither, for the OpenAPI document (issue 28, item 5; `invoicePeriod` checks it).
  .meta({ dependentRequired: { period_start: ["period_end"], period_end: ["period_start"] } });
