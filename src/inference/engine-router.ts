/**
 * Routes each catalog model to the engine that serves it, by the catalog entry's `engine.type`:
 * `llama_cpp` (the embedded engine) or `openai_compatible` (upstream servers, issue 9 item 3).
 */
import type { CatalogModel } from "../config/catalog.js";
import { AppError, ErrorCode } from "../shared/errors.js";
import type { InferenceEngine } from "./engine.js";

/** Maps catalog models to engine instances by `engine.type`. */
export class EngineRouter {
  constructor(private readonly engines: Record<CatalogModel["engine"]["type"], InferenceEngine>) {}

  /** The engine for `model`. */
  engineFor(model: CatalogModel): InferenceEngine {
    return this.engines[model.engine.type];
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

  async close(): Promise<void> {
    for (const engine of new Set(Object.values(this.engines))) await engine.close();
  }
}
