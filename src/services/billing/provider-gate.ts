/**
 * The gate in front of payment-provider calls (issue 10 review, finding 1): a provider call can
 * take a long time (Stripe: 30 s timeout and one retry), so it runs with no database connection
 * held, and this process bounds how many run at once — per team (`perTeam`) and in all
 * (`perProcess`). A call over either bound is refused at once with 429 `rate_limited` and a
 * `Retry-After`, never queued: a team whose checkouts hang cannot pile up work, and other
 * teams' calls still get their turn.
 *
 * Calls are keyed (`topup:<team>:<nonce>`, `invoice:<team>:<start>:<end>`): while a key's call
 * runs in this process, a second request for the same key joins it (`inFlight`) instead of
 * calling the provider again.
 */
import { AppError, ErrorCode } from "../../shared/errors.js";

/** Bounds of concurrent provider calls in one process. */
export interface ProviderGateLimits {
  /** Calls of one team at once (default 4; config `SWITCHYARD_PROVIDER_CALLS_PER_TEAM`). */
  perTeam: number;
  /** Calls of all teams at once (default 64; config `SWITCHYARD_PROVIDER_CALLS_PER_PROCESS`). */
  perProcess: number;
}

export const DEFAULT_PROVIDER_GATE_LIMITS: ProviderGateLimits = { perTeam: 4, perProcess: 64 };

/** Seconds a refused caller is told to wait (`Retry-After`). */
const RETRY_AFTER_S = 5;

/** Per-team and per-process bounds on provider calls, and joining of calls by key (see the module header). */
export class ProviderGate {
  private readonly byTeam = new Map<string, number>();
  private total = 0;
  private readonly running = new Map<string, Promise<unknown>>();

  constructor(private readonly limits: ProviderGateLimits = DEFAULT_PROVIDER_GATE_LIMITS) {}

  /** The call running in this process for `key`, if any (settles when it ends). */
  inFlight(key: string): Promise<unknown> | undefined {
    return this.running.get(key);
  }

  /**
   * Runs `call` for `teamId` under `key`, counted against the bounds until it settles.
   * Answers `undefined` without running it when a call for `key` is already running here (join
   * that one through `inFlight`).
   * @throws AppError 429 `rate_limited` when the team or the process is at its bound; whatever
   *   `call` throws.
   */
  async run<T>(teamId: string, key: string, call: () => Promise<T>): Promise<T | undefined> {
    if (this.running.has(key)) return undefined;
    const teamCount = this.byTeam.get(teamId) ?? 0;
    if (teamCount >= this.limits.perTeam) {
      throw new AppError(
        ErrorCode.RateLimited,
        `Your team already has ${this.limits.perTeam} payment-provider requests in progress; retry shortly`,
        undefined,
        RETRY_AFTER_S,
      );
    }
    if (this.total >= this.limits.perProcess) {
      throw new AppError(
        ErrorCode.RateLimited,
        "The payment provider is busy with other requests; retry shortly",
        undefined,
        RETRY_AFTER_S,
      );
    }
    this.byTeam.set(teamId, teamCount + 1);
    this.total += 1;
    const promise = call();
    this.running.set(key, promise);
    try {
      return await promise;
    } finally {
      this.running.delete(key);
      this.total -= 1;
      const left = (this.byTeam.get(teamId) ?? 1) - 1;
      if (left <= 0) this.byTeam.delete(teamId);
      else this.byTeam.set(teamId, left);
    }
  }
}
