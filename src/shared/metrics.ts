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
 * - `switchyard_engine_tokens_per_second{model}` (histogram): each generation's completion tokens
 *   over its engine time, so the spread of tokens/s by model is read directly;
 * - `switchyard_metering_flush_size_rows` and `switchyard_metering_flush_duration_seconds`
 *   (histograms): each group commit's rows and time;
 * - `switchyard_webhook_attempts_total{outcome}` (delivered, retry, failed);
 * - read at scrape time (`counterFrom`, `gaugeFrom`): the group commit's flushes, rows and
 *   seconds, job queue depth and oldest age;
 * - Node's defaults with the `switchyard_` prefix: event-loop lag, heap and RSS, GC, handles.
 */
import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics } from "prom-client";
import { LeanCounter, LeanHistogram } from "./lean-metrics.js";

/** Seconds buckets from 1 ms to 60 s. */
const SECONDS_BUCKETS = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60];

/** Tokens per second buckets: 1 to 5,000. */
const RATE_BUCKETS = [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000];
/** Rows per group commit: 1 to 2,000. */
const ROWS_BUCKETS = [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000];

/** A scrape-time reading: it sets gauges or counters of its own before the registry renders. */
export type MetricsCollector = () => Promise<void> | void;

/** The server's metrics (see the module header). */
export class Metrics {
  readonly registry = new Registry();
  // What every request touches is kept in lean series (`lean-metrics.ts`; same exposition).
  readonly httpRequests: LeanCounter<"method" | "route" | "status">;
  readonly httpDuration: LeanHistogram<"method" | "route" | "status">;
  readonly engineQueueWait: LeanHistogram<"model" | "operation">;
  readonly engineSeconds: LeanCounter<"model" | "operation">;
  readonly enginePromptTokens: LeanCounter<"model" | "operation">;
  readonly engineCompletionTokens: LeanCounter<"model" | "operation">;
  readonly engineRequests: LeanCounter<"model" | "operation" | "outcome">;
  readonly webhookAttempts: Counter<"outcome">;
  readonly engineTokensPerSecond: LeanHistogram<"model">;
  readonly meteringFlushRows: Histogram;
  readonly meteringFlushSeconds: Histogram;
  private readonly collectors: MetricsCollector[] = [];

  constructor() {
    const registers = [this.registry];
    this.httpRequests = new LeanCounter(
      "switchyard_http_requests_total",
      "HTTP answers by method, route pattern and status",
      ["method", "route", "status"],
      this.registry,
    );
    this.httpDuration = new LeanHistogram(
      "switchyard_http_request_duration_seconds",
      "Time from request to the end of the answer (streams: to the last byte), seconds",
      ["method", "route", "status"],
      SECONDS_BUCKETS,
      this.registry,
    );
    this.engineQueueWait = new LeanHistogram(
      "switchyard_engine_queue_wait_seconds",
      "Time a request waited for an engine slot, seconds",
      ["model", "operation"],
      SECONDS_BUCKETS,
      this.registry,
    );
    this.engineSeconds = new LeanCounter(
      "switchyard_engine_seconds_total",
      "Time engines spent on requests after taking a slot, seconds",
      ["model", "operation"],
      this.registry,
    );
    this.enginePromptTokens = new LeanCounter(
      "switchyard_engine_prompt_tokens_total",
      "Prompt (input) tokens engines processed",
      ["model", "operation"],
      this.registry,
    );
    this.engineCompletionTokens = new LeanCounter(
      "switchyard_engine_completion_tokens_total",
      "Completion (output) tokens engines generated",
      ["model", "operation"],
      this.registry,
    );
    this.engineRequests = new LeanCounter(
      "switchyard_engine_requests_total",
      "Engine calls by outcome (ok, cancelled, error)",
      ["model", "operation", "outcome"],
      this.registry,
    );
    this.webhookAttempts = new Counter({
      name: "switchyard_webhook_attempts_total",
      help: "Webhook delivery attempts by outcome: delivered, retry (failed, tried again later), failed (for good)",
      labelNames: ["outcome"],
      registers,
    });
    this.engineTokensPerSecond = new LeanHistogram(
      "switchyard_engine_tokens_per_second",
      "Completion tokens per second of engine time, one observation per generation, by model",
      ["model"],
      RATE_BUCKETS,
      this.registry,
    );
    this.meteringFlushRows = new Histogram({
      name: "switchyard_metering_flush_size_rows",
      help: "Requests written by one group commit (flush size)",
      buckets: ROWS_BUCKETS,
      registers,
    });
    this.meteringFlushSeconds = new Histogram({
      name: "switchyard_metering_flush_duration_seconds",
      help: "Time one group commit took (flush latency), seconds",
      buckets: SECONDS_BUCKETS,
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
