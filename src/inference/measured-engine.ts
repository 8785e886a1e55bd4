/**
 * An engine as seen by the metrics (issue 13, item 4): every `generate` and `embed` observes its
 * queue wait, engine time and tokens by model, and a generation its tokens/s (`shared/metrics.ts`). Everything else, including
 * operations added to `InferenceEngine` later, passes through untouched (a Proxy, so the wrapped
 * engine keeps its class for `instanceof`).
 */
import { AppError, statusForCode } from "../shared/errors.js";
import type { Metrics } from "../shared/metrics.js";
import { SeriesCache } from "../shared/lean-metrics.js";
import type { EmbedRequest, GenerateRequest, InferenceEngine } from "./engine.js";

/** `engine` with its requests observed in `metrics`. */
export function measuredEngine<E extends InferenceEngine>(engine: E, metrics: Metrics): E {
  // The series of a model and operation, looked up once (issue 30, item 3: no label hashing per request).
  const series = new SeriesCache<ReturnType<typeof seriesOf>>();
  const seriesOf = (model: string, operation: "generate" | "embed") => {
    const labels = { model, operation };
    const outcomes = new SeriesCache<(n?: number) => void>();
    return {
      queueWait: metrics.engineQueueWait.child(labels),
      seconds: metrics.engineSeconds.child(labels),
      promptTokens: metrics.enginePromptTokens.child(labels),
      completionTokens: metrics.engineCompletionTokens.child(labels),
      tokensPerSecond: metrics.engineTokensPerSecond.child({ model }),
      requests: (outcome: string) =>
        outcomes.get(outcome, () => metrics.engineRequests.child({ ...labels, outcome }))(),
    };
  };
  const measured = (model: string, operation: "generate" | "embed") =>
    series.get(`${operation} ${model}`, () => seriesOf(model, operation));
  const generate = async (req: GenerateRequest) => {
    const m = measured(req.model.id, "generate");
    try {
      const result = await engine.generate(req);
      m.queueWait(result.queueMs / 1000);
      m.seconds(result.engineMs / 1000);
      m.promptTokens(result.usage.promptTokens);
      m.completionTokens(result.usage.completionTokens);
      if (result.engineMs > 0 && result.usage.completionTokens > 0)
        m.tokensPerSecond(result.usage.completionTokens / (result.engineMs / 1000));
      m.requests(result.finishReason === "cancelled" ? "cancelled" : "ok");
      return result;
    } catch (err) {
      m.requests(outcome(err));
      throw err;
    }
  };
  const embed = async (req: EmbedRequest) => {
    const m = measured(req.model.id, "embed");
    try {
      const result = await engine.embed(req);
      m.queueWait(result.queueMs / 1000);
      m.seconds(result.engineMs / 1000);
      m.promptTokens(result.promptTokens);
      m.requests("ok");
      return result;
    } catch (err) {
      m.requests(outcome(err));
      throw err;
    }
  };
  return new Proxy(engine, {
    get(target, prop) {
      if (prop === "generate") return generate;
      if (prop === "embed") return embed;
      const value: unknown = Reflect.get(target, prop, target);
      return typeof value === "function" ? (value as (...a: unknown[]) => unknown).bind(target) : value;
    },
  });
}

/** `refused` for the caller's errors and rate limits, `error` for the engine's. */
function outcome(err: unknown): string {
  if (!(err instanceof AppError)) return "error";
  const status = statusForCode(err.code);
  return status === 499 ? "cancelled" : status < 500 ? "refused" : "error";
}
