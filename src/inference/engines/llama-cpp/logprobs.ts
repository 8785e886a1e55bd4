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
  const pieces = completionPieces(model, generated, (j) =>
    context.slice(Math.max(0, offset + j - CONTEXT_TOKENS), offset + j),
  );
  // The tokens the answer's text is made of: up to the one whose bytes reach its end.
  const textBytes = Buffer.byteLength(text, "utf8");
  let count = 0;
  for (let bytes = 0; count < pieces.length && bytes < textBytes; count++) bytes += pieces[count].bytes.length;
  const tokens = generated.slice(0, count);
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
      token: pieces[i].token,
      bytes: pieces[i].bytes,
      top: alternatives
        .map(entry)
        .sort((a, b) => b.logprob - a.logprob)
        .slice(0, top),
    };
  });
}

/**
 * Each generated token's text and UTF-8 bytes, so that the bytes joined are the completion's
 * bytes. A token alone may be part of a character (byte-fallback tokens, byte-level BPE): it
 * decodes to U+FFFD. Such runs (up to 4 tokens, the longest UTF-8 character) are decoded together;
 * when the run has one byte per token each gets its byte, else the run's bytes go to its last token.
 * A token whose bytes are not whole characters is written as OpenAI does, `bytes:\xe6\x97`.
 */
function completionPieces(
  model: LlamaModel,
  tokens: readonly Token[],
  before: (j: number) => Token[],
): Array<{ token: string; bytes: number[] }> {
  const out: Array<{ token: string; bytes: number[] }> = [];
  for (let j = 0; j < tokens.length;) {
    let end = j + 1;
    let text = model.detokenize(tokens.slice(j, end), true, before(j));
    while (text.endsWith("\uFFFD") && end < tokens.length && end - j < 4) {
      end++;
      text = model.detokenize(tokens.slice(j, end), true, before(j));
    }
    const bytes = [...Buffer.from(text, "utf8")];
    const run = end - j;
    if (run === 1) out.push({ token: text, bytes });
    else {
      for (let k = 0; k < run; k++) {
        const own = bytes.length === run ? [bytes[k]] : k === run - 1 ? bytes : [];
        out.push({ token: asText(own), bytes: own });
      }
    }
    j = end;
  }
  return out;
}

/** Bytes as text when they are whole UTF-8 characters, else OpenAI's `bytes:\xNN` form. */
function asText(bytes: number[]): string {
  const buf = Buffer.from(bytes);
  const text = buf.toString("utf8");
  if (!text.includes("\uFFFD")) return text;
  return "bytes:" + bytes.map((b) => "\\x" + b.toString(16).padStart(2, "0")).join("");
}

/** Tokens before a position that decide how its token's text continues them (a leading space). */
const CONTEXT_TOKENS = 4;
