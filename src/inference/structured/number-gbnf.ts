/**
 * Number grammars for the JSON Schema → GBNF compiler (issue 26, item 1): exact integer digit
 * ranges, and `type: number` with integer bounds (`minimum`, `maximum`, `exclusiveMinimum`,
 * `exclusiveMaximum`: `z.number().min(0).max(1)` → `0`, `0.` and digits, `1`, `1.0…`).
 * Numbers are written without an exponent, at most 15 digits before the point and 15 after; next
 * to an exclusive bound the fraction is shorter, so the double a client reads never rounds onto
 * the bound.
 */

/** Longest integer (and integer part of a number) the grammar writes, digits: under 2^53. */
export const MAX_DIGITS = 15;
export const MAX_SAFE = 10 ** MAX_DIGITS - 1;
/** A bound beyond ±this no number the grammar writes can break (it is dropped). */
const LIMIT = 10 ** MAX_DIGITS;

function literal(text: string): string {
  return `"${text}"`;
}

function seq(a: string, b: string): string {
  return [a, b].filter(Boolean).join(" ");
}

/** GBNF for the decimal numbers of [lo, hi] (non-negative, lo ≤ hi), without leading zeros. */
export function digitRange(lo: number, hi: number): string {
  const alts: string[] = [];
  // Split by digit count so each part has a fixed length.
  for (let len = String(lo).length; len <= String(hi).length; len++) {
    const from = Math.max(lo, len === 1 ? 0 : 10 ** (len - 1));
    const to = Math.min(hi, 10 ** len - 1);
    if (from <= to) alts.push(...sameLength(String(from), String(to)));
  }
  return alts.join(" | ");
}

/** Alternatives for the numbers between two digit strings of one length. */
function sameLength(a: string, b: string): string[] {
  if (a.length === 0) return [""];
  if (a === b) return [literal(a)];
  if (a[0] === b[0]) return sameLength(a.slice(1), b.slice(1)).map((r) => seq(literal(a[0]), r));
  const rest = a.length - 1;
  const zeros = "0".repeat(rest);
  const nines = "9".repeat(rest);
  const out: string[] = [];
  // a[0] followed by a.slice(1)..99…; the digits strictly between with any tail; b[0] followed by 00…..b.slice(1).
  let first = Number(a[0]);
  let last = Number(b[0]);
  if (a.slice(1) !== zeros) {
    out.push(...sameLength(a.slice(1), nines).map((r) => seq(literal(a[0]), r)));
    first += 1;
  }
  if (b.slice(1) !== nines) {
    out.push(...sameLength(zeros, b.slice(1)).map((r) => seq(literal(b[0]), r)));
    last -= 1;
  }
  if (first <= last) {
    const head = first === last ? literal(String(first)) : `[${first}-${last}]`;
    out.push(seq(head, rest > 0 ? `[0-9]{${rest}}` : ""));
  }
  return out;
}

/** One bound of a number: its value, and whether it is exclusive. */
export interface NumberBound {
  value: number;
  exclusive: boolean;
}

/**
 * Alternatives for the non-negative decimals m (`k` or `k.f`, no sign) with lo ≤ m (lo < m when
 * `loEx`) and m ≤ hi (m < hi when `hiEx`; no upper bound when hi is undefined). Uses the fixed
 * rule `frac` (a point and 1–15 digits).
 */
function magnitudes(lo: number, loEx: boolean, hi: number | undefined, hiEx: boolean): string[] {
  const alts: string[] = [];
  const top = hi ?? MAX_SAFE;
  const specials = [
    ...new Set([loEx ? lo : NaN, hi !== undefined && !hiEx ? hi : NaN, hi !== undefined && hiEx ? hi - 1 : NaN]),
  ]
    .filter((k) => k >= lo && k <= top)
    .sort((a, b) => a - b);
  for (const k of specials) {
    // Digits left for the fraction so the double read stays off the bound.
    const room = MAX_DIGITS - String(k).length;
    if (k === hi) {
      if (!(k === lo && loEx)) alts.push(`${literal(String(k))} ("." "0"{1,${MAX_DIGITS}})?`);
    } else if (k === lo && loEx) {
      if (room >= 1) alts.push(`${literal(String(k))} "." [0-9]{0,${room - 1}} [1-9]`);
    } else {
      alts.push(room >= 1 ? `${literal(String(k))} ("." [0-9]{1,${room}})?` : literal(String(k)));
    }
  }
  const from = lo + (loEx ? 1 : 0);
  const to = hi === undefined ? MAX_SAFE : hi - (hiEx ? 2 : 1);
  if (from <= to) alts.push(`( ${digitRange(from, to)} ) frac?`);
  return alts;
}

/**
 * GBNF for the numbers within integer bounds (either may be absent), or null when no number is
 * within them. Bounds beyond ±10^15 are dropped (no number written reaches them). Throws nothing;
 * the caller checks that the bounds are integers.
 */
export function boundedNumber(lower: NumberBound | undefined, upper: NumberBound | undefined): string | null {
  const L = lower && lower.value >= -LIMIT ? lower : undefined;
  const H = upper && upper.value <= LIMIT ? upper : undefined;
  const alts: string[] = [];
  if (!H || H.value > 0 || (H.value === 0 && !H.exclusive)) {
    const nonneg = L && L.value >= 0;
    alts.push(...magnitudes(nonneg ? L.value : 0, nonneg ? L.exclusive : false, H?.value, H?.exclusive ?? false));
  }
  if (!L || L.value < 0) {
    const below = H && H.value < 0;
    const neg = magnitudes(
      below ? -H.value : 0,
      below ? H.exclusive : true,
      L ? -L.value : undefined,
      L?.exclusive ?? false,
    );
    if (neg.length > 0) alts.push(`"-" ( ${neg.join(" | ")} )`);
  }
  if (alts.length === 0) return null;
  return alts.length === 1 ? alts[0] : `( ${alts.join(" | ")} )`;
}
