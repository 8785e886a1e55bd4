/**
 * OpenAI Chat Completions (DESIGN §3 "Chat completions, embeddings, messages"): request schema,
 * translation to a generation call, the `chat.completion` object and the `chat.completion.chunk`
 * stream (SSE `data:` chunks, `[DONE]`, `stream_options.include_usage`).
 */
import { z } from "zod";
import type { ChatMessage, FinishReason, GenerateResult } from "../../../inference/engine.js";
import { unixSeconds } from "../../platform/identifiers.js";
import { type GenerationParams, maxQueueWaitS, requestMetadata } from "../inference-calls.js";
import { AppError, echo } from "../../../shared/errors.js";
import { type UnhonouredField, chatFormat, chatResponseFormat, isSet } from "./structured.js";
import { openAiLogprobs } from "./logprobs.js";
import { TOOL_NAME, type ToolSpec, type Tooling } from "./tools.js";
import type { ToolFields, TranslatedMessages } from "./tool-history.js";

const textPart = z.object({ type: z.literal("text"), text: z.string() });
const otherPart = z.object({ type: z.string() }).loose();

/**
 * Required on every message (issue 5, item 3), except that an assistant message carrying
 * `tool_calls` may leave it out or null (OpenAI's rule).
 */
const chatContent = z.union([z.string(), z.array(z.union([textPart, otherPart]))], {
  error: (issue) =>
    issue.input === undefined || issue.input === null ? "is required" : "must be a string or an array of content parts",
});

/** A call in an assistant message of the history (`arguments` is JSON text, as OpenAI sends it). */
const historyToolCall = z.object({
  id: z.string().min(1).max(256),
  type: z.literal("function"),
  function: z.object({ name: z.string().min(1), arguments: z.string() }),
});

/** One function tool (`tools[i]`). */
const chatTool = z.object({
  type: z.literal("function"),
  function: z.object({
    name: z.string().regex(TOOL_NAME, "must be 1–64 letters, digits, underscores or dashes"),
    description: z.string().nullish(),
    parameters: z.record(z.string(), z.unknown()).nullish(),
    strict: z.boolean().nullish(),
  }),
});

/**
 * One message, by role: `tool` messages carry the `tool_call_id` they answer; an assistant message
 * that carries `tool_calls` may leave `content` out or null; every other message needs content.
 */
const chatMessage = z.discriminatedUnion("role", [
  z.object({
    role: z.enum(["system", "developer", "user", "function"]),
    content: chatContent,
    name: z.string().optional(),
  }),
  z
    .object({
      role: z.literal("assistant"),
      content: chatContent.nullish(),
      name: z.string().optional(),
      tool_calls: z.array(historyToolCall).nullish(),
    })
    .superRefine((m, ctx) => {
      if ((m.content === undefined || m.content === null) && (m.tool_calls?.length ?? 0) === 0) {
        ctx.addIssue({ code: "custom", path: ["content"], message: "is required" });
      }
    }),
  z.object({ role: z.literal("tool"), content: chatContent, tool_call_id: z.string().min(1) }),
]);

export const chatCompletionRequest = z
  .object({
    model: z.string().min(1),
    messages: z.array(chatMessage).min(1),
    max_tokens: z.number().int().min(1).nullish(),
    max_completion_tokens: z.number().int().min(1).nullish(),
    temperature: z.number().min(0).max(2).nullish(),
    top_p: z.number().min(0).max(1).nullish(),
    // Above 1: refused naming the model (`chatUnhonoured`), as the other fields it cannot honour.
    n: z.number().int().min(1).nullish(),
    stream: z.boolean().nullish(),
    stream_options: z.object({ include_usage: z.boolean().nullish() }).nullish(),
    stop: z.union([z.string(), z.array(z.string()).max(4)]).nullish(),
    seed: z.number().int().nullish(),
    frequency_penalty: z.number().min(-2).max(2).nullish(),
    presence_penalty: z.number().min(-2).max(2).nullish(),
    metadata: requestMetadata,
    max_queue_wait_s: maxQueueWaitS,
    user: z.string().nullish(),
    response_format: chatResponseFormat.nullish(),
    // Read so that a request asking for them is refused by name, never answered as if they were absent.
    tools: z.array(chatTool).max(128).nullish(),
    tool_choice: z
      .union([
        z.enum(["none", "auto", "required"]),
        z.object({ type: z.literal("function"), function: z.object({ name: z.string() }) }),
      ])
      .nullish(),
    parallel_tool_calls: z
      .boolean()
      .nullish()
      .meta({
        description:
          "Default true: an answer may make several calls (required: one to eight, each under its function's " +
          "schema); false: one at most. A named tool_choice is always exactly one call.",
      }),
    functions: z.array(z.unknown()).nullish(),
    function_call: z.unknown().optional(),
    logprobs: z.boolean().nullish(),
    top_logprobs: z.number().int().min(0).max(20).nullish(),
  })
  .superRefine((r, ctx) => {
    // OpenAI's rule: alternatives come with the chosen tokens' log-probabilities, never alone.
    if ((r.top_logprobs ?? 0) > 0 && r.logprobs !== true) {
      ctx.addIssue({ code: "custom", path: ["top_logprobs"], message: "requires logprobs: true" });
    }
  });
export type ChatCompletionRequest = z.infer<typeof chatCompletionRequest>;

/**
 * Flattens OpenAI message content (string or parts) to text; non-text parts are refused. An
 * assistant's `tool_calls` and a `tool` message's `tool_call_id` stay structured (each engine
 * writes them its own way), with their fields (`messages[i].tool_calls[j].id`,
 * `messages[i].tool_call_id`) for the tool history check.
 */
export function chatMessages(req: ChatCompletionRequest): TranslatedMessages {
  const unsupported: string[] = [];
  const toolFields: ToolFields = new Map();
  const messages = req.messages.map((m, i): ChatMessage => {
    let content = "";
    if (typeof m.content === "string") content = m.content;
    else if (m.content === null || m.content === undefined) content = "";
    else if (Array.isArray(m.content)) {
      content = m.content
        .map((p, j) => {
          if (p.type === "text" && typeof p.text === "string") return p.text;
          unsupported.push(`messages[${i}].content[${j}]`);
          return "";
        })
        .join("");
    }
    if (m.role === "tool") {
      const answer: ChatMessage = { role: "tool", content, toolCallId: m.tool_call_id };
      toolFields.set(answer, { calls: [], answer: `messages[${i}].tool_call_id` });
      return answer;
    }
    // A legacy `function` result names its function, not a call: a tool turn without an id.
    if (m.role === "function") return { role: "tool", content };
    const calls = m.role === "assistant" ? (m.tool_calls ?? []) : [];
    if (calls.length === 0) return { role: m.role, content };
    const toolCalls = calls.map((c) => ({ id: c.id, name: c.function.name, arguments: c.function.arguments }));
    const turn: ChatMessage = { role: m.role, content, toolCalls };
    toolFields.set(turn, { calls: calls.map((_, j) => `messages[${i}].tool_calls[${j}].id`) });
    return turn;
  });
  return { messages, unsupported, toolFields };
}

/** Chat body → sampling parameters (`max_completion_tokens` wins over `max_tokens`; `stop` as a list). */
export function chatParams(req: ChatCompletionRequest): GenerationParams {
  return {
    maxTokens: req.max_completion_tokens ?? req.max_tokens ?? undefined,
    temperature: req.temperature ?? undefined,
    topP: req.top_p ?? undefined,
    seed: req.seed ?? undefined,
    stop: req.stop === null || req.stop === undefined ? undefined : Array.isArray(req.stop) ? req.stop : [req.stop],
    frequencyPenalty: req.frequency_penalty ?? undefined,
    presencePenalty: req.presence_penalty ?? undefined,
    responseFormat: chatFormat(req.response_format),
    ...(req.logprobs === true ? { logprobs: { top: req.top_logprobs ?? 0 } } : {}),
  };
}

/**
 * The tools a chat body offers and how the model must use them (`tool_choice`: default `auto`
 * with tools, `none` without), and whether an answer may make several calls
 * (`parallel_tool_calls`, true by default; a named function is one call).
 * @throws AppError 400 when `tool_choice` names a function not in `tools`, or asks for a call with
 *   no tools.
 */
export function chatTooling(req: ChatCompletionRequest): Tooling {
  const tools: ToolSpec[] = (req.tools ?? []).map((t, i) => ({
    name: t.function.name,
    description: t.function.description,
    parameters: t.function.parameters ?? { type: "object", properties: {} },
    field: `tools[${i}].function.parameters`,
    strict: t.function.strict === true,
  }));
  const choice = req.tool_choice ?? (tools.length > 0 ? "auto" : "none");
  if (choice === "none" || tools.length === 0) {
    if (choice !== "none") {
      throw AppError.invalid("tool_choice asks for a tool call but no tools are given", [
        { field: "tool_choice", message: "needs tools" },
      ]);
    }
    return { tools, mode: { kind: "none" }, parallel: false };
  }
  const parallel = req.parallel_tool_calls !== false;
  if (choice === "auto") return { tools, mode: { kind: "auto" }, parallel };
  if (choice === "required") return { tools, mode: { kind: "forced", names: tools.map((t) => t.name) }, parallel };
  const name = choice.function.name;
  if (!tools.some((t) => t.name === name)) {
    throw AppError.invalid(`tool_choice names '${echo(name)}', which is not in tools`, [
      { field: "tool_choice.function.name", message: "is not one of the tools" },
    ]);
  }
  return { tools, mode: { kind: "forced", names: [name] }, parallel: false };
}

/** The fields of a chat body this service does not honour yet (legacy functions, `n` above 1). */
export function chatUnhonoured(req: ChatCompletionRequest): UnhonouredField[] {
  const out: UnhonouredField[] = [];
  if ((req.n ?? 1) > 1) out.push({ field: "n", message: "only n = 1 is supported" });
  if (isSet(req.functions))
    out.push({ field: "functions", message: "legacy function calling is not supported; use tools" });
  if (isSet(req.function_call) && req.function_call !== "none") {
    out.push({ field: "function_call", message: "function calling is not supported" });
  }
  return out;
}

/** Engine finish reason → OpenAI `finish_reason` (a stop string is `stop`, as OpenAI reports it). */
export function chatFinishReason(reason: FinishReason): "stop" | "length" {
  return reason === "length" ? "length" : "stop";
}

/** A call the model made, as a chat message carries it. */
export interface ChatToolCall {
  id: string;
  type: "function";
  function: { name: string; arguments: string };
}

/** `chatcmpl-<request uuid>`: the activity id behind a completion is its id without the prefix. */
export function chatCompletionId(requestId: string): string {
  return `chatcmpl-${requestId}`;
}

/** OpenAI `usage` (tokens) with the detail objects the SDK types expect. */
export function chatUsage(result: GenerateResult) {
  const u = result.usage;
  return {
    prompt_tokens: u.promptTokens,
    completion_tokens: u.completionTokens,
    total_tokens: u.promptTokens + u.completionTokens,
    prompt_tokens_details: { cached_tokens: u.cachedPromptTokens, audio_tokens: 0 },
    completion_tokens_details: {
      reasoning_tokens: 0,
      audio_tokens: 0,
      accepted_prediction_tokens: 0,
      rejected_prediction_tokens: 0,
    },
  };
}

/**
 * The `chat.completion` object: with `calls`, its `tool_calls` in order and as `content` the text
 * the answer gave before them (`callPreamble`; null when none), else the text. `created` is Unix
 * seconds. `noText`: a forced call that did not complete (cut by `max_tokens`, cancelled): no call
 * and `content: null`, as OpenAI's message has when it is no text, with the engine's
 * `finish_reason` (`length`), never the call's JSON as text (review finding F6).
 */
export function chatCompletion(
  requestId: string,
  createdAt: Date,
  model: string,
  result: GenerateResult,
  calls: ChatToolCall[] = [],
  noText = false,
) {
  const call = calls.length > 0;
  return {
    id: chatCompletionId(requestId),
    object: "chat.completion" as const,
    created: unixSeconds(createdAt),
    model,
    choices: [
      {
        index: 0,
        message: call
          ? {
              role: "assistant" as const,
              content: result.callPreamble || null,
              refusal: null,
              annotations: [],
              tool_calls: calls,
            }
          : { role: "assistant" as const, content: noText ? null : result.text, refusal: null, annotations: [] },
        logprobs: chatLogprobs(result, call),
        finish_reason: call ? ("tool_calls" as const) : chatFinishReason(result.finishReason),
      },
    ],
    usage: chatUsage(result),
    service_tier: "default",
    system_fingerprint: null,
  };
}

/**
 * `choices[].logprobs`: the content tokens' log-probabilities when they were asked for (the engine
 * returns them then), else null; null for an answer that makes tool calls (`call`).
 */
export function chatLogprobs(result: GenerateResult, call = false) {
  if (!result.logprobs || call) return null;
  return { content: openAiLogprobs(result.logprobs), refusal: null };
}

/** Builds the `chat.completion.chunk` objects of one streamed completion. */
export class ChatChunkWriter {
  private readonly base: { id: string; object: "chat.completion.chunk"; created: number; model: string };

  constructor(
    requestId: string,
    createdAt: Date,
    model: string,
    private readonly includeUsage: boolean,
  ) {
    this.base = {
      id: chatCompletionId(requestId),
      object: "chat.completion.chunk",
      created: unixSeconds(createdAt),
      model,
    };
  }

  private chunk(
    delta: Record<string, unknown>,
    finishReason: string | null,
    logprobs: ReturnType<typeof chatLogprobs> = null,
  ) {
    return {
      ...this.base,
      service_tier: "default",
      system_fingerprint: null,
      choices: [{ index: 0, delta, logprobs, finish_reason: finishReason }],
      ...(this.includeUsage ? { usage: null } : {}),
    };
  }

  /** First chunk: the assistant role. */
  start() {
    return this.chunk({ role: "assistant", content: "", refusal: null }, null);
  }

  delta(text: string) {
    return this.chunk({ content: text }, null);
  }

  /**
   * The closing chunk. Log-probabilities asked for come here, all of them: the embedded engine
   * knows them once the completion is decoded (`logprobs.ts`); the SDKs' stream helpers append
   * each chunk's `logprobs.content`, so the accumulated completion is the same as unstreamed.
   */
  finish(result: GenerateResult, call = false) {
    return this.chunk({}, call ? "tool_calls" : chatFinishReason(result.finishReason), chatLogprobs(result, call));
  }

  /**
   * The answer's calls as OpenAI streams them: for each in turn, its `index` (0, 1, …) with id,
   * type and name once (empty arguments), then its arguments under the same index.
   */
  toolCalls(calls: ChatToolCall[]) {
    return calls.flatMap((call, index) => [
      this.chunk(
        {
          tool_calls: [{ index, id: call.id, type: "function", function: { name: call.function.name, arguments: "" } }],
        },
        null,
      ),
      this.chunk({ tool_calls: [{ index, function: { arguments: call.function.arguments } }] }, null),
    ]);
  }

  /** The usage chunk (empty `choices`), sent only with `stream_options.include_usage`. */
  usage(result: GenerateResult) {
    return this.includeUsage ? { ...this.base, choices: [], usage: chatUsage(result) } : null;
  }
}
