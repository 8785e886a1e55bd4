/**
 * Access tokens: HS256 JWTs signed with the configured secret (jose), lifetime from config
 * (DESIGN §3 Credentials: 24 h). Claims: `sub` user id, `tid` team id, `iat` (with milliseconds),
 * `exp`, `jti`.
 */
import { randomUUID } from "node:crypto";
import { SignJWT, errors as joseErrors, jwtVerify } from "jose";
import { z } from "zod";

export interface AccessTokenClaims {
  userId: string;
  teamId: string;
  /** Issue time, Unix seconds (fractional: milliseconds; older tokens carry whole seconds). */
  issuedAt: number;
}

export interface IssuedToken {
  access_token: string;
  token_type: "bearer";
  /** Seconds until expiry. */
  expires_in: number;
}

const ISSUER = "switchyard";

/**
 * The claims a token must carry to be honoured (issue 5, item 3): ids that are UUIDs (they reach
 * SQL as `uuid` parameters) and numeric times. Anything else is a 401, never a 500.
 */
const accessClaims = z.object({
  sub: z.uuid(),
  tid: z.uuid(),
  iat: z.number().finite(),
  exp: z.number().finite(),
});

/** Issues and verifies access tokens (HS256, issuer `switchyard`, lifetime `ttlS` seconds). */
export class TokenService {
  private readonly key: Uint8Array;

  constructor(
    secret: string,
    private readonly ttlS: number,
  ) {
    this.key = new TextEncoder().encode(secret);
  }

  /** Signs a token for `userId` of `teamId`. */
  async issue(userId: string, teamId: string): Promise<IssuedToken> {
    const token = await new SignJWT({ tid: teamId })
      .setProtectedHeader({ alg: "HS256", typ: "JWT" })
      .setSubject(userId)
      .setIssuer(ISSUER)
      // Millisecond precision (RFC 7519 allows fractional NumericDates): a password reset voids
      // tokens issued before it (`users.tokens_valid_after`), and whole seconds could not tell a
      // token issued just before the reset from a login just after it.
      .setIssuedAt(Date.now() / 1000)
      .setJti(randomUUID())
      .setExpirationTime(`${this.ttlS}s`)
      .sign(this.key);
    return { access_token: token, token_type: "bearer", expires_in: this.ttlS };
  }

  /**
   * @returns the claims, or null for a malformed, forged or expired token, and for one without
   *   `exp` or whose `sub`/`tid` are not UUIDs.
   */
  async verify(token: string): Promise<AccessTokenClaims | null> {
    try {
      const { payload } = await jwtVerify(token, this.key, {
        issuer: ISSUER,
        algorithms: ["HS256"],
        requiredClaims: ["exp", "iat", "sub"],
      });
      const claims = accessClaims.safeParse(payload);
      if (!claims.success) return null;
      return { userId: claims.data.sub, teamId: claims.data.tid, issuedAt: claims.data.iat };
    } catch (err) {
      if (err instanceof joseErrors.JOSEError) return null;
      throw err;
    }
  }
}
