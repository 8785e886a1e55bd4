/**
 * Sign-in and account linking with OpenID Connect providers (issue 8, item 2; DESIGN §3 Account
 * schemas: OAuthCompleteRequest, LinkOAuthResponse, LinkedAccountsResponse).
 *
 * A flow starts at the authorize helper, which keeps the state, the PKCE verifier and the nonce
 * in `oauth_states` (server side: single use needs a record anyway, and the verifier never
 * leaves the server) for 10 minutes. Completing consumes that row in one `DELETE … RETURNING`,
 * so a state works once, in one process, even when two requests race. A client that ran its own
 * PKCE flow may instead send `code` with its `code_verifier` (it then checks its own state), or
 * an ID token it obtained; an access token alone is never accepted as proof of identity (it is
 * not bound to this client: any other application holding one could sign in with it).
 *
 * Who signs in: the user an identity `(provider, subject)` is linked to; else, when the provider
 * says the email is verified, the account with that email (the identity is linked to it); else a
 * new user owning a new team, like signup — again only with a verified email, so nobody can hold
 * an address they do not control. An existing account is never taken over on an unverified email
 * (409: sign in with the password and link from there). A first sign-in with `invite_token` joins
 * the inviting team instead of creating one (DESIGN §3 Roles: the invitation must name the
 * verified email, else 403; unknown or used token → 404); for an account that already exists the
 * token is ignored (it accepts through `POST /control/v1/teams/invitations/{token}/accept`).
 * A new user is created only as the signup policy allows (issue 27, item 2; `SWITCHYARD_SIGNUP`).
 */
import { createHash } from "node:crypto";
import * as client from "openid-client";
import type { DataSource, EntityManager } from "typeorm";
import { v7 as uuidv7 } from "uuid";
import { z } from "zod";
import type { OAuthProviderConfig } from "../../../config/config.js";
import { queryRows } from "../../../db/sql.js";
import { OAuthIdentityEntity } from "../../../entities/oauth-identity.entity.js";
import { AppError, parseInput } from "../../../shared/errors.js";
import type { AccountService, LoginResultDto } from "../account.service.js";
import type { InvitedUserFactory } from "../../teams/member.service.js";
import { type RequestContext, requirePrincipal } from "../../platform/context.js";
import { pgText } from "../../platform/validation.js";
import type { OidcProviders, VerifiedIdentity } from "./oidc-providers.js";

/** The authorize helper's answer: where to send the browser, and the state to expect back. */
export interface OAuthAuthorizeDto {
  provider: string;
  authorization_url: string;
  state: string;
  /** When the state stops being accepted. */
  expires_at: Date;
}

/** LinkedAccountsResponse item. */
export interface LinkedAccountDto {
  provider: string;
  subject: string;
  email: string | null;
  created_at: Date;
}

export interface LinkedAccountsDto {
  items: LinkedAccountDto[];
}

/** LinkOAuthResponse. */
export interface LinkOAuthDto extends LinkedAccountDto {
  message: "Linked successfully.";
}

/** How long a started flow's state is accepted, seconds. */
export const OAUTH_STATE_TTL_S = 600;

/** RFC 7636 `code_verifier`: 43–128 unreserved characters. */
const codeVerifier = z.string().regex(/^[A-Za-z0-9\-._~]{43,128}$/, "must be 43–128 characters of A–Z a–z 0–9 - . _ ~");

/**
 * OAuthCompleteRequest (also the body of link-oauth): `code` (with `state` from the authorize
 * helper, or with the client's own `code_verifier`), or `id_token`. `iss` is the authorization
 * response's issuer parameter when the client has it. Unknown fields are ignored.
 */
export const oauthCompleteInput = z
  .object({
    provider: pgText().min(1).max(64),
    code: pgText().min(1).max(4096).optional(),
    state: pgText().min(1).max(512).optional(),
    code_verifier: codeVerifier.optional(),
    redirect_uri: pgText().max(2048).pipe(z.url()).meta({ format: "uri" }).optional(),
    iss: pgText().max(2048).pipe(z.url()).meta({ format: "uri" }).optional(),
    id_token: pgText().min(1).max(16_384).optional(),
    access_token: pgText().min(1).max(16_384).optional(),
    invite_token: pgText().min(1).max(512).optional(),
  })
  .superRefine((v, ctx) => {
    if (v.code === undefined && v.id_token === undefined) {
      ctx.addIssue({
        code: "custom",
        path: ["code"],
        message:
          v.access_token === undefined
            ? "code or id_token is required"
            : "code or id_token is required (an access token alone does not prove who signed in)",
      });
    }
    if (v.code !== undefined && v.id_token !== undefined) {
      ctx.addIssue({ code: "custom", path: ["id_token"], message: "send code or id_token, not both" });
    }
    if (v.code !== undefined && v.state === undefined && v.code_verifier === undefined) {
      ctx.addIssue({
        code: "custom",
        path: ["state"],
        message: "a code needs the state from the authorize helper, or the code_verifier of the client's own PKCE flow",
      });
    }
    if (v.state !== undefined && v.code_verifier !== undefined) {
      ctx.addIssue({
        code: "custom",
        path: ["code_verifier"],
        message: "the authorize helper's flows keep their code_verifier on the server: send state only",
      });
    }
  })
  // The four rules above, for the OpenAPI document (issue 28, item 5).
  .meta({
    allOf: [
      { anyOf: [{ required: ["code"] }, { required: ["id_token"] }] },
      { not: { required: ["code", "id_token"] } },
      { if: { required: ["code"] }, then: { anyOf: [{ required: ["state"] }, { required: ["code_verifier"] }] } },
      { not: { required: ["state", "code_verifier"] } },
    ],
  });
export type OAuthCompleteInput = z.input<typeof oauthCompleteInput>;
type ParsedComplete = z.output<typeof oauthCompleteInput>;

interface StateRow {
  code_verifier: string;
  nonce: string;
  redirect_uri: string;
}

/** What a failed state lookup says (unknown, expired, used, or issued for something else). */
const BAD_STATE = "Unknown, expired or already used state";

/** OpenID Connect sign-in, linking and the caller's linked identities. */
export class OAuthService {
  constructor(
    private readonly ds: DataSource,
    private readonly accounts: AccountService,
    private readonly providers: OidcProviders,
    private readonly invitations: InvitedUserFactory,
  ) {}

  /**
   * Starts a flow: a fresh state, nonce and PKCE verifier, kept server side for
   * {@link OAUTH_STATE_TTL_S} seconds and bound to the caller when one is signed in (only that
   * user may then use it to link). The client sends the browser to `authorization_url` and, on
   * return to the configured redirect URI, compares the `state` it gets with this one before
   * passing `code` and `state` to complete or link-oauth.
   * @throws AppError 404 for a provider not configured; 502 when the provider's discovery fails.
   */
  async authorize(ctx: RequestContext, providerName: unknown): Promise<OAuthAuthorizeDto> {
    const provider = typeof providerName === "string" ? this.providers.get(providerName) : undefined;
    if (!provider) throw AppError.notFound("Unknown OAuth provider");
    const state = client.randomState();
    const nonce = client.randomNonce();
    const verifier = client.randomPKCECodeVerifier();
    const url = await this.providers.authorizationUrl(provider, { state, nonce, codeVerifier: verifier });
    const expiresAt = new Date(Date.now() + OAUTH_STATE_TTL_S * 1000);
    await this.ds.transaction(async (em) => {
      // Housekeeping: flows never completed leave with the next one started.
      await em.query(`DELETE FROM oauth_states WHERE expires_at < now()`);
      await em.query(
        `INSERT INTO oauth_states (state_hash, provider, code_verifier, nonce, redirect_uri, user_id, expires_at)
         VALUES ($1, $2, $3, $4, $5, $6, $7)`,
        [
          stateHash(state),
          provider.name,
          verifier,
          nonce,
          provider.redirectUri,
          ctx.principal?.userId ?? null,
          expiresAt,
        ],
      );
    });
    return { provider: provider.name, authorization_url: url.href, state, expires_at: expiresAt };
  }

  /**
   * Signs in with a provider: exchanges the code (or verifies the ID token), then logs in the
   * linked user, or links by verified email, or creates a user and team (see the module comment).
   * Answers like login.
   * @throws AppError 400 bad input, unknown provider, or a state/code/ID token that does not
   *   verify (a used state stays used); 401 when the account is not active; 403 when a new account
   *   would need an email the provider did not verify (or shared), or is refused by the signup
   *   policy (`AccountService.checkSignupAllowed`); 404 for an unknown or used `invite_token`;
   *   409 when the email belongs to an account and the provider has not verified it; 502 when
   *   the provider cannot be reached.
   */
  async complete(_ctx: RequestContext, raw: unknown): Promise<LoginResultDto> {
    const input = parseInput(oauthCompleteInput, raw);
    const provider = this.provider(input);
    const identity = await this.verify(input, provider, null);
    const userId = await this.retryOnRace(() => this.signIn(identity, input.invite_token));
    return this.accounts.issueLogin(userId);
  }

  /**
   * Links a provider identity to the signed-in user (from a signed-in session, not an API key:
   * a key made for inference must not become a way to sign in). Linking an identity the caller
   * already holds answers the existing link.
   * @throws AppError 401; 403 with an API key; 400 as complete (a state must have been issued to
   *   this user); 409 when the identity is linked to another user; 502.
   */
  async link(ctx: RequestContext, raw: unknown): Promise<LinkOAuthDto> {
    const principal = requirePrincipal(ctx);
    if (principal.apiKey) throw AppError.forbidden("Linking a provider needs a signed-in session, not an API key");
    const input = parseInput(oauthCompleteInput, raw);
    const provider = this.provider(input);
    const identity = await this.verify(input, provider, principal.userId);
    const linked = await this.retryOnRace(() =>
      this.ds.transaction(async (em) => {
        const existing = await em.findOne(OAuthIdentityEntity, {
          where: { provider: identity.provider, subject: identity.subject },
        });
        if (existing && existing.userId !== principal.userId) {
          throw AppError.conflict("This provider identity is already linked to another account");
        }
        return existing ?? (await this.insertIdentity(em, identity, principal.userId));
      }),
    );
    return { message: "Linked successfully.", ...toLinkedAccountDto(linked) };
  }

  /** The caller's linked identities, oldest first. @throws AppError 401. */
  async linkedAccounts(ctx: RequestContext): Promise<LinkedAccountsDto> {
    const principal = requirePrincipal(ctx);
    const rows = await this.ds.getRepository(OAuthIdentityEntity).find({
      where: { userId: principal.userId },
      order: { createdAt: "ASC", id: "ASC" },
    });
    return { items: rows.map(toLinkedAccountDto) };
  }

  /** The configured provider an input names. @throws AppError 400 naming `provider`. */
  private provider(input: ParsedComplete): OAuthProviderConfig {
    const provider = this.providers.get(input.provider);
    if (!provider) {
      throw AppError.invalid("Unknown OAuth provider", [{ field: "provider", message: "not a configured provider" }]);
    }
    return provider;
  }

  /**
   * Proves who signed in. `code` + `state`: consumes the state (bound to this provider, not
   * expired, and — when `linkingUser` is set — issued to that user) and exchanges the code with
   * the stored verifier and nonce. `code` + `code_verifier`: the client's own flow, with the
   * configured redirect URI. `id_token`: verified against the provider's keys.
   */
  private async verify(
    input: ParsedComplete,
    provider: OAuthProviderConfig,
    linkingUser: string | null,
  ): Promise<VerifiedIdentity> {
    if (input.id_token !== undefined) return this.providers.verifyIdToken(provider, input.id_token);
    const code = input.code as string;
    if (input.state !== undefined) {
      const [row] = await queryRows<StateRow>(
        this.ds,
        `DELETE FROM oauth_states
          WHERE state_hash = $1 AND provider = $2 AND expires_at > now()
            AND ($3::uuid IS NULL OR user_id = $3) AND ($4::text IS NULL OR redirect_uri = $4)
        RETURNING code_verifier, nonce, redirect_uri`,
        [stateHash(input.state), provider.name, linkingUser, input.redirect_uri ?? null],
      );
      if (!row) throw AppError.invalid(BAD_STATE, [{ field: "state", message: BAD_STATE.toLowerCase() }]);
      return this.providers.exchangeCode(provider, {
        code,
        state: input.state,
        iss: input.iss,
        redirectUri: row.redirect_uri,
        codeVerifier: row.code_verifier,
        nonce: row.nonce,
      });
    }
    const redirectUri = input.redirect_uri ?? provider.redirectUri;
    if (redirectUri !== provider.redirectUri) {
      throw AppError.invalid("redirect_uri is not the provider's configured one", [
        { field: "redirect_uri", message: "must be the configured redirect URI" },
      ]);
    }
    return this.providers.exchangeCode(provider, {
      code,
      iss: input.iss,
      redirectUri,
      codeVerifier: input.code_verifier as string,
    });
  }

  /** The user `identity` signs in as, linking or creating one as the module comment says. */
  private signIn(identity: VerifiedIdentity, inviteToken: string | undefined): Promise<string> {
    return this.ds.transaction(async (em) => {
      const linked = await em.findOne(OAuthIdentityEntity, {
        where: { provider: identity.provider, subject: identity.subject },
      });
      if (linked) return linked.userId;
      if (identity.email === null) {
        throw AppError.forbidden(
          "The provider shared no email address: sign up with a password, then link this provider",
        );
      }
      const [existing] = await queryRows<{ id: string; is_active: boolean }>(
        em,
        `SELECT id, is_active FROM users WHERE lower(email) = $1 FOR UPDATE`,
        [identity.email],
      );
      if (existing) {
        if (!identity.emailVerified) {
          throw AppError.conflict(
            "An account with this email exists and the provider has not verified the email: sign in with the password, then link this provider",
          );
        }
        if (!existing.is_active) throw AppError.unauthenticated("This account is not active");
        await this.insertIdentity(em, identity, existing.id);
        return existing.id;
      }
      if (!identity.emailVerified) {
        throw AppError.forbidden("The provider has not verified this email address");
      }
      // A new user: only as the signup policy allows (issue 27, item 2).
      this.accounts.checkSignupAllowed(inviteToken !== undefined);
      const user =
        inviteToken === undefined
          ? await this.accounts.openAccount(em, {
              email: identity.email,
              name: identity.name ?? "",
              passwordHash: null,
            })
          : await this.invitations.createInvitedUser(
              { token: inviteToken, email: identity.email, name: identity.name ?? "", passwordHash: null },
              em,
            );
      await this.insertIdentity(em, identity, user.id);
      return user.id;
    });
  }

  private async insertIdentity(
    em: EntityManager,
    identity: VerifiedIdentity,
    userId: string,
  ): Promise<OAuthIdentityEntity> {
    const repo = em.getRepository(OAuthIdentityEntity);
    const entity = repo.create({
      id: uuidv7(),
      provider: identity.provider,
      subject: identity.subject,
      userId,
      email: identity.email,
      emailVerified: identity.emailVerified,
      createdAt: new Date(),
    });
    await repo.insert(entity);
    return entity;
  }

  /**
   * Runs `step` again once when it lost a race on a unique key (two first sign-ins of one
   * identity or email at once): the second run sees the winner's rows.
   */
  private async retryOnRace<T>(step: () => Promise<T>): Promise<T> {
    try {
      return await step();
    } catch (err) {
      if ((err as { code?: string }).code !== "23505") throw err;
      return step();
    }
  }
}

/** The one mapping from the identity entity to its API shape (REST and GraphQL). */
export function toLinkedAccountDto(entity: OAuthIdentityEntity): LinkedAccountDto {
  return { provider: entity.provider, subject: entity.subject, email: entity.email, created_at: entity.createdAt };
}

function stateHash(state: string): Buffer {
  return createHash("sha256").update(state).digest();
}
