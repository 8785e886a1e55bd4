/**
 * Money arithmetic. Every amount is a bigint of micro-USD (DESIGN §3 Money); prices are kept as
 * micro-USD per million tokens so that catalog prices with up to six decimals stay exact.
 */

/** A model's token prices in micro-USD per million tokens (= the catalog's USD-per-million × 10⁶). */
export interface TokenPrices {
  inputPerMillionMicros: bigint;
  outputPerMillionMicros: bigint;
  cachedInputPerMillionMicros: bigint;
}

/** Token counts of one request (integers ≥ 0); `cachedPromptTokens` ⊆ `promptTokens`. */
export interface TokenUsage {
  promptTokens: number;
  completionTokens: number;
  cachedPromptTokens: number;
}

const MILLION = 1_000_000n;

/**
 * Parses a non-negative decimal USD amount (number or string, at most 6 decimals) into micro-USD.
 * `usdToMicros("0.02") === 20000n`.
 * @throws RangeError for negatives, non-numbers or more than 6 decimals.
 */
export function usdToMicros(value: number | string): bigint {
  const text = typeof value === "number" ? numberToPlain(value) : value.trim();
  const match = /^(\d+)(?:\.(\d{1,6}))?$/.exec(text);
  if (!match) throw new RangeError(`not a USD amount with at most 6 decimals: ${String(value)}`);
  return BigInt(match[1]) * MILLION + BigInt((match[2] ?? "").padEnd(6, "0"));
}

/** Formats micro-USD as a plain decimal number of USD (for `*_per_million_usd` display fields). */
export function microsToUsdNumber(micros: bigint): number {
  return Number(micros) / 1e6;
}

function numberToPlain(n: number): string {
  if (!Number.isFinite(n)) return String(n);
  // toFixed(6) keeps values like 0.000001 out of exponent notation; a number it changes has more
  // than 6 decimals and is refused rather than rounded through a float.
  const fixed = n.toFixed(6);
  if (Number(fixed) !== n) return String(n);
  return fixed.replace(/\.?0+$/, "");
}

/**
 * Cost of one request in micro-USD: `uncached_prompt × input + cached_prompt × cached_input +
 * completion × output`, with prices per million tokens, rounded half up once (DESIGN §3 Money).
 */
export function costMicros(usage: TokenUsage, prices: TokenPrices): bigint {
  const cached = BigInt(Math.min(usage.cachedPromptTokens, usage.promptTokens));
  const uncached = BigInt(usage.promptTokens) - cached;
  const scaled =
    uncached * prices.inputPerMillionMicros +
    cached * prices.cachedInputPerMillionMicros +
    BigInt(usage.completionTokens) * prices.outputPerMillionMicros;
  return (scaled + MILLION / 2n) / MILLION;
}
