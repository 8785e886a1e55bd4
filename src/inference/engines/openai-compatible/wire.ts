/**
 * The OpenAI-compatible wire format, as data and small pure functions (Portkey's provider folders
 * are the model: paths per operation, a parameter map, response transforms): what vLLM, SGLang,
 * llama.cpp server and Switchyard itself accept on `/v1/chat/completions`, `/v1/embeddings`,
 * `/v1/models` and (vLLM, llama.cpp server) `/tokenize`, and how their answers and errors map onto
 * the engine interface and our error codes (DESIGN §3 Errors).
 */
import { TextDecoder } from "node:util";
import { AppError, ErrorCode, type FieldIssue } from "../../../shared/errors.js";
import type {
  ChatMessage,
  EngineUsage,
  FinishReason,
  GenerateRequest,
  TokenAlternative,
  TokenLogprob,
} from "../../engine.js";
import { toolFields, wireToolParts } from "./tool-wire.js";

/** Paths under an endpoint's base URL (the OpenAI base URL, usually ending in `/v1`). */
export const PATHS = {
  chat: "/chat/completions",
  /** Legacy completions: log-probability scoring with `echo` (decisions, issue 11). */
  completions: "/completions",
  embeddings: "/embeddings",
  models: "/models",
} as const;

/**
 * `/tokenize` lives beside `/v1`, not under it (vLLM: `{model, prompt}` → `{count, tokens}`;
 * llama.cpp server: `{content}` → `{tokens}`): the base path without a trailing `/v1`, plus it.
 */
export function tokenizePath(basePath: string): string {
  return basePath.replace(/\/v1$/, "") + "/tokenize";
}

/**
 * Our roles → the upstream's. `developer` is sent as `system` (older servers refuse it); a tool
 * turn goes as `tool` with its call id (`wireToolParts`), and one without an id (a legacy
 * `function` result) as a user turn, as the embedded engine reads it.
 */
const ROLES: Record<ChatMessage["role"], "system" | "user" | "assistant"> = {
  system: "system",
  developer: "system",
  user: "user",
  assistant: "assistant",
  tool: "user",
};

/** Upstream `finish_reason` → ours; unknown or absent reasons are an ordinary `stop`. */
const FINISH_REASONS: Record<string, FinishReason> = {
  stop: "stop",
  length: "length",
  content_filter: "stop",
  tool_calls: "stop",
  function_call: "stop",
  // vLLM reports a request it aborted (e.g. on its own shutdown) as `abort`.
  abort: "cancelled",
};

/** Upstream `finish_reason` → ours. */
export function finishReason(reason: unknown): FinishReason {
  return (typeof reason === "string" && FINISH_REASONS[reason]) || "stop";
}

/**
 * The parameter map of a chat completion: our sampling parameters → the upstream body. Only
 * parameters the caller set are sent (the upstream's defaults apply otherwise); `top_k` is an
 * extension vLLM, SGLang and llama.cpp server read and others ignore. Tools and tool turns as
 * `tool-wire.ts` writes them. Streams ask for the usage
 * chunk (`stream_options.include_usage`), so the upstream's token counts are what gets metered.
 */
export function chatBody(req: GenerateRequest, upstreamModel: string, stream: boolean): Record<string, unknown> {
  const body: Record<string, unknown> = {
    model: upstreamModel,
    messages: req.messages.map((m) => ({ role: ROLES[m.role], content: m.content, ...wireToolParts(m) })),
    ...toolFields(req.tools),
  };
  if (req.maxTokens !== undefined) body.max_tokens = req.maxTokens;
  if (req.temperature !== undefined) body.temperature = req.temperature;
  if (req.topP !== undefined) body.top_p = req.topP;
  if (req.topK !== undefined) body.top_k = req.topK;
  if (req.seed !== undefined) body.seed = req.seed;
  if (req.stop !== undefined && req.stop.length > 0) body.stop = req.stop;
  if (req.frequencyPenalty !== undefined) body.frequency_penalty = req.frequencyPenalty;
  if (req.presencePenalty !== undefined) body.presence_penalty = req.presencePenalty;
  // Structured outputs pass through as OpenAI's `response_format` (vLLM, SGLang and llama.cpp
  // server decode under it); the upstream answers 400 for a schema it cannot serve.
  if (req.responseFormat?.type === "json_object") body.response_format = { type: "json_object" };
  if (req.responseFormat?.type === "json_schema") {
    const { schema, strict, name } = req.responseFormat;
    body.response_format = { type: "json_schema", json_schema: { name: name ?? "response", schema, strict } };
  }
  // Log-probabilities pass through as OpenAI's `logprobs` / `top_logprobs` (vLLM, SGLang and
  // llama.cpp server answer them in `choices[].logprobs.content`, read by `parseLogprobs`).
  if (req.logprobs) {
    body.logprobs = true;
    if (req.logprobs.top > 0) body.top_logprobs = req.logprobs.top;
  }
  if (stream) {
    body.stream = true;
    body.stream_options = { include_usage: true };
  }
  return body;
}

/**
 * A chunk's `choices[].logprobs.content` → ours; entries that are not `{token, logprob}` are
 * skipped, and missing `bytes` are the token's UTF-8 bytes. Null when the chunk carries none.
 */
export function parseLogprobs(logprobs: unknown): TokenLogprob[] | null {
  const content = (logprobs as { content?: unknown } | null | undefined)?.content;
  if (!Array.isArray(content)) return null;
  const alternative = (e: unknown): TokenAlternative | null => {
    const { token, logprob, bytes } = (e ?? {}) as { token?: unknown; logprob?: unknown; bytes?: unknown };
    if (typeof token !== "string" || typeof logprob !== "number") return null;
    const raw = Array.isArray(bytes) && bytes.every((b) => Number.isInteger(b)) ? (bytes as number[]) : null;
    return { token, logprob, bytes: raw ?? [...Buffer.from(token, "utf8")] };
  };
  return content.flatMap((e: unknown) => {
    const entry = alternative(e);
    if (!entry) return [];
    const top = (e as { top_logprobs?: unknown }).top_logprobs;
    const alternatives = Array.isArray(top)
      ? top.map(alternative).filter((a): a is TokenAlternative => a !== null)
      : [];
    return [{ ...entry, top: alternatives }];
  });
}

/** Per-message allowance of the prompt bound: role markers and template tokens around each turn. */
export const MESSAGE_OVERHEAD_TOKENS = 16;

/**
 * An upper bound on a chat prompt's tokens that cannot under-count on the tokenizers in use
 * (byte-level BPE and SentencePiece with byte fallback give at most one token per UTF-8 byte):
 * the content's UTF-8 bytes plus `MESSAGE_OVERHEAD_TOKENS` per message and once more for the
 * assistant turn the template opens, capped at the model's context (a longer prompt is refused by
 * the upstream, uncharged). Used to reserve credit before sending (DESIGN §3 Money).
 */
export function promptTokenBound(messages: ChatMessage[], contextTokens: number): number {
  let bytes = 0;
  for (const m of messages) bytes += Buffer.byteLength(m.content, "utf8") + MESSAGE_OVERHEAD_TOKENS;
  return Math.min(bytes + MESSAGE_OVERHEAD_TOKENS, contextTokens);
}

interface WireUsage {
  prompt_tokens?: unknown;
  completion_tokens?: unknown;
  prompt_tokens_details?: { cached_tokens?: unknown } | null;
}

/** The upstream's `usage` object → ours; null when it carries no token counts. */
export function parseUsage(usage: unknown): EngineUsage | null {
  if (!usage || typeof usage !== "object") return null;
  const u = usage as WireUsage;
  if (typeof u.prompt_tokens !== "number") return null;
  const cached = u.prompt_tokens_details?.cached_tokens;
  return {
    promptTokens: u.prompt_tokens,
    completionTokens: typeof u.completion_tokens === "number" ? u.completion_tokens : 0,
    cachedPromptTokens: typeof cached === "number" ? Math.min(cached, u.prompt_tokens) : 0,
  };
}

/**
 * The stop string that ended a completion, when the upstream says: vLLM's `stop_reason` or
 * SGLang's `matched_stop`, if it is one of the caller's. Others (llama.cpp server, Switchyard)
 * report a plain `stop`, and then the reason stays `stop`.
 */
export function matchedStop(choice: Record<string, unknown>, stops: string[] | undefined): string | null {
  for (const key of ["stop_reason", "matched_stop"]) {
    const v = choice[key];
    if (typeof v === "string" && stops?.includes(v)) return v;
  }
  return null;
}

/** Most characters of an upstream's error text passed on in a 400's detail. */
const MAX_DETAIL_CHARS = 1000;

/**
 * The human part of an upstream error body: OpenAI/vLLM/llama.cpp `{error: {message}}`, vLLM's
 * older `{message}`, Switchyard's envelope `{detail, extra}` (its field list is kept when it is
 * one), else the raw text.
 */
export function upstreamErrorDetail(text: string): { detail: string; issues?: FieldIssue[] } {
  let body: unknown;
  try {
    body = JSON.parse(text);
  } catch {
    return { detail: text.trim().slice(0, MAX_DETAIL_CHARS) };
  }
  const b = (body ?? {}) as Record<string, unknown>;
  const error = b.error;
  const message =
    (typeof error === "object" && error !== null && typeof (error as { message?: unknown }).message === "string"
      ? (error as { message: string }).message
      : undefined) ??
    (typeof error === "string" ? error : undefined) ??
    (typeof b.detail === "string" ? b.detail : undefined) ??
    (typeof b.message === "string" ? b.message : undefined) ??
    text.trim();
  const issues = Array.isArray(b.extra)
    ? (b.extra as unknown[]).filter(
        (i): i is FieldIssue =>
          typeof i === "object" &&
          i !== null &&
          typeof (i as FieldIssue).field === "string" &&
          typeof (i as FieldIssue).message === "string",
      )
    : undefined;
  return { detail: message.slice(0, MAX_DETAIL_CHARS), issues: issues && issues.length > 0 ? issues : undefined };
}

/** `Retry-After` (seconds or an HTTP date) → whole seconds, at least 1; undefined when absent or unreadable. */
export function retryAfterSeconds(value: string | string[] | undefined): number | undefined {
  const v = Array.isArray(value) ? value[0] : value;
  if (!v) return undefined;
  if (/^\d+$/.test(v.trim())) return Math.max(1, Number(v.trim()));
  const at = Date.parse(v);
  return Number.isNaN(at) ? undefined : Math.max(1, Math.ceil((at - Date.now()) / 1000));
}

/**
 * An upstream's non-2xx answer → our error (DESIGN §3 Errors: engine failures are not charged):
 * the caller's mistakes (400, 404 of a path param, 409, 413, 422) → 400 with the upstream's detail;
 * 429 → 429 with its `Retry-After`; 408 and 504 → 504; our own credentials or credit refused
 * there (401, 402, 403) and 503 → 503; other 5xx and anything else → 502. Upstream details of
 * server-side failures are not passed on (they describe the upstream, not the request).
 */
export function errorForStatus(status: number, bodyText: string, retryAfter?: number): AppError {
  if (status === 429) {
    const { detail } = upstreamErrorDetail(bodyText);
    return new AppError(ErrorCode.RateLimited, `The upstream engine is busy: ${detail}`, undefined, retryAfter ?? 1);
  }
  if (status === 408 || status === 504) {
    return new AppError(ErrorCode.EngineTimeout, `The upstream engine timed out (HTTP ${status})`);
  }
  if (status === 401 || status === 402 || status === 403) {
    return new AppError(ErrorCode.EngineUnavailable, `The upstream engine refused this service (HTTP ${status})`);
  }
  if (status === 503) {
    return new AppError(
      ErrorCode.EngineUnavailable,
      "The upstream engine is unavailable (HTTP 503)",
      undefined,
      retryAfter ?? 5,
    );
  }
  if (status >= 400 && status < 500 && status !== 404) {
    const { detail, issues } = upstreamErrorDetail(bodyText);
    return AppError.invalid(detail || `The upstream engine refused the request (HTTP ${status})`, issues);
  }
  if (status === 404) {
    // Most often the upstream does not (or no longer) serve the model: not the caller's mistake.
    return new AppError(ErrorCode.EngineUnavailable, "The upstream engine does not serve this model (HTTP 404)");
  }
  return new AppError(ErrorCode.EngineFailure, `The upstream engine failed (HTTP ${status})`);
}

/**
 * Decoders of streams that ended, for the next stream: a streaming `TextDecoder` opens an ICU
 * converter on its first use, per request otherwise (issue 30, item 3). A flushed decoder is as new.
 */
const spareDecoders: TextDecoder[] = [];
/** Most spare decoders kept. */
const MAX_SPARE_DECODERS = 64;

/**
 * Splits a `text/event-stream` body into the `data` of each event (`data:` lines joined by
 * newlines), across chunk boundaries; comments, `event:` and `id:` lines are skipped.
 */
export class SseDecoder {
  private decoder: TextDecoder | undefined;
  private buffer = "";
  private data: string[] = [];

  /** Feeds one body chunk; returns the data of every event it completed. */
  push(chunk: Uint8Array): string[] {
    this.decoder ??= spareDecoders.pop() ?? new TextDecoder();
    this.buffer += this.decoder.decode(chunk, { stream: true });
    const events: string[] = [];
    let start = 0;
    for (let nl = this.buffer.indexOf("\n", start); nl >= 0; nl = this.buffer.indexOf("\n", start)) {
      let line = this.buffer.slice(start, nl);
      start = nl + 1;
      if (line.endsWith("\r")) line = line.slice(0, -1);
      if (line === "") {
        if (this.data.length > 0) events.push(this.data.join("\n"));
        this.data = [];
      } else if (line.startsWith("data:")) {
        this.data.push(line.slice(line[5] === " " ? 6 : 5));
      }
    }
    this.buffer = this.buffer.slice(start);
    return events;
  }

  /**
   * The last event when the body ended without its blank line. The decoder goes back to the spare
   * ones, flushed (an incomplete character at the very end is dropped, as it always was).
   */
  end(): string[] {
    const events = this.push(new Uint8Array());
    const line = this.buffer.replace(/\r$/, "");
    if (line.startsWith("data:")) this.data.push(line.slice(line[5] === " " ? 6 : 5));
    this.buffer = "";
    if (this.data.length > 0) events.push(this.data.join("\n"));
    this.data = [];
    const decoder = this.decoder;
    this.decoder = undefined;
    if (decoder && spareDecoders.length < MAX_SPARE_DECODERS) {
      decoder.decode();
      spareDecoders.push(decoder);
    }
    return events;
  }
}

/**
 * The entries of the tokens `text` is made of, when a stop string matched here cut the upstream's
 * answer (an upstream that ignores `stop`): up to the one whose bytes reach the text's end.
 */
export function logprobsUpTo(logprobs: TokenLogprob[], text: string): TokenLogprob[] {
  const end = Buffer.byteLength(text, "utf8");
  let count = 0;
  for (let bytes = 0; count < logprobs.length && bytes < end; count++) bytes += logprobs[count].bytes.length;
  return logprobs.slice(0, count);
}
