/**
 * One upstream endpoint: its undici `Pool` (keep-alive connections, no pipelining), its slots
 * (`max_concurrency` requests at once, the rest wait in a `SlotPool` bounded by the request's queue
 * wait, batch work behind interactive), and its health as the last `GET /v1/models` probe or
 * request saw it. A failed endpoint is re-probed soon (1 s, doubling up to the health interval).
 */
import type { Logger } from "pino";
import { Pool } from "undici";
import type { UpstreamConfig } from "../../../config/config.js";
import { withTraceHeaders } from "../../../shared/tracing.js";
import { SlotPool } from "../../slot-pool.js";
import { PATHS, tokenizePath } from "./wire.js";

/** Timeouts of every request to an upstream (config `upstream*TimeoutMs`), ms. */
export interface UpstreamTimeouts {
  connectTimeoutMs: number;
  headersTimeoutMs: number;
  bodyTimeoutMs: number;
  healthIntervalMs: number;
}

/** Most time one health probe may take, ms (a probe answers from memory on every server we target). */
const PROBE_TIMEOUT_MS = 5_000;

/** Body read from a probe at most (a `/v1/models` list is small). */
const MAX_PROBE_BYTES = 4 * 1024 * 1024;

/**
 * True for failures that happened before the request left: DNS, a refused or unreachable
 * connection, a connect timeout, TLS set-up. Only those are retried on another replica; once a
 * request was sent the upstream may be working on it (and charging for it), so it never is.
 */
export function failedBeforeSending(err: unknown): boolean {
  if (!err || typeof err !== "object") return false;
  const e = err as { code?: unknown; syscall?: unknown };
  if (e.code === "UND_ERR_CONNECT_TIMEOUT") return true;
  if (e.syscall === "connect" || e.syscall === "getaddrinfo") return true;
  return typeof e.code === "string" && /^(ERR_TLS_|ERR_SSL_|ECONNREFUSED$|ENOTFOUND$|EAI_AGAIN$)/.test(e.code);
}

/** A short, log-safe description of a transport error (its code, else its message). */
export function describeError(err: unknown): string {
  if (err && typeof err === "object") {
    const e = err as { code?: unknown; message?: unknown };
    if (e.code === "ECONNREFUSED") return "connection refused";
    if (e.code === "UND_ERR_CONNECT_TIMEOUT") return "connect timeout";
    if (typeof e.code === "string") return e.code;
    if (typeof e.message === "string") return e.message;
  }
  return String(err);
}

/** An upstream endpoint with its connection pool, slots and health. */
export class UpstreamEndpoint {
  readonly name: string;
  readonly weight: number;
  /** Upstream model ids this endpoint is configured to serve. */
  readonly models: ReadonlySet<string>;
  readonly pool: Pool;
  readonly slots: SlotPool<number>;
  /** Base path of the OpenAI API on the server (e.g. `/v1`), without a trailing slash. */
  readonly basePath: string;
  /** Headers of every request (content type, the key), without the trace context (`headers`). */
  private readonly baseHeaders: Record<string, string>;
  /** undefined until the first probe or request says; requests are still sent to it meanwhile. */
  healthy: boolean | undefined = undefined;
  /** Why it is not healthy (log-safe, shown in EngineUnavailable details). */
  reason = "not probed yet";
  /** The model ids its last successful probe listed; null before one. */
  listed: Set<string> | null = null;
  /** Whether `/tokenize` answered (undefined until tried). */
  tokenize: boolean | undefined = undefined;
  private probing?: Promise<void>;
  private failures = 0;
  private retryTimer?: NodeJS.Timeout;
  private closed = false;

  constructor(
    config: UpstreamConfig,
    private readonly timeouts: UpstreamTimeouts,
    private readonly logger: Logger,
  ) {
    this.name = config.name;
    this.weight = config.weight;
    this.models = new Set(config.models);
    const url = new URL(config.baseUrl);
    this.basePath = url.pathname.replace(/\/+$/, "");
    this.pool = new Pool(url.origin, {
      connections: config.maxConcurrency,
      pipelining: 1,
      // Under the idle timeouts of the servers behind it (uvicorn's is 5 s), so a request is not
      // sent on a connection the server is closing (issue 9 review, finding 7).
      keepAliveTimeout: 4_000,
      connectTimeout: timeouts.connectTimeoutMs,
      headersTimeout: timeouts.headersTimeoutMs,
      bodyTimeout: timeouts.bodyTimeoutMs,
    });
    this.slots = new SlotPool(Array.from({ length: config.maxConcurrency }, (_, i) => i));
    this.baseHeaders = {
      "content-type": "application/json",
      accept: "application/json, text/event-stream",
      ...(config.apiKey ? { authorization: `Bearer ${config.apiKey}` } : {}),
    };
  }

  /**
   * Headers of a request sent now: the base ones, plus the current span's W3C `traceparent` when
   * the request is sent inside a traced engine call (issue 29, item 2).
   */
  get headers(): Record<string, string> {
    return withTraceHeaders(this.baseHeaders);
  }

  /** Requests being served by it right now. */
  get inFlight(): number {
    return this.slots.size - this.slots.available;
  }

  /** Full path of an API operation on this server. */
  path(operation: keyof typeof PATHS | "tokenize"): string {
    return operation === "tokenize" ? tokenizePath(this.basePath) : this.basePath + PATHS[operation];
  }

  /** True when it may take requests for `upstreamModel`: not known to be down, and listing it (when it lists). */
  usableFor(upstreamModel: string): boolean {
    return this.healthy !== false && (this.listed === null || this.listed.has(upstreamModel));
  }

  /** Why it cannot serve `upstreamModel` now (for EngineUnavailable details). */
  whyNot(upstreamModel: string): string {
    if (this.healthy === false) return `${this.name}: ${this.reason}`;
    if (this.listed && !this.listed.has(upstreamModel)) {
      return `${this.name}: up, but its /v1/models does not list ${upstreamModel}`;
    }
    return `${this.name}: ${this.reason}`;
  }

  /**
   * Probes `GET <base>/models` (one probe at a time; callers share it). 200 with a model list:
   * healthy, and `listed` is what it serves; anything else: unhealthy with the reason.
   */
  probe(): Promise<void> {
    this.probing ??= this.runProbe().finally(() => {
      this.probing = undefined;
    });
    return this.probing;
  }

  /** Marks it down after a failed request (a connection error or a 5xx) and schedules a re-probe. */
  markFailed(reason: string): void {
    const wasHealthy = this.healthy !== false;
    this.healthy = false;
    this.reason = reason;
    if (wasHealthy) this.logger.warn({ endpoint: this.name, reason }, "upstream endpoint marked unhealthy");
    this.scheduleRetry();
  }

  /** Closes its connections (in-flight requests fail) and stops re-probing. */
  async close(): Promise<void> {
    this.closed = true;
    clearTimeout(this.retryTimer);
    await this.pool.destroy().catch(() => undefined);
  }

  private async runProbe(): Promise<void> {
    if (this.closed) return;
    try {
      const res = await this.pool.request({
        method: "GET",
        path: this.path("models"),
        headers: this.headers,
        headersTimeout: PROBE_TIMEOUT_MS,
        bodyTimeout: PROBE_TIMEOUT_MS,
        signal: AbortSignal.timeout(PROBE_TIMEOUT_MS),
      });
      let text = "";
      for await (const chunk of res.body) {
        text += (chunk as Buffer).toString("utf8");
        if (text.length > MAX_PROBE_BYTES) {
          res.body.destroy();
          break;
        }
      }
      if (res.statusCode !== 200) return this.markFailed(`GET /v1/models answered HTTP ${res.statusCode}`);
      let ids: string[] | null = null;
      try {
        const data = (JSON.parse(text) as { data?: unknown }).data;
        if (Array.isArray(data)) {
          ids = data.map((m) => (m as { id?: unknown }).id).filter((id): id is string => typeof id === "string");
        }
      } catch {
        /* not a model list */
      }
      if (!ids) return this.markFailed("GET /v1/models did not answer a model list");
      const wasDown = this.healthy === false;
      this.healthy = true;
      this.reason = "healthy";
      this.listed = new Set(ids);
      this.failures = 0;
      clearTimeout(this.retryTimer);
      this.retryTimer = undefined;
      if (wasDown) this.logger.info({ endpoint: this.name }, "upstream endpoint healthy again");
    } catch (err) {
      this.markFailed(describeError(err));
    }
  }

  private scheduleRetry(): void {
    if (this.closed || this.retryTimer) return;
    const delay = Math.min(1000 * 2 ** Math.min(this.failures, 10), this.timeouts.healthIntervalMs);
    this.failures++;
    this.retryTimer = setTimeout(() => {
      this.retryTimer = undefined;
      void this.probe();
    }, delay);
    this.retryTimer.unref();
  }
}
