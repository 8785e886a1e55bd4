/** `createChatCompletion`: the OpenAI Chat Completions create operation (REST and batch items). */
import type { RequestContext } from "../../platform/context.js";
import {
  type ChatCompletionRequest,
  ChatChunkWriter,
  chatCompletion,
  chatMessages,
  chatParams,
  chatUnhonoured,
} from "../protocols/openai-chat.protocol.js";
import {
  type CreateOptions,
  type Created,
  type InferenceOperations,
  callFields,
  prepareGeneration,
  runGeneration,
} from "./create-call.js";

/** The `chat.completion` object. */
export type ChatCompletion = ReturnType<typeof chatCompletion>;

/**
 * Runs a chat completion: resolve the model → translate the messages (text only) → generate,
 * metered once → `chat.completion`, or `chat.completion.chunk` events ending with `[DONE]` when
 * `stream: true` (usage chunk with `stream_options.include_usage`).
 * @throws AppError 400 (non-text parts, prompt or limits, `stream` where it cannot stream), 401,
 *   402, 404 unknown model, 429, 502/503 (see `InferenceService.generate`).
 */
export async function createChatCompletion(
  ops: InferenceOperations,
  ctx: RequestContext,
  body: ChatCompletionRequest,
  options: CreateOptions,
): Promise<Created<ChatCompletion>> {
  const { model, messages, transport, requestId } = prepareGeneration(
    ops,
    ctx,
    body,
    chatMessages(body),
    chatUnhonoured(body),
    options,
  );
  const createdAt = new Date();
  const chunks = new ChatChunkWriter(requestId, createdAt, model.id, body.stream_options?.include_usage === true);
  return runGeneration(
    ops.inference,
    ctx,
    {
      requestId,
      createdAt,
      endpoint: "/v1/chat/completions",
      model,
      messages,
      params: chatParams(body),
      ...callFields(body, options),
      render: (result) => ({ body: chatCompletion(requestId, createdAt, model.id, result) }),
    },
    transport && {
      transport,
      events: {
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
      },
    },
  );
}
