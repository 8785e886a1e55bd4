/** `createMessage`: the Anthropic Messages create operation (REST and batch items). */
import type { GenerateResult } from "../../../inference/engine.js";
import { errorBody } from "../../../shared/error-dialects.js";
import type { ModelCatalogService } from "../../models/model-catalog.service.js";
import { type RequestContext, requirePrincipal } from "../../platform/context.js";
import {
  type AnthropicToolUse,
  type MessagesRequest,
  MessageStreamEvents,
  anthropicMessage,
  anthropicMessages,
  anthropicParams,
  messagesTooling,
} from "../protocols/anthropic-messages.protocol.js";
import { toolCallId } from "../protocols/tools.js";
import { MESSAGES_TOOL_RULES, checkToolHistory } from "../protocols/tool-history.js";
import {
  type CreateOptions,
  type Created,
  type InferenceOperations,
  callFields,
  checkToolGeneration,
  namedEvents,
  prepareGeneration,
  runGeneration,
} from "./create-call.js";

/** The Anthropic `message` object. */
export type AnthropicMessage = ReturnType<typeof anthropicMessage>;

/**
 * The checks of a message that need no engine, for `teamId` (the batch create runs them for each
 * item): the model resolved, text and tool blocks only, the tools servable (Messages has no field
 * this service leaves unhonoured), the `tool_use` / `tool_result` blocks paired (`MESSAGES_TOOL_RULES`).
 * @throws AppError 404 unknown model; 400.
 */
export function checkMessage(catalog: ModelCatalogService, teamId: string, body: MessagesRequest) {
  const translated = anthropicMessages(body);
  const checked = checkToolGeneration(catalog, teamId, body.model, translated, [], () => messagesTooling(body), {
    params: anthropicParams(body),
    stopField: "stop_sequences",
  });
  checkToolHistory(translated.messages, translated.toolFields, MESSAGES_TOOL_RULES);
  return checked;
}

/**
 * Runs a message: resolve the model → translate the messages (text only; earlier `tool_use` and
 * `tool_result` blocks as structured calls and tool turns) → generate, metered once → `message`,
 * or the Anthropic stream events when `stream: true`. With `tools`, the engine is offered them
 * (`tool_choice` `any` or `tool` forces a call; unless `disable_parallel_tool_use`, `auto` and `any`
 * answers may make several), and each call an answer makes comes back as a `tool_use` block
 * (`toolu_…` id) with `stop_reason: "tool_use"` (streamed: `content_block_start` with empty
 * input, then `input_json_delta`), after a text block with any text the answer gave before them
 * (streamed as it came); a forced call cut short answers no block at all (`content: []`,
 * streamed: no content block) with `stop_reason: "max_tokens"`.
 * @throws AppError 400 (non-text blocks, prompt or limits, `stop_sequences`, tools the engine
 *   cannot serve), 401, 402, 404 unknown model, 429, 502/503 (see `InferenceService.generate`).
 */
export async function createMessage(
  ops: InferenceOperations,
  ctx: RequestContext,
  body: MessagesRequest,
  options: CreateOptions,
): Promise<Created<AnthropicMessage>> {
  const { model, messages, tools, mode } = checkMessage(ops.catalog, requirePrincipal(ctx).teamId, body);
  const { transport, requestId } = prepareGeneration(model, body, options);
  const params = anthropicParams(body);
  /** The calls an answer makes, in order, each with an id of ours. */
  const toolUses = (result: GenerateResult): AnthropicToolUse[] =>
    (result.toolCalls ?? []).map((call) => ({
      type: "tool_use",
      id: toolCallId("toolu_"),
      name: call.name,
      input: JSON.parse(call.arguments) as Record<string, unknown>,
    }));
  // With tools offered, the text block opens with the first text: an answer may be calls alone.
  const held = mode.kind !== "none";
  const events = new MessageStreamEvents(requestId, model.id);
  // A forced call that did not complete is no text (review finding F6: no block, `max_tokens`).
  const noText = (result: GenerateResult) => mode.kind === "forced" && !result.toolCalls?.length;
  return runGeneration(
    ops.inference,
    ctx,
    {
      requestId,
      createdAt: new Date(),
      endpoint: "/v1/messages",
      model,
      messages,
      params,
      tools,
      stopField: "stop_sequences",
      ...callFields(body, options),
      render: (result) => ({
        body: anthropicMessage(requestId, model.id, result, toolUses(result), noText(result)),
      }),
    },
    transport && {
      transport,
      events: {
        start: (prompt) => namedEvents(events.start(prompt, held)),
        delta: (text) => namedEvents(events.delta(text)),
        finish: (result, message) => namedEvents(events.finish(result, message)),
        // Anthropic's stream error: `event: error` with `{type: "error", error}` (the envelope beside it).
        error: (failure) => [{ event: "error", data: errorBody(failure, "anthropic") }],
      },
    },
  );
}
