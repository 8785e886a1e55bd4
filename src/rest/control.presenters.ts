/**
 * REST shapes of the control plane's entity-backed answers (spec: Team and member,
 * ApiKeyListResponse): the one mapping from each entity to its snake_case JSON. Computed fields
 * (the caller's role, members, the signing-secret fields) come from the same resolver methods that
 * answer them over GraphQL, so both surfaces say the same. Deployments (spec: Deployment) likewise.
 */
import type { ApiKeyEntity } from "../entities/api-key.entity.js";
import type { DeploymentEntity } from "../entities/deployment.entity.js";
import type { TeamEntity } from "../entities/team.entity.js";
import type { TeamMemberEntity } from "../entities/team-member.entity.js";
import type { Resolvers } from "../schema/build-schema.js";
import type { ApiKeyList } from "../services/api-key.service.js";
import type { RequestContext } from "../services/context.js";
import type { InvitedMember } from "../services/members.service.js";

/** spec: Member. */
export function memberJson(m: TeamMemberEntity) {
  return { user_id: m.userId, email: m.email, role: m.role, is_active: m.isActive, created_at: m.createdAt };
}

/** The member of a new invitation, with `invite_token` (shown this once). */
export function invitedMemberJson(invited: InvitedMember) {
  return { ...memberJson(invited.member), invite_token: invited.inviteToken };
}

/** spec: Team, plus `has_webhook_signing_secret` and, in the update that set it, `webhook_signing_secret`. */
export async function teamJson(r: Resolvers, ctx: RequestContext, team: TeamEntity) {
  const members = await r.teams.members(team, ctx);
  const json = {
    id: team.id,
    name: team.name,
    email_domain: team.emailDomain,
    role: r.teams.role(team, ctx),
    zero_data_retention_enabled: team.zeroDataRetentionEnabled,
    members: members.map(memberJson),
    has_webhook_signing_secret: r.teams.hasWebhookSigningSecret(team),
  };
  const secret = r.teams.webhookSigningSecret(team);
  return secret === null ? json : { ...json, webhook_signing_secret: secret };
}

/** ApiKeyListResponse item. */
export function apiKeyJson(k: ApiKeyEntity) {
  return {
    id: k.id,
    name: k.name,
    prefix: k.prefix,
    created_at: k.createdAt,
    last_used_at: k.lastUsedAt,
    expires_at: k.expiresAt,
    revoked_at: k.revokedAt,
  };
}

/** ApiKeyListResponse. */
export function apiKeyListJson(list: ApiKeyList) {
  return { items: list.items.map(apiKeyJson) };
}

/** spec: Deployment. */
export function deploymentJson(d: DeploymentEntity) {
  return {
    id: d.id,
    name: d.name,
    model_source: d.modelSource,
    model_id: d.modelId,
    region: d.region,
    performance: d.performance,
    min_replicas: d.minReplicas,
    max_replicas: d.maxReplicas,
    notes: d.notes,
    status: d.status,
    status_reason: d.statusReason,
    activated_at: d.activatedAt,
    created_at: d.createdAt,
    updated_at: d.updatedAt,
  };
}
