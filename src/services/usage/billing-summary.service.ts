/**
 * The billing summary (issue 10, item 3; spec: Billing, "Control plane: activity, usage, billing"):
 * usage and cost over the last `days` whole UTC days with the pricing each request was charged,
 * and the team's credit balance. Aggregated in SQL over the `usage_daily` roll-up (and `activity`
 * where a day had two prices, and for requests in flight) joined to `model_prices` (see `SUMMARY_SQL`).
 *
 * Rules:
 * - Owners and admins only (`billing.manage`, DESIGN §3 Roles): members get 403. The whole team's
 *   records count.
 * - The window is the usage window (`usageWindowStart`, activity.service.ts): `days` = N (1–365,
 *   default 30) covers today and the N − 1 days before it, in UTC.
 * - `by_model` has one item per model, service tier and price version: a request belongs to the
 *   version in force when it was received (its `created_at`; the rule `PriceBook.pricesAt`
 *   charges by), so when a model's price changed inside the window it shows one item per price,
 *   each with the `pricing` its requests paid. Items are ordered by model, tier, `effective_from`.
 *   A model with no stored version (not in any catalog since the history began) has `pricing` null.
 * - A team's custom model is charged its reference model's versions (`PriceBook.pricesAt` by
 *   `limitKey`), so its items are split by and show those (`pricing.model` names the reference
 *   model), never versions stored under the custom model's own id (a platform model dropped from
 *   the catalog that shared its name). The reference is the custom model's as it stands now
 *   (`customPriceModelId`); the records of a custom model deleted since are priced by their own id.
 * - Sums are the activity records' sums: every recorded request counts (failed and cancelled
 *   ones carry their real tokens and cost, usually zero); `estimated_cost_micros` is the sum of
 *   their `cost_micros` (what was charged, before any cap at the balance).
 * - Prices are micro-USD per million tokens (DESIGN §3 Money); `effective_from` is ISO 8601.
 */
import type { DataSource } from "typeorm";
import { z } from "zod";
import { queryRows } from "../../db/sql.js";
import { CustomModelEntity } from "../../entities/custom-model.entity.js";
import { parseInput } from "../../shared/errors.js";
import { usageWindowStart } from "./activity.service.js";
import type { RequestContext } from "../platform/context.js";
import { type PlatformModels, customPriceModelId } from "../models/model-sources.js";
import { authorize } from "../platform/policy.js";
import { optionalQuery, queryInt } from "../platform/validation.js";

/** `GET /control/v1/billing/summary` query: `days` 1–365 (default 30). */
export const billingSummaryQuery = z.object({ days: optionalQuery(queryInt(1, 365)) });

/** spec: Billing, `pricing` of a `by_model` item (prices in micro-USD per million tokens). */
export interface BillingPricingDto {
  model: string;
  prompt_token_price_micros: number;
  completion_token_price_micros: number;
  /** ISO 8601: when this price version took effect. */
  effective_from: string;
}

/** spec: Billing, `by_model` item. */
export interface BillingByModelDto {
  model: string;
  service_tier: string;
  prompt_tokens: number;
  completion_tokens: number;
  total_tokens: number;
  cached_prompt_tokens: number;
  total_requests: number;
  cost_micros: number;
  pricing: BillingPricingDto | null;
}

/** spec: Billing summary. */
export interface BillingSummaryDto {
  summary: {
    days: number;
    total_prompt_tokens: number;
    total_completion_tokens: number;
    total_tokens: number;
    total_cached_prompt_tokens: number;
    total_requests: number;
    estimated_cost_micros: number;
    credit_balance_micros: number;
  };
  by_model: BillingByModelDto[];
}

interface Row {
  model: string;
  service_tier: string;
  price_model: string | null;
  effective_from: Date | null;
  input_per_million_micros: string | null;
  output_per_million_micros: string | null;
  prompt_tokens: string;
  completion_tokens: string;
  total_tokens: string;
  cached_prompt_tokens: string;
  request_count: string;
  cost_micros: string;
}

/** Each version with the instant the next one of its model replaced it (null: still in force). */
const VERSIONS = `SELECT model_id, effective_from, input_per_million_micros, output_per_million_micros,
         lead(effective_from) OVER (PARTITION BY model_id ORDER BY effective_from) AS effective_to
    FROM model_prices`;

/** The window's first instant (timestamptz) and first UTC day (date), `days` in `$2`. */
const WINDOW_START = usageWindowStart("$2");
const WINDOW_START_DAY = `(now() AT TIME ZONE 'UTC')::date - ($2::int - 1)`;
/** Midnight UTC starting the `date` expression `d`, as timestamptz. */
const midnight = (d: string) => `(${d}::timestamp AT TIME ZONE 'UTC')`;
const ENDED = `('completed', 'failed', 'cancelled')`;
const IN_FLIGHT = `('pending', 'running')`;
/** Sums of one part over rows aliased `t`, each counting `requests` requests. */
const PART_SUMS = (t: string, requests: string) =>
  `sum(${t}.prompt_tokens) AS prompt_tokens, sum(${t}.completion_tokens) AS completion_tokens,
   sum(${t}.total_tokens) AS total_tokens, sum(${t}.cached_prompt_tokens) AS cached_prompt_tokens,
   sum(${requests}) AS request_count, sum(${t}.cost_micros) AS cost_micros`;

/**
 * The summary, read from the `usage_daily` roll-up wherever a day has one price (issue 12, item 4:
 * 365 days of a 10-million-row team scanned `activity` for ~1 s per call). Three parts, summed:
 * - ended requests on days where one price version of their model was in force all day (every
 *   day but those on which a version starts after midnight): `usage_daily` rows (a few per day
 *   and model), priced by the version in force at that day's midnight;
 * - ended requests on the other days, only of the model whose price changed that day: the
 *   activity rows themselves, each priced by its own `created_at` (the `(team_id, model,
 *   created_at)` index reads one model-day);
 * - requests still in flight (pending, running; not in the roll-up, migration 1764840000000):
 *   from `activity` through its partial in-flight index.
 * Every request is in exactly one part, so the sums and the per-version split equal the former
 * single scan of `activity` joined to the versions.
 */
const SUMMARY_SQL = `
  WITH all_versions AS (${VERSIONS}),
  -- Only versions in force at some instant of the window.
  versions AS (SELECT * FROM all_versions WHERE effective_to IS NULL OR effective_to > ${WINDOW_START}),
  -- The team's custom models and the model whose versions price them ($3, $4: parallel arrays).
  aliases AS (SELECT * FROM unnest($3::text[], $4::text[]) AS x(model, price_model)),
  -- The (price model, UTC day) pairs of the window on which a version took effect after midnight.
  split_price_days AS (
    SELECT DISTINCT model_id AS price_model, (effective_from AT TIME ZONE 'UTC')::date AS day
      FROM model_prices
     WHERE effective_from >= ${WINDOW_START}
       AND effective_from <> ${midnight("(effective_from AT TIME ZONE 'UTC')::date")}
  ),
  -- The same as (activity model, day): the price model itself unless a custom model took its
  -- name, and every custom model it prices.
  split_days AS (
    SELECT DISTINCT m.model, s.day
      FROM split_price_days s
      CROSS JOIN LATERAL (
        SELECT s.price_model AS model WHERE NOT EXISTS (SELECT 1 FROM aliases al WHERE al.model = s.price_model)
        UNION ALL
        SELECT al.model FROM aliases al WHERE al.price_model = s.price_model
      ) m
  ),
  -- Each part is summed per model, tier and version on its own (a few dozen rows each), so the
  -- final sum and sort handle only those instead of every roll-up and activity row.
  parts AS (
    SELECT u.model, u.service_tier, v.model_id, v.effective_from, v.input_per_million_micros,
           v.output_per_million_micros, ${PART_SUMS("u", "u.request_count")}
      FROM usage_daily u
      LEFT JOIN aliases al ON al.model = u.model
      LEFT JOIN versions v
        ON v.model_id = COALESCE(al.price_model, u.model) AND v.effective_from <= ${midnight("u.day")}
       AND (v.effective_to IS NULL OR v.effective_to > ${midnight("u.day")})
     WHERE u.team_id = $1 AND u.day >= ${WINDOW_START_DAY}
       AND NOT EXISTS (SELECT 1 FROM split_days s WHERE s.model = u.model AND s.day = u.day)
     GROUP BY 1, 2, 3, 4, 5, 6
    UNION ALL
    SELECT a.model, a.service_tier, v.model_id, v.effective_from, v.input_per_million_micros,
           v.output_per_million_micros, ${PART_SUMS("a", "1")}
      FROM split_days s
      -- One index range per split model-day; OFFSET 0 keeps the planner from flattening this into
      -- a hash join over the team's whole history (it cannot know split_days has a row or two).
      CROSS JOIN LATERAL (
        SELECT * FROM activity a
         WHERE a.team_id = $1 AND a.model = s.model
           AND a.created_at >= ${midnight("s.day")} AND a.created_at < ${midnight("(s.day + 1)")}
           AND a.status IN ${ENDED}
        OFFSET 0
      ) a
      LEFT JOIN aliases al ON al.model = a.model
      LEFT JOIN versions v
        ON v.model_id = COALESCE(al.price_model, a.model) AND a.created_at >= v.effective_from
       AND (v.effective_to IS NULL OR a.created_at < v.effective_to)
     GROUP BY 1, 2, 3, 4, 5, 6
    UNION ALL
    SELECT a.model, a.service_tier, v.model_id, v.effective_from, v.input_per_million_micros,
           v.output_per_million_micros, ${PART_SUMS("a", "1")}
      FROM activity a
      LEFT JOIN aliases al ON al.model = a.model
      LEFT JOIN versions v
        ON v.model_id = COALESCE(al.price_model, a.model) AND a.created_at >= v.effective_from
       AND (v.effective_to IS NULL OR a.created_at < v.effective_to)
     WHERE a.team_id = $1 AND a.status IN ${IN_FLIGHT} AND a.created_at >= ${WINDOW_START}
     GROUP BY 1, 2, 3, 4, 5, 6
  )
  SELECT model, service_tier, model_id AS price_model, effective_from, input_per_million_micros,
         output_per_million_micros, COALESCE(sum(prompt_tokens), 0)::bigint::text AS prompt_tokens,
         COALESCE(sum(completion_tokens), 0)::bigint::text AS completion_tokens,
         COALESCE(sum(total_tokens), 0)::bigint::text AS total_tokens,
         COALESCE(sum(cached_prompt_tokens), 0)::bigint::text AS cached_prompt_tokens,
         COALESCE(sum(request_count), 0)::bigint::text AS request_count,
         COALESCE(sum(cost_micros), 0)::text AS cost_micros
    FROM parts
   GROUP BY model, service_tier, model_id, effective_from, input_per_million_micros, output_per_million_micros
   -- A model-tier-version whose requests all ended up netting to nothing is not shown (as before: no rows).
  HAVING sum(request_count) <> 0
   ORDER BY model, service_tier, effective_from NULLS FIRST`;

/** Reads of the team's billing summary. */
export class BillingSummaryService {
  constructor(
    private readonly ds: DataSource,
    /** The platform catalog custom models are priced by (`customPriceModelId`). */
    private readonly platform?: PlatformModels,
  ) {}

  /** The team's custom model ids and the model each is priced by (parallel arrays). */
  private async aliases(teamId: string): Promise<[string[], string[]]> {
    if (!this.platform) return [[], []];
    const rows = await this.ds.getRepository(CustomModelEntity).findBy({ teamId });
    return [rows.map((r) => r.modelId), rows.map((r) => customPriceModelId(r, this.platform!))];
  }

  /**
   * `GET /control/v1/billing/summary`: see the rules above.
   * @throws AppError 401 without credentials; 403 for members; 400 naming `days` when it is not
   *   an integer 1–365.
   */
  async summary(ctx: RequestContext, query: unknown): Promise<BillingSummaryDto> {
    const principal = authorize(ctx, "billing.manage");
    const q = parseInput(billingSummaryQuery, query ?? {});
    const days = q.days ?? 30;
    const [customIds, priceIds] = await this.aliases(principal.teamId);
    const rows = await queryRows<Row>(this.ds, SUMMARY_SQL, [principal.teamId, days, customIds, priceIds]);
    const [team] = await queryRows<{ balance: string }>(
      this.ds,
      "SELECT credit_balance_micros::text AS balance FROM teams WHERE id = $1",
      [principal.teamId],
    );
    const byModel = rows.map((r): BillingByModelDto => ({
      model: r.model,
      service_tier: r.service_tier,
      prompt_tokens: Number(r.prompt_tokens),
      completion_tokens: Number(r.completion_tokens),
      total_tokens: Number(r.total_tokens),
      cached_prompt_tokens: Number(r.cached_prompt_tokens),
      total_requests: Number(r.request_count),
      cost_micros: Number(r.cost_micros),
      pricing:
        r.effective_from === null
          ? null
          : {
              model: r.price_model ?? r.model,
              prompt_token_price_micros: Number(r.input_per_million_micros),
              completion_token_price_micros: Number(r.output_per_million_micros),
              effective_from: new Date(r.effective_from).toISOString(),
            },
    }));
    const sum = (k: "prompt_tokens" | "completion_tokens" | "total_tokens" | "cached_prompt_tokens") =>
      byModel.reduce((s, m) => s + m[k], 0);
    return {
      summary: {
        days,
        total_prompt_tokens: sum("prompt_tokens"),
        total_completion_tokens: sum("completion_tokens"),
        total_tokens: sum("total_tokens"),
        total_cached_prompt_tokens: sum("cached_prompt_tokens"),
        total_requests: byModel.reduce((s, m) => s + m.total_requests, 0),
        estimated_cost_micros: byModel.reduce((s, m) => s + m.cost_micros, 0),
        credit_balance_micros: Number(team?.balance ?? 0),
      },
      by_model: byModel,
    };
  }
}
