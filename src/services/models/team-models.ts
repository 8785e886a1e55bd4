/**
 * Each team's own models, in memory (issue 9, interface 4): the custom models and deployments
 * that are `available`, as the `CatalogModel`s requests for them run as. `ModelCatalogService`
 * reads it synchronously on the hot path (no database round trip per request).
 *
 * Kept fresh through the cache bus: every change of a team's custom models or deployments
 * publishes `team_models:<team id>` in its transaction, and every process reloads that team when
 * the NOTIFY arrives (all teams after the listener reconnects). The process that made a change
 * installs the team's rows as its own transaction saw them right after the commit (`install`), so
 * its next request already sees the change. A reload that began before a newer install is dropped.
 *
 * When a team's view loses a model that ran on a runtime of its own (a deleted deployment or
 * custom model), that runtime is unloaded once its requests in flight finish; a new one is loaded
 * in the background, one at a time, so the first request does not pay for it.
 */
import type { Logger } from "pino";
import type { DataSource, EntityManager } from "typeorm";
import type { CatalogModel } from "../../config/catalog.js";
import { CustomModelEntity } from "../../entities/custom-model.entity.js";
import { DeploymentEntity } from "../../entities/deployment.entity.js";
import type { EngineRouter } from "../../inference/engine-router.js";
import type { CacheBus } from "../platform/cache-bus.js";
import { type PlatformModels, customCatalogModel, customRuntime, deploymentRuntime } from "./model-sources.js";

/** The cache bus topic of a team's custom models and deployments (key: the team id). */
export const TEAM_MODELS_TOPIC = "team_models";

/** A team's rows the view is built from. */
export interface TeamModelRows {
  /** Custom models that are available or back an available deployment. */
  custom: CustomModelEntity[];
  /** Available deployments, oldest activation first. */
  deployments: DeploymentEntity[];
}

/** What a team's requests may name beyond the platform catalog. */
export interface TeamModelsView {
  /** Model id → what it runs as: the newest available deployment, else the available custom model. */
  models: Map<string, CatalogModel>;
  /** The team's custom model ids that resolve, oldest first (listed on `/v1/models`). */
  customIds: string[];
}

/** Slots of a requested custom model's runtime, by modality. */
export interface CustomModelSlots {
  generation: number;
  embedding: number;
}

const EMPTY: TeamModelsView = { models: new Map(), customIds: [] };

/** Per-team views of custom models and deployments, refreshed through the cache bus. */
export class TeamModelDirectory {
  private readonly views = new Map<string, TeamModelsView>();
  /** Orders installs: a reload applies only when no install newer than its start came first. */
  private ticket = 0;
  private readonly applied = new Map<string, number>();
  /** The background runtime loads, one after the other. */
  private loading: Promise<void> = Promise.resolve();

  constructor(
    private readonly ds: DataSource,
    private readonly bus: CacheBus,
    private readonly platform: PlatformModels,
    private readonly engines: EngineRouter,
    private readonly logger: Logger,
    private readonly customSlots: CustomModelSlots,
  ) {}

  /**
   * Loads every team's view and follows the cache bus from then on.
   * @throws the driver's error when the database cannot be read.
   */
  async start(): Promise<void> {
    this.bus.on(TEAM_MODELS_TOPIC, (teamId) => void this.reload(teamId));
    this.bus.on("*", () => void this.reloadAll());
    await this.reloadAll(true);
  }

  /** The team's view (empty when it has no models of its own). Synchronous: the hot path. */
  view(teamId: string): TeamModelsView {
    return this.views.get(teamId) ?? EMPTY;
  }

  /**
   * The team's rows as `em` sees them (inside a transaction: with its uncommitted changes), for
   * `install` after the commit.
   */
  async rows(em: EntityManager | DataSource, teamId: string): Promise<TeamModelRows> {
    const [custom, deployments] = await Promise.all([this.customRows(em, teamId), this.deploymentRows(em, teamId)]);
    return { custom, deployments };
  }

  /** Makes `rows` the team's view now (the caller's transaction committed them). */
  install(teamId: string, rows: TeamModelRows): void {
    this.apply(teamId, rows, ++this.ticket);
  }

  private apply(teamId: string, rows: TeamModelRows, ticket: number): void {
    if ((this.applied.get(teamId) ?? 0) > ticket) return;
    this.applied.set(teamId, ticket);
    const before = this.views.get(teamId) ?? EMPTY;
    const after = this.build(rows);
    if (after.models.size === 0) this.views.delete(teamId);
    else this.views.set(teamId, after);
    this.reconcileRuntimes(before, after);
  }

  private async reload(teamId: string): Promise<void> {
    const ticket = ++this.ticket;
    try {
      this.apply(teamId, await this.rows(this.ds, teamId), ticket);
    } catch (err) {
      this.logger.warn({ err, teamId }, "could not reload a team's models");
    }
  }

  private async reloadAll(throwErrors = false): Promise<void> {
    const ticket = ++this.ticket;
    try {
      const [custom, deployments] = await Promise.all([this.customRows(this.ds), this.deploymentRows(this.ds)]);
      const teams = new Set([
        ...this.views.keys(),
        ...custom.map((c) => c.teamId),
        ...deployments.map((d) => d.teamId),
      ]);
      for (const teamId of teams) {
        this.apply(
          teamId,
          {
            custom: custom.filter((c) => c.teamId === teamId),
            deployments: deployments.filter((d) => d.teamId === teamId),
          },
          ticket,
        );
      }
    } catch (err) {
      if (throwErrors) throw err;
      this.logger.warn({ err }, "could not reload the teams' models");
    }
  }

  private customRows(em: EntityManager | DataSource, teamId?: string): Promise<CustomModelEntity[]> {
    const query = em
      .getRepository(CustomModelEntity)
      .createQueryBuilder("c")
      .where(
        `(c.deploy_status = 'available' OR EXISTS (
           SELECT 1 FROM deployments d
            WHERE d.team_id = c.team_id AND d.model_source = 'custom' AND d.model_id = c.model_id
              AND d.status = 'available'))`,
      )
      .orderBy("c.created_at", "ASC");
    if (teamId) query.andWhere("c.team_id = :teamId", { teamId });
    return query.getMany();
  }

  private deploymentRows(em: EntityManager | DataSource, teamId?: string): Promise<DeploymentEntity[]> {
    return em.getRepository(DeploymentEntity).find({
      where: teamId ? { teamId, status: "available" } : { status: "available" },
      order: { activatedAt: "ASC", id: "ASC" },
    });
  }

  /** The view of one team's rows (see `TeamModelsView`). */
  private build(rows: TeamModelRows): TeamModelsView {
    const models = new Map<string, CatalogModel>();
    const byModelId = new Map(rows.custom.map((c) => [c.modelId, c]));
    for (const c of rows.custom) {
      if (c.deployStatus !== "available" || !c.engine) continue;
      const slots = c.modality === "text_embedding" ? this.customSlots.embedding : this.customSlots.generation;
      models.set(c.modelId, customCatalogModel(c, this.platform, c.engine, customRuntime(c, slots)));
    }
    for (const d of rows.deployments) {
      let model: CatalogModel | undefined;
      if (d.modelSource === "platform") {
        const platform = this.platform.get(d.modelId);
        if (platform && platform.platformStatus !== "coming_soon")
          model = { ...platform, runtime: deploymentRuntime(d) };
      } else {
        const custom = byModelId.get(d.modelId);
        const engine = d.engine ?? custom?.engine;
        if (custom && engine) model = customCatalogModel(custom, this.platform, engine, deploymentRuntime(d));
      }
      if (model) models.set(d.modelId, model);
    }
    const customIds = rows.custom.map((c) => c.modelId).filter((id) => models.has(id));
    return { models, customIds };
  }

  /** Unloads runtimes a view lost; loads new ones in the background. */
  private reconcileRuntimes(before: TeamModelsView, after: TeamModelsView): void {
    const keys = (view: TeamModelsView) =>
      new Map([...view.models.values()].filter((m) => m.runtime).map((m) => [m.runtime!.key, m]));
    const was = keys(before);
    const now = keys(after);
    for (const [key, model] of was) {
      if (now.has(key)) continue;
      this.engines.unload(model).catch((err) => this.logger.warn({ err, runtime: key }, "could not unload a runtime"));
    }
    for (const [key, model] of now) {
      if (was.has(key)) continue;
      // One load at a time (issue 9 review, finding 2): a start or a reconnect that learns of
      // many runtimes at once does not read every GGUF and allocate every context together.
      this.loading = this.loading
        .then(() => this.engines.engineFor(model).load(model))
        .catch((err) => this.logger.warn({ err, runtime: key, model: model.id }, "could not load a runtime"));
    }
  }
}
