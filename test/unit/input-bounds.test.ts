/** Input bounds (issue 5, item 1): the character bound and the chunked count that yields. */
import {
  TOKENIZE_CHUNK_CHARS,
  longestTokenChars,
  maxCharsFor,
  mayFitTokens,
} from "../../src/inference/input-bounds.js";

const oneTokenPerChar = (chunk: string) => chunk.length;

test("when a text is short, then it is not counted here (its exact tokenization is cheap)", async () => {
  let calls = 0;
  expect(await mayFitTokens("x".repeat(TOKENIZE_CHUNK_CHARS), 1, () => ++calls)).toBe(true);
  expect(calls).toBe(0);
});

test("when a long text cannot fit, then counting stops at the first chunk past the limit", async () => {
  const chunks: number[] = [];
  const text = "x".repeat(TOKENIZE_CHUNK_CHARS * 50);
  const fits = await mayFitTokens(text, TOKENIZE_CHUNK_CHARS * 2, (c) => {
    chunks.push(c.length);
    return oneTokenPerChar(c);
  });
  expect(fits).toBe(false);
  expect(chunks.length).toBe(3);
});

test("when a long text fits, then every chunk is counted and the answer is true", async () => {
  const text = "x".repeat(TOKENIZE_CHUNK_CHARS * 3);
  expect(await mayFitTokens(text, TOKENIZE_CHUNK_CHARS * 3, oneTokenPerChar)).toBe(true);
});

test("when a long text is counted, then other work runs between chunks", async () => {
  let ticks = 0;
  const ticker = setInterval(() => ticks++, 0);
  const seen: number[] = [];
  await mayFitTokens("x".repeat(TOKENIZE_CHUNK_CHARS * 4), Number.MAX_SAFE_INTEGER, (c) => {
    seen.push(ticks);
    const until = Date.now() + 2;
    while (Date.now() < until); // a slow tokenizer
    return c.length;
  });
  clearInterval(ticker);
  expect(seen).toHaveLength(4);
  expect(seen[3]).toBeGreaterThan(seen[0]);
});

test("when a chunk boundary falls inside a surrogate pair, then the pair stays whole", async () => {
  const text = "x".repeat(TOKENIZE_CHUNK_CHARS - 1) + "😀".repeat(TOKENIZE_CHUNK_CHARS);
  const chunks: string[] = [];
  await mayFitTokens(text, Number.MAX_SAFE_INTEGER, (c) => {
    chunks.push(c);
    return c.length;
  });
  for (const c of chunks) expect(/[\uD800-\uDBFF]$|^[\uDC00-\uDFFF]/.test(c)).toBe(false);
  expect(chunks.join("")).toBe(text);
});

test("when the vocabulary is known, then the bound is context × its longest spelling", () => {
  expect(longestTokenChars(["<s>", "▁the", "<0x0A>"])).toBe(6);
  expect(longestTokenChars(undefined)).toBe(256);
  expect(maxCharsFor(512, 7)).toBe(3584);
});
