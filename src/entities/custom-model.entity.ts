/**
 * A team's custom model (DESIGN §3 "Models and deployments"). The control plane shows it as a
 * catalog model (`services/models/catalog-views.ts` is the one mapping, for REST and GraphQL);
 * the hub token is kept sealed and only reported as `has_model_hub_token`.
 */
import { Column, Entity, PrimaryColumn } from "typeorm";
import type { EngineSpec } from "../config/catalog.js";
import type { DeployStatus } from "./deployment.entity.js";

/** Allowed `architecture` values (DESIGN §3). */
export const ARCHITECTURES = [
  "qwen",
  "llama",
  "kimi",
  "glm",
  "deepseek",
  "minimax",
  "gemma",
  "gpt_oss",
  "custom",
] as const;
export type Architecture = (typeof ARCHITECTURES)[number];

export type CustomModality = "text_generation" | "text_embedding";
export type ArtifactType = "full" | "lora";

@Entity("custom_models")
export class CustomModelEntity {
  @PrimaryColumn("uuid")
  id!: string;

  @Column({ name: "team_id", type: "uuid" })
  teamId!: string;

  @Column({ name: "model_id", type: "text" })
  modelId!: string;

  @Column("text")
  architecture!: Architecture;

  @Column({ name: "display_name", type: "text", nullable: true })
  displayName!: string | null;

  @Column("text")
  modality!: CustomModality;

  @Column({ name: "artifact_type", type: "text" })
  artifactType!: ArtifactType;

  @Column({ name: "base_model_id", type: "text", nullable: true })
  baseModelId!: string | null;

  @Column({ name: "hf_repo", type: "text", nullable: true })
  hfRepo!: string | null;

  @Column({ name: "hf_revision", type: "text", nullable: true })
  hfRevision!: string | null;

  /** The hub token, sealed with AES-256-GCM (`SecretBox`); never returned. */
  @Column({ name: "hf_token_sealed", type: "bytea", nullable: true })
  hfTokenSealed!: Buffer | null;

  @Column({ type: "text", nullable: true })
  notes!: string | null;

  @Column({ name: "deploy_status", type: "text" })
  deployStatus!: DeployStatus;

  @Column({ name: "status_reason", type: "text", nullable: true })
  statusReason!: string | null;

  /** When request-deployment was last called; the reconciler acts on requested models only. */
  @Column({ name: "deployment_requested_at", type: "timestamptz", nullable: true })
  deploymentRequestedAt!: Date | null;

  /** The engine the reconciler brought it up on (once available). */
  @Column({ type: "jsonb", nullable: true })
  engine!: EngineSpec | null;

  @Column({ name: "lease_expires_at", type: "timestamptz", nullable: true })
  leaseExpiresAt!: Date | null;

  @Column({ name: "created_at", type: "timestamptz" })
  createdAt!: Date;

  @Column({ name: "updated_at", type: "timestamptz" })
  updatedAt!: Date;
}
