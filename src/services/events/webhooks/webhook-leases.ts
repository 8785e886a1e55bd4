/**
 * Leases of the webhook attempts one process has under way (issue 28, item 3). The dispatcher's
 * claim leases a delivery for `LEASE_MS` (10 s: `next_attempt_at`, which no other process's claim
 * passes before it); this keeper renews the leases of every attempt still under way here every
 * `LEASE_RENEW_MS` (3 s), in one statement, however long the attempt ceiling is. So a process
 * that dies mid-attempt leaves its deliveries due again within `LEASE_MS` of its last renewal
 * (another process's poll sends them within about a second of that), while a live one keeps them.
 *
 * Never two at once: a renewal extends a lease only while the row is still the one claimed
 * (pending, same attempt number). An attempt whose lease could not be renewed (database
 * unreachable, the row taken over) is aborted `LEASE_SAFETY_MS` before the lease could run out,
 * and at once when the row was taken over, so the next holder never overlaps it.
 */
import type { Logger } from "pino";
import type { DataSource } from "typeorm";
import { queryRows } from "../../../db/sql.js";

/** How long a claim or a renewal leases a delivery to its process, ms. */
export const LEASE_MS = 10_000;

/** How often a process renews the leases of its attempts under way, ms. */
export const LEASE_RENEW_MS = 3_000;

/** An attempt whose lease could not be renewed is aborted this long before the lease runs out, ms. */
export const LEASE_SAFETY_MS = 3_000;

/** How often leases are checked (renewed when due, attempts aborted when unrenewable), ms. */
const LEASE_CHECK_MS = 1_000;

/** An attempt under way in this process, as its lease sees it. */
export interface LeasedAttempt {
  /** The delivery's id, its response's id (for logs) and the attempt number it claimed. */
  id: string;
  responseId: string;
  attempt: number;
  /** Its destination host, for logs. */
  host: string;
  /** Aborts this attempt alone. */
  controller: AbortController;
  /** Until when (`Date.now()`) its lease surely holds: the start of the last claim or renewal plus `LEASE_MS`. */
  leaseUntil: number;
  /** Set when its lease could not be kept: the attempt was aborted and another process may send it. */
  leaseLost: boolean;
  /** Set once its outcome is being recorded: its lease is no longer renewed (the record moves the row on). */
  recording: boolean;
}

/** Renews the leases of one process's attempts under way and aborts those whose lease is lost. */
export class LeaseKeeper {
  private readonly held = new Map<string, LeasedAttempt>();
  private timer?: NodeJS.Timeout;
  /** The renewal under way, if any. */
  private renewing: Promise<void> | null = null;
  /** When leases were last renewed (`Date.now()`). */
  private renewedAt = 0;

  constructor(
    private readonly ds: DataSource,
    private readonly logger: Logger,
  ) {}

  /** Starts the checks (every `LEASE_CHECK_MS`). */
  start(): void {
    this.timer ??= setInterval(() => this.check(), LEASE_CHECK_MS);
    this.timer.unref();
  }

  /** Stops the checks. */
  stop(): void {
    clearInterval(this.timer);
    this.timer = undefined;
  }

  /**
   * Tracks an attempt just claimed.
   * @param claimedAt `Date.now()` taken before the claim's statement was sent.
   */
  add(
    a: Omit<LeasedAttempt, "controller" | "leaseUntil" | "leaseLost" | "recording">,
    claimedAt: number,
  ): LeasedAttempt {
    const attempt = {
      ...a,
      controller: new AbortController(),
      leaseUntil: claimedAt + LEASE_MS,
      leaseLost: false,
      recording: false,
    };
    this.held.set(a.id, attempt);
    return attempt;
  }

  /** Stops tracking an attempt that has ended. */
  remove(id: string): void {
    this.held.delete(id);
  }

  /**
   * Called before an attempt's outcome is written: no renewal starts for it from now on, and one
   * under way is waited for, so none can extend its lease over what the record sets.
   */
  async recording(a: LeasedAttempt): Promise<void> {
    a.recording = true;
    await this.renewing;
  }

  private check(): void {
    const now = Date.now();
    for (const a of this.held.values()) {
      if (!a.recording && !a.leaseLost && now >= a.leaseUntil - LEASE_SAFETY_MS) {
        this.lose(a, "its lease could not be renewed");
      }
    }
    if (this.renewing || now - this.renewedAt < LEASE_RENEW_MS) return;
    const held = [...this.held.values()].filter((a) => !a.recording && !a.leaseLost);
    if (held.length === 0) return;
    this.renewedAt = now;
    this.renewing = this.renew(held)
      .catch((err: unknown) => this.logger.warn({ err }, "webhook dispatcher could not renew its leases"))
      .finally(() => {
        this.renewing = null;
      });
  }

  /** Extends the leases of `held` by `LEASE_MS` where the row is still as claimed; aborts the others. */
  private async renew(held: LeasedAttempt[]): Promise<void> {
    const startedAt = Date.now();
    const rows = await queryRows<{ id: string }>(
      this.ds,
      `UPDATE webhook_deliveries d
          SET next_attempt_at = now() + make_interval(secs => $3::double precision / 1000)
         FROM unnest($1::uuid[], $2::int[]) AS l(id, attempts)
        WHERE d.id = l.id AND d.attempts = l.attempts AND d.status = 'pending'
        RETURNING d.id`,
      [held.map((a) => a.id), held.map((a) => a.attempt), LEASE_MS],
    );
    const renewed = new Set(rows.map((r) => r.id));
    for (const a of held) {
      if (renewed.has(a.id)) a.leaseUntil = Math.max(a.leaseUntil, startedAt + LEASE_MS);
      else if (!a.recording) this.lose(a, "another process took the delivery over");
    }
  }

  private lose(a: LeasedAttempt, why: string): void {
    a.leaseLost = true;
    a.controller.abort();
    this.logger.warn(
      { deliveryId: a.id, responseId: a.responseId, host: a.host, attempt: a.attempt },
      `webhook attempt aborted: ${why}`,
    );
  }
}
