/**
 * The upstream engine (DESIGN §1 "Engines behind one interface"; issue 9, item 3): serves catalog
 * models with `engine.type: "openai_compatible"` through the OpenAI-compatible HTTP API of vLLM,
 * SGLang, llama.cpp server or another Switchyard, configured as endpoints (`SWITCHYARD_UPSTREAMS`).
 *
 * - Requests go through each endpoint's undici `Pool` (keep-alive, no pipelining), never global
 *   `fetch`, with connect, headers and body timeouts.
 * - Replicas: the endpoints serving a model. Each request goes to the usable one with the fewest
 *   requests in flight for its weight (ties in turn); at most `max_concurrency` at once per
 *   endpoint, the rest wait (interactive before batch) up to the request's queue wait, then 429.
 * - Failover: a failure before the request left (refused, unreachable, connect timeout) marks the
 *   endpoint unhealthy and the next replica is tried; once sent, a request is never retried.
 *   Unhealthy endpoints are re-probed (`GET /v1/models`) within 1 s, backing off to the health
 *   interval, and every endpoint is probed every interval.
 * - Credit: before sending, `admit` reserves a prompt bound that cannot under-count (UTF-8 bytes +
 *   per-message overhead; near the context, the upstream's `/tokenize` count) and `max_tokens`;
 *   without one, the rest of the context is sent as `max_tokens` (`completionBudget`); the usage
 *   the upstream reports is what the request records (DESIGN §3 Money).
 * - Errors: the upstream's answers map onto our codes in `wire.ts` (`errorForStatus`).
 */
import type { Logger } from "pino";
import type { Dispatcher } from "undici";
import type { CatalogModel, OpenAiCompatibleEngineSpec } from "../../../config/catalog.js";
import { ConfigError, type UpstreamConfig } from "../../../config/config.js";
import { AppError, ErrorCode } from "../../../shared/errors.js";
import type {
  EmbedRequest,
  EmbedResult,
  EngineUsage,
  FinishReason,
  GenerateRequest,
  GenerateResult,
  InferenceEngine,
  RequestPriority,
  ScoreQuestion,
  ScoreRequest,
  ScoreResult,
} from "../../engine.js";
import { type CandidateScore, ScoringStopped } from "../../engine.js";
import { StopSequenceFilter } from "../../stop-sequences.js";
import { DEFAULT_SCORING_TIME_LIMIT_MS, ScoringWatch } from "../../scoring-watch.js";
import {
  type ScoringPrompt,
  UPSTREAM_SCORING_LIMITS,
  chunkTokenBound,
  planUpstreamScoring,
  promptBytesAtLeast,
  promptChunks,
  scoredAnswers,
  scoringBody,
} from "./scoring-wire.js";
import { UpstreamEndpoint, type UpstreamTimeouts, describeError, failedBeforeSending } from "./endpoint.js";
import {
  SseDecoder,
  chatBody,
  errorForStatus,
  finishReason,
  matchedStop,
  parseUsage,
  promptTokenBound,
  retryAfterSeconds,
} from "./wire.js";

export interface OpenAiCompatibleEngineOptions extends UpstreamTimeouts {
  /** The configured endpoints (config `upstreams`). */
  endpoints: UpstreamConfig[];
  logger: Logger;
  /** Scoring time limit per decisions request, ms (`SWITCHYARD_DECISIONS_TIME_LIMIT_MS`); default 60 s. */
  scoringTimeLimitMs?: number;
}

/** One endpoint's state (`OpenAiCompatibleEngine.health`). */
export interface EndpointHealth {
  /** undefined until probed or used. */
  healthy: boolean | undefined;
  reason: string;
  inFlight: number;
  connected: number;
}

/** The endpoints that may serve one catalog model, and the model id they know it by. */
interface Route {
  modelId: string;
  upstreamModel: string;
  endpoints: UpstreamEndpoint[];
}

/** Most bytes of an upstream's error answer read (its detail is cut far shorter). */
const MAX_ERROR_BYTES = 64 * 1024;
/** Most bytes of a non-streamed answer (a completion or the vectors of one embeddings request). */
const MAX_ANSWER_BYTES = 256 * 1024 * 1024;
/** `Retry-After` of our 503 when no endpoint can take a model's requests, seconds. */
const UNAVAILABLE_RETRY_AFTER_S = 5;
/** Chat-template tokens allowed per message over an exact text count (role markers, separators). */
const EXACT_MESSAGE_OVERHEAD_TOKENS = 8;
/** Chat-template tokens allowed once over an exact text count (the generation prompt, BOS). */
const EXACT_TEMPLATE_OVERHEAD_TOKENS = 16;

/** The OpenAI-compatible upstream `InferenceEngine` (see the module header). */
export class OpenAiCompatibleEngine implements InferenceEngine {
  private readonly endpoints = new Map<string, UpstreamEndpoint>();
  private readonly routes = new WeakMap<CatalogModel, Route>();
  private healthTimer?: NodeJS.Timeout;
  private turn = 0;
  private closed = false;
  private readonly warnedNoUsage = new Set<string>();

  constructor(private readonly opts: OpenAiCompatibleEngineOptions) {
    for (const config of opts.endpoints) {
      this.endpoints.set(config.name, new UpstreamEndpoint(config, opts, opts.logger));
    }
  }

  /**
   * Checks the catalog against the configured endpoints at start-up: every endpoint an
   * `openai_compatible` model names must exist.
   * @throws ConfigError naming the model and the unknown endpoint.
   */
  checkCatalog(models: CatalogModel[]): void {
    for (const model of models) {
      if (model.engine.type !== "openai_compatible") continue;
      for (const name of model.engine.endpoints ?? []) {
        if (!this.endpoints.has(name)) {
          throw new ConfigError(
            `model ${model.id} names upstream endpoint ${name}, which SWITCHYARD_UPSTREAMS does not configure`,
          );
        }
      }
    }
  }

  /** True while at least one endpoint serving `model` is known healthy. */
  isLoaded(model: CatalogModel): boolean {
    let route: Route;
    try {
      route = this.route(model);
    } catch {
      return false;
    }
    return route.endpoints.some((e) => e.healthy === true && e.usableFor(route.upstreamModel));
  }

  /**
   * Brings `model` up: probes every endpoint that may serve it (`GET /v1/models`) and resolves
   * once at least one is healthy and lists the upstream model. Also what the deployment
   * reconciler calls (issue 9, item 4).
   * @throws AppError EngineUnavailable whose detail says, per endpoint, why none can serve it
   *   (its message becomes a deployment's `status_reason`).
   */
  async load(model: CatalogModel): Promise<void> {
    const route = this.route(model);
    await Promise.all(route.endpoints.map((e) => e.probe()));
    if (!route.endpoints.some((e) => e.healthy === true && e.usableFor(route.upstreamModel))) {
      throw this.unavailable(route);
    }
  }

  /**
   * One chat completion upstream (`POST <base>/chat/completions`, always `stream: true` with
   * `stream_options.include_usage`; text goes to `onText` when it is set). Caller stop strings go upstream and are
   * also matched here (an upstream that ignores them is cut at the first one); `stop_sequence` is
   * reported when either side says which one matched. An abort closes the upstream connection
   * (the upstream stops generating); a stream cut that way ends `cancelled` with the text so far
   * and the last usage the upstream sent (else an estimate).
   * @throws AppError as `errorForStatus` maps the upstream's refusals; RateLimited when no
   *   endpoint slot frees up within `maxQueueWaitMs`; EngineUnavailable (503) when no endpoint can
   *   be reached; EngineTimeout (504); EngineFailure (502) for a broken answer; the abort reason
   *   (ClientClosed) when the caller left before the answer started.
   */
  async generate(req: GenerateRequest): Promise<GenerateResult> {
    const route = this.route(req.model);
    if (req.model.modality === "text_embedding") throw AppError.invalid(`Model ${req.model.id} does not generate text`);
    const { bound, maxTokens } = await this.completionBudget(route, req);
    await req.admit?.(bound, maxTokens ?? req.model.contextTokens);
    // Always streamed upstream, also for a caller who wants one answer (issue 9 review, finding
    // 5): a caller who leaves closes the upstream stream, and the request still records what was
    // generated until then (`readStream`) instead of nothing.
    const body = JSON.stringify(chatBody({ ...req, maxTokens }, route.upstreamModel, true));
    return this.dispatch(route, req, async (endpoint, queueMs) => {
      const started = performance.now();
      const res = await endpoint.pool.request({
        method: "POST",
        path: endpoint.path("chat"),
        headers: endpoint.headers,
        body,
        signal: req.signal,
      });
      if (res.statusCode !== 200) throw await this.refusal(endpoint, res);
      return this.readStream(req, endpoint, res, {
        queueMs,
        started,
        bound,
        exactPrompt: () => this.exactPromptBound(route, req.messages),
      });
    });
  }

  /**
   * The prompt tokens a request reserves and the `max_tokens` it sends (issue 9 review, finding
   * 4): the reservation must bound what the upstream can charge even when the upstream's context
   * is larger than the catalog's (a custom model's 2048-token default, say), so a `max_tokens`
   * is always sent.
   * - Prompt: the byte bound (`promptTokenBound`, never under the real count, never capped).
   *   From half the context up, the upstream's `/tokenize` count plus the chat template's
   *   allowance (`exactPromptBound`) when it has one — so an answer is not cut short by a byte
   *   bound that over-counts English about 4× —, and a prompt over the context is refused here.
   * - Completion: the caller's `max_tokens`; without one, the rest of the context after the
   *   prompt bound, or the whole context when the bound reaches it and no exact count is known
   *   (an upstream whose context is the catalog's then refuses it as too long: the caller can
   *   name a smaller `max_tokens`).
   * @throws AppError 400 (field `messages`, `context_length_exceeded`) when the exact count is
   *   over the context.
   */
  private async completionBudget(route: Route, req: GenerateRequest): Promise<{ bound: number; maxTokens: number }> {
    const context = req.model.contextTokens;
    let bound = promptTokenBound(req.messages, Number.MAX_SAFE_INTEGER);
    if (bound >= context / 2) {
      const exact = await this.exactPromptBound(route, req.messages);
      if (exact !== null) {
        bound = exact;
        if (bound >= context) {
          throw AppError.invalid(
            `This model's context is ${context} tokens and the prompt takes about ${bound} with its chat ` +
              `template; shorten the messages`,
            [{ field: "messages", message: "context_length_exceeded" }],
          );
        }
      }
    }
    if (req.maxTokens !== undefined) return { bound, maxTokens: req.maxTokens };
    return { bound, maxTokens: bound < context ? context - bound : context };
  }

  /**
   * The upstream's `/tokenize` count of the messages' text plus `EXACT_MESSAGE_OVERHEAD_TOKENS`
   * per message and `EXACT_TEMPLATE_OVERHEAD_TOKENS` for the template; null when no endpoint of
   * the route counts tokens.
   */
  private async exactPromptBound(route: Route, messages: GenerateRequest["messages"]): Promise<number | null> {
    const text = messages.map((m) => m.content).join("\n");
    const exact = await this.exactTokens(route, text);
    if (exact === null) return null;
    return exact + EXACT_MESSAGE_OVERHEAD_TOKENS * messages.length + EXACT_TEMPLATE_OVERHEAD_TOKENS;
  }

  /**
   * Embeds the inputs upstream (`POST <base>/embeddings`, `encoding_format: "float"`), in input
   * order; the upstream's `usage.prompt_tokens` is what is metered. Admission reserves each text
   * input's UTF-8 bytes (+2; not capped at the catalog's context, which an upstream may exceed)
   * and each token array's length.
   * @throws as `generate`.
   */
  async embed(req: EmbedRequest): Promise<EmbedResult> {
    const route = this.route(req.model);
    if (req.model.modality !== "text_embedding") {
      throw AppError.invalid(`Model ${req.model.id} does not produce embeddings`);
    }
    let bound = 0;
    for (const input of req.inputs) {
      bound += typeof input === "string" ? Buffer.byteLength(input, "utf8") + 2 : input.length;
    }
    await req.admit?.(bound);
    const body = JSON.stringify({ model: route.upstreamModel, input: req.inputs, encoding_format: "float" });
    return this.dispatch(route, req, async (endpoint, queueMs) => {
      const started = performance.now();
      const res = await endpoint.pool.request({
        method: "POST",
        path: endpoint.path("embeddings"),
        headers: endpoint.headers,
        body,
        signal: req.signal,
      });
      if (res.statusCode !== 200) throw await this.refusal(endpoint, res);
      const json = await readJson(res.body, MAX_ANSWER_BYTES);
      const data = (json as { data?: unknown } | null)?.data;
      if (!Array.isArray(data) || data.length !== req.inputs.length) {
        throw this.broken(endpoint, "an embeddings answer without one vector per input");
      }
      const vectors: number[][] = new Array<number[]>(data.length);
      for (const [i, item] of (data as Array<{ index?: unknown; embedding?: unknown }>).entries()) {
        const at = typeof item.index === "number" ? item.index : i;
        if (!Array.isArray(item.embedding) || at < 0 || at >= vectors.length) {
          throw this.broken(endpoint, "an embeddings answer with a malformed vector");
        }
        vectors[at] = item.embedding as number[];
      }
      const usage = (json as { usage?: { prompt_tokens?: unknown } }).usage;
      const promptTokens =
        typeof usage?.prompt_tokens === "number" ? usage.prompt_tokens : this.noUsage(endpoint, bound);
      return { vectors, promptTokens, engineMs: performance.now() - started, queueMs };
    });
  }

  /**
   * Scores answers upstream (decisions, issue 11, item 3): every (question, answer) pair as one
   * prompt with `echo: true, logprobs: 1` (see `scoring-wire.ts`), sent as `POST <base>/completions`
   * requests of at most `UPSTREAM_SCORING_LIMITS.chunkPrompts` prompts each, one after the other;
   * an answer's log-probability is the sum of its echoed tokens'.
   * Bounded before anything is built (issue 11 review, finding 1): first a lower bound from string
   * lengths alone (`promptBytesAtLeast`, review 11b M3), then the prompts' bytes are summed by
   * arithmetic, over `UPSTREAM_SCORING_LIMITS.promptBytes` → 400; then `admit` reserves their bound
   * (UTF-8 bytes + 2 per prompt), then each chunk's prompts are built just before it is sent.
   * Metered (finding 2; DESIGN departure, see `scoring-wire.ts`): the sum of the upstream's
   * `usage.prompt_tokens` over the chunks (without usage: every prompt's echoed tokens), capped at
   * the reserved bound. Stops between chunks and aborts the one in flight when the caller goes away
   * or the scoring time limit passes (`ScoringStopped`, charged the chunks answered so far plus the
   * bound of the one in flight, which the upstream had: review 11b, finding M1). Any other error
   * after a chunk was answered is a `ScoringStopped` too, charged the chunks answered (finding M2).
   * @throws AppError 400 naming `questions` over the prompt-bytes limit; 400 naming `model` when the
   *   upstream cannot give prompt log-probabilities (it refuses `echo` / `logprobs`, has no
   *   completions route, or answers without them); 400 naming the question of the longest prompt
   *   when the upstream refuses a chunk otherwise (`context_length_exceeded` when it says the prompt
   *   is too long); ScoringStopped (499 / 504, or the error, after work was done); otherwise as `generate`.
   */
  async scoreContinuations(req: ScoreRequest): Promise<ScoreResult> {
    const route = this.route(req.model);
    if (req.model.modality === "text_embedding") throw AppError.invalid(`Model ${req.model.id} does not generate text`);
    const limit = UPSTREAM_SCORING_LIMITS.promptBytes;
    // By string lengths first (review 11b, M3): 64 questions about a 1 MB state are refused before
    // any prompt text is measured, which alone held the event loop for about a second.
    const atLeast = promptBytesAtLeast(req.questions);
    if (atLeast > limit) {
      const prompts = req.questions.reduce((n, q) => n + q.candidates.length, 0);
      throw AppError.invalid(
        `Model '${req.model.id}' is served upstream, where every answer is sent as a whole prompt (the input, the question, then the answer): this request would send ${prompts} prompts of at least ${atLeast} bytes in all, over the limit of ${limit} bytes. Ask fewer answers at once or send a shorter state.`,
        [{ field: "questions", message: `${prompts} prompts of at least ${atLeast} bytes in all; at most ${limit}` }],
      );
    }
    const plan = planUpstreamScoring(req.questions);
    if (plan.promptBytes > limit) {
      throw AppError.invalid(
        `Model '${req.model.id}' is served upstream, where every answer is sent as a whole prompt (the input, the question, then the answer): this request would send ${plan.prompts} prompts of ${plan.promptBytes} bytes in all, over the limit of ${limit} bytes. Ask fewer answers at once or send a shorter state.`,
        [
          {
            field: "questions",
            message: `${plan.prompts} prompts of ${plan.promptBytes} bytes in all; at most ${limit}`,
          },
        ],
      );
    }
    await req.admit?.(plan.tokenBound);
    const cannot = (why: string) =>
      AppError.invalid(`Model '${req.model.id}' cannot give log-probabilities: ${why}`, [
        { field: "model", message: "log-probabilities unavailable" },
      ]);
    const scores: CandidateScore[][] = req.questions.map((q) => new Array<CandidateScore>(q.candidates.length));
    // The time limit counts from the first chunk's start, not its wait for a slot (as embedded).
    let watch: ScoringWatch | undefined;
    const started = performance.now();
    let queueMs = 0;
    /** Prompt tokens of the chunks answered (the upstream's usage). */
    let processed = 0;
    /** The token bound of the chunk sent and not yet answered (0 when none is upstream). */
    let inFlight = 0;
    try {
      for (const chunk of promptChunks(plan)) {
        const stop = watch?.reason();
        if (stop) throw stop;
        const body = JSON.stringify(scoringBody(route.upstreamModel, chunk));
        const signal = watch?.abortSignal ?? req.signal;
        const scoring = { signal, maxQueueWaitMs: req.maxQueueWaitMs, priority: req.priority };
        processed += await this.dispatch(route, scoring, async (endpoint, waitedMs) => {
          queueMs += waitedMs;
          if (!watch) {
            watch = new ScoringWatch(req.signal, this.opts.scoringTimeLimitMs ?? DEFAULT_SCORING_TIME_LIMIT_MS);
            req.onStart?.();
          }
          inFlight = chunkTokenBound(chunk);
          const res = await endpoint.pool.request({
            method: "POST",
            path: endpoint.path("completions"),
            headers: endpoint.headers,
            body,
            signal: watch.abortSignal,
          });
          if (res.statusCode !== 200) {
            // A refusal: the upstream did no work on this chunk.
            inFlight = 0;
            const err = await this.refusal(endpoint, res);
            if ([404, 405, 501].includes(res.statusCode)) {
              throw cannot(`its upstream has no completions API (HTTP ${res.statusCode})`);
            }
            if (err.code === ErrorCode.InvalidRequest) {
              if (LOGPROB_REFUSAL.test(err.detail)) {
                throw cannot(`its upstream refused the request (${err.detail})`);
              }
              throw refusedPrompts(req.model.id, req.questions, chunk, err.detail);
            }
            throw err;
          }
          const answer = scoredAnswers(await readJson(res.body, MAX_ANSWER_BYTES), chunk);
          inFlight = 0;
          if (!answer.ok) {
            if (answer.reason === "no_logprobs") throw cannot("its upstream answered without prompt log-probabilities");
            throw this.broken(endpoint, "a completions answer that does not line up with the prompts");
          }
          chunk.forEach((p, i) => {
            scores[p.question][p.answer] = { logprob: answer.logprobs[i], tokens: answer.answerTokens[i] };
          });
          return (
            answer.usagePromptTokens ??
            this.noUsage(
              endpoint,
              answer.promptTokens.reduce((n, t) => n + t, 0),
            )
          );
        });
      }
    } catch (err) {
      // Review 11b, findings M1 and M2: what the upstream was sent is charged however the request
      // ends. The caller leaving or the time limit: the chunks answered plus the bound of the one
      // in flight (the upstream has it; as generation charges the prompt of a client that left).
      // Any other error after a chunk was answered: the chunks answered, recorded failed.
      const stop = watch?.reason();
      if (stop) {
        throw new ScoringStopped(stop, Math.min(processed + inFlight, plan.tokenBound), performance.now() - started);
      }
      if (processed > 0 && err instanceof AppError) {
        throw new ScoringStopped(err, Math.min(processed, plan.tokenBound), performance.now() - started);
      }
      throw err;
    } finally {
      watch?.dispose();
    }
    if (processed > plan.tokenBound) {
      this.opts.logger.warn(
        { model: req.model.id, reported: processed, bound: plan.tokenBound },
        "upstream reported more prompt tokens than the prompts' bytes: charged the bound",
      );
    }
    const elapsed = performance.now() - started;
    return { scores, promptTokens: Math.min(processed, plan.tokenBound), engineMs: elapsed - queueMs, queueMs };
  }

  /**
   * Tokens of `text` for `model`: the upstream's `/tokenize` count (vLLM, llama.cpp server) when
   * an endpoint has it; else its UTF-8 byte length, an upper bound (documented as such: no
   * tokenizer makes more tokens than bytes, special tokens aside).
   */
  async countTokens(model: CatalogModel, text: string): Promise<number> {
    return (await this.exactTokens(this.route(model), text)) ?? Buffer.byteLength(text, "utf8");
  }

  /** The upstream's `/tokenize` count of `text`; null when no endpoint of the route has one. */
  private async exactTokens(route: Route, text: string): Promise<number | null> {
    const endpoint = route.endpoints.find((e) => e.tokenize !== false && e.usableFor(route.upstreamModel));
    if (endpoint) {
      try {
        const res = await endpoint.pool.request({
          method: "POST",
          path: endpoint.path("tokenize"),
          headers: endpoint.headers,
          body: JSON.stringify({ model: route.upstreamModel, prompt: text, content: text, add_special_tokens: false }),
        });
        if (res.statusCode === 200) {
          const json = (await readJson(res.body, MAX_ANSWER_BYTES)) as { count?: unknown; tokens?: unknown } | null;
          const count =
            typeof json?.count === "number" ? json.count : Array.isArray(json?.tokens) ? json.tokens.length : null;
          if (count !== null) {
            endpoint.tokenize = true;
            return count;
          }
        } else {
          await res.body.dump();
        }
        if (res.statusCode === 404 || res.statusCode === 405 || res.statusCode === 200) endpoint.tokenize = false;
      } catch (err) {
        this.opts.logger.debug({ endpoint: endpoint.name, err: describeError(err) }, "upstream /tokenize failed");
      }
    }
    return null;
  }

  /** Stops the health checks, refuses waiting requests and closes every connection. */
  async close(): Promise<void> {
    this.closed = true;
    clearInterval(this.healthTimer);
    const shuttingDown = new AppError(ErrorCode.EngineUnavailable, "The engine is shutting down");
    for (const endpoint of this.endpoints.values()) endpoint.slots.rejectAll(shuttingDown);
    await Promise.all([...this.endpoints.values()].map((e) => e.close()));
  }

  /**
   * Every endpoint as it stands, for logs and tests: `{name: {healthy, reason, inFlight,
   * connected}}` (`connected`: open connections in its pool).
   */
  health(): Record<string, EndpointHealth> {
    const out: Record<string, EndpointHealth> = {};
    for (const e of this.endpoints.values()) {
      out[e.name] = { healthy: e.healthy, reason: e.reason, inFlight: e.inFlight, connected: e.pool.stats.connected };
    }
    return out;
  }

  /**
   * Sends one request through a replica: picks an endpoint, waits for one of its slots, runs
   * `send`, and on a failure before sending marks the endpoint down and tries the next one.
   */
  private async dispatch<T>(
    route: Route,
    req: { signal?: AbortSignal; maxQueueWaitMs: number; priority?: RequestPriority },
    send: (endpoint: UpstreamEndpoint, queueMs: number) => Promise<T>,
  ): Promise<T> {
    const queued = performance.now();
    const tried = new Set<UpstreamEndpoint>();
    const failures: string[] = [];
    for (;;) {
      if (this.closed) throw new AppError(ErrorCode.EngineUnavailable, "The engine is shutting down");
      const endpoint = this.pick(route, tried);
      if (!endpoint) throw this.unavailable(route, failures);
      tried.add(endpoint);
      const waitMs = Math.max(0, req.maxQueueWaitMs - (performance.now() - queued));
      const slot = await endpoint.slots.acquire(waitMs, undefined, req.signal, req.priority === "batch");
      try {
        return await send(endpoint, performance.now() - queued);
      } catch (err) {
        if (err instanceof AppError) throw err;
        if (req.signal?.aborted) throw clientGone(req.signal);
        const reason = describeError(err);
        if (failedBeforeSending(err)) {
          endpoint.markFailed(reason);
          failures.push(`${endpoint.name}: ${reason}`);
          continue;
        }
        const code = (err as { code?: unknown }).code;
        if (code === "UND_ERR_HEADERS_TIMEOUT" || code === "UND_ERR_BODY_TIMEOUT") {
          this.opts.logger.warn(
            { endpoint: endpoint.name, model: route.modelId, reason },
            "upstream request timed out",
          );
          throw new AppError(ErrorCode.EngineTimeout, "The upstream engine did not answer in time");
        }
        endpoint.markFailed(reason);
        this.opts.logger.warn({ endpoint: endpoint.name, model: route.modelId, reason }, "upstream request failed");
        throw new AppError(ErrorCode.EngineFailure, "The upstream engine closed the connection");
      } finally {
        endpoint.slots.release(slot);
      }
    }
  }

  /**
   * The replica for the next request: among usable endpoints not yet tried, one with a free slot
   * and the fewest requests in flight (and waiting) for its weight; ties go in turn. When every
   * one is busy, the least loaded is returned and the request waits for its slot.
   */
  private pick(route: Route, tried: Set<UpstreamEndpoint>): UpstreamEndpoint | undefined {
    const n = route.endpoints.length;
    const start = this.turn++ % n;
    let best: UpstreamEndpoint | undefined;
    let bestScore = Infinity;
    for (let i = 0; i < n; i++) {
      const e = route.endpoints[(start + i) % n];
      if (tried.has(e) || !e.usableFor(route.upstreamModel)) continue;
      const score = (e.slots.available > 0 ? 0 : 1e9) + (e.inFlight + e.slots.waiting + 1) / e.weight;
      if (score < bestScore) {
        best = e;
        bestScore = score;
      }
    }
    return best;
  }

  /**
   * A streamed chat completion: text deltas to `onText` (when set) as they come, usage from the
   * chunk that carries it. The caller's stream opens (`onStart`) once the upstream answered 200;
   * the prompt count it gets then is the admitted bound, the final usage is the upstream's. A
   * caller who leaves ends it `cancelled` with the text so far and the usage the upstream sent,
   * else the prompt's `/tokenize` count or admitted bound and one token per text delta.
   */
  private async readStream(
    req: GenerateRequest,
    endpoint: UpstreamEndpoint,
    res: Dispatcher.ResponseData,
    t: { queueMs: number; started: number; bound: number; exactPrompt: () => Promise<number | null> },
  ): Promise<GenerateResult> {
    const stops = new StopSequenceFilter(req.stop ?? []);
    const decoder = new SseDecoder();
    let text = "";
    let deltas = 0;
    let usage: EngineUsage | null = null;
    let choice: Record<string, unknown> | undefined;
    const emit = (chunk: string) => {
      if (!chunk) return;
      text += chunk;
      req.onText?.(chunk);
    };
    const handle = (data: string) => {
      if (data === "[DONE]") return;
      let event: { choices?: Array<Record<string, unknown>>; usage?: unknown; error?: unknown };
      try {
        event = JSON.parse(data) as typeof event;
      } catch {
        throw this.broken(endpoint, "a stream event that is not JSON");
      }
      if (event.error) {
        const code = Number((event.error as { code?: unknown }).code);
        throw errorForStatus(Number.isInteger(code) && code >= 400 && code < 600 ? code : 502, data);
      }
      usage = parseUsage(event.usage) ?? usage;
      const c = event.choices?.[0];
      if (!c) return;
      const delta = (c.delta as { content?: unknown } | undefined)?.content;
      if (typeof delta === "string" && delta.length > 0) {
        deltas++;
        if (!stops.stopped) emit(stops.push(delta));
      }
      if (c.finish_reason !== null && c.finish_reason !== undefined) choice = c;
    };
    req.onStart?.({ promptTokens: t.bound, cachedPromptTokens: 0, queueMs: t.queueMs });
    const result = (reason: FinishReason, stopSequence: string | null, final: EngineUsage): GenerateResult => ({
      text,
      finishReason: reason,
      stopSequence,
      usage: final,
      engineMs: performance.now() - t.started,
      queueMs: t.queueMs,
    });
    // Usage the upstream did not send (it comes in the last chunk, so a caller who left mostly
    // gets none): the prompt as the upstream's `/tokenize` counts it, else the admitted bound —
    // never less than the upstream may have processed (issue 9 review) — and a token a delta.
    const estimate = async (): Promise<EngineUsage> => {
      const exact = await t.exactPrompt().catch(() => null);
      return { promptTokens: Math.min(t.bound, exact ?? t.bound), completionTokens: deltas, cachedPromptTokens: 0 };
    };
    try {
      for await (const chunk of res.body) for (const data of decoder.push(chunk as Buffer)) handle(data);
      for (const data of decoder.end()) handle(data);
    } catch (err) {
      // The stream is open: the caller leaving ends it `cancelled` with what was generated.
      if (req.signal?.aborted && !(err instanceof AppError && err.code !== ErrorCode.ClientClosed)) {
        return result("cancelled", null, usage ?? (await estimate()));
      }
      throw err;
    }
    if (!stops.stopped) emit(stops.end());
    const { reason, stopSequence } = ending(choice ?? {}, stops, req.stop);
    return result(reason, stopSequence, usage ?? this.noUsage(endpoint, await estimate()));
  }

  /** Reads an upstream's non-2xx answer and maps it (`errorForStatus`); 502/503 also mark the endpoint down. */
  private async refusal(endpoint: UpstreamEndpoint, res: Dispatcher.ResponseData): Promise<AppError> {
    const text = await readText(res.body, MAX_ERROR_BYTES);
    const retryAfter = retryAfterSeconds(res.headers["retry-after"]);
    if (res.statusCode === 502 || res.statusCode === 503) endpoint.markFailed(`answered HTTP ${res.statusCode}`);
    if (res.statusCode >= 500 || res.statusCode === 401 || res.statusCode === 403) {
      this.opts.logger.warn({ endpoint: endpoint.name, status: res.statusCode }, "upstream refused a request");
    }
    return errorForStatus(res.statusCode, text, retryAfter);
  }

  /** An answer that is not what the protocol promises → 502. */
  private broken(endpoint: UpstreamEndpoint, what: string): AppError {
    this.opts.logger.warn({ endpoint: endpoint.name, answer: what }, "upstream answered something unexpected");
    return new AppError(ErrorCode.EngineFailure, `The upstream engine answered ${what}`);
  }

  /** Usage an upstream did not send: logged once per endpoint, then `fallback` is recorded. */
  private noUsage<T>(endpoint: UpstreamEndpoint, fallback: T): T {
    if (!this.warnedNoUsage.has(endpoint.name)) {
      this.warnedNoUsage.add(endpoint.name);
      this.opts.logger.warn(
        { endpoint: endpoint.name },
        "upstream answered without usage: estimated token counts recorded",
      );
    }
    return fallback;
  }

  /**
   * EngineUnavailable (503, Retry-After) saying why the endpoints cannot serve the model, without
   * their names (issue 9 review, finding 8: callers and a deployment's `status_reason` do not
   * learn the server's topology); the log has the names.
   */
  private unavailable(route: Route, failures: string[] = []): AppError {
    const named = failures.length > 0 ? failures : route.endpoints.map((e) => e.whyNot(route.upstreamModel));
    this.opts.logger.debug({ model: route.modelId, reasons: named }, "no upstream endpoint can serve a model");
    // Every reason reads `<endpoint name>: <why>`.
    const reasons = [...new Set(named.map((r) => r.slice(r.indexOf(": ") + 2)))];
    const endpoints = route.endpoints.length === 1 ? "1 endpoint" : `${route.endpoints.length} endpoints`;
    return new AppError(
      ErrorCode.EngineUnavailable,
      `No upstream endpoint can serve ${route.modelId} now (${endpoints}: ${reasons.join("; ")})`,
      undefined,
      UNAVAILABLE_RETRY_AFTER_S,
    );
  }

  /**
   * The endpoints of `model` (its `engine.endpoints`, else every endpoint listing the upstream
   * model), cached per catalog model object. Starts the periodic health checks on first use.
   * @throws AppError EngineUnavailable for a model this engine does not serve or no endpoint serves.
   */
  private route(model: CatalogModel): Route {
    const cached = this.routes.get(model);
    if (cached) return cached;
    const spec = model.engine;
    if (spec.type !== "openai_compatible") {
      throw new AppError(ErrorCode.EngineUnavailable, `Model ${model.id} is not served by an upstream engine`);
    }
    const route = this.resolve(model.id, spec);
    this.routes.set(model, route);
    this.startHealthChecks();
    return route;
  }

  private resolve(modelId: string, spec: OpenAiCompatibleEngineSpec): Route {
    const upstreamModel = spec.upstream_model ?? modelId;
    let endpoints: UpstreamEndpoint[];
    if (spec.endpoints) {
      const unknown = spec.endpoints.filter((name) => !this.endpoints.has(name));
      if (unknown.length > 0) {
        throw new AppError(
          ErrorCode.EngineUnavailable,
          `Model ${modelId} names upstream endpoints that are not configured: ${unknown.join(", ")}`,
        );
      }
      endpoints = spec.endpoints.map((name) => this.endpoints.get(name)!);
    } else {
      endpoints = [...this.endpoints.values()].filter((e) => e.models.has(upstreamModel));
    }
    if (endpoints.length === 0) {
      throw new AppError(
        ErrorCode.EngineUnavailable,
        `No upstream endpoint is configured to serve ${upstreamModel} (SWITCHYARD_UPSTREAMS)`,
      );
    }
    return { modelId, upstreamModel, endpoints };
  }

  private startHealthChecks(): void {
    if (this.healthTimer || this.closed) return;
    this.healthTimer = setInterval(() => {
      for (const endpoint of this.endpoints.values()) void endpoint.probe();
    }, this.opts.healthIntervalMs);
    this.healthTimer.unref();
  }
}

/** How a completion ended: a stop string matched here or named by the upstream, else its `finish_reason`. */
function ending(
  choice: Record<string, unknown>,
  stops: StopSequenceFilter,
  callerStops: string[] | undefined,
): { reason: FinishReason; stopSequence: string | null } {
  if (stops.stopped) return { reason: "stop_sequence", stopSequence: stops.matched };
  const named = matchedStop(choice, callerStops);
  if (named !== null) return { reason: "stop_sequence", stopSequence: named };
  return { reason: finishReason(choice.finish_reason), stopSequence: null };
}

/** The abort reason when it is an `AppError` (the HTTP layer's ClientClosed), else a ClientClosed. */
function clientGone(signal: AbortSignal): AppError {
  return signal.reason instanceof AppError
    ? signal.reason
    : new AppError(ErrorCode.ClientClosed, "The client closed the connection");
}

/** A body as text, at most `limit` bytes (the rest is dropped). */
async function readText(body: Dispatcher.ResponseData["body"], limit: number): Promise<string> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of body) {
    const buf = chunk as Buffer;
    if (size + buf.length > limit) {
      chunks.push(buf.subarray(0, limit - size));
      body.destroy();
      break;
    }
    chunks.push(buf);
    size += buf.length;
  }
  return Buffer.concat(chunks).toString("utf8");
}

/** A JSON body (null when it is not JSON). @throws AppError EngineFailure when it is over `limit` bytes. */
async function readJson(body: Dispatcher.ResponseData["body"], limit: number): Promise<unknown> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of body) {
    const buf = chunk as Buffer;
    size += buf.length;
    if (size > limit) {
      body.destroy();
      throw new AppError(ErrorCode.EngineFailure, "The upstream engine's answer is too large");
    }
    chunks.push(buf);
  }
  try {
    return JSON.parse(chunks.length === 1 ? chunks[0].toString("utf8") : Buffer.concat(chunks).toString("utf8"));
  } catch {
    return null;
  }
}

/** An upstream refusal about the scoring parameters themselves (`echo`, `logprobs`, `prompt_logprobs`). */
const LOGPROB_REFUSAL = /echo|logprob/i;

/**
 * The 400 for an upstream refusing a chunk for another reason than log-probabilities (review 11b,
 * finding M2): most often a prompt over its context. It names the question of the chunk's longest
 * prompt (the one a context limit refuses), with the upstream's words.
 */
function refusedPrompts(modelId: string, questions: ScoreQuestion[], chunk: ScoringPrompt[], detail: string): AppError {
  let longest = chunk[0];
  for (const p of chunk) if (p.text.length > longest.text.length) longest = p;
  const field = questions[longest.question].field;
  const tooLong = /context|too long|max_model_len|maximum/i.test(detail);
  return AppError.invalid(
    `The upstream of model '${modelId}' refused the prompts of ${field}${tooLong ? " (too long for its context)" : ""}: ${detail}`,
    [{ field, message: tooLong ? "context_length_exceeded" : "refused by the upstream" }],
  );
}
