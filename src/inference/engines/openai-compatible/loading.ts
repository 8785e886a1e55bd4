/**
 * Model loading for the upstream engine (see `openai-compatible.engine.ts`): the configured
 * endpoints, which of them serve each catalog model (its route), their periodic health checks,
 * bringing a model up by probing its endpoints (`load`), and the 503 that says why none can serve
 * it. Closing stops the health checks and every connection.
 */
import type { Logger } from "pino";
import type { CatalogModel, OpenAiCompatibleEngineSpec } from "../../../config/catalog.js";
import { ConfigError, type UpstreamConfig } from "../../../config/config.js";
import { AppError, ErrorCode } from "../../../shared/errors.js";
import { UpstreamEndpoint, type UpstreamTimeouts } from "./endpoint.js";

/** What the upstream engine is built with: the configured endpoints, their timeouts, a logger. */
export interface OpenAiCompatibleEngineOptions extends UpstreamTimeouts {
  /** The configured endpoints (config `upstreams`). */
  endpoints: UpstreamConfig[];
  logger: Logger;
  /** Scoring time limit per decisions request, ms (`SWITCHYARD_DECISIONS_TIME_LIMIT_MS`); default 60 s. */
  scoringTimeLimitMs?: number;
}

/** One endpoint's state (`health`). */
export interface EndpointHealth {
  /** undefined until probed or used. */
  healthy: boolean | undefined;
  reason: string;
  inFlight: number;
  connected: number;
}

/** The endpoints that may serve one catalog model, and the model id they know it by. */
export interface Route {
  modelId: string;
  upstreamModel: string;
  endpoints: UpstreamEndpoint[];
}

/** `Retry-After` of our 503 when no endpoint can take a model's requests, seconds. */
const UNAVAILABLE_RETRY_AFTER_S = 5;

/** The upstream endpoints and the routes of the models they serve (see the module header). */
export class UpstreamRoutes {
  private readonly endpoints = new Map<string, UpstreamEndpoint>();
  private readonly routes = new WeakMap<CatalogModel, Route>();
  private healthTimer?: NodeJS.Timeout;
  private isClosed = false;

  constructor(private readonly opts: OpenAiCompatibleEngineOptions) {
    for (const config of opts.endpoints) {
      this.endpoints.set(config.name, new UpstreamEndpoint(config, opts, opts.logger));
    }
  }

  /** True once `close` began: nothing more is sent. */
  get closed(): boolean {
    return this.isClosed;
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

  /** Stops the health checks, refuses waiting requests and closes every connection. */
  async close(): Promise<void> {
    this.isClosed = true;
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
   * EngineUnavailable (503, Retry-After) saying why the endpoints cannot serve the model, without
   * their names (issue 9 review, finding 8: callers and a deployment's `status_reason` do not
   * learn the server's topology); the log has the names.
   */
  unavailable(route: Route, failures: string[] = []): AppError {
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
  route(model: CatalogModel): Route {
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

  /** The endpoints serving `modelId` per `spec` (see `route`). @throws as `route`. */
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

  /** Probes every endpoint each `healthIntervalMs` from now on (once; not after `close`). */
  private startHealthChecks(): void {
    if (this.healthTimer || this.isClosed) return;
    this.healthTimer = setInterval(() => {
      for (const endpoint of this.endpoints.values()) void endpoint.probe();
    }, this.opts.healthIntervalMs);
    this.healthTimer.unref();
  }
}
