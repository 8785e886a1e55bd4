/** One inference request as the activity views show it (spec: Activity record). */
import { Column, Entity, PrimaryColumn } from "typeorm";
import { bigintTransformer } from "./transformers.js";

export type ActivityType = "standalone" | "batch" | "stream";
export type ActivityStatus = "pending" | "running" | "completed" | "failed" | "cancelled";

@Entity("activity")
export class ActivityEntity {
  @PrimaryColumn("uuid") id!: string;
  @Column({ name: "team_id", type: "uuid" }) teamId!: string;
  @Column({ name: "user_id", type: "uuid", nullable: true }) userId!: string | null;
  @Column({ name: "api_key_id", type: "uuid", nullable: true }) apiKeyId!: string | null;
  @Column({ name: "api_key_name", type: "text", nullable: true }) apiKeyName!: string | null;
  @Column({ name: "api_key_prefix", type: "text", nullable: true }) apiKeyPrefix!: string | null;
  @Column("text") type!: ActivityType;
  @Column("text") status!: ActivityStatus;
  /** The data-plane path that created it, e.g. `/v1/chat/completions`. */
  @Column("text") endpoint!: string;
  @Column("text") model!: string;
  @Column({ name: "custom_id", type: "text", nullable: true }) customId!: string | null;
  @Column({ name: "batch_id", type: "uuid", nullable: true }) batchId!: string | null;
  @Column({ name: "stream_id", type: "uuid", nullable: true }) streamId!: string | null;
  @Column({ name: "prompt_tokens", type: "integer" }) promptTokens!: number;
  @Column({ name: "completion_tokens", type: "integer" }) completionTokens!: number;
  @Column({ name: "total_tokens", type: "integer" }) totalTokens!: number;
  @Column({ name: "cached_prompt_tokens", type: "integer" }) cachedPromptTokens!: number;
  @Column({ name: "cost_micros", type: "bigint", transformer: bigintTransformer }) costMicros!: bigint;
  @Column({ name: "body_json", type: "jsonb", nullable: true }) bodyJson!: unknown;
  @Column({ name: "result_json", type: "jsonb", nullable: true }) resultJson!: unknown;
  @Column({ name: "error_json", type: "jsonb", nullable: true }) errorJson!: unknown;
  /** Time spent inside the engine, in ms. */
  @Column({ name: "engine_ms", type: "integer", nullable: true }) engineMs!: number | null;
  @Column({ name: "created_at", type: "timestamptz" }) createdAt!: Date;
  @Column({ name: "completed_at", type: "timestamptz", nullable: true }) completedAt!: Date | null;
}
