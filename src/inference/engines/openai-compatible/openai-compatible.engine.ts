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
 *
 * This class is the `InferenceEngine` façade; the work is split by concern: model loading, routes
 * and health (`loading.ts`), sending through replicas and reading answers (`dispatch.ts`), chat
 * completions (`generation.ts`), embeddings (`embedding.ts`) and scoring (`scoring.ts`).
 */
import type { CatalogModel } from "../../../config/catalog.js";
import type {
  EmbedRequest,
  EmbedResult,
  GenerateRequest,
  GenerateResult,
  InferenceEngine,
  ScoreRequest,
  ScoreResult,
} from "../../engine.js";
import { UpstreamClient } from "./dispatch.js";
import { embed } from "./embedding.js";
import { generate } from "./generation.js";
import { type EndpointHealth, type OpenAiCompatibleEngineOptions, UpstreamRoutes } from "./loading.js";
import { scoreContinuations } from "./scoring.js";

/** The OpenAI-compatible upstream `InferenceEngine` (see the module header). */
export class OpenAiCompatibleEngine implements InferenceEngine {
  private readonly routes: UpstreamRoutes;
  private readonly client: UpstreamClient;

  constructor(private readonly opts: OpenAiCompatibleEngineOptions) {
    this.routes = new UpstreamRoutes(opts);
    this.client = new UpstreamClient(this.routes, opts.logger);
  }

  /**
   * Checks the catalog against the configured endpoints at start-up: every endpoint an
   * `openai_compatible` model names must exist.
   * @throws ConfigError naming the model and the unknown endpoint.
   */
  checkCatalog(models: CatalogModel[]): void {
    this.routes.checkCatalog(models);
  }

  /** True while at least one endpoint serving `model` is known healthy. */
  isLoaded(model: CatalogModel): boolean {
    return this.routes.isLoaded(model);
  }

  /**
   * Brings `model` up: probes every endpoint that may serve it (`GET /v1/models`) and resolves
   * once at least one is healthy and lists the upstream model. Also what the deployment
   * reconciler calls (issue 9, item 4).
   * @throws AppError EngineUnavailable whose detail says, per endpoint, why none can serve it
   *   (its message becomes a deployment's `status_reason`).
   */
  load(model: CatalogModel): Promise<void> {
    return this.routes.load(model);
  }

  /**
   * One chat completion upstream, streamed from it (`generation.ts`).
   * @throws AppError as `errorForStatus` maps the upstream's refusals; RateLimited when no
   *   endpoint slot frees up within `maxQueueWaitMs`; EngineUnavailable (503) when no endpoint can
   *   be reached; EngineTimeout (504); EngineFailure (502) for a broken answer; the abort reason
   *   (ClientClosed) when the caller left before the answer started.
   */
  generate(req: GenerateRequest): Promise<GenerateResult> {
    return generate(this.client, req);
  }

  /**
   * Embeds the inputs upstream, in input order (`embedding.ts`).
   * @throws as `generate`.
   */
  embed(req: EmbedRequest): Promise<EmbedResult> {
    return embed(this.client, req);
  }

  /**
   * Scores answers upstream by their echoed prompt log-probabilities (`scoring.ts`).
   * @throws AppError 400 naming `questions` over the prompt-bytes limit, `model` when the upstream
   *   cannot give prompt log-probabilities, or the question of the longest prompt it refused;
   *   ScoringStopped (499 / 504, or the error, after work was done); otherwise as `generate`.
   */
  scoreContinuations(req: ScoreRequest): Promise<ScoreResult> {
    return scoreContinuations(this.client, this.opts, req);
  }

  /**
   * Tokens of `text` for `model`: the upstream's `/tokenize` count (vLLM, llama.cpp server) when
   * an endpoint has it; else its UTF-8 byte length, an upper bound (documented as such: no
   * tokenizer makes more tokens than bytes, special tokens aside).
   */
  async countTokens(model: CatalogModel, text: string): Promise<number> {
    return (await this.client.exactTokens(this.routes.route(model), text)) ?? Buffer.byteLength(text, "utf8");
  }

  /** Stops the health checks, refuses waiting requests and closes every connection. */
  close(): Promise<void> {
    return this.routes.close();
  }

  /**
   * Every endpoint as it stands, for logs and tests: `{name: {healthy, reason, inFlight,
   * connected}}` (`connected`: open connections in its pool).
   */
  health(): Record<string, EndpointHealth> {
    return this.routes.health();
  }
}
