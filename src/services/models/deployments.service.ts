/**
 * Dedicated deployments of a team (issue 9; spec: Deployment; DESIGN §3 "Models and deployments"):
 * list, create (201, `pending_deploy`; the reconciler is woken in the same transaction) and delete
 * (204; gone from lists at once; its runtime is released in every process once its requests in
 * flight finish). A custom model the team does not have is refused at create (404, issue 28,
 * item 5: it used to be accepted and only rejected later by the reconciler); whether a platform
 * model exists and may be deployed is the reconciler's question: an unknown or undeployable one
 * ends `rejected` with a reason.
 */
import type { DataSource } from "typeorm";
import { v7 as uuidv7 } from "uuid";
import { z } from "zod";
import { DeploymentEntity } from "../../entities/deployment.entity.js";
import { queryRows } from "../../db/sql.js";
import { AppError, ErrorCode, parseInput, parseUuidParam } from "../../shared/errors.js";
import type { JobSender } from "../platform/job-queue.port.js";
import type { CacheBus } from "../platform/cache-bus.js";
import type { RequestContext } from "../platform/context.js";
import { authorize } from "../platform/policy.js";
import { pgText } from "../platform/validation.js";
import { executor, modelId } from "./custom-models.service.js";
import { TEAM_MODELS_TOPIC, type TeamModelDirectory } from "./team-models.js";
import { type ModelQuotas, checkTeamModelQuota } from "./team-quotas.js";

/** Most replicas of a deployment (DESIGN §3). */
export const MAX_REPLICAS = 1000;

const replicas = z.number().int().min(0).max(MAX_REPLICAS).nullish();

/**
 * `POST /control/v1/deployments` (DESIGN §3): `name` 1–256, `model_source` platform|custom,
 * `model_id`; `region` emea|global (emea), `performance` cost_saving|standard|turbo (standard),
 * `0 ≤ min_replicas ≤ max_replicas ≤ 1000` (0 and 1), `notes` ≤ 4000. Unknown fields are ignored.
 */
export const createDeploymentInput = z
  .object({
    name: pgText().trim().min(1).max(256),
    model_source: z.enum(["platform", "custom"]),
    model_id: modelId,
    region: z
      .enum(["emea", "global"])
      .nullish()
      .transform((v) => v ?? "emea"),
    performance: z
      .enum(["cost_saving", "standard", "turbo"])
      .nullish()
      .transform((v) => v ?? "standard"),
    min_replicas: replicas.transform((v) => v ?? 0),
    max_replicas: replicas.transform((v) => v ?? 1),
    notes: pgText().max(4000).nullish(),
  })
  .superRefine((d, ctx) => {
    if (d.min_replicas > d.max_replicas) {
      ctx.addIssue({
        code: "custom",
        path: ["min_replicas"],
        message: `must not exceed max_replicas (${d.max_replicas})`,
      });
      ctx.addIssue({
        code: "custom",
        path: ["max_replicas"],
        message: `must be at least min_replicas (${d.min_replicas})`,
      });
    }
  });
export type CreateDeploymentInput = z.input<typeof createDeploymentInput>;

/** `GET /control/v1/deployments`. */
export interface DeploymentList {
  items: DeploymentEntity[];
}

/** Lists, creates and deletes a team's deployments. */
export class DeploymentsService {
  constructor(
    private readonly ds: DataSource,
    private readonly bus: CacheBus,
    private readonly jobs: JobSender,
    private readonly directory: TeamModelDirectory,
    private readonly quotas: ModelQuotas,
  ) {}

  /** The team's deployments, newest first (every status). @throws AppError 401. */
  async list(ctx: RequestContext): Promise<DeploymentList> {
    const principal = authorize(ctx, "deployments.read");
    const items = await this.ds.getRepository(DeploymentEntity).find({
      where: { teamId: principal.teamId },
      order: { createdAt: "DESC", id: "DESC" },
    });
    return { items };
  }

  /**
   * Creates a deployment, `pending_deploy`, and wakes the reconciler (same transaction).
   * @throws AppError 400 naming the field; 401; 403 for members; 402 when the team has no credit;
   *   404 for a `custom` model the team does not have (as `POST /control/v1/models/request-deployment`);
   *   409 when it already has `quotas.maxDeployments` deployments (`team-quotas.ts`).
   */
  async create(ctx: RequestContext, raw: unknown): Promise<DeploymentEntity> {
    const principal = authorize(ctx, "deployments.manage");
    const input = parseInput(createDeploymentInput, raw ?? undefined);
    const id = uuidv7();
    await this.ds.transaction(async (em) => {
      await checkTeamModelQuota(em, principal.teamId, "deployments", this.quotas.maxDeployments, true);
      if (input.model_source === "custom") {
        // FOR SHARE: a delete of the custom model (FOR UPDATE) waits for this deployment and then
        // refuses (409), or this create waits for the delete and then finds nothing.
        const [model] = await queryRows(
          em,
          "SELECT 1 FROM custom_models WHERE team_id = $1 AND model_id = $2 FOR SHARE",
          [principal.teamId, input.model_id],
        );
        if (!model) {
          throw new AppError(
            ErrorCode.NotFound,
            "Custom model not found: the team has no custom model with this model_id (create it at POST /control/v1/models/custom)",
            [{ field: "model_id", message: "names no custom model of the team" }],
          );
        }
      }
      await em.query(
        `INSERT INTO deployments (id, team_id, name, model_source, model_id, region, performance,
                                  min_replicas, max_replicas, notes)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)`,
        [
          id,
          principal.teamId,
          input.name,
          input.model_source,
          input.model_id,
          input.region,
          input.performance,
          input.min_replicas,
          input.max_replicas,
          input.notes ?? null,
        ],
      );
      await this.jobs.send("deployment-reconcile", { kind: "deployment", id }, { db: executor(em) });
    });
    return this.ds.getRepository(DeploymentEntity).findOneByOrFail({ id });
  }

  /**
   * Deletes a deployment of the caller's team: requests stop routing to it at once (here at
   * once, elsewhere on the NOTIFY), and its runtime is released once its requests in flight finish.
   * @throws AppError 400 when `id` is not a uuid; 401; 403 for members; 404 when the team has no
   *   such deployment.
   */
  async remove(ctx: RequestContext, rawId: unknown): Promise<void> {
    const principal = authorize(ctx, "deployments.manage");
    const id = parseUuidParam("deployment_id", rawId);
    const rows = await this.ds.transaction(async (em) => {
      const deleted = await em.getRepository(DeploymentEntity).delete({ id, teamId: principal.teamId });
      if (!deleted.affected) throw AppError.notFound("Deployment not found");
      await this.bus.publish(TEAM_MODELS_TOPIC, principal.teamId, em);
      return this.directory.rows(em, principal.teamId);
    });
    this.directory.install(principal.teamId, rows);
  }
}

/** The deployment record as this domain hands it to the transports (persisted shape; transports never import entities). */
export type { DeploymentEntity } from "../../entities/deployment.entity.js";
