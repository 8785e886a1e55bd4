/** `POST /v1/chat/completions` (OpenAI Chat Completions, plain and streamed). */
import { v7 as uuidv7 } from "uuid";
import { parseInput } from "../../shared/errors.js";
import {
  ChatChunkWriter,
  chatCompletion,
  chatCompletionRequest,
  chatMessages,
  chatParams,
} from "../../services/inference/protocols/openai-chat.protocol.js";
import { requirePrincipal } from "../../services/platform/context.js";
import type { DataPlaneHandler } from "./deps.js";
import { assertTextOnly, respondWithGeneration } from "./generation.js";

/**
 * `POST /v1/chat/completions`: OpenAI body → generation → `chat.completion`, or `chat.completion.chunk`
 * SSE ending with `[DONE]` when `stream: true`. Errors: 400 (body, non-text parts, context), 401,
 * 402, 404 unknown model, 429, 502/503.
 */
export const createChatCompletion: DataPlaneHandler = async (deps, req, res, ctx) => {
  const body = parseInput(chatCompletionRequest, req.body);
  const model = deps.catalog.resolve(requirePrincipal(ctx).teamId, body.model, "text_generation");
  const { messages, unsupported } = chatMessages(body);
  assertTextOnly(unsupported);
  const requestId = uuidv7();
  const createdAt = new Date();
  const chunks = new ChatChunkWriter(requestId, createdAt, model.id, body.stream_options?.include_usage === true);
  await respondWithGeneration(
    deps,
    res,
    ctx,
    {
      requestId,
      createdAt,
      endpoint: "/v1/chat/completions",
      model,
      messages,
      params: chatParams(body),
      metadata: body.metadata,
      body: req.body,
      maxQueueWaitS: body.max_queue_wait_s,
      render: (result) => ({ body: chatCompletion(requestId, createdAt, model.id, result) }),
    },
    body.stream
      ? {
          start: () => [{ data: chunks.start() }],
          delta: (text) => [{ data: chunks.delta(text) }],
          finish: (result) => {
            const usage = chunks.usage(result);
            return [{ data: chunks.finish(result) }, ...(usage ? [{ data: usage }] : []), { data: "[DONE]" }];
          },
          error: (status, detail) => [
            { data: { error: { message: detail, type: "server_error", code: String(status) } } },
            { data: "[DONE]" },
          ],
        }
      : null,
  );
};
