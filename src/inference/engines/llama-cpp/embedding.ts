/**
 * Embeddings on the embedded engine (see `llama-cpp.engine.ts`): every input is counted and
 * bounded (yielding to other requests while it counts) before admission, then embedded on one
 * embedding context of `req.model`'s runtime, as a unit vector.
 */
import type { Token } from "node-llama-cpp";
import type { Logger } from "pino";
import { AppError, ErrorCode } from "../../../shared/errors.js";
import { clientGone } from "../../client-gone.js";
import type { EmbedRequest, EmbedResult } from "../../engine.js";
import { TOKENIZE_CHUNK_CHARS, mayFitTokens, yieldToEventLoop } from "../../input-bounds.js";
import type { LlamaCppLoader } from "./loading.js";

/** Most tokens over all inputs of one embeddings request (OpenAI's bound; one request holds a context). */
export const MAX_EMBEDDING_REQUEST_TOKENS = 300_000;

/**
 * Embeds every input (mean-pooled by llama.cpp for models without their own pooling), as unit
 * vectors (L2-normalised, like OpenAI's, so a dot product is the cosine similarity).
 * @param logger where a llama.cpp failure is logged.
 * @throws AppError InvalidRequest for inputs longer than the context; RateLimited; EngineFailure.
 */
export async function embed(loader: LlamaCppLoader, logger: Logger, req: EmbedRequest): Promise<EmbedResult> {
  const rt = await loader.runtime(req.model);
  if (rt.kind !== "embedding") throw AppError.invalid(`Model ${req.model.id} does not produce embeddings`);
  // Inputs are counted one by one, yielding to other requests every TOKENIZE_CHUNK_CHARS.
  const tokenised: Token[][] = [];
  let sinceYield = 0;
  let totalTokens = 0;
  for (let i = 0; i < req.inputs.length; i++) {
    const input = req.inputs[i];
    if (typeof input === "string") {
      const tooLong = () =>
        AppError.invalid(`Input is longer than this model's context of ${rt.contextSize} tokens`, [
          { field: inputField(req, i), message: "context_length_exceeded" },
        ]);
      if (input.length > rt.maxInputChars) throw tooLong();
      if (!(await mayFitTokens(input, rt.contextSize, (t) => rt.model.tokenize(t).length))) throw tooLong();
      sinceYield += input.length;
      if (sinceYield > TOKENIZE_CHUNK_CHARS) {
        await yieldToEventLoop();
        sinceYield = 0;
      }
    }
    const tokens = typeof input === "string" ? rt.model.tokenize(input) : (input as Token[]);
    if (tokens.length === 0)
      throw AppError.invalid("Input is empty", [{ field: inputField(req, i), message: "empty" }]);
    // node-llama-cpp adds BOS/EOS and needs the input strictly shorter than the context.
    const usable = rt.contextSize - 3;
    if (tokens.length > usable) {
      throw AppError.invalid(`Input is ${tokens.length} tokens; this model embeds at most ${usable}`, [
        { field: inputField(req, i), message: "context_length_exceeded" },
      ]);
    }
    totalTokens += tokens.length;
    if (totalTokens > MAX_EMBEDDING_REQUEST_TOKENS) {
      throw AppError.invalid(`At most ${MAX_EMBEDDING_REQUEST_TOKENS} tokens in all inputs of one request`, [
        { field: "input", message: "too many tokens" },
      ]);
    }
    if (typeof input !== "string" && tokens.some((t) => t >= rt.vocabularySize)) {
      throw AppError.invalid(`Token ids must be below the vocabulary size ${rt.vocabularySize}`, [
        { field: inputField(req, i), message: "token id out of range" },
      ]);
    }
    tokenised.push(tokens);
  }
  await req.admit?.(tokenised.reduce((n, t) => n + t.length, 0));
  const queued = performance.now();
  const ctx = await rt.pool.acquire(req.maxQueueWaitMs, undefined, req.signal, req.priority === "batch");
  const started = performance.now();
  try {
    const vectors: number[][] = [];
    let promptTokens = 0;
    for (const tokens of tokenised) {
      if (req.signal?.aborted) throw clientGone(req.signal);
      const embedding = await ctx.getEmbeddingFor(tokens);
      vectors.push(normalise(embedding.vector));
      promptTokens += tokens.length;
    }
    return { vectors, promptTokens, engineMs: performance.now() - started, queueMs: started - queued };
  } catch (err) {
    if (err instanceof AppError) throw err;
    if (req.signal?.aborted) throw clientGone(req.signal);
    logger.error({ err, model: req.model.id }, "llama.cpp embedding failed");
    throw new AppError(ErrorCode.EngineFailure, "The engine failed to compute embeddings");
  } finally {
    rt.pool.release(ctx);
  }
}

/** `vector` scaled to unit length (L2); a zero vector as it is. */
function normalise(vector: readonly number[]): number[] {
  let sum = 0;
  for (const v of vector) sum += v * v;
  const norm = Math.sqrt(sum);
  return norm > 0 ? vector.map((v) => v / norm) : [...vector];
}

/** How a 400 names input `i` of `req`. */
function inputField(req: EmbedRequest, i: number): string {
  return req.inputs.length === 1 ? "input" : `input[${i}]`;
}
