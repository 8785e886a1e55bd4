/**
 * One inference request as the activity views show it (spec: Activity record). Also the GraphQL
 * `ActivityRecord` type (its `@Field` columns, camelCase; token counts and micro-USD as Floats
 * that are integers); the REST shapes are `activityItemJson` / `activityDetailJson` in
 * rest/control.presenters.ts.
 */
import { Field, Float, Int, ObjectType } from "type-graphql";
import { Column, Entity, PrimaryColumn } from "typeorm";
import { JSONObjectScalar } from "../shared/json-scalar.js";
import { bigintTransformer } from "./transformers.js";

export type ActivityType = "standalone" | "batch" | "stream";
export type ActivityStatus = "pending" | "running" | "completed" | "failed" | "cancelled";

@ObjectType("ActivityRecord", { description: "One request (spec: Activity record)." })
@Entity("activity")
export class ActivityEntity {
  @Field() @PrimaryColumn("uuid") id!: string;
  @Column({ name: "team_id", type: "uuid" }) teamId!: string;
  @Field(() => String, { nullable: true }) @Column({ name: "user_id", type: "uuid", nullable: true }) userId!:
    string | null;
  @Field(() => String, { nullable: true })
  @Column({ name: "api_key_id", type: "uuid", nullable: true })
  apiKeyId!: string | null;
  @Field(() => String, { nullable: true })
  @Column({ name: "api_key_name", type: "text", nullable: true })
  apiKeyName!: string | null;
  @Field(() => String, { nullable: true })
  @Column({ name: "api_key_prefix", type: "text", nullable: true })
  apiKeyPrefix!: string | null;
  @Field(() => String, { description: "standalone, batch or stream." }) @Column("text") type!: ActivityType;
  @Field(() => String, { description: "pending, running, completed, failed or cancelled." })
  @Column("text")
  status!: ActivityStatus;
  /** The data-plane path that created it, e.g. `/v1/chat/completions`. */
  @Field() @Column("text") endpoint!: string;
  @Field() @Column("text") model!: string;
  @Field(() => String, { nullable: true })
  @Column({ name: "custom_id", type: "text", nullable: true })
  customId!: string | null;
  @Field(() => String, { nullable: true })
  @Column({ name: "batch_id", type: "uuid", nullable: true })
  batchId!: string | null;
  @Field(() => String, { nullable: true })
  @Column({ name: "stream_id", type: "uuid", nullable: true })
  streamId!: string | null;
  @Field(() => Int) @Column({ name: "prompt_tokens", type: "integer" }) promptTokens!: number;
  @Field(() => Int) @Column({ name: "completion_tokens", type: "integer" }) completionTokens!: number;
  @Field(() => Int) @Column({ name: "total_tokens", type: "integer" }) totalTokens!: number;
  @Field(() => Int) @Column({ name: "cached_prompt_tokens", type: "integer" }) cachedPromptTokens!: number;
  @Column({ name: "cost_micros", type: "bigint", transformer: bigintTransformer }) costMicros!: bigint;
  /** The tier the request was served at (`default`, or `flex` for Responses that asked for it). */
  @Field() @Column({ name: "service_tier", type: "text" }) serviceTier!: string;
  /** The request as received; null under zero data retention. Shown by the detail only. */
  @Field(() => JSONObjectScalar, {
    nullable: true,
    description: "The request (detail only: null in lists; null under zero data retention).",
  })
  @Column({ name: "body_json", type: "jsonb", nullable: true })
  bodyJson!: unknown;
  @Field(() => JSONObjectScalar, {
    nullable: true,
    description: "The answer (detail only: null in lists; null under zero data retention).",
  })
  @Column({ name: "result_json", type: "jsonb", nullable: true })
  resultJson!: unknown;
  @Field(() => JSONObjectScalar, { nullable: true, description: "`{code, message}` when it failed." })
  @Column({ name: "error_json", type: "jsonb", nullable: true })
  errorJson!: unknown;
  /** Time spent inside the engine, in ms. */
  @Column({ name: "engine_ms", type: "integer", nullable: true }) engineMs!: number | null;
  @Field() @Column({ name: "created_at", type: "timestamptz" }) createdAt!: Date;
  @Field(() => Date, { nullable: true })
  @Column({ name: "completed_at", type: "timestamptz", nullable: true })
  completedAt!: Date | null;

  /** `cost_micros` as a GraphQL Float (an integer; exact below 2^53 micro-USD). */
  @Field(() => Float, { name: "costMicros", description: "Micro-USD (an integer)." })
  get costMicrosNumber(): number {
    return Number(this.costMicros);
  }
}
