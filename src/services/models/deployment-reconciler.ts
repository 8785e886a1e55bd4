/**
 * The deployment reconciler (issue 9; DESIGN §3 "Models and deployments"): brings deployments and
 * requested custom models up through the engine interface and moves them
 * `pending_deploy` → `deploying` → `available` (`activated_at` set) | `failed` (`status_reason`:
 * the engine's error) | `rejected` (the model is unknown or cannot be deployed at all: not in
 * the catalog, `coming_soon` or `deprecated`, or no such custom model in the team).
 *
 * Runs in worker processes: woken by the `deployment-reconcile` job that creates and deployment
 * requests send in their transaction, and every `reconcileIntervalMs` as a fallback. Safe with any
 * number of workers: each row is claimed in its own short transaction (`FOR UPDATE SKIP LOCKED`,
 * then `deploying` with a lease, committed, so `deploying` is visible while the model loads) and
 * the lease is renewed while the engine loads; a row left `deploying` by a dead process is claimed
 * again once its lease runs out (after a restart too). A process that is stopping leaves what it
 * was loading to that lease. When the row was deleted while its model loaded, what was loaded is
 * released again.
 *
 * "Bringing up" is `engines.engineFor(model).load(model)`: the embedded engine loads the GGUF
 * into a runtime of the deployment's own (`max(1, min_replicas)` sequences, at most
 * `deploymentMaxSlots`); an upstream engine finds a healthy endpoint serving the model. The
 * process that made a row available has its runtime loaded; others load it when they learn of it
 * (`TeamModelDirectory`). Error texts are stored with the server's folders replaced by names.
 */
import type { Logger } from "pino";
import type { DataSource } from "typeorm";
import type { CatalogModel, EngineSpec } from "../../config/catalog.js";
import { queryRows } from "../../db/sql.js";
import { CustomModelEntity } from "../../entities/custom-model.entity.js";
import { DeploymentEntity } from "../../entities/deployment.entity.js";
import type { EngineRouter } from "../../inference/engine-router.js";
import { findLocalModelFile } from "../../inference/artifacts/model-files.js";
import { AppError } from "../../shared/errors.js";
import type { CacheBus } from "../platform/cache-bus.js";
import {
  type PlatformModels,
  customCatalogModel,
  customEngine,
  customRuntime,
  deploymentRuntime,
} from "./model-sources.js";
import { TEAM_MODELS_TOPIC, type CustomModelSlots, type TeamModelDirectory } from "./team-models.js";

export interface ReconcilerOptions {
  /** How often to look for due rows without being woken, ms. */
  intervalMs: number;
  /** Most slots one deployment may take in the embedded engine (config `deploymentMaxSlots`). */
  maxSlots: number;
  /**
   * Most slots every team's dedicated runtimes take in the embedded engine together (config
   * `dedicatedSlots`): each process loads them all, so this bounds its memory.
   */
  dedicatedSlots: number;
  /** Most of those slots one team's runtimes take (config `teamDedicatedSlots`). */
  teamDedicatedSlots: number;
  /** Slots of a requested custom model's runtime. */
  customSlots: CustomModelSlots;
  /** Where local GGUF files are looked up (as the embedded engine does). */
  modelsDir?: string;
  dataDir: string;
  /** How long a claim lasts without renewal, seconds (renewed every third of it while loading). */
  leaseS?: number;
}

/** What the reconciler decided for a row before loading anything. */
type Plan =
  | { kind: "reject"; reason: string }
  | { kind: "fail"; reason: string }
  | { kind: "load"; model: CatalogModel; engine: EngineSpec | null };

type Table = "deployments" | "custom_models";

const DEFAULT_LEASE_S = 60;
/** Longest `status_reason` stored, characters. */
const MAX_REASON_CHARS = 1000;

/** Moves deployments and requested custom models through their states (see the module header). */
export class DeploymentReconciler {
  private timer?: NodeJS.Timeout;
  private running?: Promise<void>;
  private again = false;
  private stopped = false;
  private readonly leaseS: number;

  constructor(
    private readonly ds: DataSource,
    private readonly bus: CacheBus,
    private readonly engines: EngineRouter,
    private readonly platform: PlatformModels,
    private readonly directory: TeamModelDirectory,
    private readonly logger: Logger,
    private readonly opts: ReconcilerOptions,
  ) {
    this.leaseS = opts.leaseS ?? DEFAULT_LEASE_S;
  }

  /** Sweeps now and every `intervalMs` (worker processes). */
  start(): void {
    this.timer = setInterval(() => void this.sweep().catch((err) => this.logSweepError(err)), this.opts.intervalMs);
    this.timer.unref();
    void this.sweep().catch((err) => this.logSweepError(err));
  }

  /** Stops sweeping; waits for the row being handled (a load in progress is left to its lease). */
  async stop(): Promise<void> {
    this.stopped = true;
    clearInterval(this.timer);
    await this.running?.catch(() => undefined);
  }

  /**
   * Handles every due row, one at a time, until none is left. A call while a sweep runs makes
   * that sweep look once more, and resolves with it.
   * @throws the database's error (the job is retried).
   */
  sweep(): Promise<void> {
    if (this.running) {
      this.again = true;
      return this.running;
    }
    this.running = (async () => {
      try {
        do {
          this.again = false;
          while (!this.stopped && ((await this.next("deployments")) || (await this.next("custom_models")))) {
            // one row handled; look for the next
          }
        } while (this.again && !this.stopped);
      } finally {
        this.running = undefined;
      }
    })();
    return this.running;
  }

  private logSweepError(err: unknown): void {
    this.logger.warn({ err }, "deployment reconciler sweep failed");
  }

  /** Claims and handles one due row of `table`; false when none was due. */
  private async next(table: Table): Promise<boolean> {
    const due =
      table === "deployments"
        ? `status = 'pending_deploy' OR (status = 'deploying' AND lease_expires_at < now())`
        : `deployment_requested_at IS NOT NULL
           AND (deploy_status = 'pending_deploy' OR (deploy_status = 'deploying' AND lease_expires_at < now()))`;
    const status = table === "deployments" ? "status" : "deploy_status";
    const order = table === "deployments" ? "created_at" : "deployment_requested_at";
    const [claimed] = await queryRows<{ id: string }>(
      this.ds,
      `UPDATE ${table}
          SET ${status} = 'deploying', status_reason = NULL, updated_at = now(),
              lease_expires_at = now() + make_interval(secs => $1)
        WHERE id = (SELECT id FROM ${table} WHERE ${due} ORDER BY ${order} LIMIT 1 FOR UPDATE SKIP LOCKED)
        RETURNING id`,
      [this.leaseS],
    );
    if (!claimed) return false;
    const plan =
      table === "deployments" ? await this.planDeployment(claimed.id) : await this.planCustomModel(claimed.id);
    if (plan) await this.carryOut(table, claimed.id, plan);
    return true;
  }

  private async planDeployment(id: string): Promise<Plan | null> {
    const d = await this.ds.getRepository(DeploymentEntity).findOneBy({ id });
    if (!d) return null;
    let model: CatalogModel;
    let engine: EngineSpec | null = null;
    if (d.modelSource === "platform") {
      const m = this.platform.get(d.modelId);
      if (!m) return { kind: "reject", reason: `Model '${d.modelId}' is not in the platform catalog` };
      if (m.platformStatus === "coming_soon") {
        return { kind: "reject", reason: `Model '${d.modelId}' is not available yet (coming_soon)` };
      }
      if (m.platformStatus === "deprecated") {
        return { kind: "reject", reason: `Model '${d.modelId}' is deprecated and takes no new deployments` };
      }
      model = { ...m, runtime: deploymentRuntime(d) };
    } else {
      const row = await this.ds.getRepository(CustomModelEntity).findOneBy({ teamId: d.teamId, modelId: d.modelId });
      // Refused at create since issue 28 (item 5); rows made before that still end here.
      if (!row) return { kind: "reject", reason: `The team has no custom model '${d.modelId}'` };
      engine = customEngine(row, this.platform, (file) => this.hasLocalFile(file));
      const refused = this.notServable(row, engine);
      if (refused) return refused;
      model = customCatalogModel(row, this.platform, engine, deploymentRuntime(d));
    }
    const slots = model.runtime!.slots;
    if (model.engine.type === "llama_cpp" && slots > this.opts.maxSlots) {
      return {
        kind: "fail",
        reason:
          `min_replicas ${d.minReplicas} asks for ${slots} parallel sequences; this server loads at most ` +
          `${this.opts.maxSlots} per deployment (SWITCHYARD_DEPLOYMENT_MAX_SLOTS)`,
      };
    }
    return (await this.overBudget("deployments", d.id, d.teamId, model)) ?? { kind: "load", model, engine };
  }

  private async planCustomModel(id: string): Promise<Plan | null> {
    const row = await this.ds.getRepository(CustomModelEntity).findOneBy({ id });
    if (!row) return null;
    const engine = customEngine(row, this.platform, (file) => this.hasLocalFile(file));
    const refused = this.notServable(row, engine);
    if (refused) return refused;
    const slots =
      row.modality === "text_embedding" ? this.opts.customSlots.embedding : this.opts.customSlots.generation;
    const model = customCatalogModel(row, this.platform, engine, customRuntime(row, slots));
    return (await this.overBudget("custom_models", row.id, row.teamId, model)) ?? { kind: "load", model, engine };
  }

  /**
   * A `reject` plan for a custom model that runs the weights of a platform model the platform
   * does not serve now (`coming_soon`) or takes no new bring-ups of (`deprecated`), as a
   * deployment of that platform model would be (issue 9 review: a custom model is no way around
   * a platform model's status); null otherwise.
   */
  private notServable(row: CustomModelEntity, engine: EngineSpec): Plan | null {
    const same = this.platform.runningSame(engine, row.modality, row.modelId);
    if (!same || same.platformStatus === "available") return null;
    return {
      kind: "reject",
      reason: `It runs the weights of platform model '${same.id}', which is ${same.platformStatus} and takes no new deployments`,
    };
  }

  /**
   * A `fail` plan when loading `model`'s dedicated runtime in the embedded engine would take the
   * slots of every dedicated runtime beyond `dedicatedSlots`, or the team's beyond
   * `teamDedicatedSlots` (issue 9 review, finding 2: one team cannot take them all); null when
   * it fits or runs elsewhere. Counts the other rows `available` or `deploying` (a deploying one
   * whose engine is not chosen yet counts as embedded): two loads at once may both be refused
   * when only one fits, never both admitted.
   */
  private async overBudget(table: Table, id: string, teamId: string, model: CatalogModel): Promise<Plan | null> {
    if (model.engine.type !== "llama_cpp") return null;
    const need = model.runtime!.slots;
    const rows = await queryRows<{
      kind: string;
      team_id: string;
      model_source: string | null;
      model_id: string;
      slots: number;
      engine: { type?: string } | null;
      modality: string;
    }>(
      this.ds,
      `SELECT 'deployments' AS kind, d.team_id, d.id, d.model_source, d.model_id, GREATEST(1, d.min_replicas) AS slots,
              COALESCE(d.engine, c.engine) AS engine, NULL AS modality
         FROM deployments d
         LEFT JOIN custom_models c ON d.model_source = 'custom' AND c.team_id = d.team_id AND c.model_id = d.model_id
        WHERE d.status IN ('available', 'deploying') AND NOT ($1 = 'deployments' AND d.id = $2)
       UNION ALL
       SELECT 'custom_models', c.team_id, c.id, NULL, c.model_id, 0, c.engine, c.modality
         FROM custom_models c
        WHERE c.deployment_requested_at IS NOT NULL AND c.deploy_status IN ('available', 'deploying')
          AND NOT ($1 = 'custom_models' AND c.id = $2)`,
      [table, id],
    );
    let used = 0;
    let teamUsed = 0;
    for (const r of rows) {
      const type =
        r.engine?.type ?? (r.model_source === "platform" ? this.platform.get(r.model_id)?.engine.type : undefined);
      if (type !== undefined && type !== "llama_cpp") continue;
      const slots =
        r.kind === "deployments"
          ? r.slots
          : r.modality === "text_embedding"
            ? this.opts.customSlots.embedding
            : this.opts.customSlots.generation;
      used += slots;
      if (r.team_id === teamId) teamUsed += slots;
    }
    if (teamUsed + need > this.opts.teamDedicatedSlots) {
      return {
        kind: "fail",
        reason:
          `A team's dedicated runtimes take at most ${this.opts.teamDedicatedSlots} parallel sequences on this server ` +
          `(SWITCHYARD_TEAM_DEDICATED_SLOTS) and the team's take ${teamUsed}; this one needs ${need}. ` +
          `Delete a deployment or a requested custom model first`,
      };
    }
    if (used + need <= this.opts.dedicatedSlots) return null;
    return {
      kind: "fail",
      reason:
        `This server has room for ${this.opts.dedicatedSlots} parallel sequences of dedicated runtimes ` +
        `(SWITCHYARD_DEDICATED_SLOTS) and ${used} are taken; this one needs ${need}. Try again once others are deleted`,
    };
  }

  private hasLocalFile(file: string): boolean {
    return findLocalModelFile(file, { modelsDir: this.opts.modelsDir, dataDir: this.opts.dataDir }) !== undefined;
  }

  /** Loads what the plan says and records the outcome. */
  private async carryOut(table: Table, id: string, plan: Plan): Promise<void> {
    if (plan.kind === "reject") return void (await this.finish(table, id, "rejected", plan.reason, null));
    if (plan.kind === "fail") return void (await this.finish(table, id, "failed", plan.reason, null));
    const { model } = plan;
    const renew = setInterval(
      () =>
        void this.ds
          .query(
            `UPDATE ${table} SET lease_expires_at = now() + make_interval(secs => $2)
              WHERE id = $1 AND ${table === "deployments" ? "status" : "deploy_status"} = 'deploying'`,
            [id, this.leaseS],
          )
          .catch((err) => this.logger.warn({ err, id }, "could not renew a deployment lease")),
      (this.leaseS * 1000) / 3,
    );
    let failure: string | undefined;
    try {
      await this.engines.engineFor(model).load(model);
    } catch (err) {
      failure = this.reason(err);
    } finally {
      clearInterval(renew);
    }
    if (this.stopped) {
      // The engines may be closing under the load: the lease hands the row to the next sweep.
      this.logger.info({ id, model: model.id }, "deployment left to its lease: this process is stopping");
      return;
    }
    if (failure !== undefined) {
      this.logger.info({ id, model: model.id, reason: failure }, "deployment failed");
      await this.finish(table, id, "failed", failure, null);
      return;
    }
    const recorded = await this.finish(table, id, "available", null, plan.engine);
    if (recorded) {
      this.logger.info({ id, model: model.id, runtime: model.runtime?.key }, "deployment available");
      return;
    }
    // Not ours to record: deleted while it loaded, or taken over by another process after our
    // lease ran out. Only a deleted row's runtime is released: the runtime key is the row's, so
    // unloading it for a row another process made available would retire the runtime this
    // process serves it with (issue 9 review, lost-lease race).
    const [still] = await queryRows<{ id: string }>(this.ds, `SELECT id FROM ${table} WHERE id = $1`, [id]);
    if (!still) await this.engines.unload(model);
  }

  /**
   * Records the outcome of a row still `deploying`; an available one is announced to every process
   * and installed here at once. @returns false when the row is gone or no longer `deploying`.
   */
  private async finish(
    table: Table,
    id: string,
    status: "available" | "failed" | "rejected",
    reason: string | null,
    engine: EngineSpec | null,
  ): Promise<boolean> {
    const statusColumn = table === "deployments" ? "status" : "deploy_status";
    const activated = table === "deployments" ? `, activated_at = CASE WHEN $2 = 'available' THEN now() END` : "";
    const outcome = await this.ds.transaction(async (em) => {
      const [row] = await queryRows<{ team_id: string }>(
        em,
        `UPDATE ${table}
            SET ${statusColumn} = $2, status_reason = $3, engine = $4::jsonb, lease_expires_at = NULL,
                updated_at = now()${activated}
          WHERE id = $1 AND ${statusColumn} = 'deploying'
          RETURNING team_id`,
        [id, status, reason, engine === null ? null : JSON.stringify(engine)],
      );
      if (!row) return null;
      if (status !== "available") return { teamId: row.team_id, rows: null };
      await this.bus.publish(TEAM_MODELS_TOPIC, row.team_id, em);
      return { teamId: row.team_id, rows: await this.directory.rows(em, row.team_id) };
    });
    if (outcome?.rows) this.directory.install(outcome.teamId, outcome.rows);
    return outcome !== null;
  }

  /** An engine error as a `status_reason`: its message, the server's folders named, bounded. */
  private reason(err: unknown): string {
    let text = err instanceof AppError ? err.detail : err instanceof Error ? err.message : String(err);
    const folders: Array<[string | undefined, string]> = [
      [this.opts.modelsDir, "<models dir>"],
      [this.opts.dataDir, "<data dir>"],
    ];
    for (const [dir, name] of folders) if (dir) text = text.split(dir).join(name);
    return text.length > MAX_REASON_CHARS ? `${text.slice(0, MAX_REASON_CHARS - 1)}…` : text;
  }
}
