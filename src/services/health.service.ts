/**
 * Health probes (spec: Health): liveness always answers; readiness checks the database, the
 * migrations and the default engine model (503 with the envelope otherwise).
 */
import type { DataSource } from "typeorm";
import type { EngineRouter } from "../inference/engine-router.js";
import { AppError, ErrorCode } from "../shared/errors.js";
import type { ModelCatalogService } from "./model-catalog.service.js";

/** Liveness and readiness (spec: Health). */
export class HealthService {
  /** Set once every migration was seen applied (they are only added at deploys, which restart). */
  private migrated = false;

  constructor(
    private readonly ds: DataSource,
    private readonly engines: EngineRouter,
    private readonly catalog: ModelCatalogService,
  ) {}

  /** Liveness: the process serves HTTP. */
  live(): Record<string, string> {
    return { status: "ok" };
  }

  /**
   * Readiness: `{status: "ready", database, migrations, engine}`, each `ok`.
   * @throws AppError 503 whose `extra` says which check failed.
   */
  async ready(): Promise<Record<string, string>> {
    const checks: Record<string, string> = { database: "ok", migrations: "ok", engine: "ok" };
    try {
      await this.ds.query("SELECT 1");
      if (!this.migrated) {
        if (await this.ds.showMigrations()) checks.migrations = "pending";
        else this.migrated = true;
      }
    } catch {
      checks.database = "unreachable";
      checks.migrations = "unknown";
    }
    const defaultModel = this.catalog.defaultModel();
    // Issue 17: a default model whose file is not here will not load by waiting.
    if (this.catalog.unavailable(defaultModel)) checks.engine = "not_downloaded";
    else if (!this.engines.isLoaded(defaultModel)) checks.engine = "loading";
    const failed = Object.entries(checks).filter(([, v]) => v !== "ok");
    if (failed.length > 0) throw new AppError(ErrorCode.EngineUnavailable, "Service not ready", checks, 5);
    return { status: "ready", ...checks };
  }
}
