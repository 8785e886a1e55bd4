/**
 * Health probes (spec: Health): liveness always answers; readiness checks the database, the
 * migrations and the embedded engine's models (503 with the envelope otherwise).
 *
 * Quiet logs (issue 27, item 4): a probe is polled every few seconds, so readiness logs only
 * when its state changes — one WARN naming the failed checks when it becomes not ready or the
 * reason changes, one INFO when it is ready again — and never a stack trace (the REST route
 * answers the 503 without the error middleware's 5xx line).
 */
import type { Logger } from "pino";
import type { DataSource } from "typeorm";
import type { EngineRouter } from "../../inference/engine-router.js";
import type { DatabaseAvailability } from "../../shared/database-errors.js";
import { AppError, ErrorCode } from "../../shared/errors.js";
import type { ModelCatalogService } from "./model-catalog.service.js";

/** Liveness and readiness (spec: Health). */
export class HealthService {
  /** Set once every migration was seen applied (they are only added at deploys, which restart). */
  private migrated = false;
  /** The last readiness state seen: `ready`, the failed checks, or undefined before the first probe. */
  private lastState: string | undefined;

  constructor(
    private readonly ds: DataSource,
    private readonly engines: EngineRouter,
    private readonly catalog: ModelCatalogService,
    /** Where a change of readiness is logged (see the module header). */
    private readonly logger?: Pick<Logger, "warn" | "info">,
    /**
     * The database circuit (issue 28, item 1): while it refuses, the database is unreachable
     * without asking it, so readiness says what every other request is answered.
     */
    private readonly database?: DatabaseAvailability,
  ) {}

  /** Liveness: the process serves HTTP. */
  live(): Record<string, string> {
    return { status: "ok" };
  }

  /**
   * Readiness: `{status: "ready", database, migrations, engine}`, each `ok`. Logs a change of
   * state once (see the module header).
   * @throws AppError 503 whose `extra` says which check failed.
   */
  async ready(): Promise<Record<string, string>> {
    const checks: Record<string, string> = { database: "ok", migrations: "ok", engine: "ok" };
    try {
      const refused = this.database?.refusal();
      if (refused) throw refused;
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
    this.noteState(failed);
    if (failed.length > 0) throw new AppError(ErrorCode.EngineUnavailable, "Service not ready", checks, 5);
    return { status: "ready", ...checks };
  }

  /** Logs a readiness change: WARN when not ready (or for another reason), INFO when ready again. */
  private noteState(failed: Array<[string, string]>): void {
    const state = failed.length === 0 ? "ready" : failed.map(([k, v]) => `${k} ${v}`).join(", ");
    if (state === this.lastState) return;
    const previous = this.lastState;
    this.lastState = state;
    if (failed.length === 0) {
      if (previous !== undefined) this.logger?.info({ readiness: "ready" }, "ready again");
      return;
    }
    const hint = failed.some(([k, v]) => k === "engine" && v === "not_downloaded")
      ? ": no model file of the embedded engine is here (npm run models -- list, then pull one)"
      : "";
    this.logger?.warn({ readiness: "not ready", checks: Object.fromEntries(failed) }, `not ready: ${state}${hint}`);
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
