/**
 * Log-probability scoring over the OpenAI-compatible completions API (decisions, issue 11, item
 * 3), as data and pure functions. Every (question, answer) pair is one prompt — the question's
 * prompt, then a space and the answer (and a newline when the question asks for an end marker) —
 * sent with `echo: true, logprobs: 1, max_tokens: 1, temperature: 0`: the answer echoes each
 * prompt token with its log-probability (`choices[i].logprobs.{tokens, token_logprobs,
 * text_offset}`; vLLM, SGLang, llama.cpp server's OpenAI route with `echo`, OpenAI's legacy
 * endpoint). An answer's log-probability is the sum over the tokens past the question's prompt
 * (by `text_offset`, in code points, as those servers count), up to the end of the prompt (the one
 * generated token is not part of it).
 *
 * Bounded work (issue 11 review, finding 1): `planUpstreamScoring` sizes the request by
 * arithmetic alone (no per-answer prompt is built), so the limits and the credit reservation come
 * before any of them exists; `promptChunks` then builds the prompts a chunk at a time (at most
 * `UPSTREAM_SCORING_LIMITS.chunkPrompts` prompts and `chunkBytes` bytes each), one completions
 * request per chunk.
 *
 * Metering (issue 11 review, finding 2) — DESIGN departure: the embedded engine charges the shared
 * prefix once because it evaluates it once; an upstream is sent every prompt whole and recomputes
 * each (vLLM does not reuse its prefix cache for requests asking prompt log-probabilities), so an
 * upstream decision is charged what the upstream processed: the sum of its `usage.prompt_tokens`
 * (without usage: the echoed tokens of every prompt), never more than the reservation bound.
 */
import type { ChatMessage, ScoreQuestion } from "../../engine.js";

/** Bounds on one upstream scoring request (issue 11 review, finding 1). */
export const UPSTREAM_SCORING_LIMITS = {
  /** Most prompt bytes one request sends upstream in all (state × prompts, roughly); over it → 400. */
  promptBytes: 16 * 1024 * 1024,
  /** Most prompts in one completions request. */
  chunkPrompts: 64,
  /** Most prompt bytes in one completions request (a single larger prompt goes alone). */
  chunkBytes: 512 * 1024,
} as const;

/** Tokens allowed per prompt over its UTF-8 bytes (BOS and the like) in the reservation bound. */
const SPECIAL_TOKENS_PER_PROMPT = 2;

/** The end marker appended to an answer when its question asks for one (`ScoreQuestion.endMarker`). */
export const END_MARKER = "\n";

/** One prompt sent upstream: which question and answer, and where the answer starts. */
export interface ScoringPrompt {
  question: number;
  /** The answer's index in its question. */
  answer: number;
  /** The question's prompt, in code points (where the answer starts). */
  contextChars: number;
  /** The whole prompt, in code points. */
  totalChars: number;
  text: string;
}

/** One question as the upstream gets it: its prompt text, once, and the answers to append. */
interface PlannedQuestion {
  context: string;
  contextChars: number;
  contextBytes: number;
  answers: string[];
  /** The end marker appended after each answer ("" when none). */
  marker: string;
}

/** What one request will send upstream, sized before any per-answer prompt is built. */
export interface UpstreamScoringPlan {
  questions: PlannedQuestion[];
  /** Prompts in all (one per question × answer). */
  prompts: number;
  /** UTF-8 bytes of every prompt together. */
  promptBytes: number;
  /**
   * Most prompt tokens the upstream can process: per prompt its UTF-8 bytes + 2 (no tokenizer
   * makes more tokens than bytes, special tokens aside). The reservation and the charge ceiling.
   */
  tokenBound: number;
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

/**
 * A lower bound on the UTF-8 bytes of every prompt of `questions`, from string lengths alone
 * (O(questions + answers), no text is built, flattened or scanned; review 11b, finding M3): a
 * string has at least as many UTF-8 bytes as UTF-16 units (an astral character is 2 units and 4
 * bytes, a lone surrogate 1 unit and 3 bytes as U+FFFD), so over the limit here is over it for sure.
 */
export function promptBytesAtLeast(questions: ScoreQuestion[]): number {
  let bytes = 0;
  for (const q of questions) {
    let context = 0;
    let parts = 0;
    for (const m of q.messages) {
      if (m.content.length === 0) continue;
      context += m.content.length;
      parts++;
    }
    context += Math.max(0, parts - 1); // the newlines `plainPrompt` puts between messages
    const marker = q.endMarker ? END_MARKER.length : 0;
    bytes += q.candidates.length * (context + 1 + marker);
    for (const a of q.candidates) bytes += a.length;
  }
  return bytes;
}

/**
 * Sizes the upstream work of `questions` by arithmetic: each question's prompt text is made once
 * (not once per answer), and the bytes of every (question, answer) prompt are summed as
 * `answers × (context + 1 + marker) + Σ answer bytes`. Cost: O(Σ prompt text + Σ answer text).
 */
export function planUpstreamScoring(questions: ScoreQuestion[]): UpstreamScoringPlan {
  let prompts = 0;
  let promptBytes = 0;
  const planned = questions.map((q): PlannedQuestion => {
    const context = plainPrompt(q.messages);
    const contextBytes = Buffer.byteLength(context, "utf8");
    const marker = q.endMarker ? END_MARKER : "";
    prompts += q.candidates.length;
    promptBytes += q.candidates.length * (contextBytes + 1 + marker.length);
    for (const a of q.candidates) promptBytes += Buffer.byteLength(a, "utf8");
    return { context, contextChars: codePoints(context), contextBytes, answers: q.candidates, marker };
  });
  return { questions: planned, prompts, promptBytes, tokenBound: promptBytes + SPECIAL_TOKENS_PER_PROMPT * prompts };
}

/**
 * The prompts of `plan`, built lazily a chunk at a time (questions in order, answers in order
 * within each): at most `chunkPrompts` prompts and `chunkBytes` bytes per chunk, at least one.
 */
export function* promptChunks(
  plan: UpstreamScoringPlan,
  limits: { chunkPrompts: number; chunkBytes: number } = UPSTREAM_SCORING_LIMITS,
): Generator<ScoringPrompt[]> {
  let chunk: ScoringPrompt[] = [];
  let bytes = 0;
  for (const [question, q] of plan.questions.entries()) {
    for (const [answer, a] of q.answers.entries()) {
      const size = q.contextBytes + 1 + Buffer.byteLength(a, "utf8") + q.marker.length;
      if (chunk.length > 0 && (chunk.length >= limits.chunkPrompts || bytes + size > limits.chunkBytes)) {
        yield chunk;
        chunk = [];
        bytes = 0;
      }
      chunk.push({
        question,
        answer,
        contextChars: q.contextChars,
        totalChars: q.contextChars + 1 + codePoints(a) + codePoints(q.marker),
        text: `${q.context} ${a}${q.marker}`,
      });
      bytes += size;
    }
  }
  if (chunk.length > 0) yield chunk;
}

/**
 * Most prompt tokens the upstream can process for `chunk`: per prompt its UTF-8 bytes + 2, as
 * `UpstreamScoringPlan.tokenBound` counts (what a chunk in flight is charged when scoring stops;
 * review 11b, finding M1). O(chunk bytes).
 */
export function chunkTokenBound(chunk: ScoringPrompt[]): number {
  return chunk.reduce((n, p) => n + Buffer.byteLength(p.text, "utf8") + SPECIAL_TOKENS_PER_PROMPT, 0);
}

/** Every (question, answer) pair as a prompt, in one list (tests; the engine uses `promptChunks`). */
export function scoringPrompts(questions: ScoreQuestion[]): ScoringPrompt[] {
  return [...promptChunks(planUpstreamScoring(questions), { chunkPrompts: Infinity, chunkBytes: Infinity })].flat();
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
  | {
      ok: true;
      logprobs: number[];
      answerTokens: number[];
      /** Per prompt, its echoed tokens (the generated one left out). */
      promptTokens: number[];
      /** The upstream's `usage.prompt_tokens`; null when it sent none. */
      usagePromptTokens: number | null;
    }
  | { ok: false; reason: "no_logprobs" | "malformed" };

/**
 * Reads a completions answer for `prompts`: per prompt, the summed log-probability of the answer's
 * tokens (the end marker's included) and how many there are, and how many tokens the prompt has;
 * and the upstream's reported prompt usage (for metering).
 * `no_logprobs`: the answer has no echoed prompt log-probabilities (the upstream ignores `echo` or
 * `logprobs`); `malformed`: not one choice per prompt, or arrays that do not line up.
 */
export function scoredAnswers(json: unknown, prompts: ScoringPrompt[]): ScoringAnswer {
  const choices = (json as { choices?: unknown } | null)?.choices;
  if (!Array.isArray(choices) || choices.length !== prompts.length) return { ok: false, reason: "malformed" };
  const logprobs = new Array<number>(prompts.length);
  const answerTokens = new Array<number>(prompts.length);
  const promptTokens = new Array<number>(prompts.length);
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
    let echoed = 0;
    for (let t = 0; t < tokens.length; t++) {
      const offset = offsets[t];
      const token = tokens[t];
      if (typeof offset !== "number" || typeof token !== "string") return { ok: false, reason: "malformed" };
      if (offset >= p.totalChars) break; // the generated token
      echoed++;
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
  const usage = (json as { usage?: { prompt_tokens?: unknown } | null }).usage?.prompt_tokens;
  const usagePromptTokens = typeof usage === "number" && Number.isInteger(usage) && usage >= 0 ? usage : null;
  return { ok: true, logprobs, answerTokens, promptTokens, usagePromptTokens };
}
