/**
 * OpenAI Chat Completions (DESIGN §3 "Chat completions, embeddings, messages"): request schema,
 * translation to a generation call, the `chat.completion` object and the `chat.completion.chunk`
 * stream (SSE `data:` chunks, `[DONE]`, `stream_options.include_usage`).
 */
import { z } from "zod";
import type { ChatMessage, FinishReason, GenerateResult } from "../../../inference/engine.js";
import { unixSeconds } from "../../platform/identifiers.js";
import { type GenerationParams, maxQueueWaitS, requestMetadata } from "../inference-calls.js";
import { type UnhonouredField, chatFormat, chatResponseFormat, isSet } from "./structured.js";

const textPart = z.object({ type: z.literal("text"), text: z.string() });
const otherPart = z.object({ type: z.string() }).loose();

/**
 * Required on every message (issue 5, item 3). OpenAI lets an assistant message leave it out or
 * null only when it carries `tool_calls`/`function_call`, and this service has no tools.
 */
const chatContent = z.union([z.string(), z.array(z.union([textPart, otherPart]))], {
  error: (issue) =>
    issue.input === undefined || issue.input === null ? "is required" : "must be a string or an array of content parts",
});

export const chatCompletionRequest = z.object({
  model: z.string().min(1),
  messages: z
    .array(
      z.object({
        role: z.enum(["system", "developer", "user", "assistant", "tool", "function"]),
        content: chatContent,
        name: z.string().optional(),
      }),
    )
    .min(1),
  max_tokens: z.number().int().min(1).nullish(),
  max_completion_tokens: z.number().int().min(1).nullish(),
  temperature: z.number().min(0).max(2).nullish(),
  top_p: z.number().min(0).max(1).nullish(),
  n: z.number().int().min(1).max(1, "only n = 1 is supported").nullish(),
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
  tools: z.array(z.unknown()).nullish(),
  tool_choice: z.unknown().optional(),
  parallel_tool_calls: z.boolean().nullish(),
  functions: z.array(z.unknown()).nullish(),
  function_call: z.unknown().optional(),
  logprobs: z.boolean().nullish(),
  top_logprobs: z.number().int().min(0).max(20).nullish(),
});
export type ChatCompletionRequest = z.infer<typeof chatCompletionRequest>;

/** Flattens OpenAI message content (string or parts) to text; non-text parts are refused. */
export function chatMessages(req: ChatCompletionRequest): { messages: ChatMessage[]; unsupported: string[] } {
  const unsupported: string[] = [];
  const messages = req.messages.map((m, i): ChatMessage => {
    let content = "";
    if (typeof m.content === "string") content = m.content;
    else if (Array.isArray(m.content)) {
      content = m.content
        .map((p, j) => {
          if (p.type === "text" && typeof p.text === "string") return p.text;
          unsupported.push(`messages[${i}].content[${j}]`);
          return "";
        })
        .join("");
    }
    const role = m.role === "function" ? "tool" : m.role;
    return { role, content };
  });
  return { messages, unsupported };
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
  };
}

/** The fields of a chat body this service does not honour yet (tools, log-probabilities). */
export function chatUnhonoured(req: ChatCompletionRequest): UnhonouredField[] {
  const out: UnhonouredField[] = [];
  if (isSet(req.tools)) out.push({ field: "tools", message: "tool calling is not supported" });
  if (isSet(req.functions)) out.push({ field: "functions", message: "function calling is not supported" });
  if (isSet(req.tool_choice) && req.tool_choice !== "none" && !isSet(req.tools)) {
    out.push({ field: "tool_choice", message: "tool calling is not supported" });
  }
  if (isSet(req.function_call) && req.function_call !== "none") {
    out.push({ field: "function_call", message: "function calling is not supported" });
  }
  if (req.logprobs === true) out.push({ field: "logprobs", message: "log-probabilities are not supported" });
  if ((req.top_logprobs ?? 0) > 0) out.push({ field: "top_logprobs", message: "log-probabilities are not supported" });
  return out;
}

/** Engine finish reason → OpenAI `finish_reason` (a stop string is `stop`, as OpenAI reports it). */
export function chatFinishReason(reason: FinishReason): "stop" | "length" {
  return reason === "length" ? "length" : "stop";
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

/** The `chat.completion` object. `created` is Unix seconds. */
export function chatCompletion(requestId: string, createdAt: Date, model: string, result: GenerateResult) {
  return {
    id: chatCompletionId(requestId),
    object: "chat.completion" as const,
    created: unixSeconds(createdAt),
    model,
    choices: [
      {
        index: 0,
        message: { role: "assistant" as const, content: result.text, refusal: null, annotations: [] },
        logprobs: null,
        finish_reason: chatFinishReason(result.finishReason),
      },
    ],
    usage: chatUsage(result),
    service_tier: "default",
    system_fingerprint: null,
  };
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

  private chunk(delta: Record<string, unknown>, finishReason: string | null) {
    return {
      ...this.base,
      service_tier: "default",
      system_fingerprint: null,
      choices: [{ index: 0, delta, logprobs: null, finish_reason: finishReason }],
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

  finish(result: GenerateResult) {
    return this.chunk({}, chatFinishReason(result.finishReason));
  }

  /** The usage chunk (empty `choices`), sent only with `stream_options.include_usage`. */
  usage(result: GenerateResult) {
    return this.includeUsage ? { ...this.base, choices: [], usage: chatUsage(result) } : null;
  }
}
