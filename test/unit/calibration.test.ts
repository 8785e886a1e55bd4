/**
 * Temperature calibration (issue 11, item 4): on synthetic labelled examples whose answers are
 * drawn from softmax(u) while the "model" reports u × 2.5 (over-confident), the fitted
 * temperature comes back near 2.5 and the log-loss, ECE and Brier score all improve.
 */
import {
  type LabelledScores,
  brierScore,
  expectedCalibrationError,
  fitTemperature,
  logLoss,
} from "../../src/services/decisions/calibration.js";

/** mulberry32: a small seeded PRNG, so the data is the same on every run. */
function rng(seed: number): () => number {
  let a = seed;
  return () => {
    a = (a + 0x6d2b79f5) | 0;
    let t = Math.imul(a ^ (a >>> 15), 1 | a);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

function synthetic(n: number, scale: number): LabelledScores[] {
  const random = rng(42);
  const normal = () => Math.sqrt(-2 * Math.log(1 - random())) * Math.cos(2 * Math.PI * random());
  return Array.from({ length: n }, () => {
    const u = [normal() * 1.5, normal() * 1.5, normal() * 1.5];
    const w = u.map(Math.exp);
    const sum = w.reduce((a, b) => a + b, 0);
    let r = random() * sum;
    let truth = 0;
    while (truth < 2 && r > w[truth]) r -= w[truth++];
    return { logprobs: u.map((x) => x * scale - 5), truth };
  });
}

test("when a model is over-confident by 2.5×, then the fitted temperature is about 2.5 and every measure improves", () => {
  const examples = synthetic(4000, 2.5);
  const t = fitTemperature(examples);
  expect(t).toBeGreaterThan(2.2);
  expect(t).toBeLessThan(2.8);
  expect(logLoss(examples, t)).toBeLessThan(logLoss(examples, 1));
  expect(expectedCalibrationError(examples, t)).toBeLessThan(expectedCalibrationError(examples, 1));
  expect(brierScore(examples, t)).toBeLessThan(brierScore(examples, 1));
  // The minimum: nearby temperatures do no better.
  expect(logLoss(examples, t)).toBeLessThanOrEqual(logLoss(examples, t * 1.05));
  expect(logLoss(examples, t)).toBeLessThanOrEqual(logLoss(examples, t / 1.05));
});

test("when the model is already calibrated, then the fitted temperature stays near 1", () => {
  const t = fitTemperature(synthetic(4000, 1));
  expect(t).toBeGreaterThan(0.85);
  expect(t).toBeLessThan(1.15);
});

test("when the measures are computed by hand on two examples, then they agree", () => {
  // p = softmax([0, ln 3]) = [0.25, 0.75]; truth 1 and truth 0.
  const examples = [
    { logprobs: [0, Math.log(3)], truth: 1 },
    { logprobs: [0, Math.log(3)], truth: 0 },
  ];
  expect(logLoss(examples, 1)).toBeCloseTo((-Math.log(0.75) - Math.log(0.25)) / 2, 12);
  expect(brierScore(examples, 1)).toBeCloseTo((0.25 ** 2 + 0.25 ** 2 + 0.75 ** 2 + 0.75 ** 2) / 2, 12);
  // Both in the 0.7–0.8 bin with confidence 0.75 and accuracy 0.5.
  expect(expectedCalibrationError(examples, 1)).toBeCloseTo(0.25, 12);
  expect(() => fitTemperature([])).toThrow();
});
