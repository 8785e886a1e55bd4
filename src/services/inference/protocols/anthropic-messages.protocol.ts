/**
 * Anthropic Messages (DESIGN §3): request schema (`system`, `stop_sequences`, …), the `message`
 * object, and the SSE event sequence `message_start`, `content_block_start`, `ping`,
 * `content_block_delta`…, `content_block_stop`, `message_delta` (with usage), `message_stop`.
 */
import { z } from "zod";
import type { ChatMessage, FinishReason, GenerateResult } from "../../../inference/engine.js";
import { messageId } from "../../platform/identifiers.js";
import { optionalQuery } from "../../platform/validation.js";
import { type GenerationParams, maxQueueWaitS, requestMetadata } from "../inference-calls.js";
import { AppError, echo } from "../../../shared/errors.js";
import { TOOL_NAME, type ToolSpec, type Tooling } from "./tools.js";
import type { ToolFields, TranslatedMessages } from "./tool-history.js";

const textBlock = z.object({ type: z.literal("text"), text: z.string() }).loose();
/** A client tool (`tools[i]`): name, description, JSON Schema of its input. */
const anthropicTool = z.object({
  type: z.literal("custom").optional(),
  name: z.string().regex(TOOL_NAME, "must be 1–64 letters, digits, underscores or dashes"),
  description: z.string().nullish(),
  input_schema: z.record(z.string(), z.unknown()),
});
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
  tools: z.array(anthropicTool).max(128).nullish(),
  tool_choice: z
    .discriminatedUnion("type", [
      z.object({ type: z.literal("auto"), disable_parallel_tool_use: z.boolean().nullish() }),
      z.object({ type: z.literal("any"), disable_parallel_tool_use: z.boolean().nullish() }),
      z.object({ type: z.literal("tool"), name: z.string(), disable_parallel_tool_use: z.boolean().nullish() }),
      z.object({ type: z.literal("none") }),
    ])
    .nullish(),
});
export type MessagesRequest = z.infer<typeof messagesRequest>;

/**
 * The tools a Messages body offers and how the model must use them (`tool_choice`: `auto` by
 * default with tools; `any` and `tool` force a call), and whether an answer may make several
 * calls (unless `disable_parallel_tool_use`; `tool` names one tool: exactly one call).
 * @throws AppError 400 when `tool_choice` names a tool not in `tools`, or forces a call with no tools.
 */
export function messagesTooling(req: MessagesRequest): Tooling {
  const tools: ToolSpec[] = (req.tools ?? []).map((t, i) => ({
    name: t.name,
    description: t.description,
    parameters: t.input_schema,
    field: `tools[${i}].input_schema`,
    strict: false,
  }));
  const choice = req.tool_choice ?? { type: tools.length > 0 ? "auto" : "none" };
  if (choice.type === "none") return { tools, mode: { kind: "none" }, parallel: false };
  if (tools.length === 0) {
    throw AppError.invalid("tool_choice asks for tool use but no tools are given", [
      { field: "tool_choice", message: "needs tools" },
    ]);
  }
  const parallel = !("disable_parallel_tool_use" in choice && choice.disable_parallel_tool_use === true);
  if (choice.type === "auto") return { tools, mode: { kind: "auto" }, parallel };
  if (choice.type === "any") return { tools, mode: { kind: "forced", names: tools.map((t) => t.name) }, parallel };
  const name = (choice as { name: string }).name;
  if (!tools.some((t) => t.name === name)) {
    throw AppError.invalid(`tool_choice names '${echo(name)}', which is not in tools`, [
      { field: "tool_choice.name", message: "is not one of the tools" },
    ]);
  }
  return { tools, mode: { kind: "forced", names: [name] }, parallel: false };
}

/**
 * `?beta=true` is accepted (the SDK's beta namespace sends it); an empty value is refused, as for
 * every query parameter (issue 28, item 4).
 */
export const messagesQuery = z.object({ beta: optionalQuery(z.enum(["true", "false"])) });

/** Text of blocks (text blocks only; others are listed in `unsupported`). */
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

/**
 * One Messages turn → chat messages: an assistant's text with its `tool_use` blocks as calls; a
 * user's `tool_result` blocks each a tool turn (answering `tool_use_id`), its text a user turn, in
 * the order they come. Other blocks are listed in `unsupported`.
 */
function turnMessages(
  role: "user" | "assistant",
  value: z.infer<typeof content>,
  field: string,
  unsupported: string[],
  toolFields: ToolFields,
): ChatMessage[] {
  if (typeof value === "string") return [{ role, content: value }];
  const out: ChatMessage[] = [];
  let text: string[] = [];
  const flush = (always: boolean) => {
    if (always || text.length > 0) out.push({ role, content: text.join("") });
    text = [];
  };
  const calls: NonNullable<ChatMessage["toolCalls"]> = [];
  const callFields: string[] = [];
  value.forEach((b, j) => {
    const block = b as Record<string, unknown>;
    if (b.type === "text" && typeof b.text === "string") text.push(b.text);
    else if (role === "assistant" && b.type === "tool_use" && typeof block.name === "string") {
      calls.push({ id: String(block.id ?? ""), name: block.name, arguments: JSON.stringify(block.input ?? {}) });
      callFields.push(`${field}[${j}].id`);
    } else if (role === "user" && b.type === "tool_result") {
      flush(false);
      const result = block.content as z.infer<typeof content> | undefined;
      const answer: ChatMessage = {
        role: "tool",
        content: result === undefined ? "" : blocksText(result, `${field}[${j}].content`, unsupported),
        toolCallId: String(block.tool_use_id ?? ""),
      };
      toolFields.set(answer, { calls: [], answer: `${field}[${j}].tool_use_id` });
      out.push(answer);
    } else unsupported.push(`${field}[${j}]`);
  });
  if (role === "assistant") {
    const turn: ChatMessage = { role, content: text.join(""), ...(calls.length > 0 ? { toolCalls: calls } : {}) };
    if (calls.length > 0) toolFields.set(turn, { calls: callFields });
    return [turn];
  }
  flush(out.length === 0);
  return out;
}

/**
 * `system` + messages → chat messages (`tool_use` / `tool_result` blocks as structured calls and
 * tool turns, with their fields `messages[i].content[j].id` / `.tool_use_id` for the tool history
 * check); `unsupported` lists other non-text blocks (the caller answers 400).
 */
export function anthropicMessages(req: MessagesRequest): TranslatedMessages {
  const unsupported: string[] = [];
  const messages: ChatMessage[] = [];
  const toolFields: ToolFields = new Map();
  if (req.system) messages.push({ role: "system", content: blocksText(req.system, "system", unsupported) });
  req.messages.forEach((m, i) => {
    messages.push(...turnMessages(m.role, m.content, `messages[${i}].content`, unsupported, toolFields));
  });
  return { messages, unsupported, toolFields };
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

/** A call the model made, as a `tool_use` block carries it. */
export interface AnthropicToolUse {
  type: "tool_use";
  id: string;
  name: string;
  input: Record<string, unknown>;
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

/** The text block of a message. */
function textContent(text: string) {
  return { type: "text" as const, text };
}

/**
 * The `message` object: with `calls`, a `tool_use` block each, after a text block with the text
 * the answer gave before them (`callPreamble`, when there is some), else one text block.
 * `noText`: a forced call (`tool_choice` `any` / `tool`) that did not complete: no block at all
 * (`content: []`) and `stop_reason: "max_tokens"`, never the call's JSON as a text block (review
 * finding F6).
 */
export function anthropicMessage(
  requestId: string,
  model: string,
  result: GenerateResult,
  calls: AnthropicToolUse[] = [],
  noText = false,
) {
  const call = calls.length > 0;
  const preamble = result.callPreamble ? [textContent(result.callPreamble)] : [];
  return {
    id: messageId(requestId),
    type: "message" as const,
    role: "assistant" as const,
    model,
    content: call ? [...preamble, ...calls] : noText ? [] : [textContent(result.text)],
    stop_reason: call ? ("tool_use" as const) : stopReason(result.finishReason),
    stop_sequence: call ? null : result.stopSequence,
    usage: usage(result),
  };
}

function textBlockStart(): [string, unknown] {
  return ["content_block_start", { type: "content_block_start", index: 0, content_block: { type: "text", text: "" } }];
}

function blockStop(index: number): [string, unknown] {
  return ["content_block_stop", { type: "content_block_stop", index }];
}

function textDelta(text: string): [string, unknown] {
  return ["content_block_delta", { type: "content_block_delta", index: 0, delta: { type: "text_delta", text } }];
}

/**
 * The SSE events of one streamed message, as `[event, data]` pairs. Text streams in the text block
 * (index 0) as it comes; with tools offered that block opens with the first text (an answer that
 * is only calls has none), and the `tool_use` blocks follow it at the end.
 */
export class MessageStreamEvents {
  /** The text block is open (with tools offered it opens with the first text). */
  private opened = false;
  private streamed = "";

  constructor(
    private readonly requestId: string,
    private readonly model: string,
  ) {}

  /**
   * `message_start` (its usage: the prompt), the text block unless `held`, `ping`.
   * @param held with tools offered: the text block opens with the first text, if any comes.
   */
  start(prompt: { promptTokens: number; cachedPromptTokens: number }, held = false): [string, unknown][] {
    this.opened = !held;
    return [
      [
        "message_start",
        {
          type: "message_start",
          message: {
            id: messageId(this.requestId),
            type: "message",
            role: "assistant",
            model: this.model,
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
      ...(held ? [] : [textBlockStart()]),
      ["ping", { type: "ping" }],
    ];
  }

  /** A piece of text (opening the text block first when it is not yet). */
  delta(text: string): [string, unknown][] {
    const open = this.opened ? [] : [textBlockStart()];
    this.opened = true;
    this.streamed += text;
    return [...open, textDelta(text)];
  }

  /**
   * The closing events: the text block with what was not streamed of its text (the text before
   * the calls, or the whole text), closed — or opened with it where none was open and there is
   * text (or the answer is text: its one block); then each `tool_use` of `message` (empty
   * `input`, then its JSON as one `input_json_delta`), as Anthropic streams them; `message_delta`,
   * `message_stop`. No block at all for a forced call that did not complete (`content: []`).
   */
  finish(result: GenerateResult, message: ReturnType<typeof anthropicMessage>): [string, unknown][] {
    const calls = message.content.filter((b): b is AnthropicToolUse => b.type === "tool_use");
    const text = message.content.find((b) => b.type === "text")?.text;
    const rest = text?.startsWith(this.streamed) ? text.slice(this.streamed.length) : "";
    let blocks: [string, unknown][] = [];
    if (this.opened || text !== undefined) {
      const open = this.opened ? [] : [textBlockStart()];
      blocks = [...open, ...(rest ? [textDelta(rest)] : []), blockStop(0)];
    }
    const first = blocks.length > 0 ? 1 : 0;
    calls.forEach((call, i) => {
      const index = first + i;
      blocks.push(
        ["content_block_start", { type: "content_block_start", index, content_block: { ...call, input: {} } }],
        [
          "content_block_delta",
          {
            type: "content_block_delta",
            index,
            delta: { type: "input_json_delta", partial_json: JSON.stringify(call.input) },
          },
        ],
        blockStop(index),
      );
    });
    return [
      ...blocks,
      [
        "message_delta",
        {
          type: "message_delta",
          delta: { stop_reason: message.stop_reason, stop_sequence: message.stop_sequence },
          usage: usage(result),
        },
      ],
      ["message_stop", { type: "message_stop" }],
    ];
  }
}
