/**
 * Stored responses over GraphQL (issue 6, item 7): thin over `BackgroundResponsesService`, the
 * service the REST routes use (same deadlines applied on read, same cancel).
 */
import { Arg, Ctx, ID, Int, Mutation, Query, Resolver } from "type-graphql";
import { ResponseListType, ResponseType } from "../schema/response.types.js";
import type { BackgroundResponsesService } from "../services/inference/responses/background-responses.service.js";
import type { RequestContext } from "../services/platform/context.js";
import { type ResponseObject, outputText } from "../services/inference/protocols/openai-responses.protocol.js";

@Resolver()
export class ResponseResolver {
  constructor(private readonly background: BackgroundResponsesService) {}

  @Query(() => ResponseType, { description: "One stored response of the caller's team (NOT_FOUND otherwise)." })
  async response(@Arg("id", () => ID) id: string, @Ctx() ctx: RequestContext): Promise<ResponseType> {
    return toGraphql(await this.background.get(ctx, id));
  }

  @Query(() => ResponseListType, { description: "The team's stored responses, newest first." })
  async responses(
    @Ctx() ctx: RequestContext,
    @Arg("limit", () => Int, { nullable: true }) limit?: number,
    @Arg("streamId", () => ID, { nullable: true }) streamId?: string,
  ): Promise<ResponseListType> {
    const list = await this.background.list(ctx, {
      limit: limit === undefined || limit === null ? undefined : String(limit),
      stream_id: streamId ?? undefined,
    });
    return {
      data: list.data.map((r) => ({ id: r.id, createdAt: r.created_at, model: r.model, status: r.status })),
      hasMore: list.has_more,
    };
  }

  @Mutation(() => ResponseType, {
    description: "Cancels an in-progress response (it is kept, `cancelled`); an ended one is returned as it is.",
  })
  async cancelResponse(@Arg("id", () => ID) id: string, @Ctx() ctx: RequestContext): Promise<ResponseType> {
    return toGraphql(await this.background.cancel(ctx, id));
  }
}

function toGraphql(r: ResponseObject): ResponseType {
  const text = outputText(r);
  return {
    id: r.id,
    createdAt: r.created_at,
    model: r.model,
    status: r.status,
    incompleteReason: r.incomplete_details?.reason ?? null,
    outputText: r.output.length > 0 ? text : null,
    error: r.error,
    usage: r.usage && {
      inputTokens: r.usage.input_tokens,
      outputTokens: r.usage.output_tokens,
      totalTokens: r.usage.total_tokens,
      cachedTokens: r.usage.input_tokens_details.cached_tokens,
    },
    serviceTier: r.service_tier,
    functionCalls: r.output.flatMap((item) =>
      item.type === "function_call"
        ? [{ id: item.id, callId: item.call_id, name: item.name, arguments: item.arguments }]
        : [],
    ),
  };
}
