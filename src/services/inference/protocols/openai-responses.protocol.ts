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
import { type UnhonouredField, isSet, responseTextFormat, textFormat } from "./structured.js";

const inputPart = z.object({ type: z.string(), text: z.string().optional() }).loose();
const inputItem = z
  .object({
    type: z.literal("message").optional(),
    role: z.enum(["user", "assistant", "system", "developer"]),
    content: z.union([z.string(), z.array(inputPart)]),
  })
  .loose();

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
    tools: z.array(z.unknown()).nullish(),
    tool_choice: z.unknown().optional(),
    parallel_tool_calls: z.boolean().nullish(),
    previous_response_id: z.string().nullish(),
    include: z.array(z.string()).nullish(),
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

/** `instructions` + `input` (string or message items) → chat messages; `unsupported` lists non-text parts. */
export function responseMessages(req: ResponseRequest): { messages: ChatMessage[]; unsupported: string[] } {
  const unsupported: string[] = [];
  const messages: ChatMessage[] = [];
  if (req.instructions) messages.push({ role: "system", content: req.instructions });
  if (typeof req.input === "string") messages.push({ role: "user", content: req.input });
  else {
    req.input.forEach((item, i) => {
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
  return { messages, unsupported };
}

/** Responses body → sampling parameters (`max_output_tokens` → max tokens). */
export function responseParams(req: ResponseRequest): GenerationParams {
  return {
    maxTokens: req.max_output_tokens ?? undefined,
    temperature: req.temperature ?? undefined,
    topP: req.top_p ?? undefined,
    responseFormat: textFormat(req.text?.format),
  };
}

/** The fields of a Responses body this service does not honour yet (tools, log-probabilities). */
export function responseUnhonoured(req: ResponseRequest): UnhonouredField[] {
  const out: UnhonouredField[] = [];
  if (isSet(req.tools)) out.push({ field: "tools", message: "tool calling is not supported" });
  if (isSet(req.tool_choice) && req.tool_choice !== "none" && !isSet(req.tools)) {
    out.push({ field: "tool_choice", message: "tool calling is not supported" });
  }
  (req.include ?? []).forEach((item, i) => {
    if (item === "message.output_text.logprobs") {
      out.push({ field: `include[${i}]`, message: "log-probabilities are not supported" });
    }
  });
  if ((req.top_logprobs ?? 0) > 0) out.push({ field: "top_logprobs", message: "log-probabilities are not supported" });
  return out;
}

/** `service_tier` as answered: `flex` when asked for, else `default` (DESIGN §3 Responses). */
export function answeredTier(req: ResponseRequest): "default" | "flex" {
  return req.service_tier === "flex" ? "flex" : "default";
}

export interface ResponseObject {
  id: string;
  object: "response";
  /** Unix seconds. */
  created_at: number;
  model: string;
  status: "in_progress" | "completed" | "incomplete" | "failed" | "cancelled";
  incomplete_details: { reason: "max_output_tokens" } | null;
  output: Array<{
    type: "message";
    id: string;
    role: "assistant";
    status: "completed" | "incomplete";
    content: Array<{ type: "output_text"; text: string; annotations: unknown[] }>;
  }>;
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
 * `cancelled` when it was aborted: its message, the text so far, is then `incomplete`).
 */
export function responseObject(
  requestId: string,
  createdAt: Date,
  model: string,
  tier: "default" | "flex",
  result: GenerateResult,
  previous?: string | null,
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
    output: [
      {
        type: "message",
        id: messageId(requestId),
        role: "assistant",
        status: incomplete || status === "cancelled" ? "incomplete" : "completed",
        content: [{ type: "output_text", text: result.text, annotations: [] }],
      },
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
 * `type` and a running `sequence_number`, as `[event, data]` pairs.
 */
export class ResponseStreamEvents {
  private seq = 0;
  private text = "";
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

  start(): [string, unknown][] {
    const response = inProgressResponse(this.requestId, this.createdAt, this.model, this.tier, this.previous);
    return [
      this.event("response.created", { response }),
      this.event("response.in_progress", { response }),
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

  delta(text: string): [string, unknown][] {
    this.text += text;
    return [
      this.event("response.output_text.delta", {
        item_id: this.itemId,
        output_index: 0,
        content_index: 0,
        delta: text,
        logprobs: [],
      }),
    ];
  }

  finish(response: ResponseObject): [string, unknown][] {
    const item = response.output[0];
    const text = item?.content[0]?.text ?? this.text;
    const part = { type: "output_text", text, annotations: [] };
    const terminal =
      response.status === "incomplete"
        ? "response.incomplete"
        : response.status === "failed"
          ? "response.failed"
          : "response.completed";
    return [
      this.event("response.output_text.done", {
        item_id: this.itemId,
        output_index: 0,
        content_index: 0,
        text,
        logprobs: [],
      }),
      this.event("response.content_part.done", { item_id: this.itemId, output_index: 0, content_index: 0, part }),
      this.event("response.output_item.done", { output_index: 0, item }),
      this.event(terminal, { response }),
    ];
  }

  error(detail: string, code: string): [string, unknown][] {
    return [this.event("error", { code, message: detail, param: null })];
  }
}
