/**
 * Traces' SDK set-up (issue 29, item 2), the one place it happens: an OpenTelemetry tracer
 * provider of this process's own (never registered as the global one), a batch span processor
 * and the OTLP/HTTP exporter (`http/protobuf` or `http/json`) to `config.otlpTracesEndpoint`.
 * Off without an endpoint (`Tracing.off`). The standard variables are honoured where they are
 * read: the endpoint and protocol by `config.ts` (`otel-env.ts`), headers, timeout, compression
 * and certificates by the exporter, `OTEL_TRACES_SAMPLER` (`…_ARG`), `OTEL_BSP_*` and the span
 * limits by the SDK's provider, `OTEL_SERVICE_NAME` and `OTEL_RESOURCE_ATTRIBUTES` here (over
 * `service.name=switchyard`). What the spans are: `shared/tracing.ts`.
 */
import type { ReadableSpan, SpanExporter } from "@opentelemetry/sdk-trace-base";
import type { Logger } from "pino";
import type { DataSource } from "typeorm";
import { type Config, packageVersion } from "../config/config.js";
import { queryRows } from "../db/sql.js";
import { Tracing } from "../shared/tracing.js";

/** Least time between two "spans not exported" warnings, ms. */
const EXPORT_WARNING_EVERY_MS = 60_000;

/**
 * The tracing of a process started with `config`: `Tracing.off` without `otlpTracesEndpoint`.
 * `contentAllowed` answers whether a team keeps bodies (asked only with `traceContent` on). The
 * SDK and the exporter are loaded only here, when tracing is on: a process without it never
 * loads them.
 */
export async function createTracing(
  config: Config,
  logger: Logger,
  contentAllowed: (teamId: string) => Promise<boolean>,
): Promise<Tracing> {
  const url = config.otlpTracesEndpoint;
  if (!url) return Tracing.off;
  const [{ ExportResultCode, W3CTraceContextPropagator }, resources, sdk, json, protobuf] = await Promise.all([
    import("@opentelemetry/core"),
    import("@opentelemetry/resources"),
    import("@opentelemetry/sdk-trace-base"),
    import("@opentelemetry/exporter-trace-otlp-http"),
    import("@opentelemetry/exporter-trace-otlp-proto"),
  ]);
  const { detectResources, envDetector, resourceFromAttributes } = resources;
  const { BasicTracerProvider, BatchSpanProcessor } = sdk;
  const JsonExporter = json.OTLPTraceExporter;
  const ProtobufExporter = protobuf.OTLPTraceExporter;
  const exporter = config.otlpProtocol === "http/json" ? new JsonExporter({ url }) : new ProtobufExporter({ url });
  const resource = resourceFromAttributes({
    "service.name": "switchyard",
    "service.version": packageVersion,
    "switchyard.role": config.role,
  }).merge(detectResources({ detectors: [envDetector] }));
  const provider = new BasicTracerProvider({
    resource,
    spanProcessors: [new BatchSpanProcessor(new WarningExporter(exporter, logger, ExportResultCode.SUCCESS))],
  });
  logger.info({ endpoint: url, protocol: config.otlpProtocol, content: config.traceContent }, "traces exported");
  return new Tracing(provider.getTracer("switchyard", packageVersion), {
    propagator: new W3CTraceContextPropagator(),
    content: config.traceContent,
    contentAllowed,
    close: () => provider.shutdown(),
  });
}

/** An exporter that logs failed exports (a warning at most once a minute) instead of dropping them silently. */
class WarningExporter implements SpanExporter {
  private lastWarning = -Infinity;

  constructor(
    private readonly inner: SpanExporter,
    private readonly logger: Logger,
    /** `ExportResultCode.SUCCESS` (the SDK is loaded lazily, with its enums). */
    private readonly success: number,
  ) {}

  export(spans: ReadableSpan[], done: Parameters<SpanExporter["export"]>[1]): void {
    this.inner.export(spans, (result) => {
      if (result.code !== this.success && Date.now() - this.lastWarning >= EXPORT_WARNING_EVERY_MS) {
        this.lastWarning = Date.now();
        this.logger.warn({ err: result.error, spans: spans.length }, "spans not exported (OTLP receiver)");
      }
      done(result);
    });
  }

  shutdown(): Promise<void> {
    return this.inner.shutdown();
  }

  forceFlush(): Promise<void> {
    return this.inner.forceFlush?.() ?? Promise.resolve();
  }
}

/**
 * Whether `teamId` keeps request and result bodies (zero data retention off): traces record
 * content only then. False before the database is up or for an unknown team.
 */
export async function keepsBodies(ds: DataSource | undefined, teamId: string): Promise<boolean> {
  if (!ds) return false;
  const rows = await queryRows<{ zdr: boolean }>(
    ds,
    "SELECT zero_data_retention_enabled AS zdr FROM teams WHERE id = $1",
    [teamId],
  );
  return rows.length === 1 && !rows[0].zdr;
}
