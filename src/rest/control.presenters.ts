/**
 * REST shapes of the control plane's entity-backed answers (spec: Team and member,
 * ApiKeyListResponse): the one mapping from each entity to its snake_case JSON. Computed fields
 * (the caller's role, members, the signing-secret fields) come from the same resolver methods that
 * answer them over GraphQL, so both surfaces say the same. Deployments (spec: Deployment) likewise.
 */
import type { DeploymentEntity } from "../services/models/deployments.service.js";
import type { ActivityEntity } from "../services/usage/activity.service.js";
import type { ApiKeyEntity } from "../services/accounts/api-key.service.js";
import type { TeamEntity } from "../services/teams/team.service.js";
import type { TeamMemberEntity } from "../services/teams/member.service.js";
import type { UserEntity } from "../services/accounts/account.service.js";
import type { Resolvers } from "../resolvers/index.js";
import type { ActivityList } from "../services/usage/activity.service.js";
import type { ApiKeyList, CreatedApiKeyDto } from "../services/accounts/api-key.service.js";
import type { RequestContext } from "../services/platform/context.js";
import type { InvitedMember } from "../services/teams/member.service.js";

/** UserResponse (DESIGN §3 Account schemas): `username` is the email, `role` the team role. */
export function userJson(u: UserEntity) {
  return {
    username: u.email,
    role: u.role,
    id: u.id,
    email: u.email,
    name: u.name,
    team_id: u.teamId,
    created_at: u.createdAt,
  };
}

/** An answer that carries a signed-in `user` (login, signup, OAuth, accepted invitation), with it as UserResponse. */
export function withUserJson<T extends { user: UserEntity }>(result: T) {
  return { ...result, user: userJson(result.user) };
}

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

/** ApiKeyListResponse item, with its policy and spend (issue 29, item 1). */
export function apiKeyJson(k: ApiKeyEntity) {
  return {
    id: k.id,
    name: k.name,
    prefix: k.prefix,
    created_at: k.createdAt,
    last_used_at: k.lastUsedAt,
    expires_at: k.expiresAt,
    revoked_at: k.revokedAt,
    ...apiKeyPolicyJson(k),
  };
}

/** A key's policy and what it spent in its budget's current window (null without a budget). */
function apiKeyPolicyJson(k: ApiKeyEntity) {
  return {
    budget_micros: k.budgetMicrosNumber,
    budget_period: k.budgetPeriod,
    spent_micros: k.spentMicros,
    remaining_micros: k.remainingMicros,
    budget_resets_at: k.budgetResetsAt,
    rpm_limit: k.rpmLimit,
    tpm_limit: k.tpmLimit,
    allowed_models: k.allowedModelsOrAll,
  };
}

/** ApiKeyCreateResponse: the plaintext, shown this once, and the key's policy. */
export function createdApiKeyJson(c: CreatedApiKeyDto) {
  return {
    id: c.id,
    name: c.name,
    plaintext: c.plaintext,
    prefix: c.prefix,
    created_at: c.created_at,
    expires_at: c.expires_at,
    ...apiKeyPolicyJson(c.key),
  };
}

/** ApiKeyListResponse. */
export function apiKeyListJson(list: ApiKeyList) {
  return { items: list.items.map(apiKeyJson) };
}

/** spec: Activity record, list item. */
export function activityItemJson(a: ActivityEntity) {
  return {
    id: a.id,
    created_at: a.createdAt,
    completed_at: a.completedAt,
    status: a.status,
    model: a.model,
    custom_id: a.customId,
    type: a.type,
    batch_id: a.batchId,
    stream_id: a.streamId,
    prompt_tokens: a.promptTokens,
    completion_tokens: a.completionTokens,
    total_tokens: a.totalTokens,
    cached_prompt_tokens: a.cachedPromptTokens,
    cost_micros: Number(a.costMicros),
    error: a.errorJson ?? null,
    api_key_id: a.apiKeyId,
    api_key_name: a.apiKeyName,
    api_key_prefix: a.apiKeyPrefix,
  };
}

/** spec: Activity record, list wrapper. */
export function activityListJson(list: ActivityList) {
  return { items: list.items.map(activityItemJson), page: list.page, page_size: list.page_size, total: list.total };
}

/** spec: Activity record, detail (with the bodies; null under zero data retention). */
export function activityDetailJson(a: ActivityEntity) {
  return {
    id: a.id,
    status: a.status,
    model: a.model,
    custom_id: a.customId,
    type: a.type,
    batch_id: a.batchId,
    stream_id: a.streamId,
    created_at: a.createdAt,
    completed_at: a.completedAt,
    prompt_tokens: a.promptTokens,
    completion_tokens: a.completionTokens,
    total_tokens: a.totalTokens,
    cached_prompt_tokens: a.cachedPromptTokens,
    cost_micros: Number(a.costMicros),
    body_json: a.bodyJson ?? null,
    result_json: a.resultJson ?? null,
    error_json: a.errorJson ?? null,
  };
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
