/** Money arithmetic: exact micro-USD, rounding half up once per request (DESIGN §3 Money). */
import { costMicros, microsToUsdNumber, usdToMicros } from "../../src/shared/money.js";

describe("usdToMicros", () => {
  test("when given decimal USD, then it is exact micro-USD", () => {
    expect(usdToMicros("0.02")).toBe(20_000n);
    expect(usdToMicros(0.1)).toBe(100_000n);
    expect(usdToMicros(15)).toBe(15_000_000n);
    expect(usdToMicros("0.000001")).toBe(1n);
    expect(usdToMicros(0.000001)).toBe(1n);
  });

  test("when the amount is negative or too precise, then RangeError", () => {
    expect(() => usdToMicros("-1")).toThrow(RangeError);
    expect(() => usdToMicros("0.0000001")).toThrow(RangeError);
    expect(() => usdToMicros("abc")).toThrow(RangeError);
    expect(() => usdToMicros(0.0000001)).toThrow(RangeError);
    expect(() => usdToMicros(1.1234567)).toThrow(RangeError);
  });

  test("when micros go back to USD, then the number matches", () => {
    expect(microsToUsdNumber(20_000n)).toBe(0.02);
  });
});

describe("costMicros", () => {
  const prices = {
    inputPerMillionMicros: 20_000n,
    outputPerMillionMicros: 50_000n,
    cachedInputPerMillionMicros: 10_000n,
  };

  test("when tokens are priced per million, then the sum is rounded half up once", () => {
    // 5 × 0.02 + 30 × 0.05 = 1.6 µUSD → 2
    expect(costMicros({ promptTokens: 5, completionTokens: 30, cachedPromptTokens: 0 }, prices)).toBe(2n);
    // 25 × 0.02 = 0.5 → 1 (half up); 24 × 0.02 = 0.48 → 0
    expect(costMicros({ promptTokens: 25, completionTokens: 0, cachedPromptTokens: 0 }, prices)).toBe(1n);
    expect(costMicros({ promptTokens: 24, completionTokens: 0, cachedPromptTokens: 0 }, prices)).toBe(0n);
  });

  test("when prompt tokens are cached, then they use the cached price", () => {
    const big = {
      inputPerMillionMicros: 3_000_000n,
      outputPerMillionMicros: 15_000_000n,
      cachedInputPerMillionMicros: 300_000n,
    };
    // 1000 uncached × 3 + 1000 cached × 0.3 + 100 × 15 = 3000 + 300 + 1500
    expect(costMicros({ promptTokens: 2000, completionTokens: 100, cachedPromptTokens: 1000 }, big)).toBe(4800n);
  });

  test("when counts are huge, then bigint keeps the result exact", () => {
    const big = {
      inputPerMillionMicros: 1_000_000n,
      outputPerMillionMicros: 1_000_000n,
      cachedInputPerMillionMicros: 1_000_000n,
    };
    expect(costMicros({ promptTokens: 2 ** 31, completionTokens: 2 ** 31, cachedPromptTokens: 0 }, big)).toBe(
      2n ** 32n,
    );
  });
});
