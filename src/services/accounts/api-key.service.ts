/**
 * API keys (DESIGN §3 Credentials, Account schemas): `sk_` + 48 base62 characters (≈ 286 bits),
 * shown once; only the SHA-256 is stored; `prefix` is the first 12 characters. Members manage
 * their own keys, owners and admins every key of the team (DESIGN §3 Roles; `policy.ts`).
 */
import { randomBytes } from "node:crypto";
import { v7 as uuidv7 } from "uuid";
import type { DataSource } from "typeorm";
import { z } from "zod";
import { queryRows } from "../../db/sql.js";
import { ApiKeyEntity } from "../../entities/api-key.entity.js";
import type { CacheBus } from "../platform/cache-bus.js";
import type { RequestContext } from "../platform/context.js";
import { API_KEY_PREFIX, hashApiKey } from "./credential.service.js";
import { AppError, parseInput, parseUuidParam } from "../../shared/errors.js";
import { apiKeyScope, authorize } from "../platform/policy.js";
import { pgText } from "../platform/validation.js";

/** ApiKeyListResponse: the keys (entities; each transport shapes them). */
export interface ApiKeyList {
  items: ApiKeyEntity[];
}

/** ApiKeyCreateResponse: `plaintext` is the full key, returned only here. */
export interface CreatedApiKeyDto {
  id: string;
  name: string;
  plaintext: string;
  prefix: string;
  created_at: Date;
  expires_at: Date | null;
}

export const createApiKeyInput = z.object({
  name: pgText().trim().min(1).max(200),
  expires_at: z.iso
    .datetime({ offset: true })
    .nullish()
    .transform((v) => (v ? new Date(v) : null))
    .refine((d) => d === null || d.getTime() > Date.now(), "must be in the future"),
});
export type CreateApiKeyInput = z.input<typeof createApiKeyInput>;

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
   * Creates a key for the caller.
   * @throws AppError 400 (name 1–200, `expires_at` ISO 8601 in the future); 401.
   */
  async create(ctx: RequestContext, raw: unknown): Promise<CreatedApiKeyDto> {
    const principal = authorize(ctx, "apiKeys.manageOwn");
    const input = parseInput(createApiKeyInput, raw);
    const plaintext = generateApiKey();
    const rows: Array<{ id: string; name: string; prefix: string; created_at: Date; expires_at: Date | null }> =
      await this.ds.query(
        `INSERT INTO api_keys (id, team_id, user_id, name, prefix, key_hash, expires_at)
       VALUES ($1, $2, $3, $4, $5, $6, $7) RETURNING id, name, prefix, created_at, expires_at`,
        [
          uuidv7(),
          principal.teamId,
          principal.userId,
          input.name,
          plaintext.slice(0, PREFIX_CHARS),
          hashApiKey(plaintext),
          input.expires_at,
        ],
      );
    const key = rows[0];
    return {
      id: key.id,
      name: key.name,
      plaintext,
      prefix: key.prefix,
      created_at: key.created_at,
      expires_at: key.expires_at,
    };
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
    return { items };
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
