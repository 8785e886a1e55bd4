/**
 * Temperature calibration of decision probabilities (issue 11, item 4): given each labelled
 * example's answer log-probabilities and the index of the right answer, the temperature T that
 * minimises the log-loss of `softmax(logprob / T)`, and the two calibration measures printed
 * before and after: expected calibration error (ECE; top-answer confidence vs accuracy over
 * equal-width bins) and the Brier score (mean squared error of the probability vector against
 * the one-hot answer, summed over answers). Pure functions; `npm run calibrate` drives them.
 */
import type { CandidateScore } from "../../inference/engine.js";
import { answerProbabilities } from "./decisions.protocol.js";

/** One labelled example: the model's answer log-probabilities and which answer is right. */
export interface LabelledScores {
  logprobs: number[];
  truth: number;
}

const asScores = (logprobs: number[]): CandidateScore[] => logprobs.map((logprob) => ({ logprob, tokens: 1 }));

/** Each example's probabilities at temperature `t` (the service's softmax). */
export function probabilitiesAt(examples: LabelledScores[], t: number): number[][] {
  return examples.map((e) => answerProbabilities(asScores(e.logprobs), t));
}

/** Mean negative log-likelihood of the right answers at temperature `t` (probabilities floored at 1e-12). */
export function logLoss(examples: LabelledScores[], t: number): number {
  const ps = probabilitiesAt(examples, t);
  return ps.reduce((s, p, i) => s - Math.log(Math.max(p[examples[i].truth], 1e-12)), 0) / examples.length;
}

/** Mean over examples of Σ_answers (p − onehot)². */
export function brierScore(examples: LabelledScores[], t: number): number {
  const ps = probabilitiesAt(examples, t);
  let total = 0;
  ps.forEach((p, i) => {
    p.forEach((pi, j) => {
      const y = j === examples[i].truth ? 1 : 0;
      total += (pi - y) ** 2;
    });
  });
  return total / examples.length;
}

/** Expected calibration error over `bins` equal-width confidence bins of the top answer. */
export function expectedCalibrationError(examples: LabelledScores[], t: number, bins = 10): number {
  const ps = probabilitiesAt(examples, t);
  const count = new Array<number>(bins).fill(0);
  const confidence = new Array<number>(bins).fill(0);
  const correct = new Array<number>(bins).fill(0);
  ps.forEach((p, i) => {
    let best = 0;
    for (let j = 1; j < p.length; j++) if (p[j] > p[best]) best = j;
    const b = Math.min(bins - 1, Math.floor(p[best] * bins));
    count[b]++;
    confidence[b] += p[best];
    if (best === examples[i].truth) correct[b]++;
  });
  let ece = 0;
  for (let b = 0; b < bins; b++) {
    if (count[b] > 0) ece += (count[b] / ps.length) * Math.abs(correct[b] / count[b] - confidence[b] / count[b]);
  }
  return ece;
}

/** Temperatures the fit searches, as the catalog accepts them (`decision_temperature` ≤ 100). */
export const TEMPERATURE_RANGE = { min: 0.01, max: 100 } as const;

/**
 * The temperature minimising `logLoss`: golden-section search on log T over `TEMPERATURE_RANGE`
 * (the loss is smooth and, for temperature scaling, unimodal in log T), to ~1e-6 relative.
 * @throws Error for no examples.
 */
export function fitTemperature(examples: LabelledScores[]): number {
  if (examples.length === 0) throw new Error("no labelled examples");
  const f = (x: number) => logLoss(examples, Math.exp(x));
  let a = Math.log(TEMPERATURE_RANGE.min);
  let b = Math.log(TEMPERATURE_RANGE.max);
  const g = (Math.sqrt(5) - 1) / 2;
  let c = b - g * (b - a);
  let d = a + g * (b - a);
  let fc = f(c);
  let fd = f(d);
  while (b - a > 1e-6) {
    if (fc < fd) {
      b = d;
      d = c;
      fd = fc;
      c = b - g * (b - a);
      fc = f(c);
    } else {
      a = c;
      c = d;
      fc = fd;
      d = a + g * (b - a);
      fd = f(d);
    }
  }
  return Math.exp((a + b) / 2);
}
