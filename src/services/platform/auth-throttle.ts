/**
 * Sign-in throttling (issue 8, item 5): login failures and forgot-password requests, counted per
 * client address and per account in the `auth_throttle` table, so every API process sharing the
 * database sees the same counts. Beyond a rule's limit the request is refused with 429 and
 * `Retry-After` (DESIGN §3 Errors) before any password is checked or mail sent.
 *
 * Each counter is a fixed window that opens at the first hit and lasts `windowS`; one atomic
 * upsert both counts the hit and says whether it was admitted, so parallel requests cannot slip
 * past the limit between a read and a write. A login takes its place in the counters *before*
 * the password is checked and gives it back when the password was right: only failures count,
 * and a burst of parallel guesses is bounded like a sequence of them.
 *
 * Accounts are keyed by the normalised address as typed, whether or not it is registered (so a
 * 429 says nothing about which emails exist); client addresses by IPv4 address or IPv6 /64 (one
 * host usually holds a whole /64). Keys are stored as SHA-256 hashes only.
 */
import { createHash } from "node:crypto";
import { isIPv6 } from "node:net";
import type { DataSource } from "typeorm";
import type { Logger } from "pino";
import { queryRows } from "../../db/sql.js";
import { AppError, ErrorCode } from "../../shared/errors.js";
import type { RequestContext } from "./context.js";

/** The counters: what each one limits. */
export type ThrottleRule = "login_ip" | "login_account" | "forgot_ip" | "forgot_email";

export interface ThrottleLimits {
  /** Most counted hits per window, for every rule (login: failures; forgot-password: requests). */
  max: number;
  /** Window length, seconds. */
  windowS: number;
}

/** One admitted hit: enough to give it back. */
interface Hit {
  bucket: Buffer;
  /** The window it was counted in, as PostgreSQL wrote it (microseconds: a JS Date would round them). */
  windowStart: string;
}

/** A login attempt holding its place in the counters until it is known to have succeeded. */
export interface LoginAttempt {
  /** The password was right: the attempt does not count as a failure. */
  succeeded(): Promise<void>;
  /**
   * The password was checked and refused: the attempt stays counted, and an `info` line
   * "login failed" names the client address and, when the email is registered, the user id (never
   * the email or password). At most `max` such lines per window per address and per account.
   */
  failed(userId: string | undefined): void;
}

/** Sweep stale counters after this many hits counted by this process. */
const SWEEP_EVERY = 500;

/** DB-backed counters for login and forgot-password (fixed windows, shared by all processes). */
export class AuthThrottle {
  private hitsSinceSweep = 0;

  constructor(
    private readonly ds: DataSource,
    private readonly logger: Logger,
    private readonly limits: ThrottleLimits,
  ) {}

  /**
   * Counts a login attempt for the caller's address and for `account` (the normalised email).
   * Call `succeeded()` on the result when the password was right; otherwise it stays counted.
   * @throws AppError 429 (`Retry-After`, `extra.retry_after_s`) when either counter is full;
   *   nothing is counted then.
   */
  async beginLogin(ctx: RequestContext, account: string): Promise<LoginAttempt> {
    const hits = await this.admit([
      ["login_ip", clientKey(ctx.ip)],
      ["login_account", account],
    ]);
    return {
      succeeded: () => this.giveBack(hits),
      failed: (userId) => this.logger.info({ requestId: ctx.requestId, ip: ctx.ip, userId }, "login failed"),
    };
  }

  /**
   * Counts a forgot-password request for the caller's address and for `email` (normalised).
   * @throws AppError 429 (`Retry-After`, `extra.retry_after_s`) when either counter is full.
   */
  async forgotPassword(ctx: RequestContext, email: string): Promise<void> {
    await this.admit([
      ["forgot_ip", clientKey(ctx.ip)],
      ["forgot_email", email],
    ]);
  }

  /**
   * Counts one hit on each counter in order (a missing key is skipped). When one is full, the
   * hits already counted by this call are given back and 429 is thrown.
   */
  private async admit(keys: Array<[ThrottleRule, string | undefined]>): Promise<Hit[]> {
    const admitted: Hit[] = [];
    for (const [rule, key] of keys) {
      if (key === undefined) continue;
      const bucket = createHash("sha256").update(`${rule}:${key}`).digest();
      // SET reads the row as it was: a window that has run out starts over at this hit. A full
      // window stays at max + 1 (refused), so `hits <= max` says whether this hit got in.
      const [row] = await queryRows<{ hits: number; window_start: string; retry_after_s: string }>(
        this.ds,
        `INSERT INTO auth_throttle AS t (bucket, window_start, hits) VALUES ($1, now(), 1)
         ON CONFLICT (bucket) DO UPDATE SET
           window_start = CASE WHEN t.window_start <= now() - make_interval(secs => $2) THEN now() ELSE t.window_start END,
           hits = CASE WHEN t.window_start <= now() - make_interval(secs => $2) THEN 1 ELSE least(t.hits + 1, $3 + 1) END
         RETURNING hits, window_start::text AS window_start,
           extract(epoch FROM window_start + make_interval(secs => $2) - now())::text AS retry_after_s`,
        [bucket, this.limits.windowS, this.limits.max],
      );
      if (row.hits > this.limits.max) {
        await this.giveBack(admitted);
        const retryAfterS = Math.max(1, Math.ceil(Number(row.retry_after_s)));
        throw new AppError(
          ErrorCode.RateLimited,
          `Too many attempts; retry in ${retryAfterS} s`,
          { retry_after_s: retryAfterS },
          retryAfterS,
        );
      }
      admitted.push({ bucket, windowStart: row.window_start });
    }
    this.maybeSweep(admitted.length);
    return admitted;
  }

  /** Takes back hits counted earlier (their window may have started over since: then nothing). */
  private async giveBack(hits: Hit[]): Promise<void> {
    for (const hit of hits) {
      await this.ds.query(
        `UPDATE auth_throttle SET hits = hits - 1 WHERE bucket = $1 AND window_start = $2::timestamptz AND hits > 0`,
        [hit.bucket, hit.windowStart],
      );
    }
  }

  /** Now and then, drops counters whose window ended (in the background; a failure is only logged). */
  private maybeSweep(counted: number): void {
    this.hitsSinceSweep += counted;
    if (this.hitsSinceSweep < SWEEP_EVERY) return;
    this.hitsSinceSweep = 0;
    this.ds
      .query(`DELETE FROM auth_throttle WHERE window_start < now() - make_interval(secs => $1)`, [this.limits.windowS])
      .catch((err: unknown) => this.logger.warn({ err }, "could not sweep auth_throttle"));
  }
}

/**
 * The counter key of a client address: IPv4 as is (an IPv4-mapped IPv6 address as its IPv4),
 * IPv6 by its /64. Undefined (no address known) skips the per-address counter.
 */
export function clientKey(ip: string | undefined): string | undefined {
  if (!ip) return undefined;
  const mapped = /^::ffff:(\d+\.\d+\.\d+\.\d+)$/i.exec(ip);
  if (mapped) return mapped[1];
  if (!isIPv6(ip)) return ip;
  return expandIPv6(ip).slice(0, 4).join(":") + "::/64";
}

/** The eight 16-bit groups of an IPv6 address (zone id dropped, `::` expanded, embedded IPv4 split). */
function expandIPv6(ip: string): string[] {
  let text = ip.split("%")[0].toLowerCase();
  const v4 = /(\d+)\.(\d+)\.(\d+)\.(\d+)$/.exec(text);
  if (v4) {
    const [a, b, c, d] = v4.slice(1).map(Number);
    text = text.slice(0, v4.index) + ((a << 8) | b).toString(16) + ":" + ((c << 8) | d).toString(16);
  }
  const [head, tail] = text.split("::");
  const left = head ? head.split(":") : [];
  const right = tail === undefined ? [] : tail ? tail.split(":") : [];
  const fill = tail === undefined ? [] : Array<string>(8 - left.length - right.length).fill("0");
  return [...left, ...fill, ...right].map((g) => g.replace(/^0+(?=.)/, ""));
}
