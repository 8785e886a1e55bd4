/**
 * Activity and usage resolver (issue 10, items 1 and 2): thin over `ActivityService`. GraphQL
 * arguments are handed to the service as the REST query would carry them (strings), so both
 * surfaces validate alike.
 */
import { Arg, Ctx, ID, Int, Query, Resolver } from "type-graphql";
import { ActivityEntity } from "../entities/activity.entity.js";
import { ActivityPageType, UsageDailyItemType, UsageSummaryType } from "../schema/usage.types.js";
import type {
  ActivityList,
  ActivityService,
  UsageDailyItemDto,
  UsageSummaryDto,
} from "../services/usage/activity.service.js";
import type { RequestContext } from "../services/platform/context.js";

/** Drops absent arguments and stringifies the rest, as a query string would carry them. */
function asQuery(args: Record<string, string | number | null | undefined>): Record<string, string> {
  const query: Record<string, string> = {};
  for (const [k, v] of Object.entries(args)) if (v != null) query[k] = String(v);
  return query;
}

@Resolver()
export class ActivityResolver {
  constructor(private readonly activity: ActivityService) {}

  @Query(() => ActivityPageType, {
    description: "The team's activity (members: their own), newest first, filtered; dates are ISO 8601.",
  })
  activityRecords(
    @Ctx() ctx: RequestContext,
    @Arg("page", () => Int, { nullable: true }) page?: number | null,
    @Arg("pageSize", () => Int, { nullable: true }) pageSize?: number | null,
    @Arg("type", () => String, { nullable: true }) type?: string | null,
    @Arg("status", () => String, { nullable: true }) status?: string | null,
    @Arg("model", () => String, { nullable: true }) model?: string | null,
    @Arg("createdAfter", () => String, { nullable: true }) createdAfter?: string | null,
    @Arg("createdBefore", () => String, { nullable: true }) createdBefore?: string | null,
    @Arg("apiKeyId", () => ID, { nullable: true }) apiKeyId?: string | null,
    @Arg("userId", () => ID, { nullable: true, description: "Owners and admins: one member's." })
    userId?: string | null,
  ): Promise<ActivityList> {
    return this.list(
      asQuery({
        page,
        page_size: pageSize,
        type,
        status,
        model,
        created_after: createdAfter,
        created_before: createdBefore,
        api_key_id: apiKeyId,
        user_id: userId,
      }),
      ctx,
    );
  }

  /** `GET /control/v1/activity` with its query as REST carries it (the GraphQL query above lands here too). */
  list(query: unknown, ctx: RequestContext): Promise<ActivityList> {
    return this.activity.list(ctx, query);
  }

  /** `GET /control/v1/activity/models`. */
  models(query: unknown, ctx: RequestContext): Promise<string[]> {
    return this.activity.models(ctx, query);
  }

  /** `GET /control/v1/usage/daily`. */
  daily(query: unknown, ctx: RequestContext): Promise<{ items: UsageDailyItemDto[] }> {
    return this.activity.daily(ctx, query);
  }

  /** `GET /control/v1/usage/summary`. */
  summary(query: unknown, ctx: RequestContext): Promise<UsageSummaryDto> {
    return this.activity.summary(ctx, query);
  }

  @Query(() => ActivityEntity, { description: "One activity record with its bodies (NOT_FOUND outside your scope)." })
  activityRecord(@Arg("id", () => ID) id: string, @Ctx() ctx: RequestContext): Promise<ActivityEntity> {
    return this.activity.get(ctx, id);
  }

  @Query(() => [String], { description: "Models named in the activity in scope, alphabetically." })
  activityModels(
    @Ctx() ctx: RequestContext,
    @Arg("userId", () => ID, { nullable: true }) userId?: string | null,
  ): Promise<string[]> {
    return this.models(asQuery({ user_id: userId }), ctx);
  }

  @Query(() => [UsageDailyItemType], { description: "Usage per UTC day and model over the last `days` (1–365, 30)." })
  async usageDaily(
    @Ctx() ctx: RequestContext,
    @Arg("days", () => Int, { nullable: true }) days?: number | null,
    @Arg("userId", () => ID, { nullable: true }) userId?: string | null,
  ): Promise<UsageDailyItemDto[]> {
    return (await this.daily(asQuery({ days, user_id: userId }), ctx)).items;
  }

  @Query(() => UsageSummaryType, { description: "Usage totals over the last `days` (1–365, 30), and by model." })
  usageSummary(
    @Ctx() ctx: RequestContext,
    @Arg("days", () => Int, { nullable: true }) days?: number | null,
    @Arg("userId", () => ID, { nullable: true }) userId?: string | null,
  ): Promise<UsageSummaryDto> {
    return this.summary(asQuery({ days, user_id: userId }), ctx);
  }
}
