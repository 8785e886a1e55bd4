/**
 * GraphQL type of a stream (issue 6, items 4 and 7; DESIGN §3 Streams): the REST object of
 * `GET /v1/streams/{id}` in camelCase (times ISO 8601 strings); list items leave the counters out,
 * so listing stays one query.
 */
import { Field, Float, ID, Int, ObjectType } from "type-graphql";
import type { StreamSummary } from "../services/inference/responses/streams.service.js";

@ObjectType("Stream", { description: "A stream of the caller's team with its counters." })
export class StreamType {
  @Field(() => ID) id!: string;
  @Field() name!: string;
  @Field({ description: "Always 24h." }) window!: string;
  @Field({ description: "open, archived or cancelled." }) status!: string;
  @Field({ description: "ISO 8601." }) createdAt!: string;
  @Field({ description: "ISO 8601." }) updatedAt!: string;
  @Field(() => String, { nullable: true, description: "ISO 8601." }) cancelledAt!: string | null;
  @Field(() => String, { nullable: true, description: "ISO 8601." }) archivedAt!: string | null;
  @Field(() => Int) totalItems!: number;
  @Field(() => Int) pendingItems!: number;
  @Field(() => Int) runningItems!: number;
  @Field(() => Int, { description: "Incomplete responses count as completed." }) completedItems!: number;
  @Field(() => Int) failedItems!: number;
  @Field(() => Int) cancelledItems!: number;
  @Field(() => Float) completionRatio!: number;
  @Field(() => Float, { description: "An integer." }) totalPromptTokens!: number;
  @Field(() => Float, { description: "An integer." }) totalCompletionTokens!: number;
  @Field(() => Float, { description: "An integer." }) totalTokens!: number;
  @Field(() => Float, { description: "Micro-USD (an integer)." }) totalCostMicros!: number;
  @Field(() => String, { nullable: true, description: "ISO 8601." }) lastCompletionAt!: string | null;
  @Field(() => ID, { nullable: true }) latestCompletionId!: string | null;
}

@ObjectType("StreamSummary", { description: "A list item: the stream without its counters (read them with `stream`)." })
export class StreamSummaryType {
  @Field(() => ID) id!: string;
  @Field() name!: string;
  @Field() window!: string;
  @Field() status!: string;
  @Field({ description: "ISO 8601." }) createdAt!: string;
  @Field({ description: "ISO 8601." }) updatedAt!: string;

  /** The GraphQL object of a service summary. */
  static from(s: StreamSummary): StreamSummaryType {
    return {
      id: s.id,
      name: s.name,
      window: s.window,
      status: s.status,
      createdAt: s.created_at,
      updatedAt: s.updated_at,
    };
  }
}
