/**
 * Who is calling on each open graphql-ws socket (issue 8, item 5: "old sessions get 401", a
 * removed member's keys stop working). A socket presents its credentials once, when it connects;
 * yet a key can be revoked, a member removed or moved, or a password reset while it stays open.
 * So every operation the socket sends authenticates the same credentials again (through
 * `CredentialService`, cached and evicted by the cache bus, so this costs no query while nothing
 * changed), and a revocation that concerns a socket (its key, its user, or everything after the
 * bus reconnected) closes it with 4403 once the credentials no longer hold: that also ends its
 * running subscriptions, whose caller is fixed when they start.
 */
import { isDatabaseUnavailable } from "../../shared/database-errors.js";
import { AppError } from "../../shared/errors.js";
import type { CacheBus } from "../platform/cache-bus.js";
import type { Principal } from "../platform/context.js";
import { API_KEY_PREFIX, type CredentialService, hashApiKey } from "./credential.service.js";

/** graphql-ws close code for refused credentials (its `Forbidden`). */
export const SOCKET_FORBIDDEN = 4403;

/** What this module needs of a socket: closing it. */
export interface ClosableSocket {
  close(code: number, reason: string): void;
}

interface Session {
  /** The raw credential the socket connected with (undefined: none). */
  credential: string | undefined;
  /** SHA-256 (hex) of the API key it connected with, as `api_key` bus messages name keys; else null. */
  keyHash: string | null;
  /** Who it authenticated as when it connected (undefined: nobody). */
  principal: Principal | undefined;
}

/** The sessions of the open sockets of one process. */
export class SocketSessions {
  private readonly sessions = new Map<ClosableSocket, Session>();

  constructor(
    private readonly credentials: CredentialService,
    bus: CacheBus,
  ) {
    // Registered after CredentialService's own handlers (it is built first), so its caches have
    // dropped the key or user by the time these check again.
    bus.on("api_key", (hashHex) => this.recheck((s) => s.keyHash === hashHex));
    bus.on("user", (userId) => this.recheck((s) => s.principal?.userId === userId));
    bus.on("*", () => this.recheck(() => true));
  }

  /** Open sockets with a session (for tests). */
  get size(): number {
    return this.sessions.size;
  }

  /**
   * Authenticates a connecting socket and remembers its credential.
   * @returns false when the credential is refused (the socket is then refused too).
   * @throws what `CredentialService.authenticate` throws other than an `AppError` refusing the
   *   credential: an unavailable database (`isDatabaseUnavailable`, the circuit's 503 included)
   *   says nothing about the credential (issue 28 review: such sockets were closed as forbidden).
   */
  async open(socket: ClosableSocket, credential: string | undefined): Promise<boolean> {
    let principal: Principal | undefined;
    try {
      principal = await this.credentials.authenticate(credential);
    } catch (err) {
      if (err instanceof AppError && !isDatabaseUnavailable(err)) return false;
      throw err;
    }
    const keyHash =
      credential !== undefined && credential.startsWith(API_KEY_PREFIX) ? hashApiKey(credential).toString("hex") : null;
    this.sessions.set(socket, { credential, keyHash, principal });
    return true;
  }

  /** Forgets a closed socket. */
  close(socket: ClosableSocket): void {
    this.sessions.delete(socket);
  }

  /**
   * The caller of an operation the socket sends now: its credential authenticated again.
   * @returns undefined for a socket that connected without credentials (or is unknown).
   * @throws AppError 401 when the credential no longer holds (revoked key, voided token, user moved).
   */
  async principal(socket: ClosableSocket): Promise<Principal | undefined> {
    const session = this.sessions.get(socket);
    if (!session?.principal) return undefined;
    return this.credentials.authenticate(session.credential);
  }

  /** Closes (4403) each signed-in socket `concerned` picks whose credential no longer holds. */
  private recheck(concerned: (s: Session) => boolean): void {
    for (const [socket, session] of this.sessions) {
      if (!session.principal || !concerned(session)) continue;
      const before = session.principal;
      void this.credentials.authenticate(session.credential).then(
        (now) => {
          if (now?.userId !== before.userId || now.teamId !== before.teamId) this.end(socket);
        },
        (err: unknown) => {
          // A database failure proves nothing (the circuit's 503 is an AppError too: every socket
          // was closed as forbidden when the listener reconnected after an outage): the next
          // operation authenticates again anyway.
          if (err instanceof AppError && !isDatabaseUnavailable(err)) this.end(socket);
        },
      );
    }
  }

  private end(socket: ClosableSocket): void {
    if (!this.sessions.delete(socket)) return;
    socket.close(SOCKET_FORBIDDEN, "Forbidden");
  }
}
