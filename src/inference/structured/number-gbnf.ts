/**
 * Number grammars for the JSON Schema → GBNF compiler (issue 26, item 1): exact integer digit
 * ranges, and `type: number` with bounds (`minimum`, `maximum`, `exclusiveMinimum`,
 * `exclusiveMaximum`), integers or decimals: `z.number().min(0).max(1)` → `0`, `0.` and digits,
 * `1`, `1.0…`; `maximum: 3.5` → up to `2.…`, or `3`, `3.` and a fraction up to `.5`.
 * Numbers are written without an exponent, at most 15 digits before the point and 15 after; next
 * to a bound the number has at most 15 significant digits, so the double a client reads never
 * rounds onto (or past) the bound: distinct decimals of ≤ 15 significant digits are distinct
 * doubles (DBL_DIG). A bound is therefore enforced only when it has ≤ 15 significant digits
 * (`decimalBound` says why not otherwise).
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

/** A non-negative decimal: integer part and fraction digits (no trailing zeros). */
interface Decimal {
  int: number;
  frac: string;
}

/** `v`'s shortest text (`String(v)`) without an exponent: `1e-7` → `0.0000001`. */
function plainText(v: number): string {
  const text = String(Math.abs(v));
  const e = text.search(/e/i);
  if (e < 0) return text;
  const exp = Number(text.slice(e + 1));
  const [a, b = ""] = text.slice(0, e).split(".");
  const digits = a + b;
  const point = a.length + exp;
  if (point <= 0) return `0.${"0".repeat(-point)}${digits}`;
  if (point >= digits.length) return digits + "0".repeat(point - digits.length);
  return `${digits.slice(0, point)}.${digits.slice(point)}`;
}

/**
 * Why the bound `v` cannot be enforced exactly, or undefined when it can: more than 15
 * significant digits (a number of ≤ 15 digits next to it could read back as the same double).
 * Bounds beyond ±10^15 are dropped by `boundedNumber`, so they are never a problem.
 */
export function decimalBound(v: number): string | undefined {
  if (!Number.isFinite(v)) return "it is not a finite number";
  if (Math.abs(v) > LIMIT) return undefined;
  const significant = plainText(v).replace(".", "").replace(/^0+/, "").replace(/0+$/, "");
  return significant.length > MAX_DIGITS ? `${plainText(v)} has more than ${MAX_DIGITS} significant digits` : undefined;
}

function decimal(magnitude: number): Decimal {
  const [int, frac = ""] = plainText(magnitude).split(".");
  return { int: Number(int), frac: frac.replace(/0+$/, "") };
}

/**
 * What the fraction digits still read must satisfy, compared with the digit string `digits`
 * (the rest of a bound's fraction): at least it (`exclusive`: more than it), or at most it. A
 * satisfied constraint is `null`; one that cannot be met any more is `"dead"`.
 */
type FracLimit = { digits: string; exclusive: boolean } | null | "dead";

/** The constraint after reading digit `d`, for a lower (`lower`) or an upper limit. */
function afterDigit(limit: FracLimit, d: number, lower: boolean): FracLimit {
  if (limit === null || limit === "dead") return limit;
  const bound = limit.digits === "" ? 0 : Number(limit.digits[0]);
  if (d !== bound) return d > bound === lower ? null : "dead";
  if (limit.digits === "") return limit; // an exhausted bound: lower needs a nonzero digit later, upper only zeros
  return normalize({ digits: limit.digits.slice(1), exclusive: limit.exclusive }, lower);
}

function normalize(limit: FracLimit, lower: boolean): FracLimit {
  if (limit === null || limit === "dead" || limit.digits !== "") return limit;
  // The bound's fraction is exhausted: the rest compares with 0.
  if (lower) return limit.exclusive ? limit : null; // > 0 needs a nonzero digit; ≥ 0 always holds
  return limit.exclusive ? "dead" : limit; // < 0 never holds; ≤ 0 needs only zeros
}

/** Whether the fraction may end here (the digits not written are zeros). */
function mayEnd(lower: FracLimit, upper: FracLimit): boolean {
  if (lower === "dead" || upper === "dead") return false;
  // Normalized limits have no trailing zeros, so "the rest is 0" compares with "" only.
  const lowerOk = lower === null || (lower.digits === "" && !lower.exclusive);
  const upperOk = upper === null || !(upper.exclusive && upper.digits === "");
  return lowerOk && upperOk;
}

/**
 * Alternatives for the non-empty digit strings of length ≤ `room` that, read after what was
 * already read, keep both limits (the string may stop wherever `mayEnd` allows).
 */
function fractionDigits(lower: FracLimit, upper: FracLimit, room: number): string[] {
  if (room <= 0 || lower === "dead" || upper === "dead") return [];
  if (lower === null && upper === null) return [`[0-9]{1,${room}}`];
  if (lower === null && upper !== null && upper.digits === "") return [`"0"{1,${room}}`]; // at most an integer bound: zeros
  // Digits with the same outcome share one class.
  const groups = new Map<string, { digits: number[]; lower: FracLimit; upper: FracLimit }>();
  for (let d = 0; d <= 9; d++) {
    const l = afterDigit(lower, d, true);
    const u = afterDigit(upper, d, false);
    if (l === "dead" || u === "dead") continue;
    const key = JSON.stringify([l, u]);
    const group = groups.get(key) ?? { digits: [], lower: l, upper: u };
    group.digits.push(d);
    groups.set(key, group);
  }
  const alts: string[] = [];
  for (const g of groups.values()) {
    const first = g.digits[0];
    const last = g.digits[g.digits.length - 1];
    const head = first === last ? literal(String(first)) : `[${first}-${last}]`;
    const rest = fractionDigits(g.lower, g.upper, room - 1);
    const tail = rest.length === 0 ? "" : rest.length === 1 ? rest[0] : `( ${rest.join(" | ")} )`;
    if (mayEnd(g.lower, g.upper)) alts.push(tail ? `${head} ( ${tail} )?` : head);
    else if (tail) alts.push(`${head} ${rest.length === 1 ? `( ${tail} )` : tail}`);
  }
  return alts;
}

/** `k` with an optional fraction keeping both limits, in at most 15 significant digits. */
function withFraction(k: number, lower: FracLimit, upper: FracLimit): string[] {
  const digits = fractionDigits(lower, upper, MAX_DIGITS - String(k).length);
  const fraction = digits.length === 0 ? "" : `"." ( ${digits.join(" | ")} )`;
  if (mayEnd(lower, upper)) return [fraction ? `${literal(String(k))} ( ${fraction} )?` : literal(String(k))];
  return fraction ? [`${literal(String(k))} ${fraction}`] : [];
}

/**
 * Alternatives for the non-negative decimals m (`k` or `k.f`, no sign) with lo ≤ m (lo < m when
 * `loEx`) and m ≤ hi (m < hi when `hiEx`; no upper bound when hi is undefined). Uses the fixed
 * rule `frac` (a point and 1–15 digits) away from the bounds.
 */
function magnitudes(lo: number, loEx: boolean, hi: number | undefined, hiEx: boolean): string[] {
  const L = decimal(lo);
  const H = hi === undefined ? undefined : decimal(hi);
  if (H && (H.int < L.int || hi! < lo || (hi === lo && (loEx || hiEx)))) return [];
  const lower = normalize({ digits: L.frac, exclusive: loEx }, true);
  const upper = H ? normalize({ digits: H.frac, exclusive: hiEx }, false) : null;
  if (H && H.int === L.int) return withFraction(L.int, lower, upper);
  const alts = withFraction(L.int, lower, null);
  // The integer below an upper bound keeps to 15 significant digits too (4.999… must not read as 5).
  const near = H && H.int - 1 > L.int ? H.int - 1 : undefined;
  const from = L.int + 1;
  const to = H ? H.int - 2 : MAX_SAFE;
  if (from <= to) alts.push(`( ${digitRange(from, to)} ) frac?`);
  if (near !== undefined) alts.push(...withFraction(near, null, null));
  if (H) alts.push(...withFraction(H.int, null, upper));
  return alts;
}

/**
 * GBNF for the numbers within the bounds (either may be absent; integers or decimals with at most
 * 15 significant digits, see `decimalBound`), or null when no number is within them. Bounds beyond
 * ±10^15 are dropped (no number written reaches them), or make it null (a minimum above 10^15). Throws nothing; the caller checks the bounds.
 */
export function boundedNumber(lower: NumberBound | undefined, upper: NumberBound | undefined): string | null {
  // A lower bound above 10^15 (an upper one below -10^15): no number written reaches it. Its
  // integer part is no digit string either (`String(1e21)` is `1e+21`: review of issue 26).
  if ((lower && lower.value > LIMIT) || (upper && upper.value < -LIMIT)) return null;
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
