/**
 * Prometheus metrics (issue 13, item 4), one registry per server (tests run several servers in
 * one process, so nothing goes to prom-client's global registry):
 *
 * - `switchyard_http_requests_total{method,route,status}` and
 *   `switchyard_http_request_duration_seconds{method,route,status}` (histogram): every answer, by
 *   the route pattern that served it (`/v1/responses/:id`), `/graphql`, or `unmatched`;
 * - `switchyard_engine_queue_wait_seconds{model,operation}` (histogram): waiting for an engine slot;
 * - `switchyard_engine_seconds_total`, `switchyard_engine_prompt_tokens_total`,
 *   `switchyard_engine_completion_tokens_total` `{model,operation}`: tokens/s by model is
 *   `rate(completion_tokens) / rate(engine_seconds)`; `switchyard_engine_requests_total{model,operation,outcome}`;
 * - `switchyard_webhook_attempts_total{outcome}` (delivered, retry, failed);
 * - read at scrape time (`counterFrom`, `gaugeFrom`): the group commit's flushes, rows and
 *   seconds, job queue depth and oldest age;
 * - Node's defaults with the `switchyard_` prefix: event-loop lag, heap and RSS, GC, handles.
 */
import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics } from "prom-client";

/** Seconds buckets from 1 ms to 60 s. */
const SECONDS_BUCKETS = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60];

/** A scrape-time reading: it sets gauges or counters of its own before the registry renders. */
export type MetricsCollector = () => Promise<void> | void;

/** The server's metrics (see the module header). */
export class Metrics {
  readonly registry = new Registry();
  readonly httpRequests: Counter<"method" | "route" | "status">;
  readonly httpDuration: Histogram<"method" | "route" | "status">;
  readonly engineQueueWait: Histogram<"model" | "operation">;
  readonly engineSeconds: Counter<"model" | "operation">;
  readonly enginePromptTokens: Counter<"model" | "operation">;
  readonly engineCompletionTokens: Counter<"model" | "operation">;
  readonly engineRequests: Counter<"model" | "operation" | "outcome">;
  readonly webhookAttempts: Counter<"outcome">;
  private readonly collectors: MetricsCollector[] = [];

  constructor() {
    const registers = [this.registry];
    this.httpRequests = new Counter({
      name: "switchyard_http_requests_total",
      help: "HTTP answers by method, route pattern and status",
      labelNames: ["method", "route", "status"],
      registers,
    });
    this.httpDuration = new Histogram({
      name: "switchyard_http_request_duration_seconds",
      help: "Time from request to the end of the answer (streams: to the last byte), seconds",
      labelNames: ["method", "route", "status"],
      buckets: SECONDS_BUCKETS,
      registers,
    });
    this.engineQueueWait = new Histogram({
      name: "switchyard_engine_queue_wait_seconds",
      help: "Time a request waited for an engine slot, seconds",
      labelNames: ["model", "operation"],
      buckets: SECONDS_BUCKETS,
      registers,
    });
    this.engineSeconds = new Counter({
      name: "switchyard_engine_seconds_total",
      help: "Time engines spent on requests after taking a slot, seconds",
      labelNames: ["model", "operation"],
      registers,
    });
    this.enginePromptTokens = new Counter({
      name: "switchyard_engine_prompt_tokens_total",
      help: "Prompt (input) tokens engines processed",
      labelNames: ["model", "operation"],
      registers,
    });
    this.engineCompletionTokens = new Counter({
      name: "switchyard_engine_completion_tokens_total",
      help: "Completion (output) tokens engines generated",
      labelNames: ["model", "operation"],
      registers,
    });
    this.engineRequests = new Counter({
      name: "switchyard_engine_requests_total",
      help: "Engine calls by outcome (ok, cancelled, error)",
      labelNames: ["model", "operation", "outcome"],
      registers,
    });
    this.webhookAttempts = new Counter({
      name: "switchyard_webhook_attempts_total",
      help: "Webhook delivery attempts by outcome: delivered, retry (failed, tried again later), failed (for good)",
      labelNames: ["outcome"],
      registers,
    });
    collectDefaultMetrics({ register: this.registry, prefix: "switchyard_" });
  }

  /** A counter whose total `read()` returns at each scrape (a running total kept elsewhere). */
  counterFrom(name: string, help: string, read: () => number): void {
    let last = 0;
    new Counter({
      name,
      help,
      registers: [this.registry],
      collect() {
        const now = read();
        if (now > last) this.inc(now - last);
        last = Math.max(last, now);
      },
    });
  }

  /** A gauge whose labelled values `read()` returns at each scrape (e.g. from the database). */
  gaugeFrom<L extends string>(
    name: string,
    help: string,
    labelNames: L[],
    read: () => Promise<Array<{ labels: Record<L, string>; value: number }>>,
  ): void {
    new Gauge({
      name,
      help,
      labelNames,
      registers: [this.registry],
      async collect() {
        this.reset();
        for (const { labels, value } of await read().catch(() => [])) this.set(labels as never, value);
      },
    });
  }

  /** Runs `collect` before every scrape (its errors are skipped: the rest still renders). */
  addCollector(collect: MetricsCollector): void {
    this.collectors.push(collect);
  }

  /** The exposition text (`text/plain; version=0.0.4`) after running the collectors. */
  async render(): Promise<string> {
    await Promise.all(
      this.collectors.map((c) =>
        Promise.resolve()
          .then(c)
          .catch(() => undefined),
      ),
    );
    return this.registry.metrics();
  }

  /** The content type of `render()`. */
  get contentType(): string {
    return this.registry.contentType;
  }
}
