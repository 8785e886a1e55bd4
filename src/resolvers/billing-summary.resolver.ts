/**
 * Billing summary resolver (issue 10, items 3 and 7): thin over `BillingSummaryService`; REST's
 * `GET /control/v1/billing/summary` and GraphQL's `billingSummary` both land in `summary`.
 */
import { Arg, Ctx, Int, Query, Resolver } from "type-graphql";
import { BillingSummaryType } from "../schema/billing-summary.types.js";
import type { BillingSummaryDto, BillingSummaryService } from "../services/usage/billing-summary.service.js";
import type { RequestContext } from "../services/platform/context.js";

@Resolver()
export class BillingSummaryResolver {
  constructor(private readonly billing: BillingSummaryService) {}

  /** `GET /control/v1/billing/summary` with its query as REST carries it (strings). */
  summary(query: unknown, ctx: RequestContext): Promise<BillingSummaryDto> {
    return this.billing.summary(ctx, query);
  }

  @Query(() => BillingSummaryType, {
    description:
      "Owners and admins: usage and cost over the last `days` UTC days (1–365, 30) by model, tier and price.",
  })
  billingSummary(
    @Ctx() ctx: RequestContext,
    @Arg("days", () => Int, { nullable: true }) days?: number | null,
  ): Promise<BillingSummaryDto> {
    // As a query string would carry it, so both surfaces validate alike.
    return this.summary(days == null ? {} : { days: String(days) }, ctx);
  }
}
