/**
 * Generation on the embedded engine (see `llama-cpp.engine.ts`): a prompt is bounded (by length,
 * then by a chunked token count) and checked against the context before admission, then decoded
 * on the free sequence whose KV cache shares the longest prefix with it (that prefix is reused
 * and reported as cached prompt tokens). Caller stop strings are matched on the text; the chat
 * template's end-of-turn triggers go to llama.cpp.
 */
import type { LlamaContextSequence, Token } from "node-llama-cpp";
import type { Logger } from "pino";
import { AppError, ErrorCode } from "../../../shared/errors.js";
import { clientGone } from "../../client-gone.js";
import type { FinishReason } from "../../engine.js";
import { TOKENIZE_CHUNK_CHARS, mayFitTokens } from "../../input-bounds.js";
import { StopSequenceFilter } from "../../stop-sequences.js";
import { CallTextGate } from "./call-gate.js";
import type { LlamaCppLoader } from "./loading.js";
import { completionLogprobs } from "./logprobs.js";
import type { GrammarCache } from "./structured-decoding.js";
import type { GenerationResult, PromptedRequest } from "./prompted.js";

/**
 * Generates a completion for `req.messages` on a sequence of `req.model`'s runtime (the free one
 * sharing the longest prefix with the prompt), streaming text to `req.onText`.
 * @param logger where a llama.cpp failure is logged.
 * @param grammars compiled grammars of structured outputs (`req.responseFormat`).
 * @throws AppError InvalidRequest when prompt + max tokens exceed the context, a strict schema
 *   uses a keyword the grammar cannot enforce, or a schema's grammar cannot be decoded; RateLimited when
 *   no sequence frees up within `maxQueueWaitMs`; EngineFailure when llama.cpp fails.
 */
export async function generate(
  loader: LlamaCppLoader,
  grammars: GrammarCache,
  logger: Logger,
  req: PromptedRequest,
): Promise<GenerationResult> {
  const rt = await loader.runtime(req.model);
  if (rt.kind !== "generation") throw AppError.invalid(`Model ${req.model.id} does not generate text`);
  // A structured output decodes under its grammar; a strict schema it cannot enforce is a 400 here,
  // before admission (issue 26, item 1).
  // A forced call in a chat template's syntax brings its own GBNF (`template-tools.ts`, the tools'
  // schemas); a grammar llama.cpp refuses is a 400 naming the schema's field (review finding F3).
  const grammar = req.gbnf
    ? await grammars.compile(req.gbnf, "tools", req.model.id)
    : req.responseFormat
      ? await grammars.forFormat(req.responseFormat, req.model.id)
      : undefined;
  // Refuse what cannot fit before tokenizing it all (issue 5, item 1): by length first, then
  // by a chunked count that yields to other requests.
  // Tools the template writes are part of the prompt (the documented format has them in a message).
  const toolsText = req.templateTools ? JSON.stringify(req.templateTools.functions) : "";
  const chars = req.messages.reduce((n, m) => n + m.content.length + 1, toolsText.length);
  if (
    chars > rt.maxPromptChars ||
    (chars > TOKENIZE_CHUNK_CHARS &&
      !(await mayFitTokens(
        [...(toolsText ? [toolsText] : []), ...req.messages.map((m) => m.content)].join("\n"),
        rt.contextSize,
        (t) => rt.model.tokenize(t).length,
      )))
  ) {
    throw AppError.invalid(
      `This model's context is ${rt.contextSize} tokens; the prompt (${chars} characters) is longer`,
      [{ field: "messages", message: "context_length_exceeded" }],
    );
  }
  const prompt = rt.formatPrompt(req.messages, req.templateTools);
  const promptTokens = prompt.tokens.length + rt.bosCount;
  const budget = rt.contextSize - promptTokens;
  if (budget < 1 || (req.maxTokens !== undefined && req.maxTokens > budget)) {
    throw AppError.invalid(
      `This model's context is ${rt.contextSize} tokens; the prompt takes ${promptTokens}` +
        (req.maxTokens !== undefined ? ` and ${req.maxTokens} were asked for the completion` : ""),
      [{ field: "messages", message: "context_length_exceeded" }],
    );
  }
  await req.admit?.(promptTokens, req.maxTokens ?? budget);
  const queued = performance.now();
  const seq = await rt.pool.acquire(
    req.maxQueueWaitMs,
    (free) => longestPrefix(free, prompt.tokens, rt.bosCount),
    req.signal,
    req.priority === "batch",
  );
  const started = performance.now();
  let completionTokens = 0;
  // Reused KV prefix; a shared BOS alone is not reported as a cache hit.
  const reused = Math.min(commonPrefix(seq.contextTokens, prompt.tokens, rt.bosCount), promptTokens - 1);
  const cachedPromptTokens = reused > rt.bosCount ? reused : 0;
  const completion = new loader.library.LlamaCompletion({ contextSequence: seq });
  // Caller stop strings are matched on the text here (exact OpenAI semantics, even inside a
  // token); the chat template's end-of-turn triggers go to llama.cpp as stop triggers.
  const stops = new StopSequenceFilter(req.stop ?? []);
  const halt = new AbortController();
  const signal = req.signal ? AbortSignal.any([req.signal, halt.signal]) : halt.signal;
  let text = "";
  const generated: Token[] = [];
  // With tools offered, streamed text goes through the gate: held only where a call may start.
  const gate = req.callOpeners !== undefined ? new CallTextGate(req.callOpeners, req.onText) : null;
  /** The tokens of the text chunk that comes next (node-llama-cpp calls `onToken`, then `onTextChunk`). */
  let chunkTokens: Token[] = [];
  const emit = (chunk: string) => {
    if (!chunk) return;
    text += chunk;
    if (!gate) req.onText?.(chunk);
  };
  try {
    req.onStart?.({ promptTokens, cachedPromptTokens, queueMs: started - queued });
    const penalties = req.frequencyPenalty || req.presencePenalty;
    const result = await completion.generateCompletionWithMeta(prompt.tokens, {
      maxTokens: req.maxTokens ?? budget,
      temperature: req.temperature ?? 1,
      topP: req.topP,
      topK: req.topK,
      seed: req.seed,
      grammar,
      // Under a grammar, never BOS: llama.cpp checks a special token's text ("<s>") against the
      // grammar like any other, so a string could take it as three characters the answer's text
      // then lacks (a pattern or length broken; seen with the tiny model, issue 26 item 1).
      tokenBias:
        grammar && seq.model.tokens.bos !== null
          ? loader.library.TokenBias.for(seq.model).set(seq.model.tokens.bos, "never")
          : undefined,
      signal,
      stopOnAbortSignal: true,
      disableContextShift: true,
      // No room is kept for a context shift (there is none): the whole prompt stays in context,
      // as the budget check above promised. The library's default reserves 10 % and drops the
      // prompt's first tokens to make it.
      contextShiftSize: 0,
      repeatPenalty: penalties
        ? { penalty: 1, frequencyPenalty: req.frequencyPenalty, presencePenalty: req.presencePenalty }
        : false,
      customStopTriggers:
        rt.endTriggers.length + prompt.templateStops.length > 0
          ? [...rt.endTriggers, ...prompt.templateStops]
          : undefined,
      onToken: (tokens) => {
        completionTokens += tokens.length;
        if (gate) chunkTokens = tokens;
        if (req.logprobs || req.rawText || gate) generated.push(...tokens);
      },
      onTextChunk: (chunk) => {
        emit(stops.push(chunk));
        if (gate) {
          // The raw text of the same tokens, after the few before them (a leading space depends on them).
          const at = generated.length - chunkTokens.length;
          const before = generated.slice(Math.max(0, at - 8), at);
          gate.push(chunk, rt.model.detokenize(chunkTokens, true, before), text.length);
          chunkTokens = [];
        }
        if (stops.stopped) halt.abort();
      },
    });
    let finishReason: FinishReason;
    if (stops.stopped) finishReason = "stop_sequence";
    else {
      emit(stops.end());
      gate?.release(text.length);
      const reason = result.metadata.stopReason;
      finishReason = reason === "maxTokens" ? "length" : reason === "abort" ? "cancelled" : "stop";
    }
    // Log-probabilities re-evaluate the completion on this sequence (see `logprobs.ts`); a
    // cancelled answer has no caller left to read them.
    const logprobs =
      req.logprobs && finishReason !== "cancelled"
        ? await completionLogprobs(rt.model, seq, rt.bosCount + prompt.tokens.length, generated, text, req.logprobs.top)
        : undefined;
    return {
      text,
      finishReason,
      stopSequence: stops.matched,
      usage: { promptTokens, completionTokens, cachedPromptTokens },
      engineMs: performance.now() - started,
      queueMs: started - queued,
      ...(logprobs ? { logprobs } : {}),
      ...(gate
        ? { gate, rawText: gate.rawUpTo(text.length) }
        : req.rawText
          ? { rawText: rt.model.detokenize(generated, true) }
          : {}),
    };
  } catch (err) {
    if (err instanceof AppError) throw err;
    // The sequence's state is unknown after a failure: forget its tokens before reuse.
    await seq.clearHistory().catch(() => undefined);
    // Aborted before generation began: the library throws the signal's reason or its own error.
    if (req.signal?.aborted) throw clientGone(req.signal);
    logger.error({ err, model: req.model.id }, "llama.cpp generation failed");
    throw new AppError(ErrorCode.EngineFailure, "The engine failed to generate a completion");
  } finally {
    completion.dispose({ disposeSequence: false });
    rt.pool.release(seq);
  }
}

/** Index of the first differing token between a sequence's cached tokens and `[BOS?] + prompt`. */
function commonPrefix(cached: readonly Token[], prompt: readonly Token[], bosCount: number): number {
  if (cached.length === 0) return 0;
  let i = bosCount; // the BOS token is the same for every prompt
  while (i < cached.length && i - bosCount < prompt.length && cached[i] === prompt[i - bosCount]) i++;
  return i;
}

/** The free sequence whose cached tokens share the longest prefix with `[BOS?] + prompt`. */
function longestPrefix(free: LlamaContextSequence[], prompt: Token[], bosCount: number): LlamaContextSequence {
  let best = free[0];
  let bestLen = -1;
  for (const seq of free) {
    const len = commonPrefix(seq.contextTokens, prompt, bosCount);
    if (len > bestLen) {
      best = seq;
      bestLen = len;
    }
  }
  return best;
}
