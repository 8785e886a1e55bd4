/**
 * Chat completions upstream (see `openai-compatible.engine.ts`): what a request reserves and the
 * `max_tokens` it sends (`completionBudget`), always streamed from the upstream (`readStream`),
 * with the caller's stop strings matched here too and the usage the upstream reports, else an
 * estimate that never counts less than the upstream may have processed.
 */
import type { Dispatcher } from "undici";
import { AppError, ErrorCode } from "../../../shared/errors.js";
import type { EngineUsage, FinishReason, GenerateRequest, GenerateResult, TokenLogprob } from "../../engine.js";
import { StopSequenceFilter } from "../../stop-sequences.js";
import type { UpstreamClient } from "./dispatch.js";
import type { UpstreamEndpoint } from "./endpoint.js";
import type { Route } from "./loading.js";
import {
  SseDecoder,
  chatBody,
  errorForStatus,
  finishReason,
  matchedStop,
  logprobsUpTo,
  parseLogprobs,
  parseUsage,
  promptTokenBound,
} from "./wire.js";
import { TOOLS_TEMPLATE_TOKENS, ToolCallAssembler, toolPromptText } from "./tool-wire.js";

/** Chat-template tokens allowed per message over an exact text count (role markers, separators). */
const EXACT_MESSAGE_OVERHEAD_TOKENS = 8;
/** Chat-template tokens allowed once over an exact text count (the generation prompt, BOS). */
const EXACT_TEMPLATE_OVERHEAD_TOKENS = 16;

/**
 * One chat completion upstream (`POST <base>/chat/completions`, always `stream: true` with
 * `stream_options.include_usage`; text goes to `onText` when it is set). Tools and tool turns go
 * as OpenAI's `tools` / `tool_choice` / `tool_calls` and the streamed call fragments come back as
 * `toolCalls` (`tool-wire.ts`). Caller stop strings go upstream and are
 * also matched here (an upstream that ignores them is cut at the first one); `stop_sequence` is
 * reported when either side says which one matched. An abort closes the upstream connection
 * (the upstream stops generating); a stream cut that way ends `cancelled` with the text so far
 * and the last usage the upstream sent (else an estimate).
 * @throws AppError as `errorForStatus` maps the upstream's refusals; RateLimited when no
 *   endpoint slot frees up within `maxQueueWaitMs`; EngineUnavailable (503) when no endpoint can
 *   be reached; EngineTimeout (504); EngineFailure (502) for a broken answer; the abort reason
 *   (ClientClosed) when the caller left before the answer started.
 */
export async function generate(client: UpstreamClient, req: GenerateRequest): Promise<GenerateResult> {
  const route = client.routes.route(req.model);
  if (req.model.modality === "text_embedding") throw AppError.invalid(`Model ${req.model.id} does not generate text`);
  const { bound, maxTokens } = await completionBudget(client, route, req);
  await req.admit?.(bound, maxTokens ?? req.model.contextTokens);
  // Always streamed upstream, also for a caller who wants one answer (issue 9 review, finding
  // 5): a caller who leaves closes the upstream stream, and the request still records what was
  // generated until then (`readStream`) instead of nothing.
  const body = JSON.stringify(chatBody({ ...req, maxTokens }, route.upstreamModel, true));
  return client.dispatch(route, req, async (endpoint, queueMs) => {
    const started = performance.now();
    const res = await endpoint.pool.request({
      method: "POST",
      path: endpoint.path("chat"),
      headers: endpoint.headers,
      body,
      signal: req.signal,
    });
    if (res.statusCode !== 200) throw await client.refusal(endpoint, res);
    return readStream(client, req, endpoint, res, {
      queueMs,
      started,
      bound,
      exactPrompt: () => exactPromptBound(client, route, req),
    });
  });
}

/**
 * The prompt tokens a request reserves and the `max_tokens` it sends (issue 9 review, finding
 * 4): the reservation must bound what the upstream can charge even when the upstream's context
 * is larger than the catalog's (a custom model's 2048-token default, say), so a `max_tokens`
 * is always sent.
 * - Prompt: the byte bound (`promptTokenBound`, never under the real count, never capped).
 *   From half the context up, the upstream's `/tokenize` count plus the chat template's
 *   allowance (`exactPromptBound`) when it has one — so an answer is not cut short by a byte
 *   bound that over-counts English about 4× —, and a prompt over the context is refused here.
 * - Completion: the caller's `max_tokens`; without one, the rest of the context after the
 *   prompt bound, or the whole context when the bound reaches it and no exact count is known
 *   (an upstream whose context is the catalog's then refuses it as too long: the caller can
 *   name a smaller `max_tokens`).
 * @throws AppError 400 (field `messages`, `context_length_exceeded`) when the exact count is
 *   over the context.
 */
async function completionBudget(
  client: UpstreamClient,
  route: Route,
  req: GenerateRequest,
): Promise<{ bound: number; maxTokens: number }> {
  const context = req.model.contextTokens;
  let bound = promptTokenBound(req.messages, Number.MAX_SAFE_INTEGER) + toolTokenBound(req);
  if (bound >= context / 2) {
    const exact = await exactPromptBound(client, route, req);
    if (exact !== null) {
      bound = exact;
      if (bound >= context) {
        throw AppError.invalid(
          `This model's context is ${context} tokens and the prompt takes about ${bound} with its chat ` +
            `template; shorten the messages`,
          [{ field: "messages", message: "context_length_exceeded" }],
        );
      }
    }
  }
  if (req.maxTokens !== undefined) return { bound, maxTokens: req.maxTokens };
  return { bound, maxTokens: bound < context ? context - bound : context };
}

/**
 * The upstream's `/tokenize` count of the messages' text (and the tools' and history calls' JSON)
 * plus `EXACT_MESSAGE_OVERHEAD_TOKENS` per message, `EXACT_TEMPLATE_OVERHEAD_TOKENS` for the
 * template and `TOOLS_TEMPLATE_TOKENS` with tools; null when no endpoint of the route counts tokens.
 */
async function exactPromptBound(
  client: UpstreamClient,
  route: Route,
  req: Pick<GenerateRequest, "messages" | "tools">,
): Promise<number | null> {
  const tools = toolPromptText(req);
  const text = [...req.messages.map((m) => m.content), ...(tools ? [tools] : [])].join("\n");
  const exact = await client.exactTokens(route, text);
  if (exact === null) return null;
  return (
    exact +
    EXACT_MESSAGE_OVERHEAD_TOKENS * req.messages.length +
    EXACT_TEMPLATE_OVERHEAD_TOKENS +
    (req.tools ? TOOLS_TEMPLATE_TOKENS : 0)
  );
}

/**
 * What the tools and the history's calls add to the byte bound of a prompt (issue 26, item 5:
 * tool definitions count in prompt tokens): a token per byte of their JSON, and
 * `TOOLS_TEMPLATE_TOKENS` for the words a chat template writes around the definitions.
 */
function toolTokenBound(req: Pick<GenerateRequest, "messages" | "tools">): number {
  const text = toolPromptText(req);
  return Buffer.byteLength(text, "utf8") + (req.tools ? TOOLS_TEMPLATE_TOKENS : 0);
}

/**
 * A streamed chat completion: text deltas to `onText` (when set) as they come, usage from the
 * chunk that carries it. The caller's stream opens (`onStart`) once the upstream answered 200;
 * the prompt count it gets then is the admitted bound, the final usage is the upstream's. A
 * caller who leaves ends it `cancelled` with the text so far and the usage the upstream sent,
 * else the prompt's `/tokenize` count or admitted bound and one token per text delta.
 */
async function readStream(
  client: UpstreamClient,
  req: GenerateRequest,
  endpoint: UpstreamEndpoint,
  res: Dispatcher.ResponseData,
  t: { queueMs: number; started: number; bound: number; exactPrompt: () => Promise<number | null> },
): Promise<GenerateResult> {
  const stops = new StopSequenceFilter(req.stop ?? []);
  const decoder = new SseDecoder();
  let text = "";
  let deltas = 0;
  let usage: EngineUsage | null = null;
  const logprobs: TokenLogprob[] = [];
  let sawLogprobs = false;
  let choice: Record<string, unknown> | undefined;
  const calls = new ToolCallAssembler();
  // A forced call's text (the upstream may write some before the call) is sent only once the
  // answer is known to make the call (`GenerateRequest.onText`); other text as it comes (an
  // upstream that reads calls from the model's text holds back their syntax itself).
  const forced = req.tools?.mode.kind === "forced";
  const emit = (chunk: string) => {
    if (!chunk) return;
    text += chunk;
    if (!forced) req.onText?.(chunk);
  };
  const handle = (data: string) => {
    if (data === "[DONE]") return;
    let event: { choices?: Array<Record<string, unknown>>; usage?: unknown; error?: unknown };
    try {
      event = JSON.parse(data) as typeof event;
    } catch {
      throw client.broken(endpoint, "a stream event that is not JSON");
    }
    if (event.error) {
      const code = Number((event.error as { code?: unknown }).code);
      throw errorForStatus(Number.isInteger(code) && code >= 400 && code < 600 ? code : 502, data);
    }
    usage = parseUsage(event.usage) ?? usage;
    const c = event.choices?.[0];
    if (!c) return;
    const lp = req.logprobs ? parseLogprobs(c.logprobs) : null;
    if (lp) {
      sawLogprobs = true;
      logprobs.push(...lp);
    }
    const delta = c.delta as { content?: unknown; tool_calls?: unknown } | undefined;
    if (typeof delta?.content === "string" && delta.content.length > 0) {
      deltas++;
      if (!stops.stopped) emit(stops.push(delta.content));
    }
    if (Array.isArray(delta?.tool_calls)) {
      deltas++;
      calls.push(delta.tool_calls);
    }
    if (c.finish_reason !== null && c.finish_reason !== undefined) choice = c;
  };
  req.onStart?.({ promptTokens: t.bound, cachedPromptTokens: 0, queueMs: t.queueMs });
  // The calls of an answer that ended (one cut short stays what it was: text), each valid, with
  // the text the upstream sent beside them (OpenAI allows `content` and `tool_calls` together).
  // An answer whose calls are all unusable is a broken answer, never an empty one (issue 26
  // review, finding 7); every call when the caller allowed several (`tools.parallel`), else a
  // second call despite `parallel_tool_calls: false` is logged and the first is answered.
  const answeredCalls = (reason: FinishReason): Pick<GenerateResult, "toolCalls" | "callPreamble"> => {
    if (reason !== "stop" || !calls.started) return {};
    const made = calls.finished(req.tools, (call) => client.unusableCall(endpoint, call.name));
    if (made.length === 0)
      throw client.broken(endpoint, "tool calls none of which names an offered tool with JSON-object arguments");
    if (made.length > 1 && !req.tools?.parallel) client.parallelCalls(endpoint, made.length);
    if (forced && text) req.onText?.(text);
    return { toolCalls: req.tools?.parallel ? made : made.slice(0, 1), ...(text ? { callPreamble: text } : {}) };
  };
  const result = (reason: FinishReason, stopSequence: string | null, final: EngineUsage): GenerateResult => ({
    text,
    finishReason: reason,
    stopSequence,
    usage: final,
    engineMs: performance.now() - t.started,
    queueMs: t.queueMs,
    ...(req.logprobs ? { logprobs: stops.stopped ? logprobsUpTo(logprobs, text) : logprobs } : {}),
    ...answeredCalls(reason),
  });
  // Usage the upstream did not send (it comes in the last chunk, so a caller who left mostly
  // gets none): the prompt as the upstream's `/tokenize` counts it, else the admitted bound —
  // never less than the upstream may have processed (issue 9 review) — and a token a delta.
  const estimate = async (): Promise<EngineUsage> => {
    const exact = await t.exactPrompt().catch(() => null);
    return { promptTokens: Math.min(t.bound, exact ?? t.bound), completionTokens: deltas, cachedPromptTokens: 0 };
  };
  try {
    for await (const chunk of res.body) for (const data of decoder.push(chunk as Buffer)) handle(data);
    for (const data of decoder.end()) handle(data);
  } catch (err) {
    // The stream is open: the caller leaving ends it `cancelled` with what was generated.
    if (req.signal?.aborted && !(err instanceof AppError && err.code !== ErrorCode.ClientClosed)) {
      return result("cancelled", null, usage ?? (await estimate()));
    }
    throw err;
  }
  if (!stops.stopped) emit(stops.end());
  // Asked-for log-probabilities the upstream did not send are a broken answer, never left out
  // silently (issue 26, item 6).
  if (req.logprobs && !sawLogprobs && text !== "") {
    throw client.broken(endpoint, "an answer without the log-probabilities it was asked for");
  }
  const { reason, stopSequence } = ending(choice ?? {}, stops, req.stop);
  return result(reason, stopSequence, usage ?? client.noUsage(endpoint, await estimate()));
}

/** How a completion ended: a stop string matched here or named by the upstream, else its `finish_reason`. */
function ending(
  choice: Record<string, unknown>,
  stops: StopSequenceFilter,
  callerStops: string[] | undefined,
): { reason: FinishReason; stopSequence: string | null } {
  if (stops.stopped) return { reason: "stop_sequence", stopSequence: stops.matched };
  const named = matchedStop(choice, callerStops);
  if (named !== null) return { reason: "stop_sequence", stopSequence: named };
  return { reason: finishReason(choice.finish_reason), stopSequence: null };
}
