/**
 * Invoice arithmetic (issue 10; DESIGN §3 Money): which period an invoice covers, and micro-USD
 * usage turned into whole cents whose lines sum to the rounded total.
 */
import { AppError } from "../../shared/errors.js";

const DAY_MS = 86_400_000;
/** Micro-USD in one cent. */
export const MICROS_PER_CENT = 10_000n;

/**
 * An invoice period must have ended at least this long ago (review finding 3): activity rows are
 * written when a request ends with `created_at` = when it was received, and a background response
 * or batch item may end up to 24 h after that; 1 h more covers the metering group commit and
 * clock skew between processes. So usage of a period is complete before it can be invoiced.
 */
export const INVOICE_SETTLE_MS = 25 * 3_600_000;

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

/**
 * The invoice period asked for: both bounds or neither (the previous calendar month, UTC); end
 * after start; at most 366 days; ended at least `INVOICE_SETTLE_MS` before `now`.
 * @throws AppError 400 naming the field, with the time the period can be invoiced from.
 */
export function invoicePeriod(
  b: { period_start?: Date | null; period_end?: Date | null },
  now: Date,
): { start: Date; end: Date } {
  let start: Date;
  let end: Date;
  if (b.period_start == null && b.period_end == null) ({ start, end } = previousMonthUtc(now));
  else if (b.period_start == null || b.period_end == null) {
    const missing = b.period_start == null ? "period_start" : "period_end";
    throw AppError.invalid(`Invalid request: ${missing}`, [
      { field: missing, message: "give both period_start and period_end, or neither" },
    ]);
  } else {
    start = b.period_start;
    end = b.period_end;
  }
  const issues = [];
  if (end <= start) issues.push({ field: "period_end", message: "must be after period_start" });
  else if (end.getTime() - start.getTime() > 366 * DAY_MS) {
    issues.push({ field: "period_end", message: "the period is at most 366 days" });
  }
  if (end.getTime() > now.getTime() - INVOICE_SETTLE_MS) {
    const from = new Date(end.getTime() + INVOICE_SETTLE_MS).toISOString();
    issues.push({
      field: "period_end",
      message:
        `must be at least 25 hours ago: usage is recorded up to 24 h after a request is received, ` +
        `so this period can be invoiced from ${from}`,
    });
  }
  if (issues.length > 0) {
    throw AppError.invalid(`Invalid request: ${issues[0].field}: ${issues[0].message}`, issues);
  }
  return { start, end };
}
