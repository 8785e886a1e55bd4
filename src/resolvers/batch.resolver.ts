/**
 * Batches over GraphQL (issue 7, item 8): thin over `BatchesService`, the service the REST routes
 * use (same team scoping, same 400/404). Creating a batch is REST only (its body is up to 200 MB).
 */
import { Arg, Ctx, ID, Int, Mutation, Query, Resolver } from "type-graphql";
import { BatchType } from "../schema/batch.types.js";
import type { BatchObject, BatchesService } from "../services/batches/batches.service.js";
import type { RequestContext } from "../services/platform/context.js";

@Resolver()
export class BatchResolver {
  constructor(private readonly service: BatchesService) {}

  @Query(() => BatchType, { description: "One batch of the caller's team with progress (NOT_FOUND otherwise)." })
  async batch(@Arg("id", () => ID) id: string, @Ctx() ctx: RequestContext): Promise<BatchType> {
    return toGraphql(await this.service.get(ctx, id));
  }

  @Query(() => [BatchType], { description: "The team's batches, newest first; `after` a batch id to page on." })
  async batches(
    @Ctx() ctx: RequestContext,
    @Arg("limit", () => Int, { nullable: true }) limit?: number | null,
    @Arg("after", () => ID, { nullable: true }) after?: string | null,
  ): Promise<BatchType[]> {
    const query: Record<string, string> = {};
    if (limit != null) query.limit = String(limit);
    if (after != null) query.after = after;
    const { items } = await this.service.list(ctx, query);
    return items.map(toGraphql);
  }

  @Mutation(() => BatchType, {
    description: "Cancels a batch: items not started never run; running items finish and keep results.",
  })
  async cancelBatch(@Arg("id", () => ID) id: string, @Ctx() ctx: RequestContext): Promise<BatchType> {
    return toGraphql(await this.service.cancel(ctx, id));
  }
}

function toGraphql(b: BatchObject): BatchType {
  return {
    id: b.id,
    status: b.status,
    window: b.window,
    requestCount: b.request_count,
    requestCounts: b.request_counts,
    outputUrl: b.output_url,
    createdAt: b.created_at,
    updatedAt: b.updated_at,
    completedAt: b.completed_at,
    cancelledAt: b.cancelled_at,
    expiresAt: b.expires_at,
    totalPromptTokens: b.total_prompt_tokens,
    totalCompletionTokens: b.total_completion_tokens,
    totalTokens: b.total_tokens,
    totalCostMicros: b.total_cost_micros,
  };
}
