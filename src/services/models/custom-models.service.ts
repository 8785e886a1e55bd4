/**
 * The model side of the control plane for a team (issue 9; spec "Control plane: models and
 * deployments"; DESIGN §3 "Models and deployments"): the catalog (platform models and the team's
 * custom models), its search, custom models, and deployment requests for them.
 *
 * A new custom model is `pending_deploy` and stays so until `request-deployment` asks for it;
 * the reconciler (`deployment-reconciler.ts`) then moves it `deploying` → `available` | `failed`
 * | `rejected`. Asking again after `failed` or `rejected` starts over; while `deploying` or once
 * `available` it changes nothing. Only `available` custom models are listed on `/v1/models` and
 * served (`ModelCatalogService`).
 */
import type { DataSource, EntityManager } from "typeorm";
import { v7 as uuidv7 } from "uuid";
import { z } from "zod";
import { MODALITIES } from "../../config/catalog.js";
import { queryRows } from "../../db/sql.js";
import { ARCHITECTURES, CustomModelEntity } from "../../entities/custom-model.entity.js";
import { AppError, echo, parseInput } from "../../shared/errors.js";
import type { JobSender, SqlExecutor } from "../platform/job-queue.port.js";
import type { CacheBus } from "../platform/cache-bus.js";
import type { RequestContext } from "../platform/context.js";
import { authorize } from "../platform/policy.js";
import { optionalQuery, pgText } from "../platform/validation.js";
import {
  type CatalogModelDto,
  type CatalogModelList,
  type ModelSearchResult,
  customCatalogItem,
  platformCatalogItem,
  searchItem,
} from "./catalog-views.js";
import type { PlatformModels } from "./model-sources.js";
import type { SecretBox } from "./secret-box.js";
import { TEAM_MODELS_TOPIC, type TeamModelDirectory } from "./team-models.js";
import { type ModelQuotas, checkTeamCredit, checkTeamModelQuota } from "./team-quotas.js";

/** A model id: 1–512 characters, without surrounding whitespace (DESIGN §3). */
export const modelId = pgText()
  .min(1)
  .max(512)
  .refine((v) => v.trim() === v, "must not start or end with whitespace")
  // The same rule for the OpenAPI document (issue 28, item 5).
  .meta({ pattern: "^\\S(?:[\\s\\S]*\\S)?$" });

const optionalText = (max: number) => pgText().min(1).max(max).nullish();

/** `POST /control/v1/models/custom` (DESIGN §3 "Models and deployments"); unknown fields are ignored. */
export const createCustomModelInput = z.object({
  model_id: modelId,
  architecture: z.enum(ARCHITECTURES),
  display_name: pgText().trim().min(1).max(256).nullish(),
  modality: z.enum(["text_generation", "text_embedding"]).nullish(),
  artifact_type: z.enum(["full", "lora"]).nullish(),
  base_model_id: optionalText(512),
  hf_repo: optionalText(512),
  hf_revision: optionalText(256),
  hf_token: optionalText(4096),
  notes: pgText().max(4000).nullish(),
});
export type CreateCustomModelInput = z.input<typeof createCustomModelInput>;

/** `POST /control/v1/models/request-deployment`. */
export const requestDeploymentInput = z.object({ model_id: modelId });
export type RequestDeploymentInput = z.input<typeof requestDeploymentInput>;

/** `DELETE /control/v1/models/custom?model_id=…`. */
export const deleteCustomModelQuery = z.object({ model_id: modelId });

/** `GET /control/v1/models/search` query (spec: defaults `text_generation` and `all`). */
export const searchModelsQuery = z.object({
  q: optionalQuery(pgText().max(512)),
  modality: optionalQuery(z.enum(MODALITIES)).transform((v) => v ?? "text_generation"),
  status: optionalQuery(z.enum(["available", "coming_soon", "deprecated", "all"])).transform((v) => v ?? "all"),
});
export type SearchModelsQuery = z.input<typeof searchModelsQuery>;

/** `request-deployment`'s answer. */
export interface OkResult {
  ok: true;
}

/** Catalog, search, custom models and their deployment requests. */
export class CustomModelsService {
  constructor(
    private readonly ds: DataSource,
    private readonly bus: CacheBus,
    private readonly jobs: JobSender,
    private readonly platform: PlatformModels,
    private readonly directory: TeamModelDirectory,
    private readonly secrets: SecretBox,
    private readonly quotas: ModelQuotas,
  ) {}

  /**
   * The platform catalog (every status, catalog order), then the team's custom models (every
   * status, oldest first). @throws AppError 401.
   */
  async catalog(ctx: RequestContext): Promise<CatalogModelList> {
    const principal = authorize(ctx, "models.read");
    const custom = await this.ds.getRepository(CustomModelEntity).find({
      where: { teamId: principal.teamId },
      order: { createdAt: "ASC", id: "ASC" },
    });
    return {
      models: [
        ...this.platform.catalog.models.map((m) => platformCatalogItem(m, this.platform.unavailable(m))),
        ...custom.map((row) => customCatalogItem(row, this.platform)),
      ],
    };
  }

  /**
   * Platform catalog models of one modality (default `text_generation`) and status (default
   * `all`), whose id, display name or provider contains `q` (case-insensitive), in catalog order.
   * @throws AppError 400 naming `q`, `modality` or `status`; 401.
   */
  search(ctx: RequestContext, raw: unknown): ModelSearchResult {
    authorize(ctx, "models.read");
    const query = parseInput(searchModelsQuery, raw ?? {});
    const needle = query.q?.toLowerCase();
    const items = this.platform.catalog.models
      .filter((m) => m.modality === query.modality)
      .filter((m) => query.status === "all" || m.platformStatus === query.status)
      .filter(
        (m) =>
          needle === undefined || [m.id, m.displayName, m.provider].some((text) => text.toLowerCase().includes(needle)),
      )
      .map((m) => searchItem(m, this.platform.unavailable(m)));
    return { items };
  }

  /**
   * Creates a custom model of the caller's team, `pending_deploy`; `hf_token` is stored sealed.
   * @throws AppError 400 naming the field; 401; 403 for members; 409 when `model_id` is a platform
   *   model's or another custom model's of the team, or the team already has
   *   `quotas.maxCustomModels` custom models (`team-quotas.ts`).
   */
  async create(ctx: RequestContext, raw: unknown): Promise<CatalogModelDto> {
    const principal = authorize(ctx, "customModels.manage");
    const input = parseInput(createCustomModelInput, raw ?? undefined);
    if (this.platform.get(input.model_id)) {
      throw AppError.conflict(`'${echo(input.model_id)}' is a platform model's id; choose another model_id`);
    }
    const id = uuidv7();
    const sealed = input.hf_token ? this.secrets.seal(input.hf_token, hubTokenContext(principal.teamId, id)) : null;
    try {
      await this.ds.transaction(async (em) => {
        await checkTeamModelQuota(em, principal.teamId, "custom_models", this.quotas.maxCustomModels, false);
        await em.query(
          `INSERT INTO custom_models (id, team_id, model_id, architecture, display_name, modality, artifact_type,
                                    base_model_id, hf_repo, hf_revision, hf_token_sealed, notes)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)`,
          [
            id,
            principal.teamId,
            input.model_id,
            input.architecture,
            input.display_name ?? null,
            input.modality ?? "text_generation",
            input.artifact_type ?? "full",
            input.base_model_id ?? null,
            input.hf_repo ?? null,
            input.hf_revision ?? null,
            sealed,
            input.notes ?? null,
          ],
        );
      });
    } catch (err) {
      if ((err as { code?: string }).code === "23505") {
        throw AppError.conflict(`The team already has a custom model '${echo(input.model_id)}'`);
      }
      throw err;
    }
    const row = await this.ds.getRepository(CustomModelEntity).findOneByOrFail({ id });
    return customCatalogItem(row, this.platform);
  }

  /**
   * Deletes a custom model of the caller's team; its runtime is released once its requests in
   * flight finish, in every process.
   * @throws AppError 400 naming `model_id`; 401; 403 for members; 404 when the team has no such
   *   custom model; 409 while deployments of it exist (delete them first).
   */
  async remove(ctx: RequestContext, rawQuery: unknown): Promise<void> {
    const principal = authorize(ctx, "customModels.manage");
    const { model_id } = parseInput(deleteCustomModelQuery, rawQuery ?? {});
    const rows = await this.ds.transaction(async (em) => {
      const [found] = await queryRows<{ id: string }>(
        em,
        `SELECT id FROM custom_models WHERE team_id = $1 AND model_id = $2 FOR UPDATE`,
        [principal.teamId, model_id],
      );
      if (!found) throw AppError.notFound(`Custom model '${echo(model_id)}' not found`);
      const [deployed] = await queryRows<{ n: number }>(
        em,
        `SELECT count(*)::int AS n FROM deployments WHERE team_id = $1 AND model_source = 'custom' AND model_id = $2`,
        [principal.teamId, model_id],
      );
      if (deployed.n > 0) {
        throw AppError.conflict(`Custom model '${echo(model_id)}' has ${deployed.n} deployment(s); delete them first`);
      }
      await em.query(`DELETE FROM custom_models WHERE id = $1`, [found.id]);
      return this.announce(em, principal.teamId);
    });
    this.directory.install(principal.teamId, rows);
  }

  /**
   * Records a deployment request for a custom model of the caller's team: `pending_deploy` again
   * after `failed` or `rejected` (and at first), and the reconciler is woken; no change while it
   * is `deploying` or `available`. For a platform catalog model (issue 27, item 9): `{ok: true}`;
   * a no-op when it is served, else the ask is recorded in `platform_model_requests` (team, model,
   * why it is not served: `coming_soon` or the missing file), once per team and model.
   * @throws AppError 400 naming `model_id`; 401; 403 for members; 402 when the team has no credit
   *   (custom models); 404 when the id is neither a platform model nor a custom model of the team.
   */
  async requestDeployment(ctx: RequestContext, raw: unknown): Promise<OkResult> {
    const principal = authorize(ctx, "customModels.manage");
    const input = parseInput(requestDeploymentInput, raw ?? undefined);
    const platform = this.platform.get(input.model_id);
    if (platform) {
      // A platform model (issue 27, item 9): nothing to deploy when it is served; otherwise the ask
      // is recorded for the operator (coming soon, or its file not downloaded here).
      const reason =
        platform.platformStatus === "coming_soon" ? "coming_soon" : (this.platform.unavailable(platform) ?? null);
      if (reason !== null) {
        await this.ds.query(
          `INSERT INTO platform_model_requests (team_id, model_id, reason) VALUES ($1, $2, $3)
           ON CONFLICT (team_id, model_id) DO UPDATE SET reason = EXCLUDED.reason, requested_at = now()`,
          [principal.teamId, input.model_id, reason],
        );
      }
      return { ok: true };
    }
    await this.ds.transaction(async (em) => {
      await checkTeamCredit(em, principal.teamId);
      const [row] = await queryRows<{ id: string; deploy_status: string }>(
        em,
        `UPDATE custom_models
            SET deployment_requested_at = now(), updated_at = now(),
                deploy_status = CASE WHEN deploy_status IN ('failed', 'rejected') THEN 'pending_deploy' ELSE deploy_status END,
                status_reason = CASE WHEN deploy_status IN ('failed', 'rejected') THEN NULL ELSE status_reason END
          WHERE team_id = $1 AND model_id = $2
          RETURNING id, deploy_status`,
        [principal.teamId, input.model_id],
      );
      if (!row) throw AppError.notFound(`Custom model '${echo(input.model_id)}' not found`);
      if (row.deploy_status === "pending_deploy") {
        await this.jobs.send("deployment-reconcile", { kind: "custom_model", id: row.id }, { db: executor(em) });
      }
    });
    return { ok: true };
  }

  /** Tells every process the team's models changed (at commit) and reads them for `install`. */
  private async announce(em: EntityManager, teamId: string) {
    await this.bus.publish(TEAM_MODELS_TOPIC, teamId, em);
    return this.directory.rows(em, teamId);
  }
}

/** What a hub token is sealed for: its row (a token copied to another row does not open). */
export function hubTokenContext(teamId: string, customModelId: string): string {
  return `custom_models/${teamId}/${customModelId}/hf_token`;
}

/** A transaction's manager as the job queue's SQL executor. */
export function executor(em: EntityManager): SqlExecutor {
  return (text, values) => queryRows<Record<string, unknown>>(em, text, values);
}
