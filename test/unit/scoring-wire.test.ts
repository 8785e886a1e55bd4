/**
 * Reading echoed prompt log-probabilities (issue 11, item 3; `scoring-wire.ts`): which echoed
 * tokens are the answer's (by `text_offset`, in code points), the generated token left out, and
 * the refusals (no log-probabilities, answers that do not line up).
 */
import {
  planUpstreamScoring,
  promptChunks,
  scoredAnswers,
  scoringPrompts,
} from "../../src/inference/engines/openai-compatible/scoring-wire.js";

const prompts = scoringPrompts([
  { messages: [{ role: "user", content: "Is it é?\nAnswer:" }], candidates: ["yes", "no"], field: "q" },
]);

/** An echo answer for `texts` split into `tokens` (each choice), with the given log-probabilities. */
function echo(tokens: string[][], logprobs: Array<Array<number | null>>) {
  return {
    choices: tokens.map((t, index) => {
      const offsets: number[] = [];
      let at = 0;
      for (const token of t) {
        offsets.push(at);
        at += [...token].length;
      }
      return { index, logprobs: { tokens: t, token_logprobs: logprobs[index], text_offset: offsets } };
    }),
  };
}

test("when the answer's tokens follow the prompt, then only they are summed and the generated token is left out", () => {
  expect(prompts.map((p) => p.text)).toEqual(["Is it é?\nAnswer: yes", "Is it é?\nAnswer: no"]);
  const answer = scoredAnswers(
    echo(
      [
        ["Is", " it", " é?", "\nAnswer:", " y", "es", " the"],
        ["Is", " it", " é?", "\nAnswer:", " no", " the"],
      ],
      [
        [null, -1, -1, -1, -0.5, -0.25, -9],
        [null, -1, -1, -1, -2, -9],
      ],
    ),
    prompts,
  );
  expect(answer).toEqual({
    ok: true,
    logprobs: [-0.75, -2],
    answerTokens: [2, 1],
    promptTokens: [6, 5],
    usagePromptTokens: null,
  });
});

test("when a token straddles the end of the prompt, then it counts as the answer's", () => {
  const answer = scoredAnswers(
    echo(
      [
        ["Is", " it", " é?", "\nAnswer", ": yes"],
        ["Is", " it", " é?", "\nAnswer", ": no"],
      ],
      [
        [null, -1, -1, -1, -0.5],
        [null, -1, -1, -1, -2],
      ],
    ),
    prompts,
  );
  expect(answer).toMatchObject({ ok: true, logprobs: [-0.5, -2], answerTokens: [1, 1] });
});

test("when the upstream sends no log-probabilities or choices that do not line up, then it says which", () => {
  expect(
    scoredAnswers(
      {
        choices: [
          { index: 0, logprobs: null },
          { index: 1, logprobs: null },
        ],
      },
      prompts,
    ),
  ).toEqual({
    ok: false,
    reason: "no_logprobs",
  });
  expect(scoredAnswers({ choices: [{ index: 0 }] }, prompts)).toEqual({ ok: false, reason: "malformed" });
  const nulls = echo(
    [
      ["Is", " it", " é?", "\nAnswer:", " yes"],
      ["Is", " it", " é?", "\nAnswer:", " no"],
    ],
    [
      [null, -1, -1, -1, null],
      [null, -1, -1, -1, -2],
    ],
  );
  expect(scoredAnswers(nulls, prompts)).toEqual({ ok: false, reason: "no_logprobs" });
});

describe("upstream work sized before it is built (issue 11 review, findings 1 and 5)", () => {
  const questions = [
    {
      messages: [{ role: "user" as const, content: "Input:\nçà et là\nAnswer:" }],
      candidates: ["yes", "no"],
      field: "a",
    },
    {
      messages: [{ role: "user" as const, content: "Input:\nçà et là\nWhich?" }],
      candidates: ["1", "10", "ü"],
      field: "b",
      endMarker: true,
    },
  ];

  test("when the plan is sized by arithmetic, then its bytes are the bytes of the prompts later built, and its bound adds 2 per prompt", () => {
    const plan = planUpstreamScoring(questions);
    const built = scoringPrompts(questions);
    expect(built.map((p) => p.text)).toEqual([
      "Input:\nçà et là\nAnswer: yes",
      "Input:\nçà et là\nAnswer: no",
      "Input:\nçà et là\nWhich? 1\n",
      "Input:\nçà et là\nWhich? 10\n",
      "Input:\nçà et là\nWhich? ü\n",
    ]);
    expect(plan.prompts).toBe(5);
    expect(plan.promptBytes).toBe(built.reduce((n, p) => n + Buffer.byteLength(p.text), 0));
    expect(plan.tokenBound).toBe(plan.promptBytes + 2 * 5);
    // The end marker is part of the answer's span, the question's prompt is not.
    expect(built[3]).toMatchObject({ question: 1, answer: 1, contextChars: 22, totalChars: 22 + 1 + 2 + 1 });
  });

  test("when prompts are built in chunks, then no chunk passes the prompt or byte limit, and a prompt larger than the byte limit goes alone", () => {
    const plan = planUpstreamScoring(questions);
    const byCount = [...promptChunks(plan, { chunkPrompts: 2, chunkBytes: Infinity })];
    expect(byCount.map((c) => c.length)).toEqual([2, 2, 1]);
    expect(byCount.flat().map((p) => [p.question, p.answer])).toEqual([
      [0, 0],
      [0, 1],
      [1, 0],
      [1, 1],
      [1, 2],
    ]);
    const byBytes = [...promptChunks(plan, { chunkPrompts: 64, chunkBytes: 60 })];
    for (const chunk of byBytes) {
      const bytes = chunk.reduce((n, p) => n + Buffer.byteLength(p.text), 0);
      expect(chunk.length === 1 || bytes <= 60).toBe(true);
    }
    expect(byBytes.flat()).toHaveLength(5);
    expect([...promptChunks(plan, { chunkPrompts: 64, chunkBytes: 1 })].map((c) => c.length)).toEqual([1, 1, 1, 1, 1]);
  });
});
