/**
 * Log-probabilities as OpenAI writes them (issue 26, item 3): Chat Completions'
 * `choices[].logprobs.content` and Responses' `output_text.logprobs` share one entry shape,
 * `{token, logprob, bytes, top_logprobs: [{token, logprob, bytes}]}` (natural logs, UTF-8 bytes).
 */
import type { TokenLogprob } from "../../../inference/engine.js";

/** One token's entry, OpenAI's shape. */
export interface OpenAiLogprob {
  token: string;
  logprob: number;
  bytes: number[];
  top_logprobs: Array<{ token: string; logprob: number; bytes: number[] }>;
}

/** Engine log-probabilities → OpenAI entries. */
export function openAiLogprobs(logprobs: readonly TokenLogprob[]): OpenAiLogprob[] {
  return logprobs.map((l) => ({
    token: l.token,
    logprob: l.logprob,
    bytes: l.bytes,
    top_logprobs: l.top.map((t) => ({ token: t.token, logprob: t.logprob, bytes: t.bytes })),
  }));
}
