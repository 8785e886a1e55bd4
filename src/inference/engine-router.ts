/**
 * Routes each catalog model to the engine that serves it, by the catalog entry's `engine.type`.
 * Later engines (upstream OpenAI-compatible servers, dedicated deployments) register here.
 */
import type { CatalogModel } from "../config/catalog.js";
import type { InferenceEngine } from "./engine.js";

/** Maps catalog models to engine instances by `engine.type`. */
export class EngineRouter {
  constructor(private readonly engines: Record<CatalogModel["engine"]["type"], InferenceEngine>) {}

  /** The engine for `model`. */
  engineFor(model: CatalogModel): InferenceEngine {
    return this.engines[model.engine.type];
  }

  /** Loads every model (files, contexts) so the first request does not pay for it. */
  async loadAll(models: CatalogModel[]): Promise<void> {
    for (const model of models) await this.engineFor(model).load(model);
  }

  isLoaded(model: CatalogModel): boolean {
    return this.engineFor(model).isLoaded(model);
  }

  async close(): Promise<void> {
    for (const engine of new Set(Object.values(this.engines))) await engine.close();
  }
}
