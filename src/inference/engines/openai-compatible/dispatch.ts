/**
 * Sending requests upstream (see `openai-compatible.engine.ts`): each goes to the usable replica
 * with the fewest requests in flight for its weight (ties in turn), waits for one of its slots,
 * and fails over to the next replica only when it failed before leaving. Also what every part
 * reads answers with: refusals mapped onto our codes, broken answers (502), missing usage, the
 * upstream's `/tokenize` count, and bounded body reads.
 */
import type { Logger } from "pino";
import type { Dispatcher } from "undici";
import { AppError, ErrorCode } from "../../../shared/errors.js";
import { clientGone } from "../../client-gone.js";
import type { RequestPriority } from "../../engine.js";
import { type UpstreamEndpoint, describeError, failedBeforeSending } from "./endpoint.js";
import type { Route, UpstreamRoutes } from "./loading.js";
import { errorForStatus, retryAfterSeconds } from "./wire.js";

/** Most bytes of an upstream's error answer read (its detail is cut far shorter). */
const MAX_ERROR_BYTES = 64 * 1024;
/** Most bytes of a non-streamed answer (a completion or the vectors of one embeddings request). */
export const MAX_ANSWER_BYTES = 256 * 1024 * 1024;

/** Sends requests through the routes' endpoints and reads their answers (see the module header). */
export class UpstreamClient {
  private turn = 0;
  private readonly warnedNoUsage = new Set<string>();

  constructor(
    /** The endpoints and model routes requests go through. */
    readonly routes: UpstreamRoutes,
    private readonly logger: Logger,
  ) {}

  /**
   * Sends one request through a replica: picks an endpoint, waits for one of its slots, runs
   * `send`, and on a failure before sending marks the endpoint down and tries the next one.
   */
  async dispatch<T>(
    route: Route,
    req: { signal?: AbortSignal; maxQueueWaitMs: number; priority?: RequestPriority },
    send: (endpoint: UpstreamEndpoint, queueMs: number) => Promise<T>,
  ): Promise<T> {
    const queued = performance.now();
    const tried = new Set<UpstreamEndpoint>();
    const failures: string[] = [];
    for (;;) {
      if (this.routes.closed) throw new AppError(ErrorCode.EngineUnavailable, "The engine is shutting down");
      const endpoint = this.pick(route, tried);
      if (!endpoint) throw this.routes.unavailable(route, failures);
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
          this.logger.warn({ endpoint: endpoint.name, model: route.modelId, reason }, "upstream request timed out");
          throw new AppError(ErrorCode.EngineTimeout, "The upstream engine did not answer in time");
        }
        endpoint.markFailed(reason);
        this.logger.warn({ endpoint: endpoint.name, model: route.modelId, reason }, "upstream request failed");
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

  /** Reads an upstream's non-2xx answer and maps it (`errorForStatus`); 502/503 also mark the endpoint down. */
  async refusal(endpoint: UpstreamEndpoint, res: Dispatcher.ResponseData): Promise<AppError> {
    const text = await readText(res.body, MAX_ERROR_BYTES);
    const retryAfter = retryAfterSeconds(res.headers["retry-after"]);
    if (res.statusCode === 502 || res.statusCode === 503) endpoint.markFailed(`answered HTTP ${res.statusCode}`);
    if (res.statusCode >= 500 || res.statusCode === 401 || res.statusCode === 403) {
      this.logger.warn({ endpoint: endpoint.name, status: res.statusCode }, "upstream refused a request");
    }
    return errorForStatus(res.statusCode, text, retryAfter);
  }

  /** An answer that is not what the protocol promises → 502. */
  broken(endpoint: UpstreamEndpoint, what: string): AppError {
    this.logger.warn({ endpoint: endpoint.name, answer: what }, "upstream answered something unexpected");
    return new AppError(ErrorCode.EngineFailure, `The upstream engine answered ${what}`);
  }

  /**
   * A tool call an upstream answered that names no allowed tool or whose arguments are not a JSON
   * object: logged, and left out of the answer (never passed on as a broken call; an answer with
   * no usable call left is a broken answer, see `generation.ts`).
   */
  unusableCall(endpoint: UpstreamEndpoint, name: string): void {
    this.logger.warn(
      { endpoint: endpoint.name, tool: name },
      "upstream answered a tool call that is not valid: left out",
    );
  }

  /**
   * An answer with `calls` (> 1) usable tool calls although `parallel_tool_calls: false` was sent:
   * logged; the first is answered (issue 26 review, finding 7).
   */
  parallelCalls(endpoint: UpstreamEndpoint, calls: number): void {
    this.logger.warn(
      { endpoint: endpoint.name, calls },
      "upstream answered several tool calls despite parallel_tool_calls: false: the first is answered",
    );
  }

  /** Usage an upstream did not send: logged once per endpoint, then `fallback` is recorded. */
  noUsage<T>(endpoint: UpstreamEndpoint, fallback: T): T {
    if (!this.warnedNoUsage.has(endpoint.name)) {
      this.warnedNoUsage.add(endpoint.name);
      this.logger.warn({ endpoint: endpoint.name }, "upstream answered without usage: estimated token counts recorded");
    }
    return fallback;
  }

  /** The upstream's `/tokenize` count of `text`; null when no endpoint of the route has one. */
  async exactTokens(route: Route, text: string): Promise<number | null> {
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
        this.logger.debug({ endpoint: endpoint.name, err: describeError(err) }, "upstream /tokenize failed");
      }
    }
    return null;
  }
}

/** A body as text, at most `limit` bytes (the rest is dropped). */
export async function readText(body: Dispatcher.ResponseData["body"], limit: number): Promise<string> {
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
export async function readJson(body: Dispatcher.ResponseData["body"], limit: number): Promise<unknown> {
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
