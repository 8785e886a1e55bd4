/**
 * Accounts: signup (a new team with the signup credit grant), login, the current user
 * (DESIGN §3 Account schemas; spec: Control plane auth, `GET /v1/auth/me`).
 *
 * Who may create an account is the signup policy (issue 27, item 2; config `signup`,
 * `SWITCHYARD_SIGNUP`): `open` — anyone; `invite` — only a signup (or first OAuth sign-in) that
 * carries an invitation's `invite_token`, which must be valid and name the email signing up
 * (`MemberService.createInvitedUser`: 404 unknown or used, 403 another email); the token proves
 * the mailbox, so an invited email without its token is refused like any other; `closed` —
 * nobody, not even with an invitation (existing accounts still accept invitations). Refusals
 * answer 403 naming the setting. `createOwner` (`npm run admin -- create-owner`) is not subject
 * to the policy: it is how the first owner of a closed or invite-only server is made.
 */
import { v7 as uuidv7 } from "uuid";
import type { DataSource, EntityManager } from "typeorm";
import { z } from "zod";
import { type TeamRole, UserEntity } from "../../entities/user.entity.js";
import type { SignupPolicy } from "../../config/config.js";
import { type RequestContext, requirePrincipal } from "../platform/context.js";
import type { InvitedUserFactory } from "../teams/member.service.js";
import { AppError, ErrorCode, parseInput } from "../../shared/errors.js";
import { hashPassword, verifyPassword } from "./passwords.js";
import type { AuthThrottle } from "../platform/auth-throttle.js";
import type { IssuedToken, TokenService } from "../platform/tokens.js";
import { appendSignupGrant } from "../ledger/ledger.js";
import { pgText } from "../platform/validation.js";

/** Data-plane current user (spec: Current user). */
export interface CurrentUserDto {
  username: string;
  role: TeamRole;
}

/** LoginResponse; `user` is shaped by `userJson` on REST and is the `User` type on GraphQL. */
export interface LoginResultDto extends IssuedToken {
  user: UserEntity;
}

export interface SignupResultDto extends LoginResultDto {
  message: string;
  next_step: "login";
}

const email = pgText()
  .trim()
  .max(320)
  .email()
  .transform((e) => e.toLowerCase());
const password = pgText().min(8).max(128);
/** The email rule (trimmed, lower-cased) and the password rule (DESIGN §3: 8–128), shared with password reset. */
export { email as emailField, password as passwordField };

export const signupInput = z.object({
  email,
  password,
  name: pgText().trim().max(200).optional(),
  invite_token: pgText().min(1).max(512).optional(),
});
export type SignupInput = z.input<typeof signupInput>;

/** `npm run admin -- create-owner`: signup's fields without an invitation. */
export const ownerInput = signupInput.omit({ invite_token: true });
export type OwnerInput = z.input<typeof ownerInput>;

export const loginInput = z
  .object({
    username: pgText().max(320).optional(),
    email: pgText().max(320).optional(),
    password: pgText().max(128),
  })
  .refine((v) => v.username !== undefined || v.email !== undefined, {
    message: "username or email is required",
    path: ["username"],
  })
  // The same rule for the OpenAPI document (issue 28, item 5).
  .meta({ anyOf: [{ required: ["username"] }, { required: ["email"] }] });
export type LoginInput = z.input<typeof loginInput>;

interface UserRow {
  id: string;
  email: string;
  name: string;
  team_id: string;
  role: TeamRole;
  created_at: Date;
  password_hash: string | null;
  is_active: boolean;
}

const USER_COLUMNS = "id, email, name, team_id, role, created_at, password_hash, is_active";

/** Signup, login and the current user (DESIGN §3 Account schemas); passwords argon2id. */
export class AccountService {
  constructor(
    private readonly ds: DataSource,
    private readonly tokens: TokenService,
    /** Credit granted to each new team, micro-USD. */
    private readonly signupCreditMicros: bigint,
    /** Login throttling (issue 8, item 5); absent: none. */
    private readonly throttle?: AuthThrottle,
    /** Signup with `invite_token` (issue 8, item 4): the user joins the inviting team. */
    private readonly invitations?: InvitedUserFactory,
    /** Who may create an account (see the module header; config `signup`). */
    private readonly signupPolicy: SignupPolicy = "open",
  ) {}

  /**
   * Refuses a new account the signup policy does not allow (see the module header): signup, and
   * a first OAuth sign-in that would create a user.
   * @param withInvitation whether the attempt carries an `invite_token` (checked later).
   * @throws AppError 403 naming `SWITCHYARD_SIGNUP` when the policy is `closed`, or `invite` and
   *   no invitation came.
   */
  checkSignupAllowed(withInvitation: boolean): void {
    if (this.signupPolicy === "closed") {
      throw new AppError(
        ErrorCode.Forbidden,
        "Signup is closed on this server (SWITCHYARD_SIGNUP=closed): ask its operator for an account",
        { setting: "SWITCHYARD_SIGNUP", signup: "closed" },
      );
    }
    if (this.signupPolicy === "invite" && !withInvitation) {
      throw new AppError(
        ErrorCode.Forbidden,
        "Signup on this server needs an invitation (SWITCHYARD_SIGNUP=invite): ask a team owner or admin to " +
          "invite your email, then sign up with the invite_token of that invitation",
        { setting: "SWITCHYARD_SIGNUP", signup: "invite" },
      );
    }
  }

  /**
   * Creates a user who owns a new team credited with the signup grant (one `grant` ledger row);
   * with `invite_token`, a user of the inviting team instead (`MemberService.createInvitedUser`).
   * @throws AppError 400 invalid input; 403 refused by the signup policy (`checkSignupAllowed`;
   *   `closed` before the body is read) or an invitation for another email; 404 unknown or used
   *   `invite_token`; 409 when the email is registered (nothing is changed).
   */
  async signup(_ctx: RequestContext, raw: unknown): Promise<SignupResultDto> {
    if (this.signupPolicy === "closed") this.checkSignupAllowed(false);
    const input = parseInput(signupInput, raw);
    this.checkSignupAllowed(input.invite_token !== undefined);
    let user: UserEntity;
    if (input.invite_token !== undefined) {
      if (!this.invitations) throw AppError.notFound("Unknown or used invitation");
      user = await this.invitations.createInvitedUser({
        token: input.invite_token,
        email: input.email,
        name: input.name ?? "",
        passwordHash: await hashPassword(input.password),
      });
    } else {
      user = await this.openPasswordAccount(input);
    }
    const token = await this.tokens.issue(user.id, user.teamId);
    return { message: "Account created.", next_step: "login", user, ...token };
  }

  /**
   * `npm run admin -- create-owner` (issue 27, item 2): the account signup creates (a user who
   * owns a new team with the signup grant, through the same `openPasswordAccount`), whatever
   * the signup policy. Idempotent: an email already registered is answered, unchanged.
   * @returns the user, and whether it was created now (`false`: it existed; its password and role
   *   are left as they are).
   * @throws AppError 400 for an invalid email, password (8–128 characters) or name.
   */
  async createOwner(raw: unknown): Promise<{ user: UserEntity; created: boolean }> {
    const input = parseInput(ownerInput, raw);
    try {
      return { user: await this.openPasswordAccount(input), created: true };
    } catch (err) {
      if (!(err instanceof AppError) || err.status !== 409) throw err;
      const rows: UserRow[] = await this.ds.query(`SELECT ${USER_COLUMNS} FROM users WHERE lower(email) = $1`, [
        input.email,
      ]);
      if (!rows[0]) throw err;
      return { user: toUserEntity(rows[0]), created: false };
    }
  }

  /**
   * Signup's account without an invitation: hashes the password and opens the account in one
   * transaction (`openAccount`).
   * @throws AppError 409 when the email is registered (nothing is changed).
   */
  private async openPasswordAccount(input: { email: string; password: string; name?: string }): Promise<UserEntity> {
    const passwordHash = await hashPassword(input.password);
    try {
      return await this.ds.transaction((em) =>
        this.openAccount(em, { email: input.email, name: input.name ?? "", passwordHash }),
      );
    } catch (err) {
      if ((err as { code?: string }).code === "23505") throw AppError.conflict("Email is already registered");
      throw err;
    }
  }

  /**
   * Inserts, in the caller's transaction `em`, a user who owns a new team credited with the
   * signup grant (one `grant` ledger row): signup, and a first OAuth sign-in (no password).
   * @throws the driver's unique violation (SQLSTATE 23505) when the email is registered.
   */
  async openAccount(
    em: EntityManager,
    account: { email: string; name: string; passwordHash: string | null },
  ): Promise<UserEntity> {
    const teamId = uuidv7();
    const teamName = `${account.name || account.email.split("@")[0]}'s team`;
    await em.query(`INSERT INTO teams (id, name, credit_balance_micros) VALUES ($1, $2, $3)`, [
      teamId,
      teamName,
      this.signupCreditMicros.toString(),
    ]);
    const users: UserRow[] = await em.query(
      `INSERT INTO users (id, email, name, password_hash, team_id, role)
       VALUES ($1, $2, $3, $4, $5, 'owner') RETURNING ${USER_COLUMNS}`,
      [uuidv7(), account.email, account.name, account.passwordHash, teamId],
    );
    await appendSignupGrant(em, teamId, this.signupCreditMicros);
    return toUserEntity(users[0]);
  }

  /**
   * An access token for a user another proof already identified (an OAuth identity): what login
   * answers.
   * @throws AppError 401 when the user no longer exists or is not active.
   */
  async issueLogin(userId: string): Promise<LoginResultDto> {
    const rows: UserRow[] = await this.ds.query(`SELECT ${USER_COLUMNS} FROM users WHERE id = $1`, [userId]);
    const row = rows[0];
    if (!row || !row.is_active) throw AppError.unauthenticated("This account is not active");
    const token = await this.tokens.issue(row.id, row.team_id);
    return { ...token, user: toUserEntity(row) };
  }

  /**
   * Exchanges email (`username`) and password for an access token. Known and unknown emails
   * answer alike (same status, body and argon2 work). Failures are counted per client address
   * and per address typed (`AuthThrottle`); past the limit the password is not even checked.
   * @throws AppError 400 invalid input; 401 wrong credentials; 429 too many failures (`Retry-After`).
   */
  async login(ctx: RequestContext, raw: unknown): Promise<LoginResultDto> {
    const input = parseInput(loginInput, raw);
    const address = (input.username ?? input.email ?? "").trim().toLowerCase();
    const attempt = await this.throttle?.beginLogin(ctx, address);
    const rows: UserRow[] = await this.ds.query(`SELECT ${USER_COLUMNS} FROM users WHERE lower(email) = $1`, [address]);
    const row = rows[0];
    const ok = await verifyPassword(row?.password_hash ?? null, input.password);
    if (!row || !ok || !row.is_active) {
      attempt?.failed(row?.id);
      throw AppError.unauthenticated("Incorrect email or password");
    }
    await attempt?.succeeded();
    const token = await this.tokens.issue(row.id, row.team_id);
    return { ...token, user: toUserEntity(row) };
  }

  /**
   * The signed-in user.
   * @throws AppError 401 without credentials.
   */
  async me(ctx: RequestContext): Promise<UserEntity> {
    const principal = requirePrincipal(ctx);
    const rows: UserRow[] = await this.ds.query(`SELECT ${USER_COLUMNS} FROM users WHERE id = $1`, [principal.userId]);
    if (!rows[0]) throw AppError.unauthenticated();
    return toUserEntity(rows[0]);
  }

  /** Data-plane `GET /v1/auth/me`: `{username, role}` straight from the (cached) principal. */
  currentUser(ctx: RequestContext): CurrentUserDto {
    const principal = requirePrincipal(ctx);
    return { username: principal.email, role: principal.role };
  }
}

/** The entity of a `users` row read with `USER_COLUMNS` (the one row → entity mapping of this module). */
function toUserEntity(row: UserRow): UserEntity {
  return Object.assign(new UserEntity(), {
    id: row.id,
    email: row.email,
    name: row.name,
    teamId: row.team_id,
    role: row.role,
    createdAt: row.created_at,
    isActive: row.is_active,
  });
}

/** The user record as this domain hands it to the transports (persisted shape; transports never import entities). */
export type { UserEntity } from "../../entities/user.entity.js";
