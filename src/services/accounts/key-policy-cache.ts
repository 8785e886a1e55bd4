/**
 * The API key policies the data plane enforces (issue 29, item 1), cached per process by key id:
 * read on the hot path of every request made with a key, so a cached policy costs no database
 * round trip. Kept honest as the credential cache is: dropped when `ApiKeyService.update` commits
 * a change (NOTIFY `API_KEY_POLICY_TOPIC`, in every process) or the cache listener reconnects
 * (`*`), and read again after `ttlMs` at most. `CredentialService` primes it from the row it
 * reads to authenticate a key, so a request through a fresh key needs no second read either.
 * Keyed by id, not by the key's hash, because batch items and background responses run with the
 * principal stored at their creation: they find the policy as it stands when they run.
 */
import type { DataSource } from "typeorm";
import { queryRows } from "../../db/sql.js";
import type { CacheBus } from "../platform/cache-bus.js";
import { API_KEY_POLICY_TOPIC } from "./api-key-policy.js";

/** What the data plane checks of a key's policy (`api-key-policy.ts` for the rules). */
export interface EnforcedKeyPolicy {
  /** The key has a budget: its requests reserve from it (`KeyBudgetService`). */
  budgeted: boolean;
  rpmLimit: number | null;
  tpmLimit: number | null;
  /** Null: every model. */
  allowedModels: ReadonlySet<string> | null;
  /** Epoch ms; null: never. */
  expiresAt: number | null;
}

/** The columns of `api_keys` a policy is read from (the credential lookup reads them too). */
export const ENFORCED_POLICY_COLUMNS = "budget_micros IS NOT NULL AS budgeted, rpm_limit, tpm_limit, allowed_models";

/** A row with `ENFORCED_POLICY_COLUMNS` and `expires_at`. */
export interface EnforcedPolicyRow {
  budgeted: boolean;
  rpm_limit: number | null;
  tpm_limit: number | null;
  allowed_models: string[] | null;
  expires_at: Date | null;
}

/** The policy of a row read with `ENFORCED_POLICY_COLUMNS` and `expires_at`. */
export function enforcedPolicy(row: EnforcedPolicyRow): EnforcedKeyPolicy {
  return {
    budgeted: row.budgeted,
    rpmLimit: row.rpm_limit,
    tpmLimit: row.tpm_limit,
    allowedModels: row.allowed_models === null ? null : new Set(row.allowed_models),
    expiresAt: row.expires_at === null ? null : row.expires_at.getTime(),
  };
}

const MAX_CACHE = 50_000;

/** Per-process cache of the enforced policies of API keys (see the module header). */
export class KeyPolicyCache {
  private readonly policies = new Map<string, { policy: EnforcedKeyPolicy | null; at: number }>();
  private readonly lookups = new Map<string, Promise<EnforcedKeyPolicy | null>>();
  /** Bumped by every invalidation: a read that raced one is not cached (nor primed). */
  private generationCount = 0;

  constructor(
    private readonly ds: DataSource,
    bus: CacheBus,
    private readonly ttlMs: number,
  ) {
    bus.on(API_KEY_POLICY_TOPIC, (keyId) => {
      this.generationCount++;
      this.policies.delete(keyId);
    });
    bus.on("*", () => {
      this.generationCount++;
      this.policies.clear();
    });
  }

  /** The current invalidation count, read before a lookup whose row may `prime` the cache. */
  get generation(): number {
    return this.generationCount;
  }

  /** Caches `policy` for `keyId`, read from a row fetched since `generation` was read (else ignored). */
  prime(keyId: string, policy: EnforcedKeyPolicy, generation: number): void {
    if (generation !== this.generationCount) return;
    if (this.policies.size >= MAX_CACHE) this.policies.clear();
    this.policies.set(keyId, { policy, at: Date.now() });
  }

  /**
   * The enforced policy of `keyId`, cached; null when the key no longer exists.
   * @throws the database's error when it cannot be read.
   */
  async get(keyId: string): Promise<EnforcedKeyPolicy | null> {
    const cached = this.policies.get(keyId);
    if (cached && Date.now() - cached.at <= this.ttlMs) return cached.policy;
    let lookup = this.lookups.get(keyId);
    if (!lookup) {
      const generation = this.generationCount;
      lookup = queryRows<EnforcedPolicyRow>(
        this.ds,
        `SELECT ${ENFORCED_POLICY_COLUMNS}, expires_at FROM api_keys WHERE id = $1`,
        [keyId],
      )
        .then((rows) => {
          const policy = rows[0] ? enforcedPolicy(rows[0]) : null;
          if (generation === this.generationCount) {
            if (this.policies.size >= MAX_CACHE) this.policies.clear();
            this.policies.set(keyId, { policy, at: Date.now() });
          }
          return policy;
        })
        .finally(() => this.lookups.delete(keyId));
      this.lookups.set(keyId, lookup);
    }
    return lookup;
  }
}
