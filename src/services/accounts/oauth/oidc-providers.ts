/**
 * The configured OpenID Connect providers (issue 8, item 2), spoken to through `openid-client`:
 * discovery (once per provider per process, retried after a failure), the authorization URL with
 * PKCE (S256), the code exchange (which verifies the ID token: signature against the provider's
 * keys, issuer, audience, expiry, nonce), the userinfo call when the ID token carries no email,
 * and the verification of an ID token a client obtained itself (jose, against the same keys).
 *
 * Failures leave as `AppError`: 400 when what the client sent does not verify (a refused code, a
 * forged or expired ID token, a mismatched `iss`), 502 (`provider_failure`) when the provider is
 * unreachable or answers with a server error.
 */
import * as client from "openid-client";
import { type JWTVerifyGetKey, createRemoteJWKSet, errors as joseErrors, jwtVerify } from "jose";
import type { Logger } from "pino";
import { z } from "zod";
import type { OAuthProviderConfig } from "../../../config/config.js";
import { AppError, ErrorCode } from "../../../shared/errors.js";
import { isPgStorableText } from "../../platform/validation.js";

/** What a provider vouched for about the person signing in. */
export interface VerifiedIdentity {
  provider: string;
  /** The `sub` claim. */
  subject: string;
  /** Lowercased; null when the provider shared none (or not a usable address). */
  email: string | null;
  /** True only when the provider said `email_verified: true` for this email. */
  emailVerified: boolean;
  name: string | null;
}

/** One authorization-code exchange. */
export interface CodeExchange {
  code: string;
  redirectUri: string;
  codeVerifier: string;
  /** The state we issued (checked against the one in the response), or undefined for a client-held flow. */
  state?: string;
  /** The nonce we put in the authorization request; undefined when none was sent. */
  nonce?: string;
  /** The `iss` authorization-response parameter (RFC 9207) as the client received it. */
  iss?: string;
}

/** Seconds one request to a provider may take (discovery, token, userinfo, keys). */
const PROVIDER_TIMEOUT_S = 10;

/** Asymmetric JWS algorithms an ID token may be signed with (verified against the provider's JWKS). */
const ASYMMETRIC_ALGS = ["RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA"];

const emailClaim = z.email();

/** The providers of the configuration, by name. */
export class OidcProviders {
  private readonly byName: Map<string, OAuthProviderConfig>;
  private readonly discovered = new Map<string, Promise<client.Configuration>>();
  private readonly keySets = new Map<string, JWTVerifyGetKey>();

  constructor(
    providers: readonly OAuthProviderConfig[],
    private readonly logger: Logger,
  ) {
    this.byName = new Map(providers.map((p) => [p.name, p]));
  }

  /** The provider's configuration, or undefined for a name not configured. */
  get(name: string): OAuthProviderConfig | undefined {
    return this.byName.get(name);
  }

  /**
   * The authorization URL: response_type code, the configured scopes and redirect URI, `state`,
   * `nonce`, and the S256 challenge of `codeVerifier`.
   * @throws AppError 502 when discovery fails.
   */
  async authorizationUrl(
    provider: OAuthProviderConfig,
    params: { state: string; nonce: string; codeVerifier: string },
  ): Promise<URL> {
    const config = await this.configuration(provider);
    return client.buildAuthorizationUrl(config, {
      response_type: "code",
      scope: provider.scopes,
      redirect_uri: provider.redirectUri,
      state: params.state,
      nonce: params.nonce,
      code_challenge: await client.calculatePKCECodeChallenge(params.codeVerifier),
      code_challenge_method: "S256",
    });
  }

  /**
   * Exchanges an authorization code (with its PKCE verifier) at the token endpoint and verifies
   * the ID token that comes back; the email comes from the ID token, else from userinfo (same
   * `sub` required).
   * @throws AppError 400 when the provider refuses the code or the response does not verify; 502
   *   when the provider cannot be reached.
   */
  async exchangeCode(provider: OAuthProviderConfig, exchange: CodeExchange): Promise<VerifiedIdentity> {
    const config = await this.configuration(provider);
    const callback = new URL(exchange.redirectUri);
    callback.searchParams.set("code", exchange.code);
    if (exchange.state !== undefined) callback.searchParams.set("state", exchange.state);
    // RFC 9207: a provider that announces `iss` on its answers must send it, and it must be its
    // own. Clients that forward only code and state get the configured issuer filled in: the
    // state was bound to this provider when it was issued, which is what the `iss` check protects
    // against mixing up when several providers are configured.
    const iss =
      exchange.iss ??
      (config.serverMetadata().authorization_response_iss_parameter_supported
        ? config.serverMetadata().issuer
        : undefined);
    if (iss !== undefined) callback.searchParams.set("iss", iss);
    const tokens = await this.call(provider, () =>
      client.authorizationCodeGrant(config, callback, {
        pkceCodeVerifier: exchange.codeVerifier,
        expectedState: exchange.state ?? client.skipStateCheck,
        expectedNonce: exchange.nonce,
        idTokenExpected: true,
      }),
    );
    const claims = tokens.claims();
    if (!claims)
      throw AppError.invalid("The provider returned no ID token", [{ field: "code", message: "no ID token" }]);
    let profile: Record<string, unknown> = claims;
    if (claims.email === undefined && config.serverMetadata().userinfo_endpoint && tokens.access_token) {
      const info = await this.call(provider, () => client.fetchUserInfo(config, tokens.access_token, claims.sub));
      profile = { ...info, sub: claims.sub };
    }
    return identityFrom(provider.name, claims.sub, profile);
  }

  /**
   * Verifies an ID token the client obtained from the provider itself: signed by a key of the
   * provider's JWKS with an asymmetric algorithm, `iss` the provider, `aud` this client (and
   * `azp` this client when there are several audiences), not expired.
   * @throws AppError 400 when it does not verify; 502 when the provider's keys cannot be fetched.
   */
  async verifyIdToken(provider: OAuthProviderConfig, idToken: string): Promise<VerifiedIdentity> {
    const config = await this.configuration(provider);
    const metadata = config.serverMetadata();
    const keys = this.keySet(provider, metadata);
    const supported = metadata.id_token_signing_alg_values_supported ?? ["RS256"];
    const algorithms = supported.filter((alg) => ASYMMETRIC_ALGS.includes(alg));
    try {
      const { payload } = await jwtVerify(idToken, keys, {
        issuer: metadata.issuer,
        audience: provider.clientId,
        algorithms,
        requiredClaims: ["sub", "exp", "iat"],
        clockTolerance: 30,
      });
      if (Array.isArray(payload.aud) && payload.aud.length > 1 && payload.azp !== provider.clientId) {
        throw AppError.invalid("The ID token was issued to another client", [
          { field: "id_token", message: "azp is not this client" },
        ]);
      }
      return identityFrom(provider.name, payload.sub as string, payload);
    } catch (err) {
      if (err instanceof AppError) throw err;
      if (err instanceof joseErrors.JWKSTimeout || (err instanceof TypeError && /fetch/i.test(err.message))) {
        throw this.unreachable(provider, err);
      }
      if (err instanceof joseErrors.JOSEError) {
        throw AppError.invalid("The ID token did not verify", [{ field: "id_token", message: err.message }]);
      }
      throw err;
    }
  }

  /** Discovery, cached per provider; a failed one is forgotten so the next call tries again. */
  private configuration(provider: OAuthProviderConfig): Promise<client.Configuration> {
    let found = this.discovered.get(provider.name);
    if (!found) {
      const insecure = new URL(provider.issuer).protocol === "http:";
      found = client
        .discovery(
          new URL(provider.issuer),
          provider.clientId,
          provider.clientSecret,
          provider.clientSecret === undefined ? client.None() : undefined,
          { timeout: PROVIDER_TIMEOUT_S, execute: insecure ? [client.allowInsecureRequests] : [] },
        )
        .catch((err: unknown) => {
          this.discovered.delete(provider.name);
          throw this.unreachable(provider, err);
        });
      this.discovered.set(provider.name, found);
    }
    return found;
  }

  private keySet(provider: OAuthProviderConfig, metadata: client.ServerMetadata): JWTVerifyGetKey {
    let keys = this.keySets.get(provider.name);
    if (!keys) {
      if (!metadata.jwks_uri) throw this.unreachable(provider, new Error("no jwks_uri in the provider's metadata"));
      keys = createRemoteJWKSet(new URL(metadata.jwks_uri), { timeoutDuration: PROVIDER_TIMEOUT_S * 1000 });
      this.keySets.set(provider.name, keys);
    }
    return keys;
  }

  /**
   * Runs one openid-client call, sorting its failures: the provider's refusals and responses that
   * do not verify are the client's (400); transport failures and server errors are the
   * provider's (502).
   */
  private async call<T>(provider: OAuthProviderConfig, run: () => Promise<T>): Promise<T> {
    try {
      return await run();
    } catch (err) {
      if (err instanceof client.ResponseBodyError) {
        if (err.status >= 500) throw this.unreachable(provider, err);
        throw AppError.invalid(`The provider refused the authorization code (${err.error})`, [
          { field: "code", message: err.error_description ?? err.error },
        ]);
      }
      if (err instanceof client.AuthorizationResponseError) {
        throw AppError.invalid(`The provider answered with an error (${err.error})`, [
          { field: "code", message: err.error_description ?? err.error },
        ]);
      }
      if (err instanceof client.ClientError) {
        const code = err.code ?? "";
        if (code === "OAUTH_RESPONSE_IS_NOT_CONFORM" || code === "OAUTH_RESPONSE_IS_NOT_JSON") {
          throw this.unreachable(provider, err);
        }
        throw AppError.invalid(`The provider's answer did not verify: ${err.message}`, [
          { field: "code", message: err.message },
        ]);
      }
      // fetch failures (TypeError "fetch failed") and timeouts (DOMException TimeoutError/AbortError)
      if (err instanceof TypeError || (err instanceof Error && /Timeout|Abort/.test(err.name))) {
        throw this.unreachable(provider, err);
      }
      throw err;
    }
  }

  private unreachable(provider: OAuthProviderConfig, err: unknown): AppError {
    if (err instanceof AppError) return err;
    this.logger.warn({ err, provider: provider.name }, "OpenID provider failed");
    return new AppError(ErrorCode.ProviderFailure, `The identity provider ${provider.name} could not be reached`);
  }
}

/** The identity in `claims` (ID token or userinfo): the email only when it is a usable address. */
function identityFrom(provider: string, subject: string, claims: Record<string, unknown>): VerifiedIdentity {
  if (subject.length > 1024 || !isPgStorableText(subject)) {
    throw AppError.invalid("The provider's subject cannot be stored", [{ field: "sub", message: "unusable subject" }]);
  }
  const rawEmail = typeof claims.email === "string" ? claims.email.trim().toLowerCase() : "";
  const email = rawEmail !== "" && rawEmail.length <= 320 && emailClaim.safeParse(rawEmail).success ? rawEmail : null;
  const name =
    typeof claims.name === "string" && isPgStorableText(claims.name)
      ? Array.from(claims.name).slice(0, 200).join("")
      : null;
  return { provider, subject, email, emailVerified: email !== null && claims.email_verified === true, name };
}
