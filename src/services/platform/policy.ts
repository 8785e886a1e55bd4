/**
 * The authorization policy (issue 8, item 5; DESIGN §3 Roles): the one place that says which team
 * role may do what. Every service that makes a role decision asks here; the authorization-matrix
 * test (test/authorization-matrix.test.ts) calls every endpoint as each kind of caller and checks
 * the answers these rules give.
 *
 * - Owners and admins manage members, every key of the team, billing, deployments and custom
 *   models, change the team, and may read (and filter by `user_id`) everyone's activity and usage.
 * - Members use inference, manage their own keys, read the team, and see their own activity and usage.
 *   A member may set limits on their own keys (issue 29, item 1: budget, rates, models, expiry)
 *   but only tighten them: raising or lifting a limit is the managers' (`apiKeys.loosenLimits`),
 *   so a key an owner capped stays capped in its holder's hands.
 *   They also read what they may run inference on (issue 9): the model catalog, its search, and
 *   the team's deployments; creating and deleting custom models and deployments, and requesting
 *   a custom model's deployment, is the managers'.
 *   Every member reads the team's webhook delivery log (issue 27, item 6: the deliveries of the
 *   team's requests, as the team's responses are every member's); a manual redelivery sends the
 *   team's data out again and is the managers'.
 *   Inference (the data plane) is every role's: it asks only for a caller, and reaches only the
 *   caller's team's resources (streams, responses, batches), so it has no permission here.
 * - Only owners make owners, and change or remove an owner (an admin cannot take over or lock out
 *   an owner); the last owner is protected by the members service (409), not here, since that
 *   needs the team's current state.
 * - Resources belong to teams: a resource of another team is answered 404, as if it did not exist
 *   (DESIGN §3 Errors), never 403, so ids of other teams cannot be probed.
 */
import type { TeamRole } from "../../entities/user.entity.js";
import { AppError } from "../../shared/errors.js";
import { type Principal, type RequestContext, requirePrincipal } from "./context.js";

/** What a caller may be allowed to do. */
export type Permission =
  /** `GET /control/v1/teams/me`. */
  | "team.read"
  /** `PATCH /control/v1/teams/me`. */
  | "team.update"
  /** Invite members, change their roles, remove them. */
  | "members.manage"
  /** Create, list and revoke one's own API keys. */
  | "apiKeys.manageOwn"
  /** List and revoke every API key of the team. */
  | "apiKeys.manageAll"
  /** Raise or lift an API key's limits (budget, rates, models, expiry); members may only tighten their own. */
  | "apiKeys.loosenLimits"
  /** Read one's own activity and usage. */
  | "usage.readOwn"
  /** Read every member's activity and usage, and filter it by `user_id`. */
  | "usage.readAll"
  /** Billing: summaries, transactions, invoices, top-ups. */
  | "billing.manage"
  /** The model catalog (platform and the team's custom models) and its search. */
  | "models.read"
  /** List the team's deployments. */
  | "deployments.read"
  /** Create and delete deployments of models. */
  | "deployments.manage"
  /** Create and delete custom models, request their deployment. */
  | "customModels.manage"
  /** Read the team's webhook deliveries and their attempts. */
  | "webhooks.read"
  /** Redeliver a failed webhook delivery by hand. */
  | "webhooks.redeliver";

const EVERY_MEMBER: readonly Permission[] = [
  "team.read",
  "apiKeys.manageOwn",
  "usage.readOwn",
  "models.read",
  "deployments.read",
  "webhooks.read",
];
const MANAGERS: readonly Permission[] = [
  ...EVERY_MEMBER,
  "team.update",
  "members.manage",
  "apiKeys.manageAll",
  "apiKeys.loosenLimits",
  "usage.readAll",
  "billing.manage",
  "deployments.manage",
  "customModels.manage",
  "webhooks.redeliver",
];

/** The permissions of each role (DESIGN §3 Roles). */
export const ROLE_PERMISSIONS: Readonly<Record<TeamRole, ReadonlySet<Permission>>> = {
  owner: new Set(MANAGERS),
  admin: new Set(MANAGERS),
  member: new Set(EVERY_MEMBER),
};

/** What a 403 says for each permission. */
const REFUSALS: Record<Permission, string> = {
  "team.read": "Your role may not read the team",
  "team.update": "Only team owners and admins can change the team",
  "members.manage": "Only team owners and admins can manage members",
  "apiKeys.manageOwn": "Your role may not manage API keys",
  "apiKeys.manageAll": "Only team owners and admins can manage other members' API keys",
  "apiKeys.loosenLimits": "Only team owners and admins can raise or lift an API key's limits",
  "usage.readOwn": "Your role may not read activity or usage",
  "models.read": "Your role may not read the model catalog",
  "deployments.read": "Your role may not read deployments",
  "usage.readAll": "Only team owners and admins can read other members' activity and usage",
  "billing.manage": "Only team owners and admins can manage billing",
  "deployments.manage": "Only team owners and admins can manage deployments",
  "customModels.manage": "Only team owners and admins can manage custom models",
  "webhooks.read": "Your role may not read webhook deliveries",
  "webhooks.redeliver": "Only team owners and admins can redeliver webhooks",
};

/** True when `principal`'s role grants `permission`. */
export function can(principal: Principal, permission: Permission): boolean {
  return ROLE_PERMISSIONS[principal.role].has(permission);
}

/**
 * The caller, when their role grants `permission`.
 * @throws AppError 401 without valid credentials; 403 when the role does not grant it.
 */
export function authorize(ctx: RequestContext, permission: Permission): Principal {
  const principal = requirePrincipal(ctx);
  if (!can(principal, permission)) throw AppError.forbidden(REFUSALS[permission]);
  return principal;
}

/**
 * A resource read or changed by id, when it is the caller's team's.
 * @returns the resource.
 * @throws AppError 404 (`what` not found) when it does not exist or is another team's.
 */
export function inTeam<T extends { teamId: string }>(
  principal: Principal,
  resource: T | null | undefined,
  what: string,
): T {
  if (!resource || resource.teamId !== principal.teamId) throw AppError.notFound(`${what} not found`);
  return resource;
}

/**
 * A team read or changed by id, when it is the caller's own (a caller reaches only their team).
 * @throws AppError 404 when it does not exist or is another team.
 */
export function ownTeam<T extends { id: string }>(principal: Principal, team: T | null | undefined): T {
  if (!team || team.id !== principal.teamId) throw AppError.notFound("Team not found");
  return team;
}

/** Whose rows of the team a list or lookup covers: every member's (`userId` null), or one user's. */
export interface TeamScope {
  teamId: string;
  /** Null: every member of the team. */
  userId: string | null;
}

/**
 * The API keys the caller may list and revoke (DESIGN §3 Roles): owners and admins every key of
 * the team, members their own.
 * @throws AppError 401; 403 for a role without key management.
 */
export function apiKeyScope(ctx: RequestContext): TeamScope {
  const principal = authorize(ctx, "apiKeys.manageOwn");
  return { teamId: principal.teamId, userId: can(principal, "apiKeys.manageAll") ? null : principal.userId };
}

/**
 * Whose activity and usage a read covers (spec: `user_id` "team admins: filter to one member";
 * DESIGN §3 Roles): owners and admins everyone's, or the one member `requestedUserId` names;
 * members only their own (naming themselves is allowed, anyone else is refused).
 * @throws AppError 401; 403 when a member names another user.
 */
export function usageScope(ctx: RequestContext, requestedUserId?: string | null): TeamScope {
  const principal = authorize(ctx, "usage.readOwn");
  if (can(principal, "usage.readAll")) return { teamId: principal.teamId, userId: requestedUserId ?? null };
  if (requestedUserId != null && requestedUserId !== principal.userId) {
    throw AppError.forbidden(REFUSALS["usage.readAll"]);
  }
  return { teamId: principal.teamId, userId: principal.userId };
}

/**
 * Checks that the caller may give `role` to a member (invite with it, or change to it): owners any
 * role, admins `admin` and `member` (only owners make owners).
 * @throws AppError 401; 403.
 */
export function authorizeRoleGrant(ctx: RequestContext, role: TeamRole): Principal {
  const principal = authorize(ctx, "members.manage");
  if (role === "owner" && principal.role !== "owner") throw AppError.forbidden("Only owners can make owners");
  return principal;
}

/**
 * Checks that the caller may change or remove `target`, a member of their team: managers may,
 * except that only owners change or remove owners.
 * @throws AppError 401; 403.
 */
export function authorizeMemberChange(ctx: RequestContext, target: { role: TeamRole }): Principal {
  const principal = authorize(ctx, "members.manage");
  if (target.role === "owner" && principal.role !== "owner") {
    throw AppError.forbidden("Only owners can change or remove an owner");
  }
  return principal;
}
