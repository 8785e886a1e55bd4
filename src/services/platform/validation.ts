/**
 * Input rules every service shares (issue 5, item 3 "Bad input never reaches a 500"): text that
 * PostgreSQL can store, and integers in query strings. Each is a zod schema, so a refusal is a
 * 400 whose `extra` names the field (see `parseInput` in `errors.ts`), on REST and GraphQL alike.
 */
import { z } from "zod";

/**
 * A NUL character, or a UTF-16 surrogate without its partner. PostgreSQL refuses NUL in `text`
 * (SQLSTATE 22021) and in `jsonb`; the driver writes an unpaired surrogate as U+FFFD, so it would
 * be stored as something else than what was sent.
 */
// eslint-disable-next-line no-control-regex
const UNSTORABLE = /\u0000|[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/;

/** What a refused text field says in the 400's `extra`. */
export const PG_TEXT_MESSAGE = "must not contain NUL characters or unpaired UTF-16 surrogates";

/** True when PostgreSQL stores `value` in a `text` column exactly as given. O(length). */
export function isPgStorableText(value: string): boolean {
  return !UNSTORABLE.test(value);
}

/**
 * A string PostgreSQL can store as given: the base of every text field of a control-plane input
 * (chain `.trim()`, `.min()`, `.max()`, `.email()` … after it).
 */
export function pgText() {
  return z.string().refine(isPgStorableText, { message: PG_TEXT_MESSAGE });
}

/** What a query parameter given with an empty value is told (issue 28, item 4). */
export const EMPTY_QUERY_MESSAGE = "must not be empty: leave the parameter out for its default";

/**
 * An optional query parameter (issue 28, item 4): absent means "not given"; an empty value
 * (`?limit=`) is refused with `EMPTY_QUERY_MESSAGE`, whatever its type, and `null` is not special
 * (an id that does not exist, a name, or a value its type refuses). GraphQL arguments are handed
 * over as the query would carry them, so `""` there is refused alike.
 */
export function optionalQuery<T extends z.ZodType>(schema: T) {
  return z.preprocess((v, ctx) => {
    if (v === "") ctx.addIssue({ code: "custom", message: EMPTY_QUERY_MESSAGE, input: v });
    return v;
  }, schema.optional());
}

/**
 * An integer query parameter `min`–`max`: ASCII decimal digits only, so `0x10`, `1e2`, ` 5`,
 * `+5`, `5.0` and the empty value are refused (`Number()` would accept them all). A repeated
 * parameter (an array) is refused too.
 */
export function queryInt(min: number, max: number) {
  return z
    .string()
    .regex(/^[0-9]+$/, "must be a decimal integer")
    .transform(Number)
    .pipe(z.number().int().min(min).max(max));
}

/** Years a date filter or invoice period may name (see `isoDateTime`). */
export const MIN_YEAR = 2000;
export const MAX_YEAR = 2100;

const ISO_DATE_TIME =
  /^(\d{4})-(\d{2})-(\d{2})(?:[T ](\d{2}):(\d{2})(?::(\d{2})(?:\.(\d{1,9}))?)?(Z|([+-])(\d{2}):?(\d{2}))?)?$/;

/**
 * An ISO 8601 date or date-time (with a zone, or UTC when none is given), checked field by field
 * (review finding 7): a day that does not exist in its month (`2024-02-30`, `2023-02-29`), hour
 * 24, minute or second 60, or a zone beyond ±14:00 is refused instead of rolling over as
 * `Date.parse` would; years are 2000–2100 (nothing in this service predates 2000, and the bound
 * keeps year 0000, negative years and other far dates out of PostgreSQL and JavaScript date
 * arithmetic).
 */
export const isoDateTime = z.string().transform((s, ctx) => {
  const m = ISO_DATE_TIME.exec(s);
  if (!m) {
    ctx.addIssue({ code: "custom", message: "must be an ISO 8601 date or date-time" });
    return z.NEVER;
  }
  const [year, month, day] = [Number(m[1]), Number(m[2]), Number(m[3])];
  const [hour, minute, second] = [Number(m[4] ?? 0), Number(m[5] ?? 0), Number(m[6] ?? 0)];
  const ms = m[7] ? Number(m[7].slice(0, 3).padEnd(3, "0")) : 0;
  const [zoneHours, zoneMinutes] = [Number(m[10] ?? 0), Number(m[11] ?? 0)];
  const fail = (message: string) => {
    ctx.addIssue({ code: "custom", message });
    return z.NEVER;
  };
  if (year < MIN_YEAR || year > MAX_YEAR) return fail(`the year must be ${MIN_YEAR}–${MAX_YEAR}`);
  if (month < 1 || month > 12) return fail("must be a valid date (month 01–12)");
  const daysInMonth = new Date(Date.UTC(year, month, 0)).getUTCDate();
  if (day < 1 || day > daysInMonth) return fail(`must be a valid date (day 01–${daysInMonth} in that month)`);
  if (hour > 23 || minute > 59 || second > 59) return fail("must be a valid time (00:00:00–23:59:59)");
  if (zoneHours > 14 || zoneMinutes > 59 || (zoneHours === 14 && zoneMinutes > 0)) {
    return fail("must have a valid zone offset (−14:00 to +14:00)");
  }
  const offsetMs = (m[9] === "-" ? -1 : 1) * (zoneHours * 60 + zoneMinutes) * 60_000;
  return new Date(Date.UTC(year, month - 1, day, hour, minute, second, ms) - offsetMs);
});
// Documented as an RFC 3339 date-time of those years (issue 28, item 5). The service also takes
// dates alone and date-times without a zone; it refuses lowercase `t`/`z`, second 60 and
// fractions past 9 digits, which RFC 3339 allows.
z.globalRegistry.add(isoDateTime, { format: "date-time", pattern: "^(?:20[0-9]{2}|2100)-" });
