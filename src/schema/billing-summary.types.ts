/**
 * GraphQL types of the billing summary (issue 10, items 3 and 7): the REST shapes (spec: Billing)
 * with camelCase field names; token counts and micro-USD as Floats that are integers.
 */
import { Field, Float, Int, ObjectType } from "type-graphql";
import type {
  BillingByModelDto,
  BillingPricingDto,
  BillingSummaryDto,
} from "../services/usage/billing-summary.service.js";

@ObjectType("BillingPricing", {
  description: "A price version: micro-USD per million tokens, in force from `effectiveFrom`.",
})
export class BillingPricingType implements BillingPricingDto {
  @Field() model!: string;
  @Field(() => Float, { name: "promptTokenPriceMicros" }) prompt_token_price_micros!: number;
  @Field(() => Float, { name: "completionTokenPriceMicros" }) completion_token_price_micros!: number;
  @Field({ name: "effectiveFrom", description: "ISO 8601." }) effective_from!: string;
}

@ObjectType("BillingByModel", { description: "One model, service tier and price version over the window." })
export class BillingByModelType implements BillingByModelDto {
  @Field() model!: string;
  @Field({ name: "serviceTier" }) service_tier!: string;
  @Field(() => Float, { name: "promptTokens" }) prompt_tokens!: number;
  @Field(() => Float, { name: "completionTokens" }) completion_tokens!: number;
  @Field(() => Float, { name: "totalTokens" }) total_tokens!: number;
  @Field(() => Float, { name: "cachedPromptTokens" }) cached_prompt_tokens!: number;
  @Field(() => Float, { name: "totalRequests" }) total_requests!: number;
  @Field(() => Float, { name: "costMicros" }) cost_micros!: number;
  @Field(() => BillingPricingType, { nullable: true, description: "Null for a model with no stored price." })
  pricing!: BillingPricingDto | null;
}

@ObjectType("BillingSummaryTotals")
export class BillingSummaryTotalsType {
  @Field(() => Int) days!: number;
  @Field(() => Float, { name: "totalPromptTokens" }) total_prompt_tokens!: number;
  @Field(() => Float, { name: "totalCompletionTokens" }) total_completion_tokens!: number;
  @Field(() => Float, { name: "totalTokens" }) total_tokens!: number;
  @Field(() => Float, { name: "totalCachedPromptTokens" }) total_cached_prompt_tokens!: number;
  @Field(() => Float, { name: "totalRequests" }) total_requests!: number;
  @Field(() => Float, { name: "estimatedCostMicros" }) estimated_cost_micros!: number;
  @Field(() => Float, { name: "creditBalanceMicros" }) credit_balance_micros!: number;
}

@ObjectType("BillingSummary", { description: "Usage and cost over the window with the pricing used, and the balance." })
export class BillingSummaryType implements BillingSummaryDto {
  @Field(() => BillingSummaryTotalsType) summary!: BillingSummaryDto["summary"];
  @Field(() => [BillingByModelType], { name: "byModel" }) by_model!: BillingByModelDto[];
}
