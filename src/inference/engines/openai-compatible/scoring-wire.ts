/**
 * Log-probability scoring over the OpenAI-compatible completions API (decisions, issue 11, item
 * 3), as data and pure functions. One `POST <base>/completions` carries every (question, answer)
 * pair as one prompt — the question's prompt, then a space and the answer — with
 * `echo: true, logprobs: 1, max_tokens: 1, temperature: 0`: the answer echoes each prompt token
 * with its log-probability (`choices[i].logprobs.{tokens, token_logprobs, text_offset}`; vLLM,
 * SGLang, llama.cpp server's OpenAI route with `echo`, OpenAI's legacy endpoint). An answer's
 * log-probability is the sum over the tokens past the question's prompt (by `text_offset`, in
 * code points, as those servers count), up to the end of the prompt (the one generated token
 * is not part of it). The upstream's prompt processing shares the common prefix in its own
 * prefix cache (vLLM's automatic prefix caching); what is metered follows the embedded engine's
 * rule (see `scoredAnswers`).
 */
import type { ChatMessage, ScoreQuestion } from "../../engine.js";

/** One prompt sent upstream: which question and answer, and where the answer starts. */
export interface ScoringPrompt {
  question: number;
  /** The question's prompt, in code points (where the answer starts). */
  contextChars: number;
  /** The whole prompt, in code points. */
  totalChars: number;
  text: string;
}

/** The messages as one plain-text prompt: their texts, one per line (the embedded engine's plain-text form). */
export function plainPrompt(messages: ChatMessage[]): string {
  return messages
    .map((m) => m.content)
    .filter((c) => c.length > 0)
    .join("\n");
}

const codePoints = (s: string) => {
  let n = 0;
  for (const _ of s) n++;
  return n;
};

/** Every (question, answer) pair as a prompt, questions in order, answers in order within each. */
export function scoringPrompts(questions: ScoreQuestion[]): ScoringPrompt[] {
  const out: ScoringPrompt[] = [];
  questions.forEach((q, question) => {
    const context = plainPrompt(q.messages);
    const contextChars = codePoints(context);
    for (const answer of q.candidates) {
      const text = `${context} ${answer}`;
      out.push({ question, contextChars, totalChars: contextChars + 1 + codePoints(answer), text });
    }
  });
  return out;
}

/** The completions body that asks for the prompts' log-probabilities. */
export function scoringBody(upstreamModel: string, prompts: ScoringPrompt[]): Record<string, unknown> {
  return {
    model: upstreamModel,
    prompt: prompts.map((p) => p.text),
    max_tokens: 1,
    temperature: 0,
    echo: true,
    logprobs: 1,
  };
}

interface WireLogprobs {
  tokens?: unknown;
  token_logprobs?: unknown;
  text_offset?: unknown;
}

/** What an answer is made of: per prompt its answer score and token counts. */
export type ScoringAnswer =
  | { ok: true; logprobs: number[]; answerTokens: number[]; promptTokens: string[][] }
  | { ok: false; reason: "no_logprobs" | "malformed" };

/**
 * Reads a completions answer for `prompts`: per prompt, the summed log-probability of the answer's
 * tokens and how many there are, and the prompt's echoed tokens (for metering).
 * `no_logprobs`: the answer has no echoed prompt log-probabilities (the upstream ignores `echo` or
 * `logprobs`); `malformed`: not one choice per prompt, or arrays that do not line up.
 */
export function scoredAnswers(json: unknown, prompts: ScoringPrompt[]): ScoringAnswer {
  const choices = (json as { choices?: unknown } | null)?.choices;
  if (!Array.isArray(choices) || choices.length !== prompts.length) return { ok: false, reason: "malformed" };
  const logprobs = new Array<number>(prompts.length);
  const answerTokens = new Array<number>(prompts.length);
  const promptTokens = new Array<string[]>(prompts.length);
  for (const [i, choice] of (choices as Array<{ index?: unknown; logprobs?: WireLogprobs | null }>).entries()) {
    const at = typeof choice?.index === "number" ? choice.index : i;
    if (at < 0 || at >= prompts.length || promptTokens[at] !== undefined) return { ok: false, reason: "malformed" };
    const lp = choice.logprobs;
    if (!lp || !Array.isArray(lp.token_logprobs) || !Array.isArray(lp.text_offset) || !Array.isArray(lp.tokens)) {
      return { ok: false, reason: "no_logprobs" };
    }
    const tokens = lp.tokens as unknown[];
    const values = lp.token_logprobs as unknown[];
    const offsets = lp.text_offset as unknown[];
    if (tokens.length !== values.length || tokens.length !== offsets.length) return { ok: false, reason: "malformed" };
    const p = prompts[at];
    let sum = 0;
    let count = 0;
    const echoed: string[] = [];
    for (let t = 0; t < tokens.length; t++) {
      const offset = offsets[t];
      const token = tokens[t];
      if (typeof offset !== "number" || typeof token !== "string") return { ok: false, reason: "malformed" };
      if (offset >= p.totalChars) break; // the generated token
      echoed.push(token);
      // A token reaching past the question's prompt belongs to the answer.
      if (offset + codePoints(token) <= p.contextChars) continue;
      const value = values[t];
      if (typeof value !== "number") return { ok: false, reason: "no_logprobs" };
      sum += value;
      count++;
    }
    if (count === 0) return { ok: false, reason: "no_logprobs" };
    logprobs[at] = sum;
    answerTokens[at] = count;
    promptTokens[at] = echoed;
  }
  return { ok: true, logprobs, answerTokens, promptTokens };
}

/**
 * Prompt tokens as the embedded engine counts them (issue 11, item 5): the tokens every prompt
 * starts with, once; per question, the tokens its prompts share past that; per answer, the rest.
 */
export function meteredPromptTokens(prompts: ScoringPrompt[], echoed: string[][]): number {
  const common = (lists: string[][]) => {
    let n = Math.min(...lists.map((l) => l.length));
    for (const l of lists) {
      let i = 0;
      while (i < n && l[i] === lists[0][i]) i++;
      n = i;
    }
    return n;
  };
  const shared = common(echoed);
  let total = shared;
  const byQuestion = new Map<number, string[][]>();
  prompts.forEach((p, i) => byQuestion.set(p.question, [...(byQuestion.get(p.question) ?? []), echoed[i]]));
  for (const lists of byQuestion.values()) {
    const own = common(lists);
    total += own - shared;
    for (const l of lists) total += l.length - own;
  }
  return total;
}
