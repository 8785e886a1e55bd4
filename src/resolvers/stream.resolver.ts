/**
 * Streams over GraphQL (issue 6, item 7): thin over `StreamsService`, the service the REST routes
 * use (same team scoping, same validation and 400/404): queries `stream`, `streams`, mutations
 * `createStream`, `updateStream`.
 */
import { Arg, Ctx, ID, Mutation, Query, Resolver } from "type-graphql";
import { absent } from "../schema/mapped-arg.js";
import { StreamSummaryType, StreamType } from "../schema/stream.types.js";
import type { RequestContext } from "../services/platform/context.js";
import type { StreamDetail, StreamsService } from "../services/inference/responses/streams.service.js";

@Resolver()
export class StreamResolver {
  constructor(private readonly service: StreamsService) {}

  @Query(() => StreamType, { description: "One stream of the caller's team with its counters (NOT_FOUND otherwise)." })
  async stream(@Arg("id", () => ID) id: string, @Ctx() ctx: RequestContext): Promise<StreamType> {
    return toGraphql(await this.service.get(ctx, id));
  }

  @Query(() => [StreamSummaryType], { description: "The team's streams, newest first (without counters)." })
  async streams(@Ctx() ctx: RequestContext): Promise<StreamSummaryType[]> {
    const { items } = await this.service.list(ctx);
    return items.map((s) => StreamSummaryType.from(s));
  }

  @Mutation(() => StreamSummaryType, {
    description: "Creates an open stream of the caller's team (`POST /v1/streams`): name 1–256 characters, window 24h.",
  })
  async createStream(
    @Arg("name") name: string,
    @Ctx() ctx: RequestContext,
    @Arg("window", () => String, { nullable: true, description: "Only 24h (the default)." }) window?: string | null,
  ): Promise<StreamSummaryType> {
    return StreamSummaryType.from(await this.service.create(ctx, { name, window: absent(window) }));
  }

  @Mutation(() => StreamType, {
    description:
      "Renames a stream and/or sets its status to archived or cancelled (`PATCH /v1/streams/{id}`); cancelling cancels its unfinished background responses. Either way it takes no new requests.",
  })
  async updateStream(
    @Arg("id", () => ID) id: string,
    @Ctx() ctx: RequestContext,
    @Arg("name", () => String, { nullable: true }) name?: string | null,
    @Arg("status", () => String, { nullable: true, description: "archived or cancelled." }) status?: string | null,
  ): Promise<StreamType> {
    return toGraphql(await this.service.update(ctx, id, { name: absent(name), status: absent(status) }));
  }
}

function toGraphql(s: StreamDetail): StreamType {
  return {
    id: s.id,
    name: s.name,
    window: s.window,
    status: s.status,
    createdAt: s.created_at,
    updatedAt: s.updated_at,
    cancelledAt: s.cancelled_at,
    archivedAt: s.archived_at,
    totalItems: s.total_items,
    pendingItems: s.pending_items,
    runningItems: s.running_items,
    completedItems: s.completed_items,
    failedItems: s.failed_items,
    cancelledItems: s.cancelled_items,
    completionRatio: s.completion_ratio,
    totalPromptTokens: s.total_prompt_tokens,
    totalCompletionTokens: s.total_completion_tokens,
    totalTokens: s.total_tokens,
    totalCostMicros: s.total_cost_micros,
    lastCompletionAt: s.last_completion_at,
    latestCompletionId: s.latest_completion_id,
  };
}
