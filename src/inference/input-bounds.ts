/**
 * Bounds on engine input that keep one request from stalling the event loop (issue 5, item 1):
 * a character bound that refuses what cannot fit before any tokenization, and a token count that
 * yields to the event loop between chunks for long texts. Tokenizers run synchronously on the
 * main thread (node-llama-cpp measured here at about 0.6 MB/s), so a 15 MiB prompt tokenized in
 * one call froze every other request for seconds.
 */

/** Characters tokenized between two yields to the event loop (about 25 ms of llama.cpp tokenizing). */
export const TOKENIZE_CHUNK_CHARS = 16_384;

/**
 * Tokens a chunk boundary may add to a chunk-by-chunk count (a leading-space prefix per call,
 * merges cut at the boundary); the count of the whole text is at least the sum less this per chunk.
 */
const BOUNDARY_ALLOWANCE = 4;

/** Lets other requests run (I/O callbacks, timers) before the next chunk. */
export function yieldToEventLoop(): Promise<void> {
  return new Promise((resolve) => setImmediate(resolve));
}

/**
 * The longest text, in UTF-16 code units, that could fit in `contextTokens` tokens when no token
 * spells more than `maxTokenChars` characters. A longer text cannot fit, whatever its content.
 */
export function maxCharsFor(contextTokens: number, maxTokenChars: number): number {
  return contextTokens * Math.max(1, maxTokenChars);
}

/**
 * The longest token text of a vocabulary (GGUF `tokenizer.ggml.tokens` spellings: SentencePiece
 * `▁` and byte-level BPE `Ġ` stand for one character each, byte tokens like `<0x0A>` are longer
 * than what they decode to, so this bounds the decoded length from above). Falls back to 256
 * when the vocabulary is not at hand.
 */
export function longestTokenChars(tokens: readonly string[] | undefined): number {
  if (!tokens || tokens.length === 0) return 256;
  let longest = 1;
  for (const t of tokens) if (t.length > longest) longest = t.length;
  return longest;
}

/**
 * False when `text` certainly takes more than `limit` tokens, judged without blocking the event
 * loop: texts up to `TOKENIZE_CHUNK_CHARS` are not counted here (their exact tokenization is
 * cheap); longer ones are counted chunk by chunk with a yield between chunks, stopping as soon
 * as the count (less the boundary allowance) passes `limit`. True means "may fit": the caller
 * then tokenizes exactly.
 */
export async function mayFitTokens(text: string, limit: number, count: (chunk: string) => number): Promise<boolean> {
  if (text.length <= TOKENIZE_CHUNK_CHARS) return true;
  let tokens = 0;
  let chunks = 0;
  for (let start = 0; start < text.length;) {
    let end = Math.min(text.length, start + TOKENIZE_CHUNK_CHARS);
    // Never split a surrogate pair.
    if (end < text.length && /[\uD800-\uDBFF]/.test(text[end - 1])) end--;
    tokens += count(text.slice(start, end));
    chunks++;
    if (tokens - chunks * BOUNDARY_ALLOWANCE > limit) return false;
    start = end;
    if (start < text.length) await yieldToEventLoop();
  }
  return true;
}
