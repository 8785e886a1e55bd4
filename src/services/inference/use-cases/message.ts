/** `createMessage`: the Anthropic Messages create operation (REST and batch items). */
import type { RequestContext } from "../../platform/context.js";
import {
  type MessagesRequest,
  anthropicMessage,
  anthropicMessages,
  anthropicParams,
  messageEvents,
  messagesUnhonoured,
} from "../protocols/anthropic-messages.protocol.js";
import {
  type CreateOptions,
  type Created,
  type InferenceOperations,
  callFields,
  namedEvents,
  prepareGeneration,
  runGeneration,
} from "./create-call.js";

/** The Anthropic `message` object. */
export type AnthropicMessage = ReturnType<typeof anthropicMessage>;

/**
 * Runs a message: resolve the model → translate the messages (text only) → generate, metered
 * once → `message`, or the Anthropic stream events when `stream: true`.
 * @throws AppError 400 (non-text blocks, prompt or limits, `stop_sequences`), 401, 402, 404
 *   unknown model, 429, 502/503 (see `InferenceService.generate`).
 */
export async function createMessage(
  ops: InferenceOperations,
  ctx: RequestContext,
  body: MessagesRequest,
  options: CreateOptions,
): Promise<Created<AnthropicMessage>> {
  const { model, messages, transport, requestId } = prepareGeneration(
    ops,
    ctx,
    body,
    anthropicMessages(body),
    messagesUnhonoured(body),
    options,
  );
  return runGeneration(
    ops.inference,
    ctx,
    {
      requestId,
      createdAt: new Date(),
      endpoint: "/v1/messages",
      model,
      messages,
      params: anthropicParams(body),
      stopField: "stop_sequences",
      ...callFields(body, options),
      render: (result) => ({ body: anthropicMessage(requestId, model.id, result) }),
    },
    transport && {
      transport,
      events: {
        start: (prompt) => namedEvents(messageEvents.start(requestId, model.id, prompt)),
        delta: (text) => namedEvents([messageEvents.delta(text)]),
        finish: (result) => namedEvents(messageEvents.finish(result)),
        error: (status, detail) => [
          {
            event: "error",
            data: {
              type: "error",
              error: { type: status === 429 ? "rate_limit_error" : "api_error", message: detail },
            },
          },
        ],
      },
    },
  );
}
