/** `createChatCompletion`: the OpenAI Chat Completions create operation (REST and batch items). */
import type { GenerateResult } from "../../../inference/engine.js";
import { errorBody } from "../../../shared/error-dialects.js";
import type { ModelCatalogService } from "../../models/model-catalog.service.js";
import { type RequestContext, requirePrincipal } from "../../platform/context.js";
import {
  type ChatCompletionRequest,
  type ChatToolCall,
  ChatChunkWriter,
  chatCompletion,
  chatMessages,
  chatParams,
  chatTooling,
  chatUnhonoured,
} from "../protocols/openai-chat.protocol.js";
import { toolCallId } from "../protocols/tools.js";
import { CHAT_TOOL_RULES, checkToolHistory } from "../protocols/tool-history.js";
import {
  type CreateOptions,
  type Created,
  type InferenceOperations,
  callFields,
  checkToolGeneration,
  prepareGeneration,
  runGeneration,
} from "./create-call.js";

/** The `chat.completion` object. */
export type ChatCompletion = ReturnType<typeof chatCompletion>;

/**
 * The checks of a chat completion that need no engine, for `teamId` (the batch create runs them
 * for each item): the model resolved, every field honoured, text only, the tools servable, the
 * tool turns of the history paired (`CHAT_TOOL_RULES`).
 * @throws AppError 404 unknown model; 400.
 */
export function checkChatCompletion(catalog: ModelCatalogService, teamId: string, body: ChatCompletionRequest) {
  const translated = chatMessages(body);
  const checked = checkToolGeneration(
    catalog,
    teamId,
    body.model,
    translated,
    chatUnhonoured(body),
    () => chatTooling(body),
    { params: chatParams(body) },
  );
  checkToolHistory(translated.messages, translated.toolFields, CHAT_TOOL_RULES);
  return checked;
}

/**
 * Runs a chat completion: resolve the model → translate the messages (text only; earlier tool
 * calls and results structured) → generate, metered once → `chat.completion`, or
 * `chat.completion.chunk` events ending with `[DONE]` when `stream: true` (usage chunk with
 * `stream_options.include_usage`). With `tools`, the engine is offered them (`tool_choice`
 * `required` or a named function forces a call; with `parallel_tool_calls`, not false, an answer
 * may make several), and an answer that makes calls comes back as `tool_calls` with
 * `finish_reason: "tool_calls"` (streamed: for each call by `index`, id and name once, then its
 * arguments), after any text the answer gave before them (`content`, streamed as it came, before
 * the calls' deltas); a forced call cut short answers no text and no call (`content: null`,
 * streamed: no content delta) with `finish_reason: "length"`.
 * @throws AppError 400 (non-text parts, prompt or limits, `stream` where it cannot stream, a tool
 *   the engine cannot serve or a strict tool schema it cannot enforce), 401, 402, 404 unknown
 *   model, 429, 502/503 (see `InferenceService.generate`).
 */
export async function createChatCompletion(
  ops: InferenceOperations,
  ctx: RequestContext,
  body: ChatCompletionRequest,
  options: CreateOptions,
): Promise<Created<ChatCompletion>> {
  const { model, messages, tools, mode } = checkChatCompletion(ops.catalog, requirePrincipal(ctx).teamId, body);
  const { transport, requestId } = prepareGeneration(model, body, options);
  const params = chatParams(body);
  const createdAt = new Date();
  const chunks = new ChatChunkWriter(requestId, createdAt, model.id, body.stream_options?.include_usage === true);
  /** The calls an answer makes, in order, each with an id of ours. */
  const toolCalls = (result: GenerateResult): ChatToolCall[] =>
    (result.toolCalls ?? []).map((call) => ({
      id: toolCallId("call_"),
      type: "function",
      function: { name: call.name, arguments: call.arguments },
    }));
  /** The text streamed so far (the engine sends only text it answers, `GenerateRequest.onText`). */
  let streamed = "";
  // A forced call that did not complete is no text (review finding F6: `content: null`, `length`).
  const noText = (result: GenerateResult) => mode.kind === "forced" && !result.toolCalls?.length;
  return runGeneration(
    ops.inference,
    ctx,
    {
      requestId,
      createdAt,
      endpoint: "/v1/chat/completions",
      model,
      messages,
      params,
      tools,
      ...callFields(body, options),
      render: (result) => ({
        body: chatCompletion(requestId, createdAt, model.id, result, toolCalls(result), noText(result)),
      }),
    },
    transport && {
      transport,
      events: {
        start: () => [{ data: chunks.start() }],
        delta: (text) => {
          streamed += text;
          return [{ data: chunks.delta(text) }];
        },
        finish: (result, completion) => {
          const message = completion.choices[0].message;
          const calls = message.tool_calls ?? [];
          // Text the engine did not stream (none where it keeps its word), before the calls.
          const text = message.content ?? "";
          const rest = text.startsWith(streamed) ? text.slice(streamed.length) : "";
          const usage = chunks.usage(result);
          return [
            ...(rest ? [{ data: chunks.delta(rest) }] : []),
            ...chunks.toolCalls(calls).map((data) => ({ data })),
            { data: chunks.finish(result, calls.length > 0) },
            ...(usage ? [{ data: usage }] : []),
            { data: "[DONE]" },
          ];
        },
        // OpenAI's stream error: a `data:` chunk with `error` (the envelope beside it), then [DONE].
        error: (failure) => [{ data: errorBody(failure, "openai") }, { data: "[DONE]" }],
      },
    },
  );
}
