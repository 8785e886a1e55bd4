/**
 * The rows one usage record writes in the group commit (`MeteringService.write`), as its
 * `jsonb_to_recordset` reads them: the activity row (also the in-flight row at admission), the
 * stored Response, and the webhook outbox row. Split from `metering.service.ts` to keep that
 * file within the layout's 600 lines.
 */
import { v7 as uuidv7 } from "uuid";
import {
  type WebhookRequest,
  redactedMetadata,
  redactedRequest,
  webhookTarget,
} from "../events/webhooks/webhook-target.js";
import type { UsageRecord } from "./usage-record.js";

/** The activity row of a record, as the group commit's `jsonb_to_recordset` reads it (ids, ISO dates, µUSD as text). */
export function activityRow(r: UsageRecord) {
  return {
    id: r.id,
    ledger_id: uuidv7(),
    team_id: r.principal.teamId,
    user_id: r.principal.userId,
    api_key_id: r.principal.apiKey?.id ?? null,
    api_key_name: r.principal.apiKey?.name ?? null,
    api_key_prefix: r.principal.apiKey?.prefix ?? null,
    type: r.type,
    status: r.status,
    endpoint: r.endpoint,
    model: r.model,
    custom_id: r.customId,
    stream_id: r.streamId,
    batch_id: r.batchId ?? null,
    prompt_tokens: r.usage.promptTokens,
    completion_tokens: r.usage.completionTokens,
    total_tokens: r.usage.promptTokens + r.usage.completionTokens,
    cached_prompt_tokens: r.usage.cachedPromptTokens,
    cost_micros: r.costMicros.toString(),
    // The webhook token is never stored with the request (issue 6, item 3): only the outbox has it.
    body_json: redactedRequest(r.bodyJson ?? null),
    result_json: r.resultJson ?? null,
    error_json: r.errorJson ?? null,
    engine_ms: r.engineMs === null ? null : Math.round(r.engineMs),
    created_at: r.createdAt.toISOString(),
    completed_at: r.completedAt?.toISOString() ?? null,
    completion_id: uuidv7(),
    service_tier: r.serviceTier ?? "default",
  };
}

/** The stored Response row of a record that has one. */
export function responseRow(r: UsageRecord) {
  const response = r.response!;
  return {
    id: r.id,
    team_id: r.principal.teamId,
    user_id: r.principal.userId,
    api_key_id: r.principal.apiKey?.id ?? null,
    model: r.model,
    status: response.status,
    background: response.background,
    stream_id: r.streamId,
    metadata: redactedMetadata(response.metadata),
    request_json: redactedRequest(response.requestJson),
    response_json: response.responseJson,
    created_at: r.createdAt.toISOString(),
    completed_at: r.completedAt?.toISOString() ?? null,
  };
}

/** Statuses that end a request and fire its webhook (DESIGN §3 Responses: all but `in_progress`). */
const TERMINAL_STATUSES = new Set(["completed", "incomplete", "failed", "cancelled"]);

/** The record's webhook: the one it names, else one derived from its terminal stored Response. */
export function webhookOf(r: UsageRecord): WebhookRequest | null {
  if (r.webhook !== undefined) return r.webhook;
  const response = r.response;
  if (!response || !TERMINAL_STATUSES.has(response.status)) return null;
  const target = webhookTarget(response.metadata);
  return target ? { ...target, body: response.responseJson } : null;
}

/** The webhook outbox row of a record (delivery id UUIDv7; the response id is the dedup key). */
export function webhookRow(r: UsageRecord, webhook: WebhookRequest) {
  return {
    id: uuidv7(),
    team_id: r.principal.teamId,
    response_id: r.id,
    url: webhook.url,
    token: webhook.token,
    body: webhook.body,
  };
}
