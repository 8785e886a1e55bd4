/**
 * Per-team, per-model rate limits (issue 9, item 5; spec: Limits, "Per-model throughput": the
 * catalog's `tpm_limit`, `rpm_limit`, `requests_per_hour`; DESIGN §3 Errors: 429 with
 * `Retry-After`, no charge).
 *
 * Rules:
 * - Fixed windows by the database clock (`date_trunc('minute' | 'hour', now())`), so every API
 *   process sharing the database counts into the same window; one row per (team, model) in
 *   `rate_limit_windows`, updated by a single `INSERT … ON CONFLICT DO UPDATE … WHERE` that
 *   admits and counts atomically (the row lock serialises concurrent admissions, in any process).
 * - A request is admitted while, in the current minute, the team has made fewer than `rpm`
 *   requests and used fewer than `tpm` tokens, and, in the current hour, fewer than
 *   `requests_per_hour` requests. A refused request counts nothing.
 * - Tokens (prompt + completion, as metered) count once the request finishes, into the minute in
 *   which it finished; a request is admitted on the tokens used so far (as OpenAI's token limit
 *   lets the request that crosses it through).
 * - What is limited: the interactive create operations (chat completions, completions of
 *   messages, responses, embeddings) and background responses at submission; a background
 *   response's run and its tokens count in its minute. Batch items are not limited: they run
 *   behind interactive requests at the batch concurrency instead (issue 7), within their 24 h
 *   window, as OpenAI keeps batch limits apart from the per-minute ones.
 * - Models whose three limits are unlimited (the default) never reach the database here.
 */
import type { Logger } from "pino";
import type { DataSource } from "typeorm";
import type { CatalogModel } from "../../config/catalog.js";
import { queryRows } from "../../db/sql.js";
import { AppError, ErrorCode } from "../../shared/errors.js";

/** Stands for "unlimited" in the SQL comparisons (int4 max). */
const NO_LIMIT = 2_147_483_647;

/** Counts and enforces each team's use of each limited model. */
export class RateLimitService {
  constructor(
    private readonly ds: DataSource,
    private readonly logger: Logger,
  ) {}

  /** True when `model` has any limit (only those are counted). */
  static limited(model: CatalogModel): boolean {
    const l = model.limits;
    return l.tokensPerMinute !== null || l.requestsPerMinute !== null || l.requestsPerHour !== null;
  }

  /**
   * Admits one request of `teamId` for `model`, counting it in the current minute and hour.
   * @throws AppError 429 (`rate_limited`) with `Retry-After` = seconds until the window that is
   *   full starts over (≥ 1), and `extra.limit` naming it (`rpm_limit`, `tpm_limit`,
   *   `requests_per_hour`); nothing is counted then.
   */
  async admit(teamId: string, model: CatalogModel): Promise<void> {
    if (!RateLimitService.limited(model)) return;
    const rpm = model.limits.requestsPerMinute ?? NO_LIMIT;
    const tpm = model.limits.tokensPerMinute ?? NO_LIMIT;
    const rph = model.limits.requestsPerHour ?? NO_LIMIT;
    const admitted = await queryRows<{ ok: number }>(
      this.ds,
      `INSERT INTO rate_limit_windows AS w
              (team_id, model, minute_start, minute_requests, minute_tokens, hour_start, hour_requests)
       VALUES ($1, $2, date_trunc('minute', now()), 1, 0, date_trunc('hour', now()), 1)
       ON CONFLICT (team_id, model) DO UPDATE SET
         minute_requests = CASE WHEN w.minute_start = EXCLUDED.minute_start THEN w.minute_requests + 1 ELSE 1 END,
         minute_tokens = CASE WHEN w.minute_start = EXCLUDED.minute_start THEN w.minute_tokens ELSE 0 END,
         minute_start = EXCLUDED.minute_start,
         hour_requests = CASE WHEN w.hour_start = EXCLUDED.hour_start THEN w.hour_requests + 1 ELSE 1 END,
         hour_start = EXCLUDED.hour_start
       WHERE (w.minute_start <> EXCLUDED.minute_start OR (w.minute_requests < $3 AND w.minute_tokens < $4))
         AND (w.hour_start <> EXCLUDED.hour_start OR w.hour_requests < $5)
       RETURNING 1 AS ok`,
      [teamId, model.limitKey ?? model.id, rpm, tpm, rph],
    );
    if (admitted.length > 0) return;
    await this.refuse(teamId, model, { rpm, tpm, rph });
  }

  /**
   * Adds a finished request's tokens (prompt + completion) to the team's current minute for
   * `model`. Not awaited by callers' answers: it runs after the record is safe, and a failure
   * is logged (the window under-counts; no request or charge depends on it).
   */
  recordTokens(teamId: string, model: CatalogModel, tokens: number): void {
    if (model.limits.tokensPerMinute === null || tokens <= 0) return;
    this.ds
      .query(
        `UPDATE rate_limit_windows SET
           minute_tokens = CASE WHEN minute_start = date_trunc('minute', now()) THEN minute_tokens + $3 ELSE $3 END,
           minute_requests = CASE WHEN minute_start = date_trunc('minute', now()) THEN minute_requests ELSE 0 END,
           minute_start = date_trunc('minute', now())
         WHERE team_id = $1 AND model = $2`,
        [teamId, model.limitKey ?? model.id, tokens],
      )
      .catch((err: unknown) => this.logger.warn({ err, model: model.id }, "rate limit: token count not recorded"));
  }

  /** @throws AppError 429 for the window that refused the request. */
  private async refuse(
    teamId: string,
    model: CatalogModel,
    limits: { rpm: number; tpm: number; rph: number },
  ): Promise<never> {
    const [row] = await queryRows<{ hour_full: boolean; tokens_full: boolean; to_minute: number; to_hour: number }>(
      this.ds,
      `SELECT hour_start = date_trunc('hour', now()) AND hour_requests >= $5 AS hour_full,
              minute_start = date_trunc('minute', now()) AND minute_tokens >= $4
                AND minute_requests < $3 AS tokens_full,
              ceil(extract(epoch FROM date_trunc('minute', now()) + interval '1 minute' - now()))::int AS to_minute,
              ceil(extract(epoch FROM date_trunc('hour', now()) + interval '1 hour' - now()))::int AS to_hour
         FROM rate_limit_windows WHERE team_id = $1 AND model = $2`,
      [teamId, model.limitKey ?? model.id, limits.rpm, limits.tpm, limits.rph],
    );
    const limit = row?.hour_full ? "requests_per_hour" : row?.tokens_full ? "tpm_limit" : "rpm_limit";
    const retryAfterS = Math.max(1, (row?.hour_full ? row.to_hour : row?.to_minute) ?? 1);
    const what =
      limit === "requests_per_hour"
        ? "requests per hour"
        : limit === "tpm_limit"
          ? "tokens per minute"
          : "requests per minute";
    throw new AppError(
      ErrorCode.RateLimited,
      `Rate limit reached for ${model.id}: ${what} of this team; retry after ${retryAfterS} s`,
      { limit, model: model.id },
      retryAfterS,
    );
  }
}
