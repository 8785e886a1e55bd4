/**
 * The embedded engine: node-llama-cpp on CPU, or a GPU when `SWITCHYARD_GPU=auto` finds one
 * (DESIGN §1, §2; issue 17). One `LlamaModel` per GGUF file; per generation model one context
 * with N parallel sequences (node-llama-cpp decodes concurrent sequences in one batch), handed out
 * through a `SlotPool`, so concurrent requests neither share state nor queue behind a global lock. Embedding models get a small pool of embedding contexts.
 * A freed sequence keeps its tokens; the next request picks the free sequence sharing the longest
 * prefix with its prompt and reuses that KV cache (reported as cached prompt tokens).
 * Log-probability scoring (decisions, issue 11) runs on separate one-sequence contexts made on
 * first use (`scoringPool`; the evaluation itself is in `llama-cpp.scoring.ts`).
 *
 * Runtimes (a context and its slots) are keyed by the model's `runtime.key` when it has one (a
 * team's custom model or dedicated deployment, issue 9: its own context with `runtime.slots`
 * sequences, sharing the loaded GGUF weights with every other runtime of the same file), else by
 * the model id (the shared platform runtime). `unload` retires a dedicated runtime: new requests
 * are refused, the ones in flight finish, then its contexts (and the weights, when no other
 * runtime uses the file) are freed.
 */
import type {
  ChatHistoryItem,
  Llama,
  LlamaContext,
  LlamaContextSequence,
  LlamaEmbeddingContext,
  LlamaModel,
  LlamaText,
  Token,
} from "node-llama-cpp";
import type * as NodeLlamaCppModule from "node-llama-cpp";
import type { Logger } from "pino";
import type { CatalogModel, LlamaCppEngineSpec } from "../../../config/catalog.js";
import { AppError, ErrorCode } from "../../../shared/errors.js";
import type {
  ChatMessage,
  EmbedRequest,
  EmbedResult,
  FinishReason,
  GenerateRequest,
  GenerateResult,
  InferenceEngine,
  ScoreRequest,
  ScoreResult,
} from "../../engine.js";
import { ScoringStopped } from "../../engine.js";
import { DEFAULT_SCORING_TIME_LIMIT_MS, ScoringWatch } from "../../scoring-watch.js";
import {
  TOKENIZE_CHUNK_CHARS,
  longestTokenChars,
  maxCharsFor,
  mayFitTokens,
  yieldToEventLoop,
} from "../../input-bounds.js";
import { SlotPool, type SlotPoolStats } from "../../slot-pool.js";
import { StopSequenceFilter } from "../../stop-sequences.js";
import { type ModelFileSettings, resolveModelPath } from "../../artifacts/model-files.js";
import { planScoring, scoreOnSequence } from "./llama-cpp.scoring.js";
import type { EngineTuning, TuningSetting } from "../../tuning.js";
import { chooseTuning } from "./engine-tuning.js";

/** The node-llama-cpp module (an ES module loaded on first use). */
type NodeLlamaCpp = typeof NodeLlamaCppModule;

export interface LlamaCppEngineOptions extends ModelFileSettings {
  /**
   * CPU threads per context, or `auto`: measured per model file at its first load
   * (`engine-tuning.ts`, issue 12 item 3; cached in `<dataDir>/engine-tuning.json`).
   */
  threads: TuningSetting;
  /** Parallel sequences per generation model (platform runtimes), or `auto` as for `threads`. */
  sequences: TuningSetting;
  /** Embedding contexts per embedding model. */
  embeddingContexts: number;
  /**
   * Batch items a generation runtime decodes at once while interactive traffic is on: an
   * interactive request decoding, or one in the last `INTERACTIVE_QUIET_MS`
   * (`SWITCHYARD_BATCH_WHILE_INTERACTIVE`, issue 12 item 3; default unbounded here, 1 in the
   * config). On 2 cores a batch at full width slowed interactive chat ~3× at p50 through the CPU
   * its items take (bench/NOTES.md). With no interactive traffic, batch work uses every slot the
   * batch runner gives it.
   */
  batchWhileInteractive?: number;
  /**
   * GPU use (issue 17, `SWITCHYARD_GPU`): `auto` takes node-llama-cpp's GPU build when a usable
   * GPU is present (prebuilt binaries only, never a build), else the CPU; `off` (the default
   * here; the config's default is `auto`) the CPU.
   */
  gpu?: "auto" | "off";
  logger: Logger;
  /** Scoring time limit per decisions request, ms (`SWITCHYARD_DECISIONS_TIME_LIMIT_MS`); default 60 s. */
  scoringTimeLimitMs?: number;
}

interface Prompt {
  /** Prompt tokens without the BOS token the completion prepends. */
  tokens: Token[];
  /** Stop triggers from the chat template (end of turn). */
  templateStops: LlamaText[];
}

interface GenerationRuntime {
  kind: "generation";
  /** The GGUF file name the weights came from (`modelFile`'s key). */
  file: string;
  model: LlamaModel;
  context: LlamaContext;
  pool: SlotPool<LlamaContextSequence>;
  contextSize: number;
  /** Longest text that could fit the context (characters), see `input-bounds.ts`. */
  maxPromptChars: number;
  bosCount: number;
  /** Extra end-of-turn tokens from the catalog, as llama.cpp stop triggers. */
  endTriggers: Token[][];
  formatPrompt: (messages: ChatMessage[]) => Prompt;
  /** CPU threads of its contexts (the file's tuning). */
  threads: number;
  /** Contexts of one sequence each for scoring (decisions), made on first use; see `scoringPool`. */
  scoring?: Promise<ScoringContexts>;
}

interface ScoringContexts {
  contexts: LlamaContext[];
  pool: SlotPool<LlamaContextSequence>;
}

/** How long after the last interactive request batch work stays bounded (see `batchWhileInteractive`), ms. */
export const INTERACTIVE_QUIET_MS = 1_000;

/** Scoring contexts per generation runtime (each one sequence; see `LlamaCppEngine.scoringPool`). */
const SCORING_CONTEXTS = 2;

interface EmbeddingRuntime {
  kind: "embedding";
  file: string;
  model: LlamaModel;
  pool: SlotPool<LlamaEmbeddingContext>;
  contexts: LlamaEmbeddingContext[];
  contextSize: number;
  /** Longest input text that could fit the context (characters). */
  maxInputChars: number;
  vocabularySize: number;
}

type Runtime = GenerationRuntime | EmbeddingRuntime;

/** The node-llama-cpp `InferenceEngine` (see the module header for pooling and prefix reuse). */
export class LlamaCppEngine implements InferenceEngine {
  private lib?: NodeLlamaCpp;
  private llama?: Promise<Llama>;
  private readonly files = new Map<string, Promise<LlamaModel>>();
  private readonly runtimes = new Map<string, Promise<Runtime>>();
  private readonly loaded = new Set<string>();
  /** Runtimes (being) built on each loaded file: the weights are freed when it drops to 0. */
  private readonly fileUsers = new Map<string, number>();
  /** Keys of unloaded dedicated runtimes: never built again (their deployment is gone). */
  private readonly retired = new Set<string>();
  /** Threads and sequences per model file (issue 12, item 3), chosen once per file per process. */
  private readonly tunings = new Map<string, Promise<EngineTuning>>();
  /** Where each loaded model file was found (the tuning cache keys on its size and mtime). */
  private readonly paths = new Map<string, string>();
  /** The first generation model's tuning: the default for batches and custom models. */
  private firstGenerationTuning?: EngineTuning;

  constructor(private readonly opts: LlamaCppEngineOptions) {}

  isLoaded(model: CatalogModel): boolean {
    return this.loaded.has(runtimeKey(model));
  }

  /**
   * Loads `model`'s runtime. A deliberate load brings back a retired dedicated runtime (a team's
   * custom model served again once a deployment of it is deleted, or an older deployment of the
   * model routed to again); requests alone never rebuild a retired one.
   */
  async load(model: CatalogModel): Promise<void> {
    this.retired.delete(runtimeKey(model));
    await this.runtime(model);
  }

  /**
   * Retires a dedicated runtime (`model.runtime`; shared platform runtimes stay): waiting and
   * later requests get EngineUnavailable (503), requests holding a slot finish, then its contexts
   * are disposed, and the weights too when no other runtime uses the file.
   */
  async unload(model: CatalogModel): Promise<void> {
    if (!model.runtime) return;
    const key = runtimeKey(model);
    this.retired.add(key);
    const pending = this.runtimes.get(key);
    this.runtimes.delete(key);
    this.loaded.delete(key);
    if (!pending) return;
    let rt: Runtime;
    try {
      rt = await pending;
    } catch {
      return; // it never loaded: nothing was kept
    }
    rt.pool.close(new AppError(ErrorCode.EngineUnavailable, `Model '${model.id}' is no longer deployed`));
    await rt.pool.whenIdle();
    if (rt.kind === "generation") await disposeScoring(rt, true);
    if (rt.kind === "generation") await rt.context.dispose();
    else for (const c of rt.contexts) await c.dispose();
    await this.releaseFile(rt.file);
    this.opts.logger.info({ model: model.id, runtime: key }, "dedicated runtime released");
  }

  /**
   * Generates a completion for `req.messages`.
   * @throws AppError InvalidRequest when prompt + max tokens exceed the context; RateLimited when
   *   no sequence frees up within `maxQueueWaitMs`; EngineFailure when llama.cpp fails.
   */
  async generate(req: GenerateRequest): Promise<GenerateResult> {
    const rt = await this.runtime(req.model);
    if (rt.kind !== "generation") throw AppError.invalid(`Model ${req.model.id} does not generate text`);
    // Refuse what cannot fit before tokenizing it all (issue 5, item 1): by length first, then
    // by a chunked count that yields to other requests.
    const chars = req.messages.reduce((n, m) => n + m.content.length + 1, 0);
    if (
      chars > rt.maxPromptChars ||
      (chars > TOKENIZE_CHUNK_CHARS &&
        !(await mayFitTokens(
          req.messages.map((m) => m.content).join("\n"),
          rt.contextSize,
          (t) => rt.model.tokenize(t).length,
        )))
    ) {
      throw AppError.invalid(
        `This model's context is ${rt.contextSize} tokens; the prompt (${chars} characters) is longer`,
        [{ field: "messages", message: "context_length_exceeded" }],
      );
    }
    const prompt = rt.formatPrompt(req.messages);
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
    const completion = new this.lib!.LlamaCompletion({ contextSequence: seq });
    // Caller stop strings are matched on the text here (exact OpenAI semantics, even inside a
    // token); the chat template's end-of-turn triggers go to llama.cpp as stop triggers.
    const stops = new StopSequenceFilter(req.stop ?? []);
    const halt = new AbortController();
    const signal = req.signal ? AbortSignal.any([req.signal, halt.signal]) : halt.signal;
    let text = "";
    const emit = (chunk: string) => {
      if (!chunk) return;
      text += chunk;
      req.onText?.(chunk);
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
        },
        onTextChunk: (chunk) => {
          emit(stops.push(chunk));
          if (stops.stopped) halt.abort();
        },
      });
      let finishReason: FinishReason;
      if (stops.stopped) finishReason = "stop_sequence";
      else {
        emit(stops.end());
        const reason = result.metadata.stopReason;
        finishReason = reason === "maxTokens" ? "length" : reason === "abort" ? "cancelled" : "stop";
      }
      return {
        text,
        finishReason,
        stopSequence: stops.matched,
        usage: { promptTokens, completionTokens, cachedPromptTokens },
        engineMs: performance.now() - started,
        queueMs: started - queued,
      };
    } catch (err) {
      if (err instanceof AppError) throw err;
      // The sequence's state is unknown after a failure: forget its tokens before reuse.
      await seq.clearHistory().catch(() => undefined);
      // Aborted before generation began: the library throws the signal's reason or its own error.
      if (req.signal?.aborted) throw clientGone(req.signal);
      this.opts.logger.error({ err, model: req.model.id }, "llama.cpp generation failed");
      throw new AppError(ErrorCode.EngineFailure, "The engine failed to generate a completion");
    } finally {
      completion.dispose({ disposeSequence: false });
      rt.pool.release(seq);
    }
  }

  /**
   * Embeds every input (mean-pooled by llama.cpp for models without their own pooling), as unit
   * vectors (L2-normalised, like OpenAI's, so a dot product is the cosine similarity).
   * @throws AppError InvalidRequest for inputs longer than the context; RateLimited; EngineFailure.
   */
  async embed(req: EmbedRequest): Promise<EmbedResult> {
    const rt = await this.runtime(req.model);
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
      this.opts.logger.error({ err, model: req.model.id }, "llama.cpp embedding failed");
      throw new AppError(ErrorCode.EngineFailure, "The engine failed to compute embeddings");
    } finally {
      rt.pool.release(ctx);
    }
  }

  /**
   * Scores each question's answers by their token log-probabilities (decisions, issue 11): the
   * prompt prefix the questions share is evaluated once on one sequence and reused for every
   * question and answer (see `llama-cpp.scoring.ts`). Stops between answers when the caller goes
   * away or the scoring time limit (`scoringTimeLimitMs`) passes, with `ScoringStopped` carrying
   * the tokens evaluated so far (issue 11 review, findings 3–4).
   * @throws AppError InvalidRequest (naming the question) when a prompt and its longest answer do
   *   not fit the context, an answer has no tokens, or two answers are the same tokens;
   *   RateLimited; ScoringStopped (499 / 504); EngineFailure.
   */
  async scoreContinuations(req: ScoreRequest): Promise<ScoreResult> {
    const rt = await this.runtime(req.model);
    if (rt.kind !== "generation") throw AppError.invalid(`Model ${req.model.id} does not generate text`);
    const tooLong = (field: string, detail: string) =>
      AppError.invalid(`This model's context is ${rt.contextSize} tokens; ${detail}`, [
        { field, message: "context_length_exceeded" },
      ]);
    const prompts: Token[][] = [];
    const candidates: Token[][][] = [];
    const endTokens = [...new Set([rt.model.tokens.nl, rt.model.tokens.eos, rt.model.tokens.eot])].filter(
      (t): t is Token => t !== null,
    );
    for (const q of req.questions) {
      const chars = q.messages.reduce((n, m) => n + m.content.length + 1, 0);
      if (chars > rt.maxPromptChars) throw tooLong(q.field, `the prompt (${chars} characters) is longer`);
      await yieldToEventLoop();
      prompts.push(rt.formatPrompt(q.messages).tokens);
      const seen = new Map<string, string>();
      candidates.push(
        q.candidates.map((c) => {
          const tokens = rt.model.tokenize(c);
          if (tokens.length === 0) throw AppError.invalid("An answer has no tokens", [{ field: q.field, message: c }]);
          const key = tokens.join(",");
          const twin = seen.get(key);
          if (twin !== undefined) {
            throw AppError.invalid(`Answers ${JSON.stringify(twin)} and ${JSON.stringify(c)} are the same tokens`, [
              { field: q.field, message: "two answers tokenise identically" },
            ]);
          }
          seen.set(key, c);
          return tokens;
        }),
      );
      const need = rt.bosCount + prompts.at(-1)!.length + Math.max(...candidates.at(-1)!.map((t) => t.length));
      if (prompts.at(-1)!.length === 0 || need > rt.contextSize) {
        throw tooLong(q.field, `the question and its longest answer take ${need}`);
      }
    }
    const bos = rt.bosCount > 0 ? rt.model.tokens.bos : null;
    const ends = req.questions.map((q) => (q.endMarker && endTokens.length > 0 ? endTokens : null));
    const plan = planScoring(prompts, candidates, bos, ends);
    await req.admit?.(plan.promptTokens);
    const queued = performance.now();
    const pool = (await this.scoringPool(req.model, rt)).pool;
    const seq = await pool.acquire(req.maxQueueWaitMs, undefined, req.signal, req.priority === "batch");
    const started = performance.now();
    const watch = new ScoringWatch(req.signal, this.opts.scoringTimeLimitMs ?? DEFAULT_SCORING_TIME_LIMIT_MS);
    const progress = { tokens: 0 };
    try {
      req.onStart?.();
      const scores = await scoreOnSequence(seq, plan, watch, progress);
      return {
        scores,
        promptTokens: plan.promptTokens,
        engineMs: performance.now() - started,
        queueMs: started - queued,
      };
    } catch (err) {
      await seq.clearHistory().catch(() => undefined);
      const stop = watch.reason();
      if (stop)
        throw new ScoringStopped(stop, Math.min(progress.tokens, plan.promptTokens), performance.now() - started);
      if (err instanceof AppError && err.code !== ErrorCode.EngineFailure) throw err;
      if (req.signal?.aborted) throw clientGone(req.signal);
      this.opts.logger.error({ err, model: req.model.id }, "llama.cpp scoring failed");
      throw new AppError(ErrorCode.EngineFailure, "The engine failed to score the answers");
    } finally {
      watch.dispose();
      pool.release(seq);
    }
  }

  /**
   * The scoring contexts of a generation runtime, made on first use: `SCORING_CONTEXTS` contexts
   * of one sequence each, apart from the generation context, because llama.cpp's float results
   * depend on how tokens are batched together, and a context batches its sequences together:
   * scoring alone in its context, from an empty state, makes identical requests give identical
   * probabilities whatever else runs. Decisions do not take generation slots.
   */
  private scoringPool(model: CatalogModel, rt: GenerationRuntime): Promise<ScoringContexts> {
    rt.scoring ??= (async () => {
      const contexts: LlamaContext[] = [];
      for (let i = 0; i < SCORING_CONTEXTS; i++) {
        contexts.push(await rt.model.createContext({ contextSize: rt.contextSize, sequences: 1, threads: rt.threads }));
      }
      this.opts.logger.info({ model: model.id, contexts: contexts.length }, "scoring contexts ready");
      return { contexts, pool: new SlotPool(contexts.map((c) => c.getSequence())) };
    })();
    rt.scoring.catch(() => (rt.scoring = undefined));
    return rt.scoring;
  }

  /**
   * The slot pool of `model` (sequences for generation, contexts for embeddings) as it stands:
   * `{size, available, waiting}`; undefined until the model is loaded. Read-only; lets tests see
   * that every request gives its slot back (issue 14, item 2).
   */
  async slots(model: CatalogModel): Promise<SlotPoolStats | undefined> {
    const key = runtimeKey(model);
    if (!this.loaded.has(key)) return undefined;
    return (await this.runtimes.get(key))?.pool.stats();
  }

  async countTokens(model: CatalogModel, text: string): Promise<number> {
    const rt = await this.runtime(model);
    return rt.model.tokenize(text).length;
  }

  async close(): Promise<void> {
    const runtimes = await Promise.allSettled(this.runtimes.values());
    for (const r of runtimes) {
      if (r.status !== "fulfilled") continue;
      r.value.pool.rejectAll(new AppError(ErrorCode.EngineUnavailable, "The engine is shutting down"));
      if (r.value.kind === "generation") await disposeScoring(r.value, false);
      if (r.value.kind === "generation") await r.value.context.dispose();
      else for (const c of r.value.contexts) await c.dispose();
    }
    for (const m of await Promise.allSettled(this.files.values())) {
      if (m.status === "fulfilled") await m.value.dispose();
    }
    this.runtimes.clear();
    this.files.clear();
    this.fileUsers.clear();
    this.loaded.clear();
    if (this.llama) await (await this.llama).dispose();
  }

  private runtime(model: CatalogModel): Promise<Runtime> {
    const key = runtimeKey(model);
    let rt = this.runtimes.get(key);
    if (!rt) {
      if (this.retired.has(key)) {
        return Promise.reject(new AppError(ErrorCode.EngineUnavailable, `Model '${model.id}' is no longer deployed`));
      }
      rt = this.createRuntime(model);
      this.runtimes.set(key, rt);
      rt.then(
        () => {
          if (this.runtimes.get(key) === rt) this.loaded.add(key);
        },
        () => {
          if (this.runtimes.get(key) === rt) this.runtimes.delete(key);
        },
      );
    }
    return rt;
  }

  private async createRuntime(model: CatalogModel): Promise<Runtime> {
    const spec = model.engine;
    if (spec.type !== "llama_cpp") {
      throw new AppError(ErrorCode.EngineUnavailable, `Model '${model.id}' is not served by the embedded engine`);
    }
    // Counted before the file loads, so an unload elsewhere never frees weights this runtime is about to use.
    this.fileUsers.set(spec.file, (this.fileUsers.get(spec.file) ?? 0) + 1);
    try {
      return await this.buildRuntime(model, spec);
    } catch (err) {
      await this.releaseFile(spec.file);
      throw err;
    }
  }

  /** One fewer runtime on `file`; the last one frees the weights. */
  private async releaseFile(file: string): Promise<void> {
    const users = (this.fileUsers.get(file) ?? 1) - 1;
    if (users > 0) {
      this.fileUsers.set(file, users);
      return;
    }
    this.fileUsers.delete(file);
    const weights = this.files.get(file);
    this.files.delete(file);
    const loaded = await weights?.catch(() => undefined);
    await loaded?.dispose();
  }

  private async buildRuntime(model: CatalogModel, spec: LlamaCppEngineSpec): Promise<Runtime> {
    const llamaModel = await this.modelFile(model, spec);
    const contextSize = Math.min(spec.context_size, llamaModel.trainContextSize);
    const tuning = await this.tuningFor(model, spec, llamaModel);
    const threads = tuning.threads;
    if (model.modality === "text_embedding") {
      const contexts: LlamaEmbeddingContext[] = [];
      for (let i = 0; i < (model.runtime?.slots ?? this.opts.embeddingContexts); i++) {
        contexts.push(await llamaModel.createEmbeddingContext({ contextSize, threads }));
      }
      const vocabulary = llamaModel.fileInfo.metadata.tokenizer?.ggml?.tokens as string[] | undefined;
      const vocabularySize = vocabulary?.length ?? Number.MAX_SAFE_INTEGER;
      return {
        kind: "embedding",
        file: spec.file,
        model: llamaModel,
        contexts,
        pool: new SlotPool(contexts),
        contextSize,
        maxInputChars: maxCharsFor(contextSize, longestTokenChars(vocabulary)),
        vocabularySize,
      };
    }
    this.firstGenerationTuning ??= tuning;
    const slots = model.runtime?.slots ?? tuning.sequences;
    const context = await llamaModel.createContext({ contextSize, sequences: slots, threads });
    const sequences = Array.from({ length: slots }, () => context.getSequence());
    const bosCount = llamaModel.tokens.shouldPrependBosToken && llamaModel.tokens.bos != null ? 1 : 0;
    this.opts.logger.info(
      {
        model: model.id,
        runtime: model.runtime?.key,
        contextSize: context.contextSize,
        sequences: sequences.length,
        threads,
      },
      "generation model ready",
    );
    return {
      kind: "generation",
      file: spec.file,
      model: llamaModel,
      context,
      pool: new SlotPool(sequences, this.opts.batchWhileInteractive, INTERACTIVE_QUIET_MS),
      contextSize: context.contextSize,
      maxPromptChars: maxCharsFor(
        context.contextSize,
        longestTokenChars(llamaModel.fileInfo.metadata.tokenizer?.ggml?.tokens as string[] | undefined),
      ),
      bosCount,
      endTriggers: spec.eog_token_ids.map((id) => [id as Token]),
      formatPrompt: this.promptFormatter(llamaModel, spec),
      threads,
    };
  }

  /**
   * The threads and sequences for `spec.file` (issue 12, item 3): configured numbers, or `auto`
   * ones measured by a short probe at the file's first load (cached on disk by file and machine;
   * see `engine-tuning.ts`). Logged once per file with the measured figures.
   */
  private tuningFor(model: CatalogModel, spec: LlamaCppEngineSpec, llamaModel: LlamaModel): Promise<EngineTuning> {
    let tuning = this.tunings.get(spec.file);
    if (!tuning) {
      tuning = chooseTuning(llamaModel, this.paths.get(spec.file) ?? resolveModelPath(model, spec, this.opts), {
        threads: this.opts.threads,
        sequences: this.opts.sequences,
        dataDir: this.opts.dataDir,
        logger: this.opts.logger,
      }).then((t) => {
        this.opts.logger.info(
          { file: spec.file, ...t },
          `engine tuning for ${spec.file}: ${t.threads} thread(s), ${t.sequences} sequences (${t.source}` +
            (t.source === "measured" ? ` in ${t.probeMs} ms` : "") +
            ")",
        );
        return t;
      });
      this.tunings.set(spec.file, tuning);
    }
    return tuning;
  }

  /**
   * The threads and sequences chosen for the first generation model loaded (undefined before
   * one loads): what the start banner shows, and the default of the batch runner's concurrency
   * (sequences − 1) and of custom models' slots when the configuration says `auto`.
   */
  chosenTuning(): EngineTuning | undefined {
    return this.firstGenerationTuning;
  }

  /**
   * Chat messages → prompt tokens. Models whose GGUF carries a chat template (and whose catalog
   * entry does not say `chat_template: none`) go through node-llama-cpp's chat wrapper; others get
   * a plain-text prompt: the message texts in order, one per line.
   */
  private promptFormatter(model: LlamaModel, spec: LlamaCppEngineSpec): (messages: ChatMessage[]) => Prompt {
    const template = (model.fileInfo.metadata as { tokenizer?: { chat_template?: string } }).tokenizer?.chat_template;
    if (spec.chat_template === "auto" && template) {
      const wrapper = this.lib!.resolveChatWrapper(model, { fallbackToOtherWrappersOnJinjaError: true });
      return (messages) => {
        const history: ChatHistoryItem[] = messages.map((m): ChatHistoryItem => {
          if (m.role === "system" || m.role === "developer") return { type: "system", text: m.content };
          if (m.role === "assistant") return { type: "model", response: [m.content] };
          return { type: "user", text: m.content };
        });
        history.push({ type: "model", response: [] });
        const state = wrapper.generateContextState({ chatHistory: history });
        return { tokens: state.contextText.tokenize(model.tokenizer), templateStops: state.stopGenerationTriggers };
      };
    }
    return (messages) => ({
      tokens: model.tokenize(
        messages
          .map((m) => m.content)
          .filter((c) => c.length > 0)
          .join("\n"),
      ),
      templateStops: [],
    });
  }

  private modelFile(model: CatalogModel, spec: LlamaCppEngineSpec): Promise<LlamaModel> {
    const key = spec.file;
    let file = this.files.get(key);
    if (!file) {
      file = (async () => {
        const modelPath = resolveModelPath(model, spec, this.opts);
        this.paths.set(key, modelPath);
        const llama = await this.llamaInstance();
        this.opts.logger.info({ model: model.id, path: modelPath }, "loading model file");
        return llama.loadModel({ modelPath });
      })();
      this.files.set(key, file);
      file.catch(() => this.files.delete(key));
    }
    return file;
  }

  private async library(): Promise<NodeLlamaCpp> {
    this.lib ??= await import("node-llama-cpp");
    return this.lib;
  }

  /**
   * What the engine computes on (issue 17, start banner): `cpu`, or the GPU backend node-llama-cpp
   * chose (`cuda`, `vulkan`, `metal`). Starts llama.cpp when no model has yet.
   */
  async backend(): Promise<string> {
    const llama = await this.llamaInstance();
    return llama.gpu === false ? "cpu" : llama.gpu;
  }

  private llamaInstance(): Promise<Llama> {
    this.llama ??= this.library().then((lib) =>
      lib.getLlama({
        gpu: this.opts.gpu === "auto" ? "auto" : false,
        build: "never",
        logLevel: lib.LlamaLogLevel.error,
        logger: (level, message) => this.opts.logger.debug({ level }, message.trim()),
      }),
    );
    return this.llama;
  }
}

/**
 * Frees a generation runtime's scoring contexts (if any were made): `retire` (unload) lets the
 * scoring in flight finish first; at shutdown the waiting requests are refused at once.
 */
async function disposeScoring(rt: GenerationRuntime, retire: boolean): Promise<void> {
  const scoring = await rt.scoring?.catch(() => undefined);
  if (!scoring) return;
  const gone = new AppError(ErrorCode.EngineUnavailable, "The model is no longer served");
  if (retire) {
    scoring.pool.close(gone);
    await scoring.pool.whenIdle();
  } else scoring.pool.rejectAll(gone);
  for (const c of scoring.contexts) await c.dispose();
}

/** The key of `model`'s runtime: its dedicated runtime's, else the model id (shared). */
function runtimeKey(model: CatalogModel): string {
  return model.runtime?.key ?? model.id;
}

/** Most tokens over all inputs of one embeddings request (OpenAI's bound; one request holds a context). */
export const MAX_EMBEDDING_REQUEST_TOKENS = 300_000;

/** Index of the first differing token between a sequence's cached tokens and `[BOS?] + prompt`. */
function commonPrefix(cached: readonly Token[], prompt: readonly Token[], bosCount: number): number {
  if (cached.length === 0) return 0;
  let i = bosCount; // the BOS token is the same for every prompt
  while (i < cached.length && i - bosCount < prompt.length && cached[i] === prompt[i - bosCount]) i++;
  return i;
}

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

/** The abort reason when it is an `AppError` (the HTTP layer's ClientClosed), else a ClientClosed. */
function clientGone(signal: AbortSignal): AppError {
  return signal.reason instanceof AppError
    ? signal.reason
    : new AppError(ErrorCode.ClientClosed, "The client closed the connection");
}

function normalise(vector: readonly number[]): number[] {
  let sum = 0;
  for (const v of vector) sum += v * v;
  const norm = Math.sqrt(sum);
  return norm > 0 ? vector.map((v) => v / norm) : [...vector];
}

function inputField(req: EmbedRequest, i: number): string {
  return req.inputs.length === 1 ? "input" : `input[${i}]`;
}
