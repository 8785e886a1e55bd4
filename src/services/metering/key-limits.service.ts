/**
 * API key limits at admission (issue 29, item 1): what a key's policy refuses before any engine
 * work, on every data-plane path (synchronous and streamed create operations, background
 * responses at submission and when they run, batch items, decisions). The key's budget is
 * reserved later, once the prompt is counted (`InferenceService`, `KeyBudgetService`).
 *
 * Rules, in order:
 * - An expired key's work is refused (401 `invalid_api_key`), also for batch items and background
 *   responses accepted before it expired (the credential check refuses its new requests already).
 * - A model the key may not use is refused: 403 `model_not_allowed`, naming the model and the
 *   models allowed (`extra.allowed_models`).
 * - Requests and tokens per minute (`rpm_limit`, `tpm_limit`): fixed windows of the database clock
 *   (`date_trunc('minute', now())`), one row per key in `api_key_rate_windows`, so every API
 *   process counts into the same window. One `INSERT … ON CONFLICT DO UPDATE … WHERE` admits and
 *   counts atomically (the row lock serialises concurrent admissions in any process) and, in the
 *   same statement, says which limit refused and when the window ends. A request is admitted while
 *   the key has made fewer than `rpm_limit` requests and used fewer than `tpm_limit` tokens in the
 *   minute; a refused one counts nothing. Tokens (prompt + completion, as metered) count once the
 *   request ends, into the minute it ended in (as the team's per-model limits,
 *   `rate-limit.service.ts`). 429 names the limit, its value, the window and when it resets, with
 *   `Retry-After`. A background response counts at submission, not again when it runs; batch items
 *   count (a refused item runs again later, as with any 429 of a batch item).
 * - A key with no policy costs nothing here beyond a cached read.
 */
import type { Logger } from "pino";
import type { DataSource } from "typeorm";
import type { CatalogModel } from "../../config/catalog.js";
import { queryRows } from "../../db/sql.js";
import { AppError, ErrorCode } from "../../shared/errors.js";
import type { EnforcedKeyPolicy, KeyPolicyCache } from "../accounts/key-policy-cache.js";
import type { Principal } from "../platform/context.js";

/** Stands for "unlimited" in the SQL comparisons (int4 max). */
const NO_LIMIT = 2_147_483_647;

/** Enforces API keys' expiry, allowed models and per-minute rates (see the module header). */
export class KeyLimitsService {
  constructor(
    private readonly ds: DataSource,
    private readonly policies: KeyPolicyCache,
    private readonly logger: Logger,
  ) {}

  /**
   * Checks one request of `principal` for `model` against its key's expiry and allowed models.
   * @returns the key's policy (null for callers without a key, or a key that is gone).
   * @throws AppError 401 when the key has expired; 403 `model_not_allowed`; the database's error.
   */
  async check(principal: Principal, model: CatalogModel): Promise<EnforcedKeyPolicy | null> {
    const keyId = principal.apiKey?.id;
    if (!keyId) return null;
    const policy = await this.policies.get(keyId);
    if (!policy) return null;
    if (policy.expiresAt !== null && policy.expiresAt <= Date.now()) {
      throw AppError.unauthenticated("API key has expired").because("invalid_api_key");
    }
    if (policy.allowedModels !== null && !policy.allowedModels.has(model.id)) {
      const allowed = [...policy.allowedModels];
      throw new AppError(
        ErrorCode.Forbidden,
        `This API key may not use model '${model.id}'; it may use ${allowed.map((m) => `'${m}'`).join(", ")} ` +
          `(allowed_models); an owner or admin can change that`,
        { limit: "allowed_models", scope: "api_key", api_key_id: keyId, model: model.id, allowed_models: allowed },
      ).because("model_not_allowed");
    }
    return policy;
  }

  /**
   * Counts one request against its key's per-minute limits (nothing to do for a key without them).
   * @throws AppError 429 (`Retry-After`) when one is reached (nothing counted then); the database's error.
   */
  async countRequest(principal: Principal, policy: EnforcedKeyPolicy | null): Promise<void> {
    const keyId = principal.apiKey?.id;
    if (keyId && policy && (policy.rpmLimit !== null || policy.tpmLimit !== null)) await this.count(keyId, policy);
  }

  /** `check`, then `countRequest`. @throws as both. */
  async admit(principal: Principal, model: CatalogModel): Promise<EnforcedKeyPolicy | null> {
    const policy = await this.check(principal, model);
    await this.countRequest(principal, policy);
    return policy;
  }

  /**
   * Adds a finished request's tokens to its key's current minute, when the key has a `tpm_limit`.
   * Not awaited by callers' answers: a failure is logged (the window under-counts; no request or
   * charge depends on it).
   */
  recordTokens(principal: Principal, policy: EnforcedKeyPolicy | null, tokens: number): void {
    const keyId = principal.apiKey?.id;
    if (!keyId || policy?.tpmLimit == null || tokens <= 0) return;
    this.ds
      .query(
        `UPDATE api_key_rate_windows SET
           minute_tokens = CASE WHEN minute_start = date_trunc('minute', now()) THEN minute_tokens + $2 ELSE $2 END,
           minute_requests = CASE WHEN minute_start = date_trunc('minute', now()) THEN minute_requests ELSE 0 END,
           minute_start = date_trunc('minute', now())
         WHERE key_id = $1`,
        [keyId, tokens],
      )
      .catch((err: unknown) => this.logger.warn({ err, keyId }, "key rate limit: token count not recorded"));
  }

  /** Counts one request in the key's minute, or refuses it (one statement either way). */
  private async count(keyId: string, policy: EnforcedKeyPolicy): Promise<void> {
    const rpm = policy.rpmLimit ?? NO_LIMIT;
    const tpm = policy.tpmLimit ?? NO_LIMIT;
    const [row] = await queryRows<{ ok: boolean; tokens_full: boolean | null; resets_at: Date; retry_s: number }>(
      this.ds,
      `WITH counted AS (
         INSERT INTO api_key_rate_windows AS w (key_id, minute_start, minute_requests, minute_tokens)
         VALUES ($1, date_trunc('minute', now()), 1, 0)
         ON CONFLICT (key_id) DO UPDATE SET
           minute_requests = CASE WHEN w.minute_start = EXCLUDED.minute_start THEN w.minute_requests + 1 ELSE 1 END,
           minute_tokens = CASE WHEN w.minute_start = EXCLUDED.minute_start THEN w.minute_tokens ELSE 0 END,
           minute_start = EXCLUDED.minute_start
         WHERE w.minute_start <> EXCLUDED.minute_start OR (w.minute_requests < $2 AND w.minute_tokens < $3)
         RETURNING 1
       )
       SELECT EXISTS (SELECT FROM counted) AS ok,
              -- Which limit refused, as this statement's snapshot saw the window (the row's
              -- latest version is what refused; a race only changes which limit is named).
              w.minute_start = date_trunc('minute', now()) AND w.minute_tokens >= $3 AND w.minute_requests < $2
                AS tokens_full,
              date_trunc('minute', now()) + interval '1 minute' AS resets_at,
              ceil(extract(epoch FROM date_trunc('minute', now()) + interval '1 minute' - now()))::int AS retry_s
         FROM (SELECT 1) one LEFT JOIN api_key_rate_windows w ON w.key_id = $1`,
      [keyId, rpm, tpm],
    );
    if (row.ok) return;
    const tokens = row.tokens_full === true;
    const limit = tokens ? "tpm_limit" : "rpm_limit";
    const value = tokens ? tpm : rpm;
    const retryAfterS = Math.max(1, row.retry_s);
    throw new AppError(
      ErrorCode.RateLimited,
      `Rate limit reached for this API key: ${value} ${tokens ? "tokens" : "requests"} per minute (${limit}); ` +
        `retry after ${retryAfterS} s`,
      {
        limit,
        scope: "api_key",
        api_key_id: keyId,
        value,
        window: "minute",
        resets_at: new Date(row.resets_at).toISOString(),
      },
      retryAfterS,
    );
  }
}
