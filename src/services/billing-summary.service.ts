/**
 * The billing summary (issue 10, item 3; spec: Billing, "Control plane: activity, usage, billing"):
 * usage and cost over the last `days` whole UTC days with the pricing each request was charged,
 * and the team's credit balance. Aggregated in SQL over `activity` joined to `model_prices`.
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
 * - Sums are the activity records' sums: every recorded request counts (failed and cancelled
 *   ones carry their real tokens and cost, usually zero); `estimated_cost_micros` is the sum of
 *   their `cost_micros` (what was charged, before any cap at the balance).
 * - Prices are micro-USD per million tokens (DESIGN §3 Money); `effective_from` is ISO 8601.
 */
import type { DataSource } from "typeorm";
import { z } from "zod";
import { queryRows } from "../db/sql.js";
import { parseInput } from "../shared/errors.js";
import { usageWindowStart } from "./activity.service.js";
import type { RequestContext } from "./context.js";
import { authorize } from "./policy.js";
import { optionalQuery, queryInt } from "./validation.js";

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

/** Reads of the team's billing summary. */
export class BillingSummaryService {
  constructor(private readonly ds: DataSource) {}

  /**
   * `GET /control/v1/billing/summary`: see the rules above.
   * @throws AppError 401 without credentials; 403 for members; 400 naming `days` when it is not
   *   an integer 1–365.
   */
  async summary(ctx: RequestContext, query: unknown): Promise<BillingSummaryDto> {
    const principal = authorize(ctx, "billing.manage");
    const q = parseInput(billingSummaryQuery, query ?? {});
    const days = q.days ?? 30;
    const rows = await queryRows<Row>(
      this.ds,
      `WITH all_versions AS (${VERSIONS}),
       -- Only versions in force at some instant of the window: fewer candidates per joined row.
       versions AS (SELECT * FROM all_versions
                     WHERE effective_to IS NULL OR effective_to > ${usageWindowStart("$2")})
       SELECT a.model, a.service_tier, v.effective_from, v.input_per_million_micros, v.output_per_million_micros,
              COALESCE(sum(a.prompt_tokens), 0)::bigint::text AS prompt_tokens,
              COALESCE(sum(a.completion_tokens), 0)::bigint::text AS completion_tokens,
              COALESCE(sum(a.total_tokens), 0)::bigint::text AS total_tokens,
              COALESCE(sum(a.cached_prompt_tokens), 0)::bigint::text AS cached_prompt_tokens,
              count(*)::bigint::text AS request_count,
              COALESCE(sum(a.cost_micros), 0)::text AS cost_micros
         FROM activity a
         LEFT JOIN versions v
           ON v.model_id = a.model AND a.created_at >= v.effective_from
          AND (v.effective_to IS NULL OR a.created_at < v.effective_to)
        WHERE a.team_id = $1 AND a.created_at >= ${usageWindowStart("$2")}
        GROUP BY a.model, a.service_tier, v.effective_from, v.input_per_million_micros, v.output_per_million_micros
        ORDER BY a.model, a.service_tier, v.effective_from NULLS FIRST`,
      [principal.teamId, days],
    );
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
              model: r.model,
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
