/**
 * GraphQL types of the completion events feed (issue 6, item 7): the REST event under camelCase
 * names; its free-form `result` and `error` use the `JSONObject` scalar (src/shared/json-scalar.ts).
 */
import { Field, Float, ID, Int, ObjectType } from "type-graphql";
import type { CompletionEvent, CompletionEventList } from "../services/events/completion-events.service.js";
import { JSONObjectScalar } from "../shared/json-scalar.js";

export { JSONObjectScalar };

@ObjectType("CompletionEvent", { description: "One finished inference request (spec: Response event)." })
export class CompletionEventType {
  @Field(() => ID, { name: "completionId", description: "The cursor (UUIDv7)." }) completion_id!: string;
  @Field(() => ID, { name: "responseId", description: "The request id (the Response id for /v1/responses)." })
  response_id!: string;
  @Field(() => String, { name: "customId", nullable: true }) custom_id!: string | null;
  @Field(() => ID, { name: "streamId", nullable: true }) stream_id!: string | null;
  @Field(() => ID, { name: "batchId", nullable: true, description: "The batch of a batch item (issue 7)." })
  batch_id!: string | null;
  @Field() model!: string;
  @Field({ description: "completed, incomplete (a Response cut at its token limit), failed or cancelled." })
  status!: string;
  @Field(() => JSONObjectScalar, { nullable: true, description: "The answer body (activity result)." })
  result!: unknown;
  @Field(() => JSONObjectScalar, { nullable: true, description: "`{code, message}` when it failed." })
  error!: unknown;
  @Field(() => Int, { name: "promptTokens" }) prompt_tokens!: number;
  @Field(() => Int, { name: "completionTokens" }) completion_tokens!: number;
  @Field(() => Int, { name: "totalTokens" }) total_tokens!: number;
  @Field(() => Float, { name: "costMicros", description: "Micro-USD (an integer)." }) cost_micros!: number;
  @Field({ name: "completedAt", description: "ISO 8601." }) completed_at!: string;
}

/** Type check only: the GraphQL type carries every field of the service's event. */
export type CompletionEventFields = CompletionEventType extends CompletionEvent ? true : never;

@ObjectType("CompletionEventList")
export class CompletionEventListType {
  @Field(() => [CompletionEventType]) data!: CompletionEvent[];
  @Field({ name: "hasMore", description: "More events exist in the direction of the page." })
  has_more!: boolean;
}

/** Type check only: the list type matches the service's page. */
export type CompletionEventListFields =
  Omit<CompletionEventList, "object"> extends CompletionEventListType ? true : never;
