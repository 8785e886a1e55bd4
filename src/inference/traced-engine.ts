/**
 * An engine as seen by traces (issue 29, item 2): every `generate`, `embed` and
 * `scoreContinuations` is a span named and attributed by the OpenTelemetry GenAI semantic
 * conventions (`chat <model>`, `embeddings <model>`; `gen_ai.operation.name`,
 * `gen_ai.request.model`, `gen_ai.provider.name` and its older name `gen_ai.system`, the sampling
 * parameters, `gen_ai.usage.input_tokens` / `output_tokens`, `gen_ai.response.finish_reasons`),
 * plus the time it waited for a slot and generated. The span is current while the engine works,
 * so the upstream engine sends it as the `traceparent` of its request. The prompt and the answer
 * (`gen_ai.input.messages`, `gen_ai.output.messages`) only where `Tracing.contentAllowed` says so.
 * Everything else passes through (a Proxy, as `measuredEngine`). Installed only when tracing is on.
 */
import type { Attributes } from "@opentelemetry/api";
import { type Span, SpanKind, type Tracing, failSpan, runInScope } from "../shared/tracing.js";
import type {
  ChatMessage,
  EmbedRequest,
  GenerateRequest,
  GenerateResult,
  InferenceEngine,
  ScoreRequest,
} from "./engine.js";

/** `engine` with its calls traced by `tracing`; `engine` itself when tracing is off. */
export function tracedEngine<E extends InferenceEngine>(engine: E, tracing: Tracing): E {
  if (!tracing.enabled) return engine;
  // The hot path (every chat request): one async frame, the span's attributes built once, and
  // the content question (an await) asked only when the operator opted in.
  const generate = async (req: GenerateRequest): Promise<GenerateResult> => {
    const opts = spanOptions(req, "chat");
    addGenerationAttributes(opts.attributes, req);
    const scope = tracing.start(`chat ${req.model.id}`, opts);
    if (!scope) return engine.generate(req);
    const span = scope.span;
    try {
      const result = await runInScope(scope, () => engine.generate(req));
      const usage: Attributes = {
        "gen_ai.usage.input_tokens": result.usage.promptTokens,
        "gen_ai.usage.output_tokens": result.usage.completionTokens,
        "gen_ai.response.finish_reasons": [finishReason(result)],
        "switchyard.engine.queue_ms": result.queueMs,
        "switchyard.engine.ms": result.engineMs,
      };
      if (result.usage.cachedPromptTokens > 0) {
        usage["gen_ai.usage.cache_read.input_tokens"] = result.usage.cachedPromptTokens;
      }
      span.setAttributes(usage);
      if (tracing.recordsContent && (await tracing.contentAllowed(scope.teamId))) {
        recordContent(span, req.messages, result);
      }
      return result;
    } catch (err) {
      failSpan(span, err);
      throw err;
    } finally {
      span.end();
    }
  };
  const embed = (req: EmbedRequest) =>
    tracing.inSpan(
      `embeddings ${req.model.id}`,
      spanOptions(req, "embeddings", { "gen_ai.embeddings.input_count": req.inputs.length }),
      async (span) => {
        const result = await engine.embed(req);
        span?.setAttributes({
          "gen_ai.usage.input_tokens": result.promptTokens,
          "switchyard.engine.queue_ms": result.queueMs,
          "switchyard.engine.ms": result.engineMs,
        });
        return result;
      },
    );
  const score = engine.scoreContinuations
    ? (req: ScoreRequest) =>
        tracing.inSpan(
          `score ${req.model.id}`,
          spanOptions(req, "score", { "switchyard.score.questions": req.questions.length }),
          async (span) => {
            const result = await engine.scoreContinuations!(req);
            span?.setAttributes({
              "gen_ai.usage.input_tokens": result.promptTokens,
              "switchyard.engine.queue_ms": result.queueMs,
              "switchyard.engine.ms": result.engineMs,
            });
            return result;
          },
        )
    : undefined;
  return new Proxy(engine, {
    get(target, prop) {
      if (prop === "generate") return generate;
      if (prop === "embed") return embed;
      if (prop === "scoreContinuations") return score;
      const value: unknown = Reflect.get(target, prop, target);
      return typeof value === "function" ? (value as (...a: unknown[]) => unknown).bind(target) : value;
    },
  });
}

/**
 * The span options shared by every operation: kind (a remote upstream is a client call), model,
 * provider, and batch priority. The team is on the request's or job's span (`traceTeam`).
 */
function spanOptions(
  req: GenerateRequest | EmbedRequest | ScoreRequest,
  operation: string,
  extra?: Attributes,
): { kind: SpanKind; attributes: Attributes } {
  const provider = req.model.engine.type;
  const attributes: Attributes = {
    "gen_ai.operation.name": operation,
    "gen_ai.request.model": req.model.id,
    "gen_ai.provider.name": provider,
    "gen_ai.system": provider,
    ...extra,
  };
  if (req.priority === "batch") attributes["switchyard.priority"] = "batch";
  return { kind: provider === "openai_compatible" ? SpanKind.CLIENT : SpanKind.INTERNAL, attributes };
}

/** Adds the request's sampling parameters to `out`, as the conventions name them (absent ones left out). */
function addGenerationAttributes(out: Attributes, req: GenerateRequest): void {
  if (req.responseFormat) out["gen_ai.output.type"] = "json";
  if (req.maxTokens !== undefined) out["gen_ai.request.max_tokens"] = req.maxTokens;
  if (req.temperature !== undefined) out["gen_ai.request.temperature"] = req.temperature;
  if (req.topP !== undefined) out["gen_ai.request.top_p"] = req.topP;
  if (req.topK !== undefined) out["gen_ai.request.top_k"] = req.topK;
  if (req.seed !== undefined) out["gen_ai.request.seed"] = req.seed;
  if (req.frequencyPenalty !== undefined) out["gen_ai.request.frequency_penalty"] = req.frequencyPenalty;
  if (req.presencePenalty !== undefined) out["gen_ai.request.presence_penalty"] = req.presencePenalty;
}

/** The finish reason in OpenAI's words (what the API answers): `stop`, `length`, `tool_calls`, `cancelled`. */
function finishReason(result: GenerateResult): string {
  if (result.toolCalls?.length) return "tool_calls";
  return result.finishReason === "stop_sequence" ? "stop" : result.finishReason;
}

/** The prompt and the answer as the conventions' message lists (JSON text attributes). */
function recordContent(span: Span, messages: ChatMessage[], result: GenerateResult): void {
  const input = messages.map((m) => ({ role: m.role, parts: [{ type: "text", content: m.content }] }));
  const parts: unknown[] = [];
  const text = result.toolCalls?.length ? result.callPreamble : result.text;
  if (text) parts.push({ type: "text", content: text });
  for (const call of result.toolCalls ?? []) {
    parts.push({ type: "tool_call", id: call.id, name: call.name, arguments: call.arguments });
  }
  span.setAttributes({
    "gen_ai.input.messages": JSON.stringify(input),
    "gen_ai.output.messages": JSON.stringify([{ role: "assistant", parts, finish_reason: finishReason(result) }]),
  });
}
