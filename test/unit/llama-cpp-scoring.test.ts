/**
 * What the embedded engine charges for a decision (issue 11, item 5; review finding 4):
 * `planScoring` counts the shared prefix once, each question's own tokens, and every answer's
 * tokens, so a request with many answers pays for evaluating each of them.
 */
import type { Token } from "node-llama-cpp";
import { hasPrefixAnswers } from "../../src/services/decisions/decisions.protocol.js";
import { planScoring } from "../../src/inference/engines/llama-cpp/scoring.js";

const t = (...ids: number[]) => ids as Token[];

test("when two questions share a prefix, then it is counted once and every answer's tokens are counted", () => {
  const plan = planScoring(
    [t(1, 2, 3, 4), t(1, 2, 3, 5, 6)],
    [
      [t(7), t(8, 9)],
      [t(10), t(11), t(12, 13, 14)],
    ],
    t(0)[0],
  );
  expect(plan.prefix).toEqual([0, 1, 2, 3]);
  expect(plan.questions.map((q) => q.suffix)).toEqual([[4], [5, 6]]);
  // BOS + shared 3, suffixes 1 + 2, answers 1 + 2 + 1 + 1 + 3.
  expect(plan.promptTokens).toBe(4 + 3 + 8);
  // More answers, more tokens charged.
  const more = planScoring([t(1, 2, 3, 4)], [[t(7), t(8, 9), t(20), t(21, 22)]], null);
  const fewer = planScoring([t(1, 2, 3, 4)], [[t(7), t(8, 9)]], null);
  expect(more.promptTokens - fewer.promptTokens).toBe(3);
});

test("when one answer is a prefix of another, then the question asks for an end marker", () => {
  expect(hasPrefixAnswers(["1", "10", "2"])).toBe(true);
  expect(hasPrefixAnswers(["big apple", "pear", "big"])).toBe(true);
  expect(hasPrefixAnswers(["yes", "no"])).toBe(false);
  expect(hasPrefixAnswers(["ab", "a!", "b"])).toBe(false);
  expect(hasPrefixAnswers(Array.from({ length: 10 }, (_, i) => String(i)))).toBe(false);
  expect(hasPrefixAnswers(Array.from({ length: 11 }, (_, i) => String(i)))).toBe(true);
});
