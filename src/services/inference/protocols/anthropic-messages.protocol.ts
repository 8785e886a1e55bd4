/**
 * Anthropic Messages (DESIGN §3): request schema (`system`, `stop_sequences`, …), the `message`
 * object, and the SSE event sequence `message_start`, `content_block_start`, `ping`,
 * `content_block_delta`…, `content_block_stop`, `message_delta` (with usage), `message_stop`.
 */
import { z } from "zod";
import type { ChatMessage, FinishReason, GenerateResult } from "../../../inference/engine.js";
import { messageId } from "../../platform/identifiers.js";
import { type GenerationParams, maxQueueWaitS, requestMetadata } from "../inference-calls.js";
import { type UnhonouredField, isSet } from "./structured.js";

const textBlock = z.object({ type: z.literal("text"), text: z.string() }).loose();
const otherBlock = z.object({ type: z.string() }).loose();
const content = z.union([z.string(), z.array(z.union([textBlock, otherBlock]))]);

/**
 * As Anthropic: every message has non-empty content except an optional final assistant message
 * (a prefill), and text blocks are never empty.
 */
const messageList = z
  .array(z.object({ role: z.enum(["user", "assistant"]), content }))
  .min(1)
  .superRefine((messages, ctx) => {
    messages.forEach((m, i) => {
      const prefill = i === messages.length - 1 && m.role === "assistant";
      if (m.content.length === 0 && !prefill) {
        ctx.addIssue({ code: "custom", path: [i, "content"], message: "must not be empty" });
      }
      if (typeof m.content === "string") return;
      m.content.forEach((b, j) => {
        if (b.type === "text" && b.text === "") {
          ctx.addIssue({ code: "custom", path: [i, "content", j, "text"], message: "text blocks must not be empty" });
        }
      });
    });
  });

export const messagesRequest = z.object({
  model: z.string().min(1),
  max_tokens: z.number().int().min(1),
  messages: messageList,
  system: z.union([z.string(), z.array(textBlock)]).nullish(),
  stop_sequences: z.array(z.string()).nullish(),
  temperature: z.number().min(0).max(1).nullish(),
  top_p: z.number().min(0).max(1).nullish(),
  top_k: z.number().int().min(0).nullish(),
  stream: z.boolean().nullish(),
  metadata: requestMetadata,
  max_queue_wait_s: maxQueueWaitS,
  // Read so that a request asking for them is refused by name, never answered as if they were absent.
  tools: z.array(z.unknown()).nullish(),
  tool_choice: z.unknown().optional(),
});
export type MessagesRequest = z.infer<typeof messagesRequest>;

/** The fields of a Messages body this service does not honour yet (tools). */
export function messagesUnhonoured(req: MessagesRequest): UnhonouredField[] {
  const out: UnhonouredField[] = [];
  if (isSet(req.tools)) out.push({ field: "tools", message: "tool use is not supported" });
  const choice = (req.tool_choice as { type?: unknown } | null | undefined)?.type;
  if (isSet(req.tool_choice) && choice !== "none" && !isSet(req.tools)) {
    out.push({ field: "tool_choice", message: "tool use is not supported" });
  }
  return out;
}

/** `?beta=true` is accepted (the SDK's beta namespace sends it). */
export const messagesQuery = z.object({ beta: z.enum(["true", "false", ""]).optional() });

function blocksText(value: z.infer<typeof content>, field: string, unsupported: string[]): string {
  if (typeof value === "string") return value;
  return value
    .map((b, j) => {
      if (b.type === "text" && typeof b.text === "string") return b.text;
      unsupported.push(`${field}[${j}]`);
      return "";
    })
    .join("");
}

/** `system` + messages → chat messages; `unsupported` lists non-text blocks (the caller answers 400). */
export function anthropicMessages(req: MessagesRequest): { messages: ChatMessage[]; unsupported: string[] } {
  const unsupported: string[] = [];
  const messages: ChatMessage[] = [];
  if (req.system) messages.push({ role: "system", content: blocksText(req.system, "system", unsupported) });
  req.messages.forEach((m, i) => {
    messages.push({ role: m.role, content: blocksText(m.content, `messages[${i}].content`, unsupported) });
  });
  return { messages, unsupported };
}

/** Messages body → sampling parameters (`max_tokens` is required by the API). */
export function anthropicParams(req: MessagesRequest): GenerationParams {
  return {
    maxTokens: req.max_tokens,
    temperature: req.temperature ?? undefined,
    topP: req.top_p ?? undefined,
    topK: req.top_k ?? undefined,
    stop: req.stop_sequences ?? undefined,
  };
}

/** Engine finish reason → Anthropic `stop_reason`. */
export function stopReason(reason: FinishReason): "end_turn" | "max_tokens" | "stop_sequence" {
  if (reason === "length") return "max_tokens";
  if (reason === "stop_sequence") return "stop_sequence";
  return "end_turn";
}

/** Anthropic counts cache reads apart from `input_tokens`. */
function usage(result: GenerateResult) {
  return {
    input_tokens: result.usage.promptTokens - result.usage.cachedPromptTokens,
    output_tokens: result.usage.completionTokens,
    cache_creation_input_tokens: 0,
    cache_read_input_tokens: result.usage.cachedPromptTokens,
  };
}

/** The `message` object. */
export function anthropicMessage(requestId: string, model: string, result: GenerateResult) {
  return {
    id: messageId(requestId),
    type: "message" as const,
    role: "assistant" as const,
    model,
    content: [{ type: "text" as const, text: result.text }],
    stop_reason: stopReason(result.finishReason),
    stop_sequence: result.stopSequence,
    usage: usage(result),
  };
}

/** SSE events of one streamed message, as `[event, data]` pairs. */
export const messageEvents = {
  start(
    requestId: string,
    model: string,
    prompt: { promptTokens: number; cachedPromptTokens: number },
  ): [string, unknown][] {
    return [
      [
        "message_start",
        {
          type: "message_start",
          message: {
            id: messageId(requestId),
            type: "message",
            role: "assistant",
            model,
            content: [],
            stop_reason: null,
            stop_sequence: null,
            usage: {
              input_tokens: prompt.promptTokens - prompt.cachedPromptTokens,
              output_tokens: 0,
              cache_creation_input_tokens: 0,
              cache_read_input_tokens: prompt.cachedPromptTokens,
            },
          },
        },
      ],
      ["content_block_start", { type: "content_block_start", index: 0, content_block: { type: "text", text: "" } }],
      ["ping", { type: "ping" }],
    ];
  },
  delta(text: string): [string, unknown] {
    return ["content_block_delta", { type: "content_block_delta", index: 0, delta: { type: "text_delta", text } }];
  },
  finish(result: GenerateResult): [string, unknown][] {
    return [
      ["content_block_stop", { type: "content_block_stop", index: 0 }],
      [
        "message_delta",
        {
          type: "message_delta",
          delta: { stop_reason: stopReason(result.finishReason), stop_sequence: result.stopSequence },
          usage: usage(result),
        },
      ],
      ["message_stop", { type: "message_stop" }],
    ];
  },
};
