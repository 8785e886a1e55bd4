/**
 * Log-probabilities of a generated completion on the embedded engine (issue 26, item 3).
 *
 * The completion is decoded as usual (sampling, grammar, stop strings), then its tokens are
 * evaluated again in one batch on the same sequence, teacher-forced, asking for the raw logits at
 * every position: each token's log-probability is `logit − max − log Σ exp(logit − max)` under the
 * model's own distribution (temperature 1, no truncation), the same computation decisions use
 * (`scoring.ts`, `logProbs`). So the numbers do not depend on the request's temperature or on the
 * grammar, as OpenAI's do not, and two identical requests get identical numbers. The batch costs
 * prompt-speed evaluation of the completion's tokens, paid only when log-probabilities are asked.
 */
import type { LlamaContextSequence, LlamaModel, Token } from "node-llama-cpp";
import type { TokenAlternative, TokenLogprob } from "../../engine.js";
import { logProbs } from "./scoring.js";

/**
 * The log-probabilities of `generated` (the tokens decoded after the prompt, which ends at
 * `start` in `seq`'s context), cut to the tokens whose text is in `text` (a stop string or an
 * end-of-turn marker removed from the text drops the tokens past it).
 * Leaves `seq` holding the prompt and the completion (but its last token), as decoding did.
 * @param start index in `seq.contextTokens` of the first completion token (BOS + prompt length).
 * @param top alternatives per position, 0–20.
 * @throws AppError EngineFailure when the engine returns no logits.
 */
export async function completionLogprobs(
  model: LlamaModel,
  seq: LlamaContextSequence,
  start: number,
  generated: readonly Token[],
  text: string,
  top: number,
): Promise<TokenLogprob[]> {
  if (generated.length === 0 || text === "" || start < 1) return [];
  const previous = seq.contextTokens[start - 1];
  const context = [...seq.contextTokens.slice(Math.max(0, start - CONTEXT_TOKENS), start), ...generated];
  const offset = Math.min(start, CONTEXT_TOKENS);
  /** `t`'s text at completion position `j`, continuing the tokens before it (a leading space kept). */
  const piece = (t: Token, j: number) =>
    model.detokenize([t], true, context.slice(Math.max(0, offset + j - CONTEXT_TOKENS), offset + j));
  // The tokens the answer's text is made of: up to the one that reaches its end.
  const tokens: Token[] = [];
  for (let chars = 0; tokens.length < generated.length && chars < text.length;) {
    chars += piece(generated[tokens.length], tokens.length).length;
    tokens.push(generated[tokens.length]);
  }
  if (tokens.length === 0) return [];
  // The decoded state is dropped from the prompt's last token on, then rebuilt with logits kept.
  await seq.eraseContextTokenRanges([{ start: start - 1, end: seq.nextTokenIndex }]);
  const inputs: Token[] = [previous, ...tokens.slice(0, -1)];
  const out = await seq.controlledEvaluate(
    inputs.map((t, i) => [
      t,
      {
        generateNext: {
          options: { temperature: 0 },
          totalLogitWeight: true,
          logits: { filter: { tokens: [tokens[i]], includeMax: true, includeTop: top } },
        },
      },
    ]),
  );
  return tokens.map((token, i) => {
    const next = out[i]?.next;
    const alternatives = top > 0 ? [...(next?.logits?.keys() ?? [])].slice(0, top) : [];
    const lp = logProbs(out[i], [token, ...alternatives]);
    const entry = (t: Token): TokenAlternative => {
      const text = piece(t, i);
      return { token: text, logprob: lp.get(t)!, bytes: [...Buffer.from(text, "utf8")] };
    };
    return {
      ...entry(token),
      top: alternatives
        .map(entry)
        .sort((a, b) => b.logprob - a.logprob)
        .slice(0, top),
    };
  });
}

/** Tokens before a position that decide how its token's text continues them (a leading space). */
const CONTEXT_TOKENS = 4;
