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

/** Absent, empty and `null` query values all mean "not given". */
export function optionalQuery<T extends z.ZodType>(schema: T) {
  return z.preprocess((v) => (v === "" || v === "null" ? undefined : v), schema.optional());
}

/**
 * An integer query parameter `min`–`max`: ASCII decimal digits only, so `0x10`, `1e2`, ` 5`,
 * `+5` and `5.0` are refused (`Number()` would accept them all). A repeated parameter (an array)
 * is refused too.
 */
export function queryInt(min: number, max: number) {
  return z
    .string()
    .regex(/^[0-9]+$/, "must be a decimal integer")
    .transform(Number)
    .pipe(z.number().int().min(min).max(max));
}
