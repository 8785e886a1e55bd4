/** `createMessage`: the Anthropic Messages create operation (REST and batch items). */
import { v7 as uuidv7 } from "uuid";
import { requirePrincipal, type RequestContext } from "../../platform/context.js";
import {
  type MessagesRequest,
  anthropicMessage,
  anthropicMessages,
  anthropicParams,
  messageEvents,
} from "../protocols/anthropic-messages.protocol.js";
import {
  type CreateOptions,
  type Created,
  type InferenceOperations,
  type ProtocolEvent,
  assertTextOnly,
  batchFields,
  callMetadata,
  runGeneration,
  streamTransport,
} from "./create-call.js";

/** The Anthropic `message` object. */
export type AnthropicMessage = ReturnType<typeof anthropicMessage>;

/** `[event, data]` pairs (as the protocol module builds them) → named events. */
function named(events: [string, unknown][]): ProtocolEvent[] {
  return events.map(([event, data]) => ({ event, data }));
}

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
  const model = ops.catalog.resolve(requirePrincipal(ctx).teamId, body.model, "text_generation");
  const { messages, unsupported } = anthropicMessages(body);
  assertTextOnly(unsupported);
  const transport = streamTransport(body.stream, options);
  const requestId = options.requestId ?? uuidv7();
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
      metadata: callMetadata(body.metadata, options.batch),
      body: options.rawBody,
      maxQueueWaitS: options.maxQueueWaitS ?? body.max_queue_wait_s,
      signal: options.signal,
      ...batchFields(options.batch),
      render: (result) => ({ body: anthropicMessage(requestId, model.id, result) }),
    },
    transport && {
      transport,
      events: {
        start: (prompt) => named(messageEvents.start(requestId, model.id, prompt)),
        delta: (text) => named([messageEvents.delta(text)]),
        finish: (result) => named(messageEvents.finish(result)),
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
