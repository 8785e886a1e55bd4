/**
 * Turns presented credentials into a `Principal` (DESIGN §3 Credentials): `Authorization: Bearer`
 * with an API key (`sk_…`) or an access token, or `x-api-key`. API-key and user lookups are cached
 * in memory (hot path) and evicted on NOTIFY when a key is revoked or a user changes.
 */
import { createHash, hash as oneShotHash } from "node:crypto";
import type { DataSource } from "typeorm";
import type { TeamRole } from "../../entities/user.entity.js";
import type { CacheBus } from "../platform/cache-bus.js";
import type { Principal } from "../platform/context.js";
import { AppError } from "../../shared/errors.js";
import type { TokenService } from "../platform/tokens.js";
import {
  ENFORCED_POLICY_COLUMNS,
  type EnforcedPolicyRow,
  type KeyPolicyCache,
  enforcedPolicy,
} from "./key-policy-cache.js";

export const API_KEY_PREFIX = "sk_";

/** The machine code of a refused API key (OpenAI's own for it; issue 27, item 1). */
const INVALID_API_KEY = "invalid_api_key";

interface CachedKey {
  principal: Principal;
  expiresAt: number | null;
  revoked: boolean;
  cachedAt: number;
}

interface CachedUser {
  email: string;
  teamId: string;
  role: TeamRole;
  isActive: boolean;
  /** Unix seconds, fractional; tokens issued before are void (password reset). */
  tokensValidAfterS: number;
  cachedAt: number;
}

const MAX_CACHE = 50_000;
/** How long an unknown key is remembered as unknown (spares the database key-guessing loads), ms. */
const UNKNOWN_KEY_TTL_MS = 5_000;

/** SHA-256 of an API key, the only form in which keys are stored. */
export function hashApiKey(key: string): Buffer {
  return createHash("sha256").update(key).digest();
}

/** `hashApiKey(key)` as lowercase hex, in one call (no Hash object; Node ≥ 20.12). */
function hashHex(key: string): string {
  return oneShotHash("sha256", key, "hex");
}

/** Authenticates API keys and access tokens, with in-memory caches kept honest by NOTIFY. */
export class CredentialService {
  private readonly keys = new Map<string, CachedKey>();
  private readonly users = new Map<string, CachedUser>();
  /** Hashes of keys found in no row, with when they were looked up. */
  private readonly unknownKeys = new Map<string, number>();
  /**
   * Bumped by every invalidation. A lookup caches its row only if no invalidation happened while
   * it ran: a row read before a revoke committed must not outlive the revoke in the cache.
   */
  private generation = 0;

  constructor(
    private readonly ds: DataSource,
    private readonly tokens: TokenService,
    bus: CacheBus,
    private readonly ttlMs: number,
    /** Primed with the policy of every key read here (issue 29, item 1), so requests need no second read. */
    private readonly policies?: KeyPolicyCache,
  ) {
    bus.on("api_key", (hashHex) => {
      this.generation++;
      this.keys.delete(hashHex);
    });
    bus.on("user", (userId) => {
      this.generation++;
      this.users.delete(userId);
      for (const [k, v] of this.keys) if (v.principal.userId === userId) this.keys.delete(k);
    });
    bus.on("*", () => {
      this.generation++;
      this.keys.clear();
      this.users.clear();
    });
  }

  /**
   * Authenticates a raw credential (the Bearer token or `x-api-key` value).
   * @param opts.apiKeyOnly the credential came in a header that takes API keys only (`x-api-key`,
   *   issue 5, item 6): anything else there is refused, an access token included.
   * @returns the caller, or undefined when no credential was presented.
   * @throws AppError 401 for an unknown, revoked or expired key, an invalid token, or a non-key
   *   where only keys are taken.
   */
  async authenticate(
    credential: string | undefined,
    opts: { apiKeyOnly?: boolean } = {},
  ): Promise<Principal | undefined> {
    if (credential === undefined || credential === "") return undefined;
    if (credential.startsWith(API_KEY_PREFIX)) return this.fromApiKey(credential);
    if (opts.apiKeyOnly) {
      throw AppError.unauthenticated("x-api-key takes API keys only; send access tokens as Authorization: Bearer");
    }
    return this.fromAccessToken(credential);
  }

  private async fromApiKey(key: string): Promise<Principal> {
    // One-shot digest straight to hex (the cache key); the bytes only for a database look-up.
    const hex = hashHex(key);
    const now = Date.now();
    let entry = this.keys.get(hex);
    if (!entry && now - (this.unknownKeys.get(hex) ?? -Infinity) < UNKNOWN_KEY_TTL_MS) {
      throw AppError.unauthenticated("Invalid API key").because(INVALID_API_KEY);
    }
    if (!entry || now - entry.cachedAt > this.ttlMs) {
      const generation = this.generation;
      const policyGeneration = this.policies?.generation ?? 0;
      const rows: Array<
        EnforcedPolicyRow & {
          id: string;
          name: string;
          prefix: string;
          user_id: string;
          team_id: string;
          role: TeamRole;
          email: string;
          is_active: boolean;
          expires_at: Date | null;
          revoked_at: Date | null;
        }
      > = await this.ds.query(
        `SELECT k.id, k.name, k.prefix, k.user_id, k.team_id, u.role, u.email, u.is_active, k.expires_at, k.revoked_at,
                ${ENFORCED_POLICY_COLUMNS}
           FROM api_keys k JOIN users u ON u.id = k.user_id
          -- A key works only while its user is in the key's team (issue 8: a removed member's keys
          -- are revoked too; this holds even for one a revoke missed).
          WHERE k.key_hash = $1 AND u.team_id = k.team_id`,
        [Buffer.from(hex, "hex")],
      );
      const row = rows[0];
      if (!row) {
        if (this.unknownKeys.size >= MAX_CACHE) this.unknownKeys.clear();
        this.unknownKeys.set(hex, now);
      }
      if (!row || !row.is_active) throw AppError.unauthenticated("Invalid API key").because(INVALID_API_KEY);
      this.policies?.prime(row.id, enforcedPolicy(row), policyGeneration);
      entry = {
        principal: {
          userId: row.user_id,
          teamId: row.team_id,
          role: row.role,
          email: row.email,
          apiKey: { id: row.id, name: row.name, prefix: row.prefix },
        },
        expiresAt: row.expires_at ? row.expires_at.getTime() : null,
        revoked: row.revoked_at !== null,
        cachedAt: now,
      };
      if (this.keys.size >= MAX_CACHE) this.keys.clear();
      if (generation === this.generation) this.keys.set(hex, entry);
    }
    if (entry.revoked) throw AppError.unauthenticated("API key has been revoked").because(INVALID_API_KEY);
    if (entry.expiresAt !== null && entry.expiresAt <= now)
      throw AppError.unauthenticated("API key has expired").because(INVALID_API_KEY);
    return entry.principal;
  }

  private async fromAccessToken(token: string): Promise<Principal> {
    const claims = await this.tokens.verify(token);
    if (!claims) throw AppError.unauthenticated("Invalid or expired access token");
    const user = await this.user(claims.userId);
    if (!user || !user.isActive || user.teamId !== claims.teamId || claims.issuedAt < user.tokensValidAfterS) {
      throw AppError.unauthenticated("Invalid or expired access token");
    }
    return { userId: claims.userId, teamId: user.teamId, role: user.role, email: user.email, apiKey: null };
  }

  private async user(userId: string): Promise<CachedUser | undefined> {
    const now = Date.now();
    const cached = this.users.get(userId);
    if (cached && now - cached.cachedAt <= this.ttlMs) return cached;
    const generation = this.generation;
    const rows: Array<{
      email: string;
      team_id: string;
      role: TeamRole;
      is_active: boolean;
      valid_after: string | null;
    }> = await this.ds.query(
      `SELECT email, team_id, role, is_active,
                CASE WHEN tokens_valid_after = '-infinity' THEN NULL
                     ELSE extract(epoch FROM tokens_valid_after)::text END AS valid_after
           FROM users WHERE id = $1`,
      [userId],
    );
    const row = rows[0];
    if (!row) return undefined;
    const entry: CachedUser = {
      email: row.email,
      teamId: row.team_id,
      role: row.role,
      isActive: row.is_active,
      tokensValidAfterS: row.valid_after === null ? -Infinity : Number(row.valid_after),
      cachedAt: now,
    };
    if (this.users.size >= MAX_CACHE) this.users.clear();
    if (generation === this.generation) this.users.set(userId, entry);
    return entry;
  }
}
