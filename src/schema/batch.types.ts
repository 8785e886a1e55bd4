/**
 * GraphQL types of batches (issue 7, item 8; DESIGN §3 Batches): the REST batch object in
 * camelCase with its progress counts (times ISO 8601 strings, tokens and micro-USD as Floats that
 * hold integers, as on streams).
 */
import { Field, Float, ID, Int, ObjectType } from "type-graphql";

@ObjectType("BatchRequestCounts", { description: "Items of a batch by status." })
export class BatchRequestCountsType {
  @Field(() => Int) total!: number;
  @Field(() => Int) pending!: number;
  @Field(() => Int) running!: number;
  @Field(() => Int) completed!: number;
  @Field(() => Int) failed!: number;
  @Field(() => Int) cancelled!: number;
}

@ObjectType("Batch", { description: "A batch of the caller's team, with progress and totals." })
export class BatchType {
  @Field(() => ID) id!: string;
  @Field({ description: "pending, running, completed, failed or cancelled." }) status!: string;
  @Field({ description: "Always 24h." }) window!: string;
  @Field(() => Int) requestCount!: number;
  @Field(() => BatchRequestCountsType, { description: "Progress: items by status." })
  requestCounts!: BatchRequestCountsType;
  @Field({ description: "Absolute URL of results.jsonl." }) outputUrl!: string;
  @Field({ description: "ISO 8601." }) createdAt!: string;
  @Field({ description: "ISO 8601." }) updatedAt!: string;
  @Field(() => String, { nullable: true, description: "ISO 8601; set on terminal states." }) completedAt!:
    string | null;
  @Field(() => String, { nullable: true, description: "ISO 8601." }) cancelledAt!: string | null;
  @Field({ description: "ISO 8601: the end of the window." }) expiresAt!: string;
  @Field(() => Float, { description: "An integer." }) totalPromptTokens!: number;
  @Field(() => Float, { description: "An integer." }) totalCompletionTokens!: number;
  @Field(() => Float, { description: "An integer." }) totalTokens!: number;
  @Field(() => Float, { description: "Micro-USD (an integer)." }) totalCostMicros!: number;
}
