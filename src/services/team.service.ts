/**
 * The caller's team (spec: Team and member; `GET`/`PATCH /control/v1/teams/me`). For now PATCH
 * sets the team's Standard Webhooks signing secret (issue 6, item 3; DESIGN §3 Webhooks): a
 * `whsec_…` value, `"rotate"` for a new random one, or null to remove it; owners and admins only.
 * The secret is shown once, in the PATCH answer that set it; reads only say whether one is set.
 * The rest of the teams group (members, invitations) comes with the accounts issue.
 */
import type { DataSource } from "typeorm";
import { z } from "zod";
import { queryRows } from "../db/sql.js";
import type { TeamRole } from "../entities/user.entity.js";
import { type RequestContext, isTeamAdmin, requirePrincipal } from "./context.js";
import { AppError, parseInput } from "../shared/errors.js";
import { isSigningSecret, newSigningSecret } from "./webhooks/webhook-target.js";

/** spec: Member. */
export interface TeamMemberDto {
  user_id: string;
  email: string;
  role: TeamRole;
  is_active: boolean;
  created_at: Date;
}

/** spec: Team, plus whether a webhook signing secret is set. */
export interface TeamDto {
  id: string;
  name: string;
  email_domain: string | null;
  /** The caller's role. */
  role: TeamRole;
  zero_data_retention_enabled: boolean;
  members: TeamMemberDto[];
  has_webhook_signing_secret: boolean;
  /** Only in the PATCH answer that set it (shown once). */
  webhook_signing_secret?: string;
}

/** `PATCH /control/v1/teams/me` body (unknown fields ignored). */
export const updateTeamInput = z.object({
  webhook_signing_secret: z
    .union([
      z.literal("rotate"),
      z.string().refine(isSigningSecret, 'must be "rotate" or whsec_ followed by base64 of 24 to 64 bytes'),
    ])
    .nullish(),
});
export type UpdateTeamInput = z.input<typeof updateTeamInput>;

/** Reads and updates the caller's team. */
export class TeamService {
  constructor(private readonly ds: DataSource) {}

  /**
   * The caller's team with its members (oldest first).
   * @throws AppError 401.
   */
  async get(ctx: RequestContext): Promise<TeamDto> {
    const principal = requirePrincipal(ctx);
    const [team] = await queryRows<{
      id: string;
      name: string;
      email_domain: string | null;
      zero_data_retention_enabled: boolean;
      has_secret: boolean;
    }>(
      this.ds,
      `SELECT id, name, email_domain, zero_data_retention_enabled, webhook_signing_secret IS NOT NULL AS has_secret
         FROM teams WHERE id = $1`,
      [principal.teamId],
    );
    if (!team) throw AppError.notFound("Team not found");
    const members = await queryRows<TeamMemberDto>(
      this.ds,
      `SELECT id AS user_id, email, role, is_active, created_at FROM users WHERE team_id = $1 ORDER BY created_at, id`,
      [principal.teamId],
    );
    return {
      id: team.id,
      name: team.name,
      email_domain: team.email_domain,
      role: principal.role,
      zero_data_retention_enabled: team.zero_data_retention_enabled,
      members,
      has_webhook_signing_secret: team.has_secret,
    };
  }

  /**
   * Updates the caller's team; answers the team, with `webhook_signing_secret` when this call set it.
   * @throws AppError 400 (a secret that is neither `"rotate"` nor `whsec_` + base64 of 24–64
   *   bytes); 401; 403 for members.
   */
  async update(ctx: RequestContext, raw: unknown): Promise<TeamDto> {
    const principal = requirePrincipal(ctx);
    if (!isTeamAdmin(principal.role)) throw AppError.forbidden("Only team owners and admins can change the team");
    const input = parseInput(updateTeamInput, raw ?? {});
    let shown: string | undefined;
    if (input.webhook_signing_secret !== undefined) {
      const secret = input.webhook_signing_secret === "rotate" ? newSigningSecret() : input.webhook_signing_secret;
      await this.ds.query(`UPDATE teams SET webhook_signing_secret = $2, updated_at = now() WHERE id = $1`, [
        principal.teamId,
        secret,
      ]);
      shown = secret ?? undefined;
    }
    const team = await this.get(ctx);
    return shown === undefined ? team : { ...team, webhook_signing_secret: shown };
  }
}
