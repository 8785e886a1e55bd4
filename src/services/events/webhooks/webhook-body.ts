/**
 * What a webhook delivers (spec: Events, Completion webhook, "Body"): the object the create
 * operation answers (the stored Response for `/v1/responses`, the chat completion for chat …),
 * always with `status`, and for a request that failed before it produced one, an object of the
 * same kind carrying `status: "failed"` (or `cancelled`) and `error.code` / `error.message`.
 */
import { messageId, unixSeconds } from "../../platform/identifiers.js";

/** A failure as recorded in the activity's `error_json`. */
export interface WebhookError {
  code: string;
  message: string;
}

/** The finished request a failure body describes. */
export interface FailedRequest {
  requestId: string;
  createdAt: Date;
  endpoint: string;
  model: string;
  status: "failed" | "cancelled";
  error: WebhookError;
}

/** `body` with `status` added when the object has none (a chat completion has no status field). */
export function withStatus(body: unknown, status: string): unknown {
  if (typeof body !== "object" || body === null || Array.isArray(body) || "status" in body) return body;
  return { ...body, status };
}

/** The object delivered for a request that ended without an answer, shaped like its endpoint's answer. */
export function failureBody(f: FailedRequest): Record<string, unknown> {
  switch (f.endpoint) {
    case "/v1/responses":
      return {
        id: f.requestId,
        object: "response",
        created_at: unixSeconds(f.createdAt),
        model: f.model,
        status: f.status,
        incomplete_details: null,
        output: [],
        error: f.error,
        usage: null,
        service_tier: "default",
      };
    case "/v1/chat/completions":
      return {
        // Same id as `chatCompletionId` (openai-chat.protocol.ts), which would import back into this layer.
        id: `chatcmpl-${f.requestId}`,
        object: "chat.completion",
        created: unixSeconds(f.createdAt),
        model: f.model,
        status: f.status,
        choices: [],
        error: f.error,
        usage: null,
      };
    case "/v1/messages":
      return {
        id: messageId(f.requestId),
        type: "message",
        role: "assistant",
        model: f.model,
        status: f.status,
        content: [],
        error: f.error,
      };
    default:
      return { id: f.requestId, object: "list", model: f.model, status: f.status, data: [], error: f.error };
  }
}
