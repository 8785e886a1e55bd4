/**
 * Members of a team and invitations (issue 8, item 4; DESIGN §3 Roles; spec: Team and member).
 *
 * - Adding a member makes an invitation: a single-use token (≥ 256 random bits, only its SHA-256
 *   stored, valid `INVITATION_TTL_DAYS`) mailed to the address (kind `invitation`) and shown once
 *   to the inviter as `invite_token`. Until it is used (or expires) the member is listed with
 *   `is_active: false`. Inviting an address that has an open invitation replaces it (a new token;
 *   the old one stops working): that is how an invitation is sent again.
 * - It is used by the signed-in user whose email it names (`accept`; anyone else 403), or by a
 *   signup with `invite_token` (`createInvitedUser`, also meant for the OAuth first login).
 *   Unknown, used, replaced or expired tokens → 404.
 * - A user belongs to one team. Accepting moves the user; the team they leave must be their own
 *   unused personal team (they are its only user, and it has none of the data `TEAM_DATA` lists),
 *   which is then removed (marked deleted: its ledger rows stay, the ledger being append-only).
 *   Any other team → 409 saying why.
 * - Roles change with `updateRole`; `remove` revokes the member's keys for the team and gives them
 *   a new empty personal team (no signup credit), so they can still sign in and be invited again.
 *   The last owner can be neither demoted nor removed (409). Who may do what is `policy.ts`.
 *
 * Member changes of a team are serialised by a lock on its `teams` row, so two owners demoting
 * each other at once cannot leave the team without an owner; under that lock the caller's own
 * role is read again, so a change that won the lock first (demoting or removing the caller)
 * decides what the caller may still do. Role and team changes reach every
 * process's credential cache through the cache bus (`user:<id>`), and tokens issued before a move
 * stop working (`tokens_valid_after`).
 */
import { createHash, randomBytes } from "node:crypto";
import type { DataSource, EntityManager } from "typeorm";
import { v7 as uuidv7 } from "uuid";
import { z } from "zod";
import { queryRows } from "../../db/sql.js";
import { InvitationEntity } from "../../entities/invitation.entity.js";
import type { TeamEntity } from "../../entities/team.entity.js";
import { TeamMemberEntity } from "../../entities/team-member.entity.js";
import { TEAM_ROLES, type TeamRole, UserEntity } from "../../entities/user.entity.js";
import { AppError, parseInput, parseUuidParam } from "../../shared/errors.js";
import type { ApiKeyEntity } from "../../entities/api-key.entity.js";
import type { CacheBus } from "../platform/cache-bus.js";
import type { ControlLoaders } from "./control-loaders.js";
import { type Principal, type RequestContext, requirePrincipal } from "../platform/context.js";
import type { Mailer } from "../platform/mail/mailer.js";
import { authorize, authorizeMemberChange, authorizeRoleGrant, inTeam, ownTeam } from "../platform/policy.js";
import type { IssuedToken, TokenService } from "../platform/tokens.js";
import { TEAM_LEDGER_USED } from "../ledger/ledger.js";
import { pgText } from "../platform/validation.js";

/** How long an invitation can be used, days. */
export const INVITATION_TTL_DAYS = 7;

/** Invitation tokens: `inv_` + 43 base64url characters (32 random bytes). */
const TOKEN_PREFIX = "inv_";

/**
 * Tables whose rows make a team "used": a personal team with any of them is not removed when its
 * user joins another team (409). Endpoints that add team data (deployments, custom models, …) add
 * their table here. The signup credit grant does not count; any other ledger row does.
 */
export const TEAM_DATA = ["activity", "responses", "batches", "streams", "webhook_deliveries"] as const;

const email = pgText()
  .trim()
  .max(320)
  .email()
  .transform((e) => e.toLowerCase());

/** `POST /control/v1/teams/me/members` body. `role` defaults to `member`. */
export const inviteMemberInput = z.object({ email, role: z.enum(TEAM_ROLES).default("member") });
export type InviteMemberInput = z.input<typeof inviteMemberInput>;

/** `PATCH /control/v1/teams/me/members/{user_id}` body. */
export const updateMemberInput = z.object({ role: z.enum(TEAM_ROLES) });
export type UpdateMemberInput = z.input<typeof updateMemberInput>;

/** The answer to an invitation: the pending member and the token, shown this once. */
export interface InvitedMember {
  member: TeamMemberEntity;
  inviteToken: string;
}

/** The answer to an accepted invitation: the user in their new team and an access token for it. */
export interface AcceptedInvitation {
  user: UserEntity;
  token: IssuedToken;
}

/** A signup (or OAuth first login) that uses an invitation: the account to create. */
export interface InvitedSignup {
  token: string;
  /** Lowercase email: must be the invitation's. */
  email: string;
  name: string;
  /** argon2id PHC string; null for an account without a password (OAuth). */
  passwordHash: string | null;
}

/** Creates users from invitations; what `AccountService` needs for signup with `invite_token`. */
export interface InvitedUserFactory {
  /**
   * Creates the invited user in the inviting team and marks the invitation used; inside `within`
   * when given (the caller's transaction), else in a transaction of its own.
   * @throws AppError 404 unknown/used/expired token; 403 the invitation names another email;
   *   409 the email is registered (only without `within`: inside a caller's transaction the
   *   unique violation aborts it, and the caller decides).
   */
  createInvitedUser(input: InvitedSignup, within?: EntityManager): Promise<UserEntity>;
}

/** SHA-256 of an invitation token (the only form stored). */
function hashToken(token: string): Buffer {
  return createHash("sha256").update(token).digest();
}

/** The personal team name of a new team: "<name or mailbox>'s team" (as signup names it). */
export function personalTeamName(name: string, emailAddress: string): string {
  return `${name || emailAddress.split("@")[0]}'s team`;
}

/** Members, invitations and roles of the caller's team. */
export class MemberService implements InvitedUserFactory {
  constructor(
    private readonly ds: DataSource,
    private readonly bus: CacheBus,
    private readonly loaders: ControlLoaders,
    private readonly mailer: Mailer,
    private readonly tokens: TokenService,
    /** Base URL of the service in mails (config `publicUrl`; never the request's Host). */
    private readonly publicUrl: string,
  ) {}

  /**
   * Members of `team` (active users and pending invitations, oldest first), batched per request.
   * @throws AppError 401; 404 when `team` is not the caller's.
   */
  async membersOf(ctx: RequestContext, team: Pick<TeamEntity, "id">): Promise<TeamMemberEntity[]> {
    const principal = authorize(ctx, "team.read");
    ownTeam(principal, team);
    return this.loaders.for(ctx).membersByTeam.load(team.id);
  }

  /**
   * The user behind a member or an API key of the caller's team, batched per request. Null when
   * that user is not in the caller's team: a pending invitation (of an address nobody registered,
   * or of someone else's user, whose account the inviting team does not get to see), or the key
   * of a removed member.
   * @throws AppError 401; 404 when `of` is another team's.
   */
  async userOf(ctx: RequestContext, of: TeamMemberEntity | ApiKeyEntity): Promise<UserEntity | null> {
    const principal = authorize(ctx, "team.read");
    inTeam(principal, of, "Member");
    const user = await this.loaders.for(ctx).userById.load(of.userId);
    return user?.teamId === principal.teamId ? user : null;
  }

  /**
   * Invites `email` into the caller's team with `role` (default `member`): the invitation is
   * mailed and its token returned once.
   * @throws AppError 400 (email, role); 401; 403 for members, and for admins inviting an owner;
   *   409 when the address is already an active member of the team.
   */
  async invite(ctx: RequestContext, raw: unknown): Promise<InvitedMember> {
    authorize(ctx, "members.manage");
    const input = parseInput(inviteMemberInput, raw);
    const principal = authorizeRoleGrant(ctx, input.role);
    const token = TOKEN_PREFIX + randomBytes(32).toString("base64url");
    const { invitation, team } = await this.ds.transaction(async (em) => {
      const team = await this.lockTeam(em, principal);
      authorizeRoleGrant(await this.callerNow(em, ctx), input.role);
      const [existing] = await queryRows<{ id: string; team_id: string }>(
        em,
        `SELECT id, team_id FROM users WHERE lower(email) = $1`,
        [input.email],
      );
      if (existing?.team_id === principal.teamId)
        throw AppError.conflict("That address is already a member of the team");
      // An open invitation of the address is replaced; the pending member keeps its user id.
      const [replaced] = await queryRows<{ user_id: string }>(
        em,
        `UPDATE team_invitations SET revoked_at = now()
          WHERE team_id = $1 AND lower(email) = $2 AND accepted_at IS NULL AND revoked_at IS NULL
        RETURNING user_id`,
        [principal.teamId, input.email],
      );
      const invitation = em.getRepository(InvitationEntity).create({
        id: uuidv7(),
        teamId: principal.teamId,
        email: input.email,
        role: input.role,
        userId: existing?.id ?? replaced?.user_id ?? uuidv7(),
        tokenHash: hashToken(token),
        invitedBy: principal.userId,
        createdAt: new Date(),
        expiresAt: new Date(Date.now() + INVITATION_TTL_DAYS * 86_400_000),
        acceptedAt: null,
        revokedAt: null,
      });
      await em.getRepository(InvitationEntity).insert(invitation);
      return { invitation, team };
    });
    await this.mailer.send({
      kind: "invitation",
      to: input.email,
      subject: `You are invited to join ${team.name} on Switchyard`,
      text: this.invitationText(principal.email, team.name, input.role, token),
      // The token is a credential (it joins the team): once SMTP took the mail, the outbox drops it.
      secret: true,
    });
    const member = await this.ds
      .getRepository(TeamMemberEntity)
      .findOneByOrFail({ teamId: principal.teamId, invitationId: invitation.id });
    return { member, inviteToken: token };
  }

  /**
   * Changes the role of a member (or of a pending invitation) of the caller's team.
   * @throws AppError 400 (`user_id` not a uuid, role not owner/admin/member); 401; 403 for
   *   members, and for admins touching an owner or making one; 404 no such member in the team;
   *   409 when it would leave the team without an owner.
   */
  async updateRole(ctx: RequestContext, userId: unknown, raw: unknown): Promise<TeamMemberEntity> {
    authorize(ctx, "members.manage");
    const id = parseUuidParam("user_id", userId);
    const input = parseInput(updateMemberInput, raw);
    const principal = authorizeRoleGrant(ctx, input.role);
    const member = await this.ds.transaction(async (em) => {
      await this.lockTeam(em, principal);
      const caller = await this.callerNow(em, ctx);
      authorizeRoleGrant(caller, input.role);
      const member = await this.memberOf(em, principal, id);
      authorizeMemberChange(caller, member);
      if (member.invitationId !== null) {
        await em.getRepository(InvitationEntity).update({ id: member.invitationId }, { role: input.role });
      } else if (member.role !== input.role) {
        if (member.role === "owner") await this.assertOtherOwner(em, principal.teamId, "demoted");
        await em.getRepository(UserEntity).update({ id }, { role: input.role, updatedAt: () => "now()" });
        await this.bus.publish("user", id, em);
      }
      return this.memberOf(em, principal, id);
    });
    this.bus.deliverLocally("user", id);
    return member;
  }

  /**
   * Removes a member from the caller's team (or withdraws a pending invitation): every key they
   * hold for the team is revoked, tokens issued before stop working, and they get a new, empty
   * personal team of their own (they keep their account).
   * @throws AppError 400 (`user_id` not a uuid); 401; 403 for members, and for admins removing an
   *   owner; 404 no such member in the team; 409 for the last owner.
   */
  async remove(ctx: RequestContext, userId: unknown): Promise<void> {
    authorize(ctx, "members.manage");
    const id = parseUuidParam("user_id", userId);
    const principal = requirePrincipal(ctx);
    const revokedKeys = await this.ds.transaction(async (em) => {
      await this.lockTeam(em, principal);
      const caller = await this.callerNow(em, ctx);
      const member = await this.memberOf(em, principal, id);
      authorizeMemberChange(caller, member);
      if (member.invitationId !== null) {
        await em.getRepository(InvitationEntity).update({ id: member.invitationId }, { revokedAt: () => "now()" });
        return [];
      }
      if (member.role === "owner") await this.assertOtherOwner(em, principal.teamId, "removed");
      const keys = await this.revokeKeys(em, principal.teamId, id);
      const [user] = await queryRows<{ name: string; email: string }>(
        em,
        `SELECT name, email FROM users WHERE id = $1`,
        [id],
      );
      const teamId = uuidv7();
      await em.query(`INSERT INTO teams (id, name) VALUES ($1, $2)`, [teamId, personalTeamName(user.name, user.email)]);
      await em.query(
        `UPDATE users SET team_id = $2, role = 'owner', team_joined_at = now(), tokens_valid_after = now(),
                          updated_at = now()
          WHERE id = $1`,
        [id, teamId],
      );
      await this.bus.publish("user", id, em);
      return keys;
    });
    this.bus.deliverLocally("user", id);
    for (const hex of revokedKeys) this.bus.deliverLocally("api_key", hex);
  }

  /**
   * Uses an invitation as the signed-in user: they move into its team with its role. Their current
   * team must be their own unused personal team, which is removed.
   * @returns the user in the new team and an access token for it (tokens for the old team stop working).
   * @throws AppError 401; 403 when the invitation names another email; 404 unknown, used, replaced
   *   or expired token; 409 when the caller is already in that team, or their current team has
   *   other users or data (the detail says which).
   */
  async accept(ctx: RequestContext, token: unknown): Promise<AcceptedInvitation> {
    const principal = requirePrincipal(ctx);
    const { user, revokedKeys } = await this.ds.transaction(async (em) => {
      const found = await this.openInvitation(em, token, false);
      if (found.email.toLowerCase() !== principal.email.toLowerCase()) {
        throw AppError.forbidden("This invitation is for another email address");
      }
      const current = async (lock: string) =>
        (
          await queryRows<{ team_id: string; team_name: string }>(
            em,
            `SELECT u.team_id, t.name AS team_name FROM users u JOIN teams t ON t.id = u.team_id WHERE u.id = $1 ${lock}`,
            [principal.userId],
          )
        )[0];
      const before = await current("");
      if (!before) throw AppError.unauthenticated();
      if (before.team_id === found.teamId) throw AppError.conflict("You are already a member of that team");
      // Teams first, in id order, then the invitation and the user (member changes and invitations
      // lock their team before its users and invitations).
      for (const teamId of [before.team_id, found.teamId].sort()) {
        await em.query(`SELECT 1 FROM teams WHERE id = $1 FOR UPDATE`, [teamId]);
      }
      const invitation = await this.openInvitation(em, token, true);
      const me = await current("FOR UPDATE OF u");
      if (me?.team_id !== before.team_id) throw AppError.conflict("Your team changed meanwhile; try again");
      await this.assertRemovable(em, me.team_id, me.team_name, principal.userId);
      await em.query(
        `UPDATE team_invitations SET revoked_at = now() WHERE team_id = $1 AND accepted_at IS NULL AND revoked_at IS NULL`,
        [me.team_id],
      );
      await em.query(`UPDATE teams SET deleted_at = now(), updated_at = now() WHERE id = $1`, [me.team_id]);
      const revokedKeys = await this.revokeKeys(em, me.team_id, principal.userId);
      await em.query(
        `UPDATE users SET team_id = $2, role = $3, team_joined_at = now(), tokens_valid_after = now(), updated_at = now()
          WHERE id = $1`,
        [principal.userId, invitation.teamId, invitation.role],
      );
      await em
        .getRepository(InvitationEntity)
        .update({ id: invitation.id }, { acceptedAt: () => "now()", userId: principal.userId });
      await this.bus.publish("user", principal.userId, em);
      const user = await em.getRepository(UserEntity).findOneByOrFail({ id: principal.userId });
      return { user, revokedKeys };
    });
    this.bus.deliverLocally("user", principal.userId);
    for (const hex of revokedKeys) this.bus.deliverLocally("api_key", hex);
    return { user, token: await this.tokens.issue(user.id, user.teamId) };
  }

  /**
   * Creates the account of a signup (or OAuth first login) that uses an invitation: the user joins
   * the inviting team with the invitation's role (no team of their own, no signup credit), under
   * the user id the invitation announced.
   * @throws AppError 403 when the invitation names another email; 404 unknown, used, replaced or
   *   expired token; 409 when the email is registered (nothing is changed).
   */
  async createInvitedUser(input: InvitedSignup, within?: EntityManager): Promise<UserEntity> {
    const create = async (em: EntityManager) => {
      const found = await this.openInvitation(em, input.token, false);
      if (found.email.toLowerCase() !== input.email) {
        throw AppError.forbidden("This invitation is for another email address");
      }
      await em.query(`SELECT 1 FROM teams WHERE id = $1 FOR UPDATE`, [found.teamId]);
      const invitation = await this.openInvitation(em, input.token, true);
      await em.query(
        `INSERT INTO users (id, email, name, password_hash, team_id, role) VALUES ($1, $2, $3, $4, $5, $6)`,
        [invitation.userId, input.email, input.name, input.passwordHash, invitation.teamId, invitation.role],
      );
      await em.getRepository(InvitationEntity).update({ id: invitation.id }, { acceptedAt: () => "now()" });
      return em.getRepository(UserEntity).findOneByOrFail({ id: invitation.userId });
    };
    try {
      return await (within ? create(within) : this.ds.transaction(create));
    } catch (err) {
      if ((err as { code?: string }).code === "23505") throw AppError.conflict("Email is already registered");
      throw err;
    }
  }

  /** Locks the caller's team row for this transaction (serialises member changes). */
  private async lockTeam(em: EntityManager, principal: Principal): Promise<{ name: string }> {
    const [team] = await queryRows<{ name: string }>(em, `SELECT name FROM teams WHERE id = $1 FOR UPDATE`, [
      principal.teamId,
    ]);
    if (!team) throw AppError.notFound("Team not found");
    return team;
  }

  /**
   * The request's context with the caller's role as it stands now, read under the team lock that
   * `lockTeam` took: the role the credentials carried was read before the lock, and a member change
   * that held the lock meanwhile (a demotion, a removal) must count, or a just-demoted owner could
   * still remove the owner who demoted them. The policy checks run again on this context.
   * @throws AppError 401 when the caller is no longer an active user of the team.
   */
  private async callerNow(em: EntityManager, ctx: RequestContext): Promise<RequestContext> {
    const principal = requirePrincipal(ctx);
    const [row] = await queryRows<{ role: TeamRole }>(
      em,
      `SELECT role FROM users WHERE id = $1 AND team_id = $2 AND is_active`,
      [principal.userId, principal.teamId],
    );
    if (!row) throw AppError.unauthenticated("Invalid or expired access token");
    return { ...ctx, principal: { ...principal, role: row.role } };
  }

  /** @throws AppError 404 when `userId` is no member (nor pending invitation) of the caller's team. */
  private async memberOf(em: EntityManager, principal: Principal, userId: string): Promise<TeamMemberEntity> {
    const member = await em.getRepository(TeamMemberEntity).findOneBy({ teamId: principal.teamId, userId });
    return inTeam(principal, member, "Member");
  }

  /** @throws AppError 409 unless the team has an active owner besides the one being `what` (demoted/removed). */
  private async assertOtherOwner(em: EntityManager, teamId: string, what: string): Promise<void> {
    const [row] = await queryRows<{ n: number }>(
      em,
      `SELECT count(*)::int AS n FROM users WHERE team_id = $1 AND role = 'owner' AND is_active`,
      [teamId],
    );
    if (row.n <= 1) {
      throw AppError.conflict(`The last owner cannot be ${what}: make another member owner first`);
    }
  }

  /** Revokes every key `userId` holds for `teamId`; returns their hashes (hex) for the caches. */
  private async revokeKeys(em: EntityManager, teamId: string, userId: string): Promise<string[]> {
    const rows = await queryRows<{ key_hash: Buffer }>(
      em,
      `UPDATE api_keys SET revoked_at = now() WHERE team_id = $1 AND user_id = $2 AND revoked_at IS NULL
       RETURNING key_hash`,
      [teamId, userId],
    );
    const hashes = rows.map((r) => r.key_hash.toString("hex"));
    for (const hex of hashes) await this.bus.publish("api_key", hex, em);
    return hashes;
  }

  /**
   * The open invitation a token names; with `lock`, locked for this transaction (take its team's
   * lock first).
   * @throws AppError 404 unknown, used, replaced or expired, or its team is gone.
   */
  private async openInvitation(em: EntityManager, token: unknown, lock: boolean): Promise<InvitationEntity> {
    let invitation: InvitationEntity | null = null;
    if (typeof token === "string" && token.length <= 512) {
      const query = em
        .getRepository(InvitationEntity)
        .createQueryBuilder("i")
        .where("i.token_hash = :hash", { hash: hashToken(token) });
      invitation = await (lock ? query.setLock("pessimistic_write") : query).getOne();
    }
    if (!invitation || invitation.acceptedAt || invitation.revokedAt || invitation.expiresAt.getTime() <= Date.now()) {
      throw AppError.notFound("Unknown or used invitation");
    }
    const [team] = await queryRows<{ deleted: boolean }>(
      em,
      `SELECT deleted_at IS NOT NULL AS deleted FROM teams WHERE id = $1`,
      [invitation.teamId],
    );
    if (!team || team.deleted) throw AppError.notFound("Unknown or used invitation");
    return invitation;
  }

  /**
   * @throws AppError 409 unless `teamId` is `userId`'s own unused personal team: no other users,
   *   and no rows in `TEAM_DATA` nor ledger rows beyond the signup grant.
   */
  private async assertRemovable(em: EntityManager, teamId: string, teamName: string, userId: string): Promise<void> {
    const [others] = await queryRows<{ n: number }>(
      em,
      `SELECT count(*)::int AS n FROM users WHERE team_id = $1 AND id <> $2`,
      [teamId, userId],
    );
    if (others.n > 0) {
      throw AppError.conflict(
        `You belong to the team "${teamName}", which has other members; a user belongs to one team, so leave it first (an owner or admin removes you)`,
      );
    }
    const data = TEAM_DATA.map((table) => `EXISTS (SELECT 1 FROM ${table} WHERE team_id = $1)`).join(" OR ");
    const [row] = await queryRows<{ used: boolean }>(em, `SELECT ${data} OR ${TEAM_LEDGER_USED} AS used`, [teamId]);
    if (row.used) {
      throw AppError.conflict(
        `Your team "${teamName}" has requests, batches, streams or payments; a user belongs to one team and a team with data is not removed, so you cannot join another team with this account`,
      );
    }
  }

  /** The invitation mail: who invites, to which team and role, and the two ways to use the token. */
  private invitationText(inviter: string, teamName: string, role: TeamRole, token: string): string {
    return [
      `${inviter} invited you to join the team "${teamName}" on Switchyard as ${role}.`,
      "",
      "If you have an account, sign in and accept the invitation:",
      `  POST ${this.publicUrl}/control/v1/teams/invitations/${token}/accept`,
      "",
      "If you do not, sign up with this address and the invitation:",
      `  POST ${this.publicUrl}/control/v1/auth/signup  {"email": "…", "password": "…", "invite_token": "${token}"}`,
      "",
      `The invitation can be used once, within ${INVITATION_TTL_DAYS} days.`,
    ].join("\n");
  }
}

/** The team member record as this domain hands it to the transports (persisted shape; transports never import entities). */
export type { TeamMemberEntity } from "../../entities/team-member.entity.js";
