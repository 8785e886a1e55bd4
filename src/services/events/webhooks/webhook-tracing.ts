/**
 * A span per webhook attempt (issue 29, item 2): a root client span `webhook attempt` with the
 * delivery, its response and team, the attempt's number in its delivery, the receiver's host (never the
 * full URL: its query may hold a secret), the answer's status and whether it was delivered.
 */
import { SpanKind, SpanStatusCode } from "@opentelemetry/api";
import type { Tracing } from "../../../shared/tracing.js";
import type { AttemptResult } from "./webhook-client.js";

/** What a span says of the delivery attempted. */
export interface TracedDelivery {
  id: string;
  response_id: string;
  team_id: string;
  url: string;
  attempts: number;
}

/** Runs `attempt` inside its span when `tracing` is on; `attempt()` otherwise. */
export function traceAttempt(
  tracing: Tracing | undefined,
  delivery: TracedDelivery,
  attempt: () => Promise<AttemptResult>,
): Promise<AttemptResult> {
  if (!tracing?.enabled) return attempt();
  let host: string | undefined;
  try {
    host = new URL(delivery.url).hostname;
  } catch {
    host = undefined;
  }
  const attributes = {
    "http.request.method": "POST",
    "switchyard.webhook.delivery_id": delivery.id,
    "switchyard.response_id": delivery.response_id,
    "switchyard.team_id": delivery.team_id,
    "switchyard.webhook.attempt": delivery.attempts,
    ...(host ? { "server.address": host } : {}),
  };
  return tracing.inSpan("webhook attempt", { kind: SpanKind.CLIENT, parent: "root", attributes }, async (span) => {
    const result = await attempt();
    if (span) {
      if (result.statusCode !== null) span.setAttribute("http.response.status_code", result.statusCode);
      span.setAttribute("switchyard.webhook.delivered", result.ok);
      if (!result.ok) {
        span.setAttribute("error.type", result.refused ? "refused" : String(result.statusCode ?? "no_answer"));
        span.setStatus({ code: SpanStatusCode.ERROR, message: result.error ?? undefined });
      }
    }
    return result;
  });
}
