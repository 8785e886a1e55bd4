/**
 * A dedicated deployment of a model for one team (spec: Deployment; DESIGN §3 "Models and
 * deployments"). Also the GraphQL `Deployment` type: its `@Field` columns are the fields; the
 * team, the engine the reconciler chose and its lease are no fields.
 */
import { Field, ID, Int, ObjectType } from "type-graphql";
import { Column, Entity, PrimaryColumn } from "typeorm";
import type { EngineSpec } from "../config/catalog.js";

/** `status` of a deployment and `deploy_status` of a custom model (DESIGN §3). */
export const DEPLOY_STATUSES = ["pending_deploy", "deploying", "available", "rejected", "failed"] as const;
export type DeployStatus = (typeof DEPLOY_STATUSES)[number];

export type ModelSource = "platform" | "custom";
export type DeploymentRegion = "emea" | "global";
export type DeploymentPerformance = "cost_saving" | "standard" | "turbo";

@ObjectType("Deployment")
@Entity("deployments")
export class DeploymentEntity {
  @Field(() => ID)
  @PrimaryColumn("uuid")
  id!: string;

  @Column({ name: "team_id", type: "uuid" })
  teamId!: string;

  @Field()
  @Column("text")
  name!: string;

  @Field(() => String, { description: "platform or custom." })
  @Column({ name: "model_source", type: "text" })
  modelSource!: ModelSource;

  @Field()
  @Column({ name: "model_id", type: "text" })
  modelId!: string;

  @Field(() => String, { description: "emea or global." })
  @Column("text")
  region!: DeploymentRegion;

  @Field(() => String, { description: "cost_saving, standard or turbo." })
  @Column("text")
  performance!: DeploymentPerformance;

  @Field(() => Int)
  @Column({ name: "min_replicas", type: "integer" })
  minReplicas!: number;

  @Field(() => Int)
  @Column({ name: "max_replicas", type: "integer" })
  maxReplicas!: number;

  @Field(() => String, { nullable: true })
  @Column({ type: "text", nullable: true })
  notes!: string | null;

  @Field(() => String, { description: "pending_deploy, deploying, available, rejected or failed." })
  @Column("text")
  status!: DeployStatus;

  @Field(() => String, { nullable: true, description: "Why it failed or was rejected." })
  @Column({ name: "status_reason", type: "text", nullable: true })
  statusReason!: string | null;

  /** The engine the reconciler brought a custom model up on (null for platform models: the catalog's). */
  @Column({ type: "jsonb", nullable: true })
  engine!: EngineSpec | null;

  /** While `deploying`: the claim of the reconciler bringing it up runs out then. */
  @Column({ name: "lease_expires_at", type: "timestamptz", nullable: true })
  leaseExpiresAt!: Date | null;

  @Field(() => Date, { nullable: true, description: "When it became available." })
  @Column({ name: "activated_at", type: "timestamptz", nullable: true })
  activatedAt!: Date | null;

  @Field()
  @Column({ name: "created_at", type: "timestamptz" })
  createdAt!: Date;

  @Field()
  @Column({ name: "updated_at", type: "timestamptz" })
  updatedAt!: Date;
}
