/**
 * The standard OpenTelemetry variables Switchyard reads itself for traces (issue 29, item 2);
 * the OTLP exporter reads the rest (`OTEL_EXPORTER_OTLP_HEADERS`, `…_TIMEOUT`, `…_COMPRESSION`,
 * certificates) and the SDK the sampler and batching (`OTEL_TRACES_SAMPLER`, `OTEL_BSP_*`).
 */

/** The path OTLP/HTTP receivers take traces at, under `OTEL_EXPORTER_OTLP_ENDPOINT`. */
const TRACES_PATH = "/v1/traces";

/**
 * Config values the signal-independent variables give, overridden by the traces-specific ones
 * (`ENV_KEYS`): `OTEL_EXPORTER_OTLP_ENDPOINT` (a base URL; traces go to `<base>/v1/traces`) and
 * `OTEL_EXPORTER_OTLP_PROTOCOL`.
 */
export function otelTracesFallbacks(env: NodeJS.ProcessEnv): Record<string, string> {
  const out: Record<string, string> = {};
  const base = env.OTEL_EXPORTER_OTLP_ENDPOINT?.trim();
  if (base) out.otlpTracesEndpoint = base.replace(/\/+$/, "") + TRACES_PATH;
  const protocol = env.OTEL_EXPORTER_OTLP_PROTOCOL?.trim();
  if (protocol) out.otlpProtocol = protocol;
  return out;
}

/** True when the variables turn traces off whatever the endpoint: `OTEL_SDK_DISABLED=true`, `OTEL_TRACES_EXPORTER=none`. */
export function otelTracesOff(env: NodeJS.ProcessEnv): boolean {
  return (
    env.OTEL_SDK_DISABLED?.trim().toLowerCase() === "true" || env.OTEL_TRACES_EXPORTER?.trim().toLowerCase() === "none"
  );
}
