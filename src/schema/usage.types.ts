/**
 * GraphQL types of activity and usage (issue 10, items 1 and 2): the activity page (its items are
 * the `ActivityRecord` entity type) and the usage shapes under the REST field names in camelCase
 * (token counts and micro-USD as Floats that are integers).
 */
import { Field, Float, Int, ObjectType } from "type-graphql";
import { ActivityEntity } from "../entities/activity.entity.js";
import type { ActivityList, UsageDailyItemDto, UsageSummaryDto } from "../services/usage/activity.service.js";

@ObjectType("ActivityPage", { description: "One page of activity records, newest first." })
export class ActivityPageType implements ActivityList {
  @Field(() => [ActivityEntity]) items!: ActivityEntity[];
  @Field(() => Int) page!: number;
  @Field(() => Int, { name: "pageSize" }) page_size!: number;
  @Field(() => Int, { description: "Records matching the filters, over all pages." }) total!: number;
}

@ObjectType("UsageDailyItem", { description: "One UTC day and model (spec: Usage, daily item)." })
export class UsageDailyItemType implements UsageDailyItemDto {
  @Field({ description: "YYYY-MM-DD (UTC)." }) date!: string;
  @Field() model!: string;
  @Field(() => Float, { name: "promptTokens" }) prompt_tokens!: number;
  @Field(() => Float, { name: "completionTokens" }) completion_tokens!: number;
  @Field(() => Float, { name: "totalTokens" }) total_tokens!: number;
  @Field(() => Float, { name: "cachedPromptTokens" }) cached_prompt_tokens!: number;
  @Field(() => Float, { name: "requestCount" }) request_count!: number;
  @Field(() => Float, { name: "costMicros" }) cost_micros!: number;
}

@ObjectType("UsageTotals")
export class UsageTotalsType implements Omit<UsageSummaryDto["by_model"][number], "model" | "service_tier"> {
  @Field(() => Float, { name: "totalPromptTokens" }) total_prompt_tokens!: number;
  @Field(() => Float, { name: "totalCompletionTokens" }) total_completion_tokens!: number;
  @Field(() => Float, { name: "totalTokens" }) total_tokens!: number;
  @Field(() => Float, { name: "totalCachedPromptTokens" }) total_cached_prompt_tokens!: number;
  @Field(() => Float, { name: "totalRequests" }) total_requests!: number;
  @Field(() => Float, { name: "totalCostMicros" }) total_cost_micros!: number;
}

@ObjectType("UsageByModel")
export class UsageByModelType extends UsageTotalsType {
  @Field() model!: string;
  @Field({ name: "serviceTier" }) service_tier!: string;
}

@ObjectType("UsageSummary", { description: "Totals over the window, and by model and service tier." })
export class UsageSummaryType implements UsageSummaryDto {
  @Field(() => UsageTotalsType) summary!: UsageSummaryDto["summary"];
  @Field(() => [UsageByModelType], { name: "byModel" }) by_model!: UsageSummaryDto["by_model"];
}
