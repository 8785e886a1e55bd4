/**
 * Health probes (spec: Health): liveness always answers; readiness checks the database, the
 * migrations and the embedded engine's models (503 with the envelope otherwise).
 */
import type { DataSource } from "typeorm";
import type { EngineRouter } from "../../inference/engine-router.js";
import { AppError, ErrorCode } from "../../shared/errors.js";
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
    checks.engine = this.engineCheck();
    const failed = Object.entries(checks).filter(([, v]) => v !== "ok");
    if (failed.length > 0) throw new AppError(ErrorCode.EngineUnavailable, "Service not ready", checks, 5);
    return { status: "ready", ...checks };
  }

  /**
   * The engine check (review of issue 17, finding 6): `ok` when a platform model of the embedded
   * engine whose file is here has loaded (the start loads them all before it listens), or when
   * the catalog has none; `not_downloaded` when none of their files is here (waiting will not
   * help: `npm run models -- pull`); `loading` otherwise. Models whose file is absent are "not
   * downloaded" in the catalog, not a readiness failure, whichever is the default model.
   */
  private engineCheck(): string {
    const embedded = this.catalog
      .all()
      .filter((m) => m.engine.type === "llama_cpp" && m.platformStatus !== "coming_soon");
    if (embedded.length === 0) return "ok";
    const usable = embedded.filter((m) => this.catalog.unavailable(m) === undefined);
    if (usable.length === 0) return "not_downloaded";
    return usable.some((m) => this.engines.isLoaded(m)) ? "ok" : "loading";
  }
}
