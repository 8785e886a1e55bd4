/**
 * Activity and usage reads (issue 10, items 1 and 2; spec: Activity record, Usage, "Control plane:
 * activity, usage, billing", Limits): the activity list with its filters and pages, one record's
 * detail, the models a caller has used, and daily and summed usage — all aggregated in SQL over
 * the `activity` table the group commit writes.
 *
 * Rules:
 * - Whose rows: `usageScope` (policy.ts; DESIGN §3 Roles): owners and admins see the whole team
 *   and may filter by `user_id`; members see their own rows only (naming another user → 403).
 *   A record of another team, or another member's for a member, is 404.
 * - Dates: `created_after` / `created_before` are ISO 8601 date-times (a bare date means its
 *   midnight UTC); bounds are exclusive. Usage windows are whole UTC days: `days` = N covers today
 *   and the N − 1 days before it.
 * - Usage counts every recorded request (failed and cancelled ones carry their real tokens and
 *   cost, usually zero), so sums equal the sums of the activity records in the same window.
 *   `service_tier` is the tier the request was served at (`flex` for Responses that asked for it,
 *   else `default`); `by_model` has one item per model and tier.
 */
import { And, type DataSource, type FindOptionsWhere, LessThan, MoreThan } from "typeorm";
import { z } from "zod";
import { queryRows } from "../db/sql.js";
import { ActivityEntity } from "../entities/activity.entity.js";
import { AppError, parseInput, parseUuidParam } from "../shared/errors.js";
import type { RequestContext } from "./context.js";
import { usageScope } from "./policy.js";
import { optionalQuery, pgText, queryInt } from "./validation.js";

export const ACTIVITY_TYPES = ["standalone", "batch", "stream"] as const;
export const ACTIVITY_STATUSES = ["pending", "running", "completed", "failed", "cancelled"] as const;

/** An ISO 8601 date or date-time (with a zone, or UTC when none is given). */
const isoDateTime = z
  .string()
  .regex(
    /^\d{4}-\d{2}-\d{2}(?:[T ]\d{2}:\d{2}(?::\d{2}(?:\.\d{1,9})?)?(?:Z|[+-]\d{2}:?\d{2})?)?$/,
    "must be an ISO 8601 date or date-time",
  )
  .transform((s, ctx) => {
    const hasZone = /(?:Z|[+-]\d{2}:?\d{2})$/.test(s) && s.length > 10;
    const ms = Date.parse(hasZone ? s : `${s.length === 10 ? `${s}T00:00:00` : s}Z`);
    if (Number.isNaN(ms)) {
      ctx.addIssue({ code: "custom", message: "must be a valid date" });
      return z.NEVER;
    }
    return new Date(ms);
  });

/** `GET /control/v1/activity` query (spec: Limits: `page` ≥ 1 default 1, `page_size` 1–100 default 25). */
export const activityListQuery = z.object({
  page: optionalQuery(queryInt(1, 1_000_000)),
  page_size: optionalQuery(queryInt(1, 100)),
  type: optionalQuery(z.enum(ACTIVITY_TYPES)),
  status: optionalQuery(z.enum(ACTIVITY_STATUSES)),
  model: optionalQuery(pgText().min(1).max(512)),
  created_after: optionalQuery(isoDateTime),
  created_before: optionalQuery(isoDateTime),
  api_key_id: optionalQuery(z.uuid()),
  user_id: optionalQuery(z.uuid()),
});

/** `user_id` alone (`/activity/models`). */
export const userFilterQuery = z.object({ user_id: optionalQuery(z.uuid()) });

/** `days` 1–365 (default 30) and `user_id` (usage daily and summary). */
export const usageQuery = z.object({
  days: optionalQuery(queryInt(1, 365)),
  user_id: optionalQuery(z.uuid()),
});

/** spec: Activity record, list wrapper (items shaped by the transport). */
export interface ActivityList {
  items: ActivityEntity[];
  page: number;
  page_size: number;
  total: number;
}

/** Token and request totals of one group of activity records. */
export interface UsageTotals {
  prompt_tokens: number;
  completion_tokens: number;
  total_tokens: number;
  cached_prompt_tokens: number;
  request_count: number;
  cost_micros: number;
}

/** spec: Usage, daily item (`date` is `YYYY-MM-DD`, UTC). */
export interface UsageDailyItemDto extends UsageTotals {
  date: string;
  model: string;
}

/** spec: Usage summary. */
export interface UsageSummaryDto {
  summary: {
    total_prompt_tokens: number;
    total_completion_tokens: number;
    total_tokens: number;
    total_cached_prompt_tokens: number;
    total_requests: number;
    total_cost_micros: number;
  };
  by_model: Array<{
    model: string;
    service_tier: string;
    total_prompt_tokens: number;
    total_completion_tokens: number;
    total_tokens: number;
    total_cached_prompt_tokens: number;
    total_requests: number;
    total_cost_micros: number;
  }>;
}

const TOTALS = `COALESCE(sum(prompt_tokens), 0)::bigint::text AS prompt_tokens,
  COALESCE(sum(completion_tokens), 0)::bigint::text AS completion_tokens,
  COALESCE(sum(total_tokens), 0)::bigint::text AS total_tokens,
  COALESCE(sum(cached_prompt_tokens), 0)::bigint::text AS cached_prompt_tokens,
  count(*)::bigint::text AS request_count,
  COALESCE(sum(cost_micros), 0)::text AS cost_micros`;

type TotalsRow = Record<keyof UsageTotals, string>;

function totals(r: TotalsRow): UsageTotals {
  return {
    prompt_tokens: Number(r.prompt_tokens),
    completion_tokens: Number(r.completion_tokens),
    total_tokens: Number(r.total_tokens),
    cached_prompt_tokens: Number(r.cached_prompt_tokens),
    request_count: Number(r.request_count),
    cost_micros: Number(r.cost_micros),
  };
}

/** The `days` window's first instant: midnight UTC, `days − 1` days before today. */
const WINDOW_START = `date_trunc('day', now() AT TIME ZONE 'UTC') AT TIME ZONE 'UTC' - make_interval(days => $3::int - 1)`;

/** Reads of the caller's activity records and usage. */
export class ActivityService {
  constructor(private readonly ds: DataSource) {}

  /**
   * `GET /control/v1/activity`: newest first, filtered, one page.
   * @throws AppError 400 naming a bad query field; 401; 403 when a member names another user.
   */
  async list(ctx: RequestContext, query: unknown): Promise<ActivityList> {
    const q = parseInput(activityListQuery, query ?? {});
    const scope = usageScope(ctx, q.user_id);
    const page = q.page ?? 1;
    const pageSize = q.page_size ?? 25;
    const createdAt =
      q.created_after && q.created_before
        ? And(MoreThan(q.created_after), LessThan(q.created_before))
        : q.created_after
          ? MoreThan(q.created_after)
          : q.created_before
            ? LessThan(q.created_before)
            : undefined;
    const where: FindOptionsWhere<ActivityEntity> = {
      teamId: scope.teamId,
      ...(scope.userId ? { userId: scope.userId } : {}),
      ...(q.type ? { type: q.type } : {}),
      ...(q.status ? { status: q.status } : {}),
      ...(q.model ? { model: q.model } : {}),
      ...(q.api_key_id ? { apiKeyId: q.api_key_id } : {}),
      ...(createdAt ? { createdAt } : {}),
    };
    const [items, total] = await this.ds.getRepository(ActivityEntity).findAndCount({
      where,
      order: { createdAt: "DESC", id: "DESC" },
      skip: (page - 1) * pageSize,
      take: pageSize,
    });
    return { items, page, page_size: pageSize, total };
  }

  /**
   * `GET /control/v1/activity/{request_id}`: one record with its bodies (null under zero data
   * retention).
   * @throws AppError 400 for an id that is not a UUID; 401; 404 when it is not in the caller's scope.
   */
  async get(ctx: RequestContext, requestId: unknown): Promise<ActivityEntity> {
    const scope = usageScope(ctx);
    const id = parseUuidParam("request_id", requestId);
    const record = await this.ds.getRepository(ActivityEntity).findOneBy({ id, teamId: scope.teamId });
    if (!record || (scope.userId !== null && record.userId !== scope.userId)) {
      throw AppError.notFound("Activity record not found");
    }
    return record;
  }

  /**
   * `GET /control/v1/activity/models`: the models named in the scope's records, alphabetically.
   * @throws as `list`.
   */
  async models(ctx: RequestContext, query: unknown): Promise<string[]> {
    const q = parseInput(userFilterQuery, query ?? {});
    const scope = usageScope(ctx, q.user_id);
    const rows = await queryRows<{ model: string }>(
      this.ds,
      `SELECT DISTINCT model FROM activity WHERE team_id = $1 AND ($2::uuid IS NULL OR user_id = $2) ORDER BY model`,
      [scope.teamId, scope.userId],
    );
    return rows.map((r) => r.model);
  }

  /**
   * `GET /control/v1/usage/daily`: one item per UTC day and model with any record, oldest first.
   * @throws as `list`.
   */
  async daily(ctx: RequestContext, query: unknown): Promise<{ items: UsageDailyItemDto[] }> {
    const q = parseInput(usageQuery, query ?? {});
    const scope = usageScope(ctx, q.user_id);
    const rows = await queryRows<TotalsRow & { date: string; model: string }>(
      this.ds,
      `SELECT to_char(created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD') AS date, model, ${TOTALS}
         FROM activity
        WHERE team_id = $1 AND ($2::uuid IS NULL OR user_id = $2) AND created_at >= ${WINDOW_START}
        GROUP BY 1, 2 ORDER BY 1, 2`,
      [scope.teamId, scope.userId, q.days ?? 30],
    );
    return { items: rows.map((r) => ({ date: r.date, model: r.model, ...totals(r) })) };
  }

  /**
   * `GET /control/v1/usage/summary`: totals over the window, and by model and service tier.
   * @throws as `list`.
   */
  async summary(ctx: RequestContext, query: unknown): Promise<UsageSummaryDto> {
    const q = parseInput(usageQuery, query ?? {});
    const scope = usageScope(ctx, q.user_id);
    const rows = await queryRows<TotalsRow & { model: string; service_tier: string }>(
      this.ds,
      `SELECT model, service_tier, ${TOTALS}
         FROM activity
        WHERE team_id = $1 AND ($2::uuid IS NULL OR user_id = $2) AND created_at >= ${WINDOW_START}
        GROUP BY model, service_tier ORDER BY model, service_tier`,
      [scope.teamId, scope.userId, q.days ?? 30],
    );
    const byModel = rows.map((r) => ({ model: r.model, service_tier: r.service_tier, ...totals(r) }));
    const sum = (k: keyof UsageTotals) => byModel.reduce((s, m) => s + m[k], 0);
    return {
      summary: {
        total_prompt_tokens: sum("prompt_tokens"),
        total_completion_tokens: sum("completion_tokens"),
        total_tokens: sum("total_tokens"),
        total_cached_prompt_tokens: sum("cached_prompt_tokens"),
        total_requests: sum("request_count"),
        total_cost_micros: sum("cost_micros"),
      },
      by_model: byModel.map((m) => ({
        model: m.model,
        service_tier: m.service_tier,
        total_prompt_tokens: m.prompt_tokens,
        total_completion_tokens: m.completion_tokens,
        total_tokens: m.total_tokens,
        total_cached_prompt_tokens: m.cached_prompt_tokens,
        total_requests: m.request_count,
        total_cost_micros: m.cost_micros,
      })),
    };
  }
}
