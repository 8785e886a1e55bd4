/**
 * The caller's team (spec: Team and member; `GET`/`PATCH /control/v1/teams/me`; issue 8, item 3).
 * PATCH changes `name`, `email_domain`, `zero_data_retention_enabled` and the Standard Webhooks
 * signing secret (DESIGN §3 Webhooks: a `whsec_…` value, `"rotate"` for a new random one, or null
 * to remove it); owners and admins only (`policy.ts`). Unknown fields are ignored; a known field
 * of the wrong type or out of range is a 400 and nothing changes.
 *
 * The signing secret is shown once, by the update that set it: `signingSecretShown` answers it
 * only for the entity that update returned; reads only say whether one is set.
 *
 * Zero data retention (when on, request and result bodies are not stored) is applied where bodies
 * are written: the metering group commit (`metering.service.ts`) reads the flag at commit time.
 * A completion webhook's body waits in the outbox only until its delivery ends (then it is
 * erased, for every team); batches, which are stored bodies by nature, are refused (403,
 * `batches.service.ts`). Turning the flag on does not erase what was stored before.
 */
import type { DataSource } from "typeorm";
import { z } from "zod";
import { TeamEntity } from "../../entities/team.entity.js";
import type { TeamRole } from "../../entities/user.entity.js";
import { AppError, parseInput } from "../../shared/errors.js";
import type { RequestContext } from "../platform/context.js";
import { authorize, ownTeam } from "../platform/policy.js";
import { pgText } from "../platform/validation.js";
import { isSigningSecret, newSigningSecret } from "../events/webhooks/webhook-target.js";

/** A host name: dot-separated labels of letters, digits and inner hyphens, ending in a letters-only label. */
const DOMAIN = /^(?=.{1,253}$)(?:[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?\.)+[a-z]{2,63}$/;

/** `PATCH /control/v1/teams/me` body (unknown fields ignored; an absent field keeps its value). */
export const updateTeamInput = z.object({
  name: pgText().trim().min(1).max(200).optional(),
  /** A host name such as `example.com` (stored lowercase), or null to clear it. */
  email_domain: pgText()
    .trim()
    .toLowerCase()
    .regex(DOMAIN, "must be a domain name such as example.com")
    .nullable()
    .optional(),
  zero_data_retention_enabled: z.boolean().optional(),
  webhook_signing_secret: z
    .union([
      z.literal("rotate"),
      z
        .string()
        .refine(isSigningSecret, 'must be "rotate" or whsec_ followed by base64 of 24 to 64 bytes')
        // The same rule for the OpenAPI document (issue 28, item 5): 32–86 base64 digits are 24–64 bytes.
        .meta({ pattern: "^whsec_[A-Za-z0-9+/]{32,86}={0,2}$" }),
    ])
    .nullish(),
});
export type UpdateTeamInput = z.input<typeof updateTeamInput>;

/** Reads and updates the caller's team. */
export class TeamService {
  /** Entities returned by the update that set their signing secret (the only answer that shows it). */
  private readonly shownOnce = new WeakSet<TeamEntity>();

  constructor(private readonly ds: DataSource) {}

  /**
   * The caller's team.
   * @throws AppError 401; 404 when it is gone (never for a signed-in caller in practice).
   */
  async get(ctx: RequestContext): Promise<TeamEntity> {
    const principal = authorize(ctx, "team.read");
    const team = await this.ds.getRepository(TeamEntity).findOneBy({ id: principal.teamId });
    return ownTeam(principal, team);
  }

  /** The caller's role in `team` (their own team: the only one they can read). @throws AppError 401. */
  callerRole(ctx: RequestContext, team: TeamEntity): TeamRole {
    const principal = authorize(ctx, "team.read");
    ownTeam(principal, team);
    return principal.role;
  }

  /** True when the team has a webhook signing secret. */
  hasSigningSecret(team: TeamEntity): boolean {
    return team.webhookSigningSecret !== null;
  }

  /** The signing secret when `team` is the answer of the update that set it; null otherwise. */
  signingSecretShown(team: TeamEntity): string | null {
    return this.shownOnce.has(team) ? team.webhookSigningSecret : null;
  }

  /**
   * Updates the caller's team with the fields given; answers the team (see `signingSecretShown`).
   * @throws AppError 400 (name 1–200 characters, `email_domain` a domain name or null,
   *   `zero_data_retention_enabled` a boolean, a secret that is neither `"rotate"` nor `whsec_` +
   *   base64 of 24–64 bytes; nothing is changed); 401; 403 for members.
   */
  async update(ctx: RequestContext, raw: unknown): Promise<TeamEntity> {
    const principal = authorize(ctx, "team.update");
    const input = parseInput(updateTeamInput, raw ?? {});
    const patch: Partial<
      Pick<TeamEntity, "name" | "emailDomain" | "zeroDataRetentionEnabled" | "webhookSigningSecret">
    > = {};
    if (input.name !== undefined) patch.name = input.name;
    if (input.email_domain !== undefined) patch.emailDomain = input.email_domain;
    if (input.zero_data_retention_enabled !== undefined)
      patch.zeroDataRetentionEnabled = input.zero_data_retention_enabled;
    const setsSecret = input.webhook_signing_secret !== undefined;
    if (setsSecret) {
      patch.webhookSigningSecret =
        input.webhook_signing_secret === "rotate" ? newSigningSecret() : (input.webhook_signing_secret ?? null);
    }
    const repo = this.ds.getRepository(TeamEntity);
    if (Object.keys(patch).length > 0) {
      const result = await repo.update({ id: principal.teamId }, { ...patch, updatedAt: () => "now()" });
      if (result.affected === 0) throw AppError.notFound("Team not found");
    }
    const team = await this.get(ctx);
    if (setsSecret && team.webhookSigningSecret !== null) this.shownOnce.add(team);
    return team;
  }
}

/** The team record as this domain hands it to the transports (persisted shape; transports never import entities). */
export type { TeamEntity } from "../../entities/team.entity.js";
