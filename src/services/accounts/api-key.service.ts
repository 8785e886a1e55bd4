/**
 * API keys (DESIGN §3 Credentials, Account schemas): `sk_` + 48 base62 characters (≈ 286 bits),
 * shown once; only the SHA-256 is stored; `prefix` is the first 12 characters. Members manage
 * their own keys, owners and admins every key of the team (DESIGN §3 Roles; `policy.ts`).
 * A key carries a policy (issue 29, item 1; `api-key-policy.ts`): set on create and changed by
 * `update` (`PATCH`), announced to every process (`API_KEY_POLICY_TOPIC`, and `api_key` for the
 * credential cache) when the change commits. A key with a budget has a row in `api_key_spend`,
 * what it spent in its current window, which the metering group commit moves with every charge.
 */
import { randomBytes } from "node:crypto";
import { v7 as uuidv7 } from "uuid";
import type { DataSource, EntityManager } from "typeorm";
import { z } from "zod";
import { queryRows } from "../../db/sql.js";
import { ApiKeyEntity, type BudgetPeriod } from "../../entities/api-key.entity.js";
import type { CacheBus } from "../platform/cache-bus.js";
import type { RequestContext } from "../platform/context.js";
import { API_KEY_PREFIX, hashApiKey } from "./credential.service.js";
import { AppError, ErrorCode, parseInput, parseUuidParam } from "../../shared/errors.js";
import { apiKeyScope, authorize, can } from "../platform/policy.js";
import { pgText } from "../platform/validation.js";
import {
  API_KEY_POLICY_TOPIC,
  CREATE_BUDGET_RULE,
  type KeyPolicy,
  NO_POLICY,
  UPDATE_BUDGET_RULE,
  keyPolicyFields,
  loosened,
  mergePolicy,
} from "./api-key-policy.js";
import { KEY_BUDGET_SHRINK_TOPIC } from "../ledger/key-budget.service.js";

/** ApiKeyListResponse: the keys (entities; each transport shapes them). */
export interface ApiKeyList {
  items: ApiKeyEntity[];
}

/** ApiKeyCreateResponse: `plaintext` is the full key, returned only here; the key's fields beside it. */
export interface CreatedApiKeyDto {
  id: string;
  name: string;
  plaintext: string;
  prefix: string;
  created_at: Date;
  expires_at: Date | null;
  /** The key as listed (its policy, spend), for the transports to shape. */
  key: ApiKeyEntity;
}

export const createApiKeyInput = z
  .object({
    name: pgText().trim().min(1).max(200),
    ...keyPolicyFields,
  })
  // The budget pair's rule (`mergePolicy`) for the OpenAPI document (issue 28, item 5).
  .meta(CREATE_BUDGET_RULE);
export type CreateApiKeyInput = z.input<typeof createApiKeyInput>;

/** `PATCH /control/v1/auth/api-keys/{key_id}`: every field optional; null lifts a limit. */
export const updateApiKeyInput = z
  .object({
    name: pgText().trim().min(1).max(200).optional(),
    ...keyPolicyFields,
  })
  // What the body alone decides of the budget pair's rule, and what the key decides (issue 28, item 5).
  .meta(UPDATE_BUDGET_RULE);
export type UpdateApiKeyInput = z.input<typeof updateApiKeyInput>;

const BASE62 = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
const KEY_CHARS = 48;
const PREFIX_CHARS = 12;

/** A fresh key: `sk_` + 48 uniformly random base62 characters (rejection sampling, no modulo bias). */
export function generateApiKey(): string {
  let out = API_KEY_PREFIX;
  while (out.length < API_KEY_PREFIX.length + KEY_CHARS) {
    for (const byte of randomBytes(64)) {
      if (byte < 248) out += BASE62[byte % 62];
      if (out.length === API_KEY_PREFIX.length + KEY_CHARS) break;
    }
  }
  return out;
}

/** Creates, lists and revokes API keys (DESIGN §3 Credentials, Roles). */
export class ApiKeyService {
  constructor(
    private readonly ds: DataSource,
    private readonly bus: CacheBus,
  ) {}

  /**
   * Creates a key for the caller, with the policy the body gives (none by default).
   * @throws AppError 400 (name 1–200, `expires_at` ISO 8601 in the future, policy fields as
   *   `api-key-policy.ts` says); 401.
   */
  async create(ctx: RequestContext, raw: unknown): Promise<CreatedApiKeyDto> {
    const principal = authorize(ctx, "apiKeys.manageOwn");
    const input = parseInput(createApiKeyInput, raw);
    const policy = mergePolicy(NO_POLICY, input);
    const plaintext = generateApiKey();
    const id = uuidv7();
    await this.ds.transaction(async (em) => {
      await em.query(
        `INSERT INTO api_keys (id, team_id, user_id, name, prefix, key_hash, expires_at, budget_micros, budget_period,
                               rpm_limit, tpm_limit, allowed_models)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)`,
        [
          id,
          principal.teamId,
          principal.userId,
          input.name,
          plaintext.slice(0, PREFIX_CHARS),
          hashApiKey(plaintext),
          ...policyParams(policy),
        ],
      );
      if (policy.budgetPeriod !== null) await startSpend(em, id, policy.budgetPeriod);
    });
    const [key] = await this.withSpend([await this.ds.getRepository(ApiKeyEntity).findOneByOrFail({ id })]);
    return {
      id: key.id,
      name: key.name,
      plaintext,
      prefix: key.prefix,
      created_at: key.createdAt,
      expires_at: key.expiresAt,
      key,
    };
  }

  /**
   * Changes a key's name and policy (`PATCH /control/v1/auth/api-keys/{key_id}`; issue 29, item 1):
   * the fields given change, null lifts a limit. Owners and admins change any key of the team;
   * members their own, and only to tighten its limits. A new budget, or a new period, starts
   * from what the key's requests cost in the window so far (its activity records); every process
   * drops its cached policy of the key when the change commits.
   * @returns the key as listed.
   * @throws AppError 400 when `keyId` is not a uuid or the body is invalid; 401; 403 when a
   *   member would raise or lift a limit (`extra.fields`); 404 when the caller may not manage it.
   */
  async update(ctx: RequestContext, keyId: unknown, raw: unknown): Promise<ApiKeyEntity> {
    const principal = authorize(ctx, "apiKeys.manageOwn");
    const scope = apiKeyScope(ctx);
    const id = parseUuidParam("key_id", keyId);
    const input = parseInput(updateApiKeyInput, raw ?? {});
    const hashHex = await this.ds.transaction(async (em) => {
      // The spend row first, then the key: the metering group commit locks them in this order
      // (its key budgets, then `last_used_at`), so the two never wait on each other in a cycle.
      await em.query("SELECT 1 FROM api_key_spend WHERE key_id = $1 FOR NO KEY UPDATE", [id]);
      const [row] = await queryRows<PolicyRow & { key_hash: Buffer }>(
        em,
        `SELECT key_hash, ${POLICY_COLUMNS} FROM api_keys
          WHERE id = $1 AND team_id = $2 AND ($3::uuid IS NULL OR user_id = $3) FOR NO KEY UPDATE`,
        [id, scope.teamId, scope.userId],
      );
      if (!row) throw AppError.notFound("API key not found");
      const current = policyOf(row);
      const next = mergePolicy(current, input);
      const looser = loosened(current, next);
      if (looser.length > 0 && !can(principal, "apiKeys.loosenLimits")) {
        throw new AppError(
          ErrorCode.Forbidden,
          `Only team owners and admins can raise or lift an API key's limits (${looser.join(", ")}); ` +
            "a member may only tighten them",
          { fields: looser },
        );
      }
      await em.query(
        `UPDATE api_keys SET name = coalesce($2, name), expires_at = $3, budget_micros = $4, budget_period = $5,
                rpm_limit = $6, tpm_limit = $7, allowed_models = $8
          WHERE id = $1`,
        [id, input.name ?? null, ...policyParams(next)],
      );
      if (next.budgetPeriod === null) await em.query("DELETE FROM api_key_spend WHERE key_id = $1", [id]);
      else if (next.budgetPeriod !== current.budgetPeriod) await startSpend(em, id, next.budgetPeriod);
      const hex = row.key_hash.toString("hex");
      await this.bus.publish("api_key", hex, em);
      await this.bus.publish(API_KEY_POLICY_TOPIC, id, em);
      // Leases were taken from the old budget: each process keeps only what it has promised.
      if (current.budgetMicros !== null) await this.bus.publish(KEY_BUDGET_SHRINK_TOPIC, id, em);
      return hex;
    });
    this.bus.deliverLocally("api_key", hashHex);
    this.bus.deliverLocally(API_KEY_POLICY_TOPIC, id);
    this.bus.deliverLocally(KEY_BUDGET_SHRINK_TOPIC, id);
    const [key] = await this.withSpend([await this.ds.getRepository(ApiKeyEntity).findOneByOrFail({ id })]);
    return key;
  }

  /**
   * Keys the caller may manage (`apiKeyScope`: every key of the team for owners and admins, their
   * own for members), newest first, revoked ones included (with `revoked_at`). @throws AppError 401.
   */
  async list(ctx: RequestContext): Promise<ApiKeyList> {
    const scope = apiKeyScope(ctx);
    const items = await this.ds.getRepository(ApiKeyEntity).find({
      where: scope.userId === null ? { teamId: scope.teamId } : { teamId: scope.teamId, userId: scope.userId },
      order: { createdAt: "DESC", id: "DESC" },
    });
    return { items: await this.withSpend(items) };
  }

  /**
   * Sets `spend` on the keys with a budget: what they spent in the current window (0 when the
   * window started over since their last charge) and when it ends. @returns `keys`.
   */
  private async withSpend(keys: ApiKeyEntity[]): Promise<ApiKeyEntity[]> {
    const budgeted = keys.filter((k) => k.budgetPeriod !== null);
    if (budgeted.length === 0) return keys;
    const rows = await queryRows<{ id: string; spent: string; resets_at: Date | null }>(
      this.ds,
      `SELECT k.id,
              (CASE WHEN s.window_start = api_key_budget_window(k.budget_period, now()) THEN s.spent_micros
                    ELSE 0 END)::text AS spent,
              nullif(api_key_budget_reset(k.budget_period, now()), 'infinity') AS resets_at
         FROM api_keys k LEFT JOIN api_key_spend s ON s.key_id = k.id
        WHERE k.id = ANY($1::uuid[])`,
      [budgeted.map((k) => k.id)],
    );
    const byId = new Map(rows.map((r) => [r.id, r]));
    for (const key of budgeted) {
      const row = byId.get(key.id);
      key.spend = { spentMicros: BigInt(row?.spent ?? "0"), resetsAt: row?.resets_at ?? null };
    }
    return keys;
  }

  /**
   * Revokes a key; idempotent for keys already revoked. This process drops it from its cache as
   * soon as the revoke commits (so the key is refused from the moment the caller hears the 204);
   * other processes drop it when the NOTIFY sent in the same transaction reaches them.
   * @throws AppError 400 when `keyId` is not a uuid; 401; 404 when the caller may not manage it
   *   (another team's key, or another member's key for a member).
   */
  async revoke(ctx: RequestContext, keyId: unknown): Promise<void> {
    const scope = apiKeyScope(ctx);
    const id = parseUuidParam("key_id", keyId);
    const hashHex = await this.ds.transaction(async (em) => {
      const rows = await queryRows<{ key_hash: Buffer }>(
        em,
        `UPDATE api_keys SET revoked_at = coalesce(revoked_at, now())
          WHERE id = $1 AND team_id = $2 AND ($3::uuid IS NULL OR user_id = $3)
        RETURNING key_hash`,
        [id, scope.teamId, scope.userId],
      );
      if (rows.length === 0) throw AppError.notFound("API key not found");
      const hex = rows[0].key_hash.toString("hex");
      await this.bus.publish("api_key", hex, em);
      return hex;
    });
    this.bus.deliverLocally("api_key", hashHex);
  }
}

/** The api key record as this domain hands it to the transports (persisted shape; transports never import entities). */
export type { ApiKeyEntity } from "../../entities/api-key.entity.js";

/** The policy columns of `api_keys`, as `PolicyRow` reads them. */
const POLICY_COLUMNS = "budget_micros::text, budget_period, rpm_limit, tpm_limit, allowed_models, expires_at";

interface PolicyRow {
  budget_micros: string | null;
  budget_period: BudgetPeriod | null;
  rpm_limit: number | null;
  tpm_limit: number | null;
  allowed_models: string[] | null;
  expires_at: Date | null;
}

function policyOf(row: PolicyRow): KeyPolicy {
  return {
    budgetMicros: row.budget_micros === null ? null : BigInt(row.budget_micros),
    budgetPeriod: row.budget_period,
    rpmLimit: row.rpm_limit,
    tpmLimit: row.tpm_limit,
    allowedModels: row.allowed_models,
    expiresAt: row.expires_at,
  };
}

/** `expires_at`, `budget_micros`, `budget_period`, `rpm_limit`, `tpm_limit`, `allowed_models` as SQL parameters. */
function policyParams(p: KeyPolicy): unknown[] {
  return [
    p.expiresAt,
    p.budgetMicros === null ? null : p.budgetMicros.toString(),
    p.budgetPeriod,
    p.rpmLimit,
    p.tpmLimit,
    p.allowedModels,
  ];
}

/**
 * (Re)starts a key's spend in the current window of `period`: what its requests recorded since
 * the window began cost (their activity rows, by completion time; 0 for a new key), so a budget
 * set mid-month counts the month's spending so far.
 */
async function startSpend(em: EntityManager, keyId: string, period: BudgetPeriod): Promise<void> {
  await em.query(
    `INSERT INTO api_key_spend (key_id, window_start, spent_micros)
     SELECT $1, w.start, coalesce((SELECT sum(cost_micros) FROM activity
                                    WHERE api_key_id = $1 AND completed_at >= w.start), 0)
       FROM (SELECT api_key_budget_window($2, now()) AS start) w
     ON CONFLICT (key_id) DO UPDATE SET window_start = EXCLUDED.window_start, spent_micros = EXCLUDED.spent_micros`,
    [keyId, period],
  );
}
