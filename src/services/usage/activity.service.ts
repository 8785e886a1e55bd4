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
 *   midnight UTC), strictly checked (`isoDateTime`); bounds are exclusive, and `created_after`
 *   must come before `created_before` (else 400). Usage windows are whole UTC days: `days` = N covers today
 *   and the N − 1 days before it.
 * - Usage and the models used are read from `usage_daily`, the per-day roll-up a trigger keeps
 *   of every ended activity row (migration 1764770000000), so they cost the same at any table
 *   size; rows still in flight (`pending`, `running`: no tokens or cost yet) are counted from
 *   `activity` through its partial in-flight index, in the same statement (one snapshot).
 * - Usage counts every recorded request (failed and cancelled ones carry their real tokens and
 *   cost, usually zero; those in flight count as requests), so sums equal the sums of the
 *   activity records in the same window, as the billing summary's do.
 *   `service_tier` is the tier the request was served at (`flex` for Responses that asked for it,
 *   else `default`); `by_model` has one item per model and tier.
 */
import { And, type DataSource, type FindOptionsSelect, type FindOptionsWhere, LessThan, MoreThan } from "typeorm";
import { z } from "zod";
import { queryRows } from "../../db/sql.js";
import { ActivityEntity } from "../../entities/activity.entity.js";
import { AppError, parseInput, parseUuidParam } from "../../shared/errors.js";
import type { RequestContext } from "../platform/context.js";
import { usageScope } from "../platform/policy.js";
import { isoDateTime, optionalQuery, pgText, queryInt } from "../platform/validation.js";

export const ACTIVITY_TYPES = ["standalone", "batch", "stream"] as const;
export const ACTIVITY_STATUSES = ["pending", "running", "completed", "failed", "cancelled"] as const;

/** `GET /control/v1/activity` query (spec: Limits: `page` ≥ 1 default 1, `page_size` 1–100 default 25). */
export const activityListQuery = z
  .object({
    page: optionalQuery(queryInt(1, 1_000_000)),
    page_size: optionalQuery(queryInt(1, 100)),
    type: optionalQuery(z.enum(ACTIVITY_TYPES)),
    status: optionalQuery(z.enum(ACTIVITY_STATUSES)),
    model: optionalQuery(pgText().min(1).max(512)),
    created_after: optionalQuery(isoDateTime),
    created_before: optionalQuery(isoDateTime),
    api_key_id: optionalQuery(z.uuid()),
    user_id: optionalQuery(z.uuid()),
  })
  // Both bounds are exclusive: a window that ends before it starts (or where it starts) is a mistake, not "empty".
  .refine((q) => !q.created_after || !q.created_before || q.created_after < q.created_before, {
    path: ["created_before"],
    message: "must be after created_after",
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

/** Sums over `usage_daily` rows (the roll-up of `activity`, migration 1764770000000). */
const TOTALS = `sum(prompt_tokens)::text AS prompt_tokens,
  sum(completion_tokens)::text AS completion_tokens,
  sum(total_tokens)::text AS total_tokens,
  sum(cached_prompt_tokens)::text AS cached_prompt_tokens,
  sum(request_count)::text AS request_count,
  sum(cost_micros)::text AS cost_micros`;

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

/**
 * SQL for the `days` window's first instant: midnight UTC, `days − 1` days before today, with
 * `days` in the parameter `param` (e.g. `$3`). Shared with the billing summary.
 */
export function usageWindowStart(param: string): string {
  return `date_trunc('day', now() AT TIME ZONE 'UTC') AT TIME ZONE 'UTC' - make_interval(days => ${param}::int - 1)`;
}

/** The `days` window's first UTC day, `days − 1` days before today: `usageWindowStart` as a date, for `usage_daily`. */
const WINDOW_START = `(now() AT TIME ZONE 'UTC')::date - ($3::int - 1)`;

/**
 * The scope's requests in flight inside the `days` window (`$1` team, `$2` user or null, `$3`
 * days), by UTC day, model and tier, as a second branch of a usage statement: `part` 'f', zero
 * tokens and cost (they are charged when they end, and then counted by `usage_daily`).
 */
const IN_FLIGHT_PART = `SELECT 'f' AS part, to_char((created_at AT TIME ZONE 'UTC')::date, 'YYYY-MM-DD') AS date,
         model, service_tier, '0' AS prompt_tokens, '0' AS completion_tokens, '0' AS total_tokens,
         '0' AS cached_prompt_tokens, count(*)::text AS request_count, '0' AS cost_micros
    FROM activity
   WHERE status IN ('pending', 'running') AND created_at >= ${usageWindowStart("$3")}
     AND team_id = $1 AND ($2::uuid IS NULL OR user_id = $2)
   GROUP BY 2, 3, 4`;

const TOTAL_KEYS = [
  "prompt_tokens",
  "completion_tokens",
  "total_tokens",
  "cached_prompt_tokens",
  "request_count",
  "cost_micros",
] as const satisfies ReadonlyArray<keyof UsageTotals>;

/** Adds `b`'s totals into `a`. */
function addTotals(a: UsageTotals, b: UsageTotals): void {
  for (const k of TOTAL_KEYS) a[k] += b[k];
}

/** Reads of the caller's activity records and usage. */
export class ActivityService {
  constructor(private readonly ds: DataSource) {}

  /**
   * `GET /control/v1/activity`: newest first, filtered, one page; the records come without their
   * bodies (`bodyJson`, `resultJson` undefined: the detail shows them).
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
    const repo = this.ds.getRepository(ActivityEntity);
    const [items, total] = await Promise.all([
      repo.find({
        select: this.listColumns(),
        where,
        order: { createdAt: "DESC", id: "DESC" },
        skip: (page - 1) * pageSize,
        take: pageSize,
      }),
      this.total(scope, q, () => repo.count({ where })),
    ]);
    return { items, page, page_size: pageSize, total };
  }

  /**
   * Every column of a record but its bodies (`body_json`, `result_json`: up to the 8 MiB request
   * limit each), which only the detail shows: a page of 100 read them all for nothing.
   */
  private listColumns(): FindOptionsSelect<ActivityEntity> {
    this.columns ??= Object.fromEntries(
      this.ds
        .getMetadata(ActivityEntity)
        .columns.map((c) => c.propertyName)
        .filter((p) => p !== "bodyJson" && p !== "resultJson")
        .map((p) => [p, true]),
    ) as FindOptionsSelect<ActivityEntity>;
    return this.columns;
  }

  private columns?: FindOptionsSelect<ActivityEntity>;

  /**
   * The list's `total`, exact, without counting millions of rows (issue 12, item 4):
   * - asking for rows in flight (`pending`, `running`): a count over the partial in-flight index
   *   (a few rows);
   * - no date bound: the sum of the matching `activity_counts` groups (migration 1764880000000;
   *   every row of every status, per user, key, model, type and status);
   * - date bounds with at most `user_id` and `model`: `usage_daily` for the whole UTC days inside
   *   the bounds (ended rows), `activity` for the part-days at the edges (ended rows, at most two
   *   days), and the rows in flight inside the bounds;
   * - date bounds with `type`, an ended `status` or `api_key_id`: `count(*)` over `activity` (no
   *   roll-up has both the day and those columns; the filter indexes keep it to the matching
   *   rows — the one case whose cost grows with the rows matched, see bench/NOTES.md).
   */
  private async total(
    scope: { teamId: string; userId: string | null },
    q: z.infer<typeof activityListQuery>,
    countRows: () => Promise<number>,
  ): Promise<number> {
    const userId = scope.userId;
    if (q.status === "pending" || q.status === "running") return countRows();
    if (!q.created_after && !q.created_before) {
      const [row] = await queryRows<{ n: string | null }>(
        this.ds,
        `SELECT sum(n)::text AS n FROM activity_counts
          WHERE team_id = $1 AND ($2::uuid IS NULL OR user_id = $2) AND ($3::uuid IS NULL OR api_key_id = $3)
            AND ($4::text IS NULL OR model = $4) AND ($5::text IS NULL OR type = $5)
            AND ($6::text IS NULL OR status = $6)`,
        [scope.teamId, userId, q.api_key_id ?? null, q.model ?? null, q.type ?? null, q.status ?? null],
      );
      return Number(row?.n ?? 0);
    }
    if (q.type || q.status || q.api_key_id) return countRows();
    // Whole UTC days: from the first midnight after `after` to the last midnight at or before
    // `before`; none when the bounds are less than that apart.
    const after = q.created_after ?? null;
    const before = q.created_before ?? null;
    const midnight = (d: Date) => new Date(Date.UTC(d.getUTCFullYear(), d.getUTCMonth(), d.getUTCDate()));
    const firstDay = after ? new Date(midnight(after).getTime() + 86_400_000) : null;
    const endDay = before ? midnight(before) : null;
    const whole = !firstDay || !endDay || firstDay < endDay;
    const day = (d: Date) => d.toISOString().slice(0, 10);
    const scoped = `team_id = $1 AND ($2::uuid IS NULL OR user_id = $2) AND ($3::text IS NULL OR model = $3)`;
    const ended = `status IN ('completed', 'failed', 'cancelled')`;
    const params: unknown[] = [scope.teamId, userId, q.model ?? null];
    const param = (v: unknown) => `$${params.push(v)}`;
    const parts: string[] = [
      // Rows in flight inside the bounds (not in usage_daily).
      `SELECT count(*) FROM activity WHERE ${scoped} AND status IN ('pending', 'running')
          ${after ? `AND created_at > ${param(after)}` : ""} ${before ? `AND created_at < ${param(before)}` : ""}`,
    ];
    if (whole) {
      parts.push(
        `SELECT COALESCE(sum(request_count), 0) FROM usage_daily WHERE ${scoped}
            ${firstDay ? `AND day >= ${param(day(firstDay))}::date` : ""}
            ${endDay ? `AND day < ${param(day(endDay))}::date` : ""}`,
      );
      if (after && firstDay) {
        parts.push(`SELECT count(*) FROM activity WHERE ${scoped} AND ${ended}
            AND created_at > ${param(after)} AND created_at < ${param(firstDay)}`);
      }
      if (before && endDay) {
        parts.push(`SELECT count(*) FROM activity WHERE ${scoped} AND ${ended}
            AND created_at >= ${param(endDay)} AND created_at < ${param(before)}`);
      }
    } else {
      parts.push(`SELECT count(*) FROM activity WHERE ${scoped} AND ${ended}
          AND created_at > ${param(after)} AND created_at < ${param(before)}`);
    }
    const [row] = await queryRows<{ n: string | null }>(
      this.ds,
      `SELECT (${parts.map((p) => `(${p})`).join(" + ")})::text AS n`,
      params,
    );
    return Number(row?.n ?? 0);
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
      `SELECT model FROM usage_daily WHERE team_id = $1 AND ($2::uuid IS NULL OR user_id = $2)
       UNION
       SELECT model FROM activity
        WHERE status IN ('pending', 'running') AND team_id = $1 AND ($2::uuid IS NULL OR user_id = $2)
       ORDER BY model`,
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
    const rows = await queryRows<TotalsRow & { part: string; date: string; model: string }>(
      this.ds,
      // Grouped by the date itself (not its text), in the covering index's order (team, day,
      // model): the sums stream out of an index-only scan with no hash or sort (bench/NOTES.md).
      // The requests in flight follow as a second branch, added in below.
      `(SELECT 'u' AS part, to_char(day, 'YYYY-MM-DD') AS date, model, NULL AS service_tier, ${TOTALS}
          FROM usage_daily
         WHERE team_id = $1 AND ($2::uuid IS NULL OR user_id = $2) AND day >= ${WINDOW_START}
         GROUP BY day, model ORDER BY day, model)
       UNION ALL (${IN_FLIGHT_PART})`,
      [scope.teamId, scope.userId, q.days ?? 30],
    );
    const items = new Map<string, UsageDailyItemDto>();
    for (const r of rows) {
      const key = `${r.date}\u0000${r.model}`;
      const item = items.get(key);
      if (item) addTotals(item, totals(r));
      else items.set(key, { date: r.date, model: r.model, ...totals(r) });
    }
    const sorted = [...items.values()].sort((a, b) =>
      a.date === b.date ? (a.model < b.model ? -1 : a.model > b.model ? 1 : 0) : a.date < b.date ? -1 : 1,
    );
    return { items: sorted };
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
         FROM (SELECT model, service_tier, prompt_tokens, completion_tokens, total_tokens, cached_prompt_tokens,
                      request_count, cost_micros
                 FROM usage_daily
                WHERE team_id = $1 AND ($2::uuid IS NULL OR user_id = $2) AND day >= ${WINDOW_START}
               UNION ALL
               SELECT model, service_tier, 0, 0, 0, 0, 1, 0
                 FROM activity
                WHERE status IN ('pending', 'running') AND created_at >= ${usageWindowStart("$3")}
                  AND team_id = $1 AND ($2::uuid IS NULL OR user_id = $2)) u
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

/** The activity record as this domain hands it to the transports (persisted shape; transports never import entities). */
export type { ActivityEntity } from "../../entities/activity.entity.js";
