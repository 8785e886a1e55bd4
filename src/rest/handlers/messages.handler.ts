/** `POST /v1/messages` (Anthropic Messages, plain and streamed). */
import { v7 as uuidv7 } from "uuid";
import { parseInput } from "../../shared/errors.js";
import {
  anthropicMessage,
  anthropicMessages,
  anthropicParams,
  messageEvents,
  messagesQuery,
  messagesRequest,
} from "../../services/inference/protocols/anthropic-messages.protocol.js";
import { eventFrames } from "../sse.js";
import { requirePrincipal } from "../../services/platform/context.js";
import type { DataPlaneHandler } from "./deps.js";
import { assertTextOnly, respondWithGeneration } from "./generation.js";

/**
 * `POST /v1/messages`: Anthropic Messages body → generation → `message` object, or the SSE events
 * with `stream: true`. Errors: 400 (body, query `beta`, non-text blocks, context), 401, 402, 404
 * unknown model, 429, 502/503.
 */
export const createMessage: DataPlaneHandler = async (deps, req, res, ctx) => {
  parseInput(messagesQuery, req.query);
  const body = parseInput(messagesRequest, req.body);
  const model = deps.catalog.resolve(requirePrincipal(ctx).teamId, body.model, "text_generation");
  const { messages, unsupported } = anthropicMessages(body);
  assertTextOnly(unsupported);
  const requestId = uuidv7();
  await respondWithGeneration(
    deps,
    res,
    ctx,
    {
      requestId,
      createdAt: new Date(),
      endpoint: "/v1/messages",
      model,
      messages,
      params: anthropicParams(body),
      stopField: "stop_sequences",
      metadata: body.metadata,
      body: req.body,
      maxQueueWaitS: body.max_queue_wait_s,
      render: (result) => ({ body: anthropicMessage(requestId, model.id, result) }),
    },
    body.stream
      ? {
          start: (prompt) => eventFrames(messageEvents.start(requestId, model.id, prompt)),
          delta: (text) => eventFrames([messageEvents.delta(text)]),
          finish: (result) => eventFrames(messageEvents.finish(result)),
          error: (status, detail) => [
            {
              event: "error",
              data: {
                type: "error",
                error: { type: status === 429 ? "rate_limit_error" : "api_error", message: detail },
              },
            },
          ],
        }
      : null,
  );
};
