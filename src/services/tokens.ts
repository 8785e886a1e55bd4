/**
 * Access tokens: HS256 JWTs signed with the configured secret (jose), lifetime from config
 * (DESIGN §3 Credentials: 24 h). Claims: `sub` user id, `tid` team id, `iat`, `exp`, `jti`.
 */
import { randomUUID } from "node:crypto";
import { SignJWT, errors as joseErrors, jwtVerify } from "jose";

export interface AccessTokenClaims {
  userId: string;
  teamId: string;
  /** Issue time, Unix seconds. */
  issuedAt: number;
}

export interface IssuedToken {
  access_token: string;
  token_type: "bearer";
  /** Seconds until expiry. */
  expires_in: number;
}

const ISSUER = "switchyard";

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
      .setIssuedAt()
      .setJti(randomUUID())
      .setExpirationTime(`${this.ttlS}s`)
      .sign(this.key);
    return { access_token: token, token_type: "bearer", expires_in: this.ttlS };
  }

  /** @returns the claims, or null for a malformed, forged or expired token. */
  async verify(token: string): Promise<AccessTokenClaims | null> {
    try {
      const { payload } = await jwtVerify(token, this.key, { issuer: ISSUER, algorithms: ["HS256"] });
      if (typeof payload.sub !== "string" || typeof payload.tid !== "string" || typeof payload.iat !== "number") {
        return null;
      }
      return { userId: payload.sub, teamId: payload.tid, issuedAt: payload.iat };
    } catch (err) {
      if (err instanceof joseErrors.JOSEError) return null;
      throw err;
    }
  }
}
