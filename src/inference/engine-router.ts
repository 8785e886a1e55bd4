/**
 * Routes each catalog model to the engine that serves it, by the catalog entry's `engine.type`:
 * `llama_cpp` (the embedded engine) or `openai_compatible` (upstream servers, issue 9 item 3). An
 * engine type with no engine registered on this server is refused with a reason
 * (EngineUnavailable), which the deployment reconciler records as a deployment's `status_reason`.
 */
import type { CatalogModel, EngineSpec } from "../config/catalog.js";
import { AppError, ErrorCode } from "../shared/errors.js";
import type { InferenceEngine } from "./engine.js";

/** Maps catalog models to engine instances by `engine.type`. */
export class EngineRouter {
  constructor(private readonly engines: Partial<Record<EngineSpec["type"], InferenceEngine>>) {}

  /**
   * The engine for `model`.
   * @throws AppError EngineUnavailable when no engine of the model's type is registered.
   */
  engineFor(model: CatalogModel): InferenceEngine {
    const engine = this.engines[model.engine.type];
    if (!engine) {
      throw new AppError(
        ErrorCode.EngineUnavailable,
        `No ${model.engine.type} engine is configured on this server to serve model '${model.id}'`,
      );
    }
    return engine;
  }

  /**
   * Loads every model (files, contexts; upstream endpoints probed) so the first request does not
   * pay for it. A model whose engine is unavailable for now (an upstream that is down: AppError
   * EngineUnavailable) goes to `onUnavailable` when given, and the others still load; that model
   * answers 503 until its engine is back.
   * @throws what a load throws otherwise (a missing model file: ConfigError).
   */
  async loadAll(models: CatalogModel[], onUnavailable?: (model: CatalogModel, err: AppError) => void): Promise<void> {
    for (const model of models) {
      try {
        await this.engineFor(model).load(model);
      } catch (err) {
        if (!onUnavailable || !(err instanceof AppError) || err.code !== ErrorCode.EngineUnavailable) throw err;
        onUnavailable(model, err);
      }
    }
  }

  isLoaded(model: CatalogModel): boolean {
    return this.engineFor(model).isLoaded(model);
  }

  /**
   * Releases a dedicated runtime (`model.runtime`; see `InferenceEngine.unload`) once its
   * requests in flight are done; nothing for an engine type that is not registered here.
   */
  async unload(model: CatalogModel): Promise<void> {
    const engine = this.engines[model.engine.type];
    await engine?.unload?.(model);
  }

  async close(): Promise<void> {
    for (const engine of new Set(Object.values(this.engines))) await engine?.close();
  }
}
