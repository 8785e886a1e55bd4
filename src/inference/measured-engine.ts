/**
 * An engine as seen by the metrics (issue 13, item 4): every `generate` and `embed` observes its
 * queue wait, engine time and tokens by model, and a generation its tokens/s (`shared/metrics.ts`). Everything else, including
 * operations added to `InferenceEngine` later, passes through untouched (a Proxy, so the wrapped
 * engine keeps its class for `instanceof`).
 */
import { AppError, statusForCode } from "../shared/errors.js";
import type { Metrics } from "../shared/metrics.js";
import type { EmbedRequest, GenerateRequest, InferenceEngine } from "./engine.js";

/** `engine` with its requests observed in `metrics`. */
export function measuredEngine<E extends InferenceEngine>(engine: E, metrics: Metrics): E {
  const generate = async (req: GenerateRequest) => {
    const labels = { model: req.model.id, operation: "generate" };
    try {
      const result = await engine.generate(req);
      metrics.engineQueueWait.observe(labels, result.queueMs / 1000);
      metrics.engineSeconds.inc(labels, result.engineMs / 1000);
      metrics.enginePromptTokens.inc(labels, result.usage.promptTokens);
      metrics.engineCompletionTokens.inc(labels, result.usage.completionTokens);
      if (result.engineMs > 0 && result.usage.completionTokens > 0)
        metrics.engineTokensPerSecond.observe(
          { model: req.model.id },
          result.usage.completionTokens / (result.engineMs / 1000),
        );
      metrics.engineRequests.inc({ ...labels, outcome: result.finishReason === "cancelled" ? "cancelled" : "ok" });
      return result;
    } catch (err) {
      metrics.engineRequests.inc({ ...labels, outcome: outcome(err) });
      throw err;
    }
  };
  const embed = async (req: EmbedRequest) => {
    const labels = { model: req.model.id, operation: "embed" };
    try {
      const result = await engine.embed(req);
      metrics.engineQueueWait.observe(labels, result.queueMs / 1000);
      metrics.engineSeconds.inc(labels, result.engineMs / 1000);
      metrics.enginePromptTokens.inc(labels, result.promptTokens);
      metrics.engineRequests.inc({ ...labels, outcome: "ok" });
      return result;
    } catch (err) {
      metrics.engineRequests.inc({ ...labels, outcome: outcome(err) });
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
