/**
 * OpenAI Responses, as the spec lists it (spec: Resources, Response; DESIGN §3 Responses): the
 * request schema, translation to a generation call, and the Response object with exactly the
 * spec's fields: id, object, created_at, model, status, incomplete_details, output, error, usage,
 * service_tier.
 */
import { z } from "zod";
import type { ChatMessage, GenerateResult } from "../../../inference/engine.js";
import { messageId, unixSeconds } from "../../platform/identifiers.js";
import { type GenerationParams, maxQueueWaitS, requestMetadata } from "../inference-calls.js";
import { type Failure, errorBody, openAiError } from "../../../shared/error-dialects.js";
import { AppError, echo } from "../../../shared/errors.js";
import { type UnhonouredField, responseTextFormat, textFormat } from "./structured.js";
import { type OpenAiLogprob, openAiLogprobs } from "./logprobs.js";
import type { HistoryToolCall } from "../../../inference/tools.js";
import { TOOL_NAME, type ToolSpec, type Tooling } from "./tools.js";
import { RESPONSES_TOOL_RULES, type ToolFields, type TranslatedMessages, checkToolHistory } from "./tool-history.js";

const inputPart = z.object({ type: z.string(), text: z.string().optional() }).loose();
const messageItem = z
  .object({
    type: z.literal("message").optional(),
    role: z.enum(["user", "assistant", "system", "developer"]),
    content: z.union([z.string(), z.array(inputPart)]),
  })
  .loose();
/** A call the model made earlier (the `function_call` output item sent back as input). */
const functionCallItem = z
  .object({
    type: z.literal("function_call"),
    call_id: z.string().min(1),
    name: z.string().min(1),
    arguments: z.string(),
  })
  .loose();
/** A function's result for a call (`call_id`). */
const functionCallOutputItem = z
  .object({ type: z.literal("function_call_output"), call_id: z.string().min(1), output: z.string() })
  .loose();
// By `type` (a message item may leave it out), so a bad item is reported at its own field.
const inputItem = z.discriminatedUnion("type", [messageItem, functionCallItem, functionCallOutputItem]);

/** A function tool (`tools[i]`, Responses' flat shape). */
const functionTool = z.object({
  type: z.literal("function"),
  name: z.string().regex(TOOL_NAME, "must be 1–64 letters, digits, underscores or dashes"),
  description: z.string().nullish(),
  parameters: z.record(z.string(), z.unknown()).nullish(),
  strict: z.boolean().nullish(),
});
/** Built-in tools (web search, file search, …), which this service does not run. */
const builtInTool = z.object({ type: z.string() }).loose();

/** The `include` values OpenAI's Responses API accepts. */
const RESPONSE_INCLUDES = [
  "message.output_text.logprobs",
  "code_interpreter_call.outputs",
  "computer_call_output.output.image_url",
  "file_search_call.results",
  "message.input_image.image_url",
  "reasoning.encrypted_content",
  "web_search_call.action.sources",
  "web_search_call.results",
] as const;

export const responseRequest = z
  .object({
    model: z.string().min(1),
    input: z.union([z.string(), z.array(inputItem).min(1)]),
    instructions: z.string().nullish(),
    max_output_tokens: z.number().int().min(1).nullish(),
    temperature: z.number().min(0).max(2).nullish(),
    top_p: z.number().min(0).max(1).nullish(),
    stream: z.boolean().nullish(),
    background: z.boolean().nullish(),
    store: z.boolean().nullish(),
    service_tier: z.enum(["auto", "default", "flex", "priority", "scale"]).nullish(),
    max_queue_wait_s: maxQueueWaitS,
    timeout_s: z.number().int().min(1).max(86_400).nullish(),
    metadata: requestMetadata,
    text: z.object({ format: responseTextFormat.nullish() }).loose().nullish(),
    // Read so that a request asking for them is refused by name, never answered as if they were absent.
    tools: z
      .array(z.union([functionTool, builtInTool]))
      .max(128)
      .nullish(),
    tool_choice: z
      .union([z.enum(["none", "auto", "required"]), z.object({ type: z.literal("function"), name: z.string() })])
      .nullish(),
    parallel_tool_calls: z.boolean().nullish().meta({
      description:
        "Default true: an answer may make several function_call items (required: one to eight); false: one at most",
    }),
    previous_response_id: z.string().nullish(),
    // OpenAI's include values: only the log-probabilities have anything to add here (this service
    // runs no built-in tools, no reasoning, no image input); the others are accepted as OpenAI
    // does and add nothing, and any other value is a 400 naming it (never silently ignored).
    include: z.array(z.enum(RESPONSE_INCLUDES)).nullish(),
    top_logprobs: z.number().int().min(0).max(20).nullish(),
  })
  .superRefine((r, ctx) => {
    if (r.background && r.max_queue_wait_s != null) {
      ctx.addIssue({ code: "custom", path: ["max_queue_wait_s"], message: "cannot be combined with background" });
    }
    // The background window; a synchronous request may carry it too and it is ignored there
    // (DESIGN §3 Responses: the original SDK's own example sends it that way; issue 6, item 2).
    if (r.metadata?.completion_window !== undefined && r.metadata.completion_window !== "24h") {
      ctx.addIssue({ code: "custom", path: ["metadata", "completion_window"], message: 'must be "24h"' });
    }
    // A background response is read back later, so it must be stored (OpenAI refuses the same).
    if (r.background && r.store === false) {
      ctx.addIssue({ code: "custom", path: ["store"], message: "background responses must be stored" });
    }
    if (r.background && r.stream) {
      ctx.addIssue({ code: "custom", path: ["stream"], message: "cannot be combined with background" });
    }
  });
export type ResponseRequest = z.infer<typeof responseRequest>;

/** An assistant turn that only calls functions (a `function_call` item, or a stored response's). */
export function assistantCalls(calls: HistoryToolCall[]): ChatMessage {
  return { role: "assistant", content: "", toolCalls: calls };
}

/**
 * `instructions` + `input` (string or message items) → chat messages, `function_call` items as an
 * assistant's calls (those in a row as one turn) and `function_call_output` items as tool turns
 * (by `call_id`), with their fields (`input[i].call_id`) for the tool history check;
 * `unsupported` lists non-text parts.
 */
export function responseMessages(req: ResponseRequest): TranslatedMessages {
  const unsupported: string[] = [];
  const messages: ChatMessage[] = [];
  const toolFields: ToolFields = new Map();
  if (req.instructions) messages.push({ role: "system", content: req.instructions });
  if (typeof req.input === "string") messages.push({ role: "user", content: req.input });
  else {
    req.input.forEach((item, i) => {
      if (item.type === "function_call") {
        const call = item as z.infer<typeof functionCallItem>;
        const made = { id: call.call_id, name: call.name, arguments: call.arguments };
        // Calls in a row are one assistant turn (parallel calls), as a chat history writes them.
        const last = messages.at(-1);
        const turn = last?.toolCalls && toolFields.has(last) ? last : assistantCalls([]);
        if (turn !== last) messages.push(turn);
        turn.toolCalls!.push(made);
        const at = toolFields.get(turn) ?? { calls: [] };
        at.calls.push(`input[${i}].call_id`);
        toolFields.set(turn, at);
        return;
      }
      if (item.type === "function_call_output") {
        const output = item as z.infer<typeof functionCallOutputItem>;
        const answer: ChatMessage = { role: "tool", content: output.output, toolCallId: output.call_id };
        toolFields.set(answer, { calls: [], answer: `input[${i}].call_id` });
        messages.push(answer);
        return;
      }
      item = item as z.infer<typeof messageItem>;
      const text =
        typeof item.content === "string"
          ? item.content
          : item.content
              .map((p, j) => {
                if ((p.type === "input_text" || p.type === "output_text") && typeof p.text === "string") return p.text;
                unsupported.push(`input[${i}].content[${j}]`);
                return "";
              })
              .join("");
      messages.push({ role: item.role, content: text });
    });
  }
  return { messages, unsupported, toolFields };
}

/**
 * The messages a Responses create generates from: its `instructions`, then the conversation it
 * continues (`history`, from `previous_response_id`; issue 26, item 4), then its input — with the
 * tool turns of all of them checked (`checkToolHistory`: an output may answer a call of the
 * history, and a call of the history must be answered in the input).
 * @throws AppError 400 naming `input[i].call_id`, or `previous_response_id` for a call of the history.
 */
export function continuedMessages(
  req: ResponseRequest,
  own: TranslatedMessages,
  history: ChatMessage[],
): ChatMessage[] {
  const instructions = req.instructions ? 1 : 0;
  const messages = [...own.messages.slice(0, instructions), ...history, ...own.messages.slice(instructions)];
  checkToolHistory(messages, own.toolFields, RESPONSES_TOOL_RULES);
  return messages;
}

/** Responses body → sampling parameters (`max_output_tokens` → max tokens). */
export function responseParams(req: ResponseRequest): GenerationParams {
  return {
    maxTokens: req.max_output_tokens ?? undefined,
    temperature: req.temperature ?? undefined,
    topP: req.top_p ?? undefined,
    responseFormat: textFormat(req.text?.format),
    ...(wantsLogprobs(req) ? { logprobs: { top: req.top_logprobs ?? 0 } } : {}),
  };
}

/**
 * Log-probabilities are asked for with `include: ["message.output_text.logprobs"]`; `top_logprobs`
 * above 0 asks for them too (alternatives make no sense without them).
 */
function wantsLogprobs(req: ResponseRequest): boolean {
  return (req.include ?? []).includes("message.output_text.logprobs") || (req.top_logprobs ?? 0) > 0;
}

/** The fields of a Responses body this service does not honour yet (built-in tools). */
export function responseUnhonoured(req: ResponseRequest): UnhonouredField[] {
  const out: UnhonouredField[] = [];
  (req.tools ?? []).forEach((t, i) => {
    if (t.type !== "function")
      out.push({ field: `tools[${i}]`, message: `built-in tools (${t.type}) are not supported` });
  });
  return out;
}

/**
 * The function tools a Responses body offers and how the model must use them (`tool_choice`:
 * `auto` by default with tools), and whether an answer may make several calls
 * (`parallel_tool_calls`, true by default; a named function is one call).
 * @throws AppError 400 when `tool_choice` names a function not in `tools`, or asks for a call with
 *   no tools.
 */
export function responseTooling(req: ResponseRequest): Tooling {
  const tools: ToolSpec[] = (req.tools ?? []).flatMap((t, i) =>
    t.type === "function"
      ? [
          {
            name: (t as z.infer<typeof functionTool>).name,
            description: (t as z.infer<typeof functionTool>).description,
            parameters: (t as z.infer<typeof functionTool>).parameters ?? { type: "object", properties: {} },
            field: `tools[${i}].parameters`,
            strict: (t as z.infer<typeof functionTool>).strict === true,
          },
        ]
      : [],
  );
  const choice = req.tool_choice ?? (tools.length > 0 ? "auto" : "none");
  if (choice === "none") return { tools, mode: { kind: "none" }, parallel: false };
  if (tools.length === 0) {
    throw AppError.invalid("tool_choice asks for a tool call but no function tools are given", [
      { field: "tool_choice", message: "needs tools" },
    ]);
  }
  const parallel = req.parallel_tool_calls !== false;
  if (choice === "auto") return { tools, mode: { kind: "auto" }, parallel };
  if (choice === "required") return { tools, mode: { kind: "forced", names: tools.map((t) => t.name) }, parallel };
  if (!tools.some((t) => t.name === choice.name)) {
    throw AppError.invalid(`tool_choice names '${echo(choice.name)}', which is not in tools`, [
      { field: "tool_choice.name", message: "is not one of the tools" },
    ]);
  }
  return { tools, mode: { kind: "forced", names: [choice.name] }, parallel: false };
}

/** `service_tier` as answered: `flex` when asked for, else `default` (DESIGN §3 Responses). */
export function answeredTier(req: ResponseRequest): "default" | "flex" {
  return req.service_tier === "flex" ? "flex" : "default";
}

/** The assistant's message (text) in a Response's `output`. */
export interface ResponseMessageItem {
  type: "message";
  id: string;
  role: "assistant";
  status: "completed" | "incomplete";
  content: Array<{ type: "output_text"; text: string; annotations: unknown[]; logprobs?: OpenAiLogprob[] }>;
}

/** A call the model made, in a Response's `output` (`fc_…` item id, `call_…` call id). */
export interface ResponseFunctionCall {
  type: "function_call";
  id: string;
  call_id: string;
  name: string;
  /** JSON text. */
  arguments: string;
  status: "completed";
}

/** The text of a Response's message items (what the SDKs' `output_text` joins). */
export function outputText(response: ResponseObject): string {
  return response.output.flatMap((item) => (item.type === "message" ? item.content.map((c) => c.text) : [])).join("");
}

export interface ResponseObject {
  id: string;
  object: "response";
  /** Unix seconds. */
  created_at: number;
  model: string;
  status: "in_progress" | "completed" | "incomplete" | "failed" | "cancelled";
  incomplete_details: { reason: "max_output_tokens" } | null;
  output: Array<ResponseMessageItem | ResponseFunctionCall>;
  error: { code: string; message: string } | null;
  usage: {
    input_tokens: number;
    output_tokens: number;
    total_tokens: number;
    input_tokens_details: { cached_tokens: number };
    output_tokens_details: { reasoning_tokens: number };
  } | null;
  service_tier: "default" | "flex";
  /** The response this one continues, when it does (echoed as sent). */
  previous_response_id?: string;
}

/** `previous_response_id`, echoed on the Response when the request continues one. */
function continuing(previous: string | null | undefined): { previous_response_id?: string } {
  return previous ? { previous_response_id: previous } : {};
}

/**
 * The Response object of a finished generation (`incomplete` when it hit the token limit,
 * `cancelled` when it was aborted: its message, the text so far, is then `incomplete`). With
 * `calls`, the output is a `function_call` item each, after a message item with the text the
 * answer gave before them (`callPreamble`), when there is some. `noText`: a forced call that did not
 * complete: no output item at all (`output: []`, `incomplete` with `max_output_tokens`), never the
 * call's JSON as `output_text`, which a later `previous_response_id` would read as the assistant's
 * turn (review finding F6).
 */
export function responseObject(
  requestId: string,
  createdAt: Date,
  model: string,
  tier: "default" | "flex",
  result: GenerateResult,
  previous?: string | null,
  calls: ResponseFunctionCall[] = [],
  noText = false,
): ResponseObject {
  const incomplete = result.finishReason === "length";
  const status = result.finishReason === "cancelled" ? "cancelled" : incomplete ? "incomplete" : "completed";
  const u = result.usage;
  return {
    id: requestId,
    object: "response",
    created_at: unixSeconds(createdAt),
    model,
    status,
    incomplete_details: incomplete ? { reason: "max_output_tokens" } : null,
    output:
      calls.length > 0
        ? [...(result.callPreamble ? [outputMessage(requestId, "completed", result.callPreamble)] : []), ...calls]
        : noText
          ? []
          : [
              outputMessage(
                requestId,
                incomplete || status === "cancelled" ? "incomplete" : "completed",
                result.text,
                result.logprobs ? openAiLogprobs(result.logprobs) : undefined,
              ),
            ],
    error: null,
    usage: {
      input_tokens: u.promptTokens,
      output_tokens: u.completionTokens,
      total_tokens: u.promptTokens + u.completionTokens,
      input_tokens_details: { cached_tokens: u.cachedPromptTokens },
      output_tokens_details: { reasoning_tokens: 0 },
    },
    service_tier: tier,
    ...continuing(previous),
  };
}

/** A Response's message item with one `output_text` part. */
function outputMessage(
  requestId: string,
  status: ResponseMessageItem["status"],
  text: string,
  logprobs?: OpenAiLogprob[],
): ResponseMessageItem {
  return {
    type: "message",
    id: messageId(requestId),
    role: "assistant",
    status,
    content: [{ type: "output_text", text, annotations: [], ...(logprobs ? { logprobs } : {}) }],
  };
}

/** The in-progress Response object (background creates and the stream's first events). */
export function inProgressResponse(
  requestId: string,
  createdAt: Date,
  model: string,
  tier: "default" | "flex",
  previous?: string | null,
): ResponseObject {
  return {
    id: requestId,
    object: "response",
    created_at: unixSeconds(createdAt),
    model,
    status: "in_progress",
    incomplete_details: null,
    output: [],
    error: null,
    usage: null,
    service_tier: tier,
    ...continuing(previous),
  };
}

/**
 * The Responses streaming events (`response.created` … `response.completed`), each with its
 * `type` and a running `sequence_number`, as `[event, data]` pairs. The message item (output
 * index 0) streams its text as it comes; with tools offered it opens with the first text (an
 * answer that is only calls has none), and the `function_call` items follow it at the end.
 */
export class ResponseStreamEvents {
  private seq = 0;
  private text = "";
  private opened = false;
  private readonly itemId: string;

  constructor(
    private readonly requestId: string,
    private readonly createdAt: Date,
    private readonly model: string,
    private readonly tier: "default" | "flex",
    private readonly previous: string | null = null,
  ) {
    this.itemId = messageId(requestId);
  }

  private event(type: string, fields: Record<string, unknown>): [string, unknown] {
    return [type, { type, sequence_number: this.seq++, ...fields }];
  }

  /** @param held with tools offered: the message item opens with the first text, if any comes. */
  start(held = false): [string, unknown][] {
    const response = inProgressResponse(this.requestId, this.createdAt, this.model, this.tier, this.previous);
    const created = [this.event("response.created", { response }), this.event("response.in_progress", { response })];
    return held ? created : [...created, ...this.messageOpened()];
  }

  private messageOpened(): [string, unknown][] {
    this.opened = true;
    return [
      this.event("response.output_item.added", {
        output_index: 0,
        item: { id: this.itemId, type: "message", status: "in_progress", role: "assistant", content: [] },
      }),
      this.event("response.content_part.added", {
        item_id: this.itemId,
        output_index: 0,
        content_index: 0,
        part: { type: "output_text", text: "", annotations: [] },
      }),
    ];
  }

  /** A piece of text (opening the message item first when it is not yet). */
  delta(text: string): [string, unknown][] {
    const open = this.opened ? [] : this.messageOpened();
    this.text += text;
    return [
      ...open,
      this.event("response.output_text.delta", {
        item_id: this.itemId,
        output_index: 0,
        content_index: 0,
        delta: text,
        logprobs: [],
      }),
    ];
  }

  /**
   * The closing events: the message item, opened now where it was not and the response has one,
   * with what was not streamed of its text, then closed; each function call as OpenAI streams one
   * (item added with empty arguments, the arguments as one delta, done) at the next output index;
   * the terminal event. Nothing but the terminal event when there is no output item (a held
   * forced call that did not complete, `responseObject`'s `noText`).
   */
  finish(response: ResponseObject): [string, unknown][] {
    const calls = response.output.filter((item): item is ResponseFunctionCall => item.type === "function_call");
    const message = response.output.find((item) => item.type === "message");
    const events: [string, unknown][] = [];
    if (message || this.opened) {
      if (!this.opened) events.push(...this.messageOpened());
      const full = message?.content[0]?.text ?? this.text;
      const rest = full.startsWith(this.text) ? full.slice(this.text.length) : "";
      if (rest) events.push(...this.delta(rest));
      events.push(...this.messageClosed(message));
    }
    const first = events.length > 0 ? 1 : 0;
    calls.forEach((call, i) => {
      const at = first + i;
      events.push(
        this.event("response.output_item.added", {
          output_index: at,
          item: { ...call, arguments: "", status: "in_progress" },
        }),
        this.event("response.function_call_arguments.delta", {
          item_id: call.id,
          output_index: at,
          delta: call.arguments,
        }),
        this.event("response.function_call_arguments.done", {
          item_id: call.id,
          output_index: at,
          arguments: call.arguments,
        }),
        this.event("response.output_item.done", { output_index: at, item: call }),
      );
    });
    const terminal = calls.length > 0 ? "response.completed" : terminalEvent(response);
    return [...events, this.event(terminal, { response })];
  }

  /** The message item's closing events (output index 0). */
  private messageClosed(item: ResponseMessageItem | undefined): [string, unknown][] {
    const text = item?.content[0]?.text ?? this.text;
    const logprobs = item?.content[0]?.logprobs ?? [];
    const part = { type: "output_text", text, annotations: [], ...(item?.content[0]?.logprobs ? { logprobs } : {}) };
    return [
      this.event("response.output_text.done", {
        item_id: this.itemId,
        output_index: 0,
        content_index: 0,
        text,
        // All of them here: the embedded engine knows them once the text is decoded (`logprobs.ts`).
        logprobs,
      }),
      this.event("response.content_part.done", { item_id: this.itemId, output_index: 0, content_index: 0, part }),
      this.event("response.output_item.done", { output_index: 0, item }),
    ];
  }

  /**
   * The Responses stream's `error` event (`code`, `message`, `param`) for a failure after the
   * stream opened, with the error body beside them (the envelope and OpenAI's `error` object, which
   * the `openai` client throws as an `APIError` carrying `message`; issue 27, item 1).
   */
  error(failure: Failure): [string, unknown][] {
    const { code, message, param } = openAiError(failure);
    return [this.event("error", { ...errorBody(failure, "openai"), code, message, param })];
  }
}

/** The stream's last event for a Response that ended as text. */
function terminalEvent(response: ResponseObject): string {
  if (response.status === "incomplete") return "response.incomplete";
  return response.status === "failed" ? "response.failed" : "response.completed";
}
