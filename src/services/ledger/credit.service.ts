/**
 * Credit reservations: nothing is ever served unpaid (DESIGN §3 Money; issue 5, item 2).
 *
 * The rule. A create operation may start engine work only when its worst-case cost — the prompt
 * at the input price plus `max_tokens` (or, without one, the rest of the context) at the output
 * price, in micro-USD — is covered by credit not already promised to other in-flight requests,
 * in every API process on the database. It then settles at its real cost (≤ the worst case) and
 * releases the rest.
 *
 * The protocol: leases. Each process (a `holder`, a random UUID per start) holds per team a
 * lease row in `credit_leases`: micro-USD of the team's balance set aside for that process. The
 * invariant kept in the database is
 *
 *     teams.credit_balance_micros ≥ Σ micros of the team's unexpired leases
 *
 * and each process keeps, per team, `leased` (its lease as far as it knows; never more than the
 * row) and `promised` (the worst cases of its in-flight requests). A request reserves its worst
 * case locally — no database round trip — when `leased − promised` covers it. Otherwise the
 * process *acquires*: in one transaction it locks the team row (`FOR NO KEY UPDATE`, the lock the
 * metering flush takes, so acquires and charges of every process serialise per team), then, in a
 * new statement (a fresh snapshot after the lock, so no other holder's committed lease is missed),
 * sets its lease to `min(free, need + min(headroom, (free − need) / 2))`, where `free` is the
 * balance less every other unexpired lease, `need` is `promised` plus this request's worst case,
 * and `headroom` is 32 worst cases. The headroom is what keeps the common case local; taking at
 * most half of what is left beyond the need leaves credit for the other processes of a team
 * running low. An acquire never lowers the holder's own row (which covers its in-flight requests),
 * and when the free credit does not cover the need it changes nothing: a refused request takes no
 * credit from anyone. When other processes hold leases, the short process asks them (NOTIFY
 * `credit-shrink:<team>`) to give back what they have not promised, and re-acquires after 50,
 * 150 and 300 ms before it answers 402 with the credit available to it (`extra.available_micros`:
 * the balance less every other lease and less its own promises).
 *
 * Charging. The metering group commit (`MeteringService.write`) debits a request's real cost
 * from the balance and from the charging process's lease in the same statement, so the invariant
 * holds after every commit. Locally a settled request gives back its whole worst case to
 * `promised` and takes its real charge off `leased`. `leased` only ever under-counts the row
 * (an acquire overwrites it with the row's value less every charge settled during its round
 * trip; such a charge that had committed before the acquire is taken off twice), which errs on the side of refusing, never of overspending.
 *
 * Releasing. A team idle in this process (nothing promised) for `idleReleaseMs` gives its lease
 * back (row deleted), so other processes can use that credit; a shrink request gives back at once
 * what is not promised. Leases are renewed every
 * `renewEveryMs` and expire after `ttlMs`: the lease of a process that died stops counting then.
 * Lease operations of one team are serialised in-process (`TeamLease.busy`), so a release cannot
 * delete a lease an acquire has just granted. Shutdown deletes every lease of the holder.
 *
 * Residual risk, by design: a process that stops renewing for longer than `ttlMs` (an event loop
 * frozen for 30 s) while requests are in flight could see its credit leased elsewhere; the
 * group commit then still caps charges at the balance (`balance_after_micros` never below zero),
 * so the ledger stays consistent and the loss is bounded by those requests.
 */
import { randomUUID } from "node:crypto";
import type { Logger } from "pino";
import type { DataSource } from "typeorm";
import { queryRows } from "../../db/sql.js";
import { AppError, ErrorCode } from "../../shared/errors.js";
import type { CacheBus } from "../platform/cache-bus.js";

/** Settings of the lease protocol (milliseconds; `headroomRequests` in worst cases). */
export interface CreditLeaseOptions {
  ttlMs: number;
  renewEveryMs: number;
  idleReleaseMs: number;
  headroomRequests: number;
}

const DEFAULTS: CreditLeaseOptions = {
  ttlMs: 30_000,
  renewEveryMs: 10_000,
  idleReleaseMs: 2_000,
  headroomRequests: 32,
};

/** A request's hold on credit; settle or release it exactly once (later calls do nothing). */
export interface CreditReservation {
  /** The worst-case cost reserved, micro-USD. */
  readonly micros: bigint;
  /** The request was charged `chargedMicros` (≤ `micros`): the rest goes back. */
  settle(chargedMicros: bigint): void;
  /** The request was not charged (refused, failed, or its record was not written). */
  release(): void;
}

interface TeamLease {
  /** Micro-USD of this holder's lease row, as far as this process knows (≤ the row). */
  leased: bigint;
  /** Σ worst cases of this process's in-flight requests of the team. */
  promised: bigint;
  /** The lease operation (acquire, release) under way; others wait for it. */
  busy?: Promise<void>;
  /** When `promised` last dropped to zero (ms); null while requests are in flight. */
  idleSince: number | null;
  /**
   * Σ micro-USD charged by this process's settled requests of the team since it started (only
   * grows). An acquire reads it before and after its round trip: a charge whose flush committed
   * after the acquire's snapshot may settle before the acquire's answer is handled, and must
   * still come off the lease the acquire read.
   */
  charged: bigint;
}

/** What an acquire saw: this holder's lease, the credit not leased to others, and what others hold (µUSD). */
interface LeaseView {
  lease: bigint;
  free: bigint;
  heldByOthers: bigint;
}

/** NOTIFY topic asking every process to give back the unpromised part of a team's lease. */
const SHRINK_TOPIC = "credit-shrink";
/** Waits before the re-acquires that follow a shrink request, ms (total ≈ 0.5 s before a 402). */
const SHRINK_RETRY_DELAYS_MS = [50, 150, 300];

/** A reservation of nothing: free requests (zero prices) never touch the lease. */
const FREE: CreditReservation = { micros: 0n, settle() {}, release() {} };

/** The per-process side of the credit lease protocol (see the module header). */
export class CreditService {
  /** This process's holder id, also passed to the metering group commit. */
  readonly holder = randomUUID();
  private readonly teams = new Map<string, TeamLease>();
  private readonly opts: CreditLeaseOptions;
  private timer?: NodeJS.Timeout;
  private lastSweep = 0;
  private lastRenew = 0;
  private ticking?: Promise<void>;
  /** Round trips to the database for leases (acquire, renew, release), for tests and benchmarks. */
  readonly stats = { acquires: 0, releases: 0, renewals: 0 };

  constructor(
    private readonly ds: DataSource,
    private readonly bus: CacheBus,
    private readonly logger: Logger,
    opts: Partial<CreditLeaseOptions> = {},
  ) {
    this.opts = { ...DEFAULTS, ...opts };
    // Another process is short of credit that this one holds: give back what is not promised.
    bus.on(SHRINK_TOPIC, (teamId) => {
      const t = this.teams.get(teamId);
      if (t && !t.busy && t.leased > t.promised) void this.serialised(t, () => this.shrink(teamId, t)).catch(() => {});
    });
  }

  /** Starts renewing and releasing leases in the background. */
  start(): void {
    const every = Math.max(50, Math.min(this.opts.renewEveryMs, this.opts.idleReleaseMs / 2));
    this.timer = setInterval(() => {
      if (!this.ticking) this.ticking = this.tick().finally(() => (this.ticking = undefined));
    }, every);
    this.timer.unref();
  }

  /**
   * Reserves `worstMicros` of the team's credit for one request.
   * @throws AppError 402 (`extra`: `required_micros`, `available_micros`) when the credit not
   *   promised to other in-flight requests, in every process, does not cover it; the database's
   *   error when the lease cannot be read.
   */
  async reserve(teamId: string, worstMicros: bigint): Promise<CreditReservation> {
    if (worstMicros <= 0n) return FREE;
    const t = this.team(teamId);
    let tries = 0;
    let last: LeaseView | undefined;
    for (;;) {
      // While a lease operation runs, wait even if the old lease has room: an acquire sets the
      // lease to what was promised when it started, so a hold taken meanwhile would be uncovered.
      if (t.busy) {
        await t.busy.catch(() => undefined);
        continue;
      }
      if (t.leased - t.promised >= worstMicros) return this.hold(t, worstMicros);
      // Short because other processes hold leases: ask them to give back what they have not
      // promised (NOTIFY), then try again a few times before refusing.
      if (last && last.heldByOthers > 0n && tries <= SHRINK_RETRY_DELAYS_MS.length) {
        if (tries === 1) await this.bus.publish(SHRINK_TOPIC, teamId, this.ds).catch(() => undefined);
        await new Promise((r) => setTimeout(r, SHRINK_RETRY_DELAYS_MS[tries - 1]));
      } else if (last) {
        const free = last.free > t.promised ? last.free - t.promised : 0n;
        const available = free > t.leased - t.promised ? free : t.leased - t.promised;
        throw new AppError(
          ErrorCode.InsufficientCredit,
          `Insufficient credit: this request may cost up to ${worstMicros} micro-USD (the prompt at the input ` +
            `price plus max_tokens, or the rest of the context, at the output price) and ${available} micro-USD ` +
            `is available; a smaller max_tokens may fit, or add credit`,
          { required_micros: Number(worstMicros), available_micros: Number(available) },
        );
      }
      await this.serialised(t, async () => {
        last = await this.acquire(teamId, t, worstMicros);
      });
      tries++;
    }
  }

  /** Stops the background work and gives back every lease of this holder. */
  async close(): Promise<void> {
    if (this.timer) clearInterval(this.timer);
    await this.ticking;
    await Promise.allSettled([...this.teams.values()].map((t) => t.busy));
    this.teams.clear();
    await this.ds
      .query("DELETE FROM credit_leases WHERE holder = $1", [this.holder])
      .catch((err: unknown) => this.logger.warn({ err }, "could not release credit leases"));
  }

  private team(teamId: string): TeamLease {
    let t = this.teams.get(teamId);
    if (!t) {
      t = { leased: 0n, promised: 0n, idleSince: Date.now(), charged: 0n };
      this.teams.set(teamId, t);
    }
    return t;
  }

  private hold(t: TeamLease, micros: bigint): CreditReservation {
    t.promised += micros;
    t.idleSince = null;
    let done = false;
    const finish = (charged: bigint) => {
      if (done) return;
      done = true;
      t.promised -= micros;
      t.leased = t.leased > charged ? t.leased - charged : 0n;
      t.charged += charged;
      if (t.promised === 0n) t.idleSince = Date.now();
    };
    return { micros, settle: (charged) => finish(charged), release: () => finish(0n) };
  }

  /** Runs one lease operation of a team at a time. */
  private async serialised(t: TeamLease, op: () => Promise<void>): Promise<void> {
    const run = op();
    t.busy = run;
    try {
      await run;
    } finally {
      if (t.busy === run) t.busy = undefined;
    }
  }

  /**
   * Sets this holder's lease to what the request and headroom need when the free credit covers
   * the need; otherwise leaves the lease as it is (a refused request takes nothing from others).
   */
  private async acquire(teamId: string, t: TeamLease, worstMicros: bigint): Promise<LeaseView> {
    this.stats.acquires++;
    const need = t.promised + worstMicros;
    const headroom = worstMicros * BigInt(this.opts.headroomRequests);
    const chargedBefore = t.charged;
    const view = await this.ds.transaction(async (em) => {
      await em.query("SELECT 1 FROM teams WHERE id = $1 FOR NO KEY UPDATE", [teamId]);
      // A new statement, so a fresh snapshot: every lease committed before the lock is seen.
      const rows = await queryRows<{ micros: string; free: string; held: string }>(
        em,
        `WITH held AS (
           SELECT coalesce(sum(micros), 0) AS micros FROM credit_leases
            WHERE team_id = $1 AND holder <> $2 AND expires_at > now()
         ),
         free AS (
           SELECT t.id, GREATEST(0, t.credit_balance_micros - held.micros) AS micros, held.micros AS held
             FROM teams t, held WHERE t.id = $1
         ),
         lease AS (
           INSERT INTO credit_leases (team_id, holder, micros, expires_at, updated_at)
           SELECT id, $2,
                  CASE WHEN micros >= $3::bigint
                       THEN LEAST(micros, $3::bigint + LEAST($5::bigint, (micros - $3::bigint) / 2))
                       ELSE 0 END,
                  now() + $4::integer * interval '1 millisecond', now()
             FROM free
           ON CONFLICT (team_id, holder)
           DO UPDATE SET micros = GREATEST(credit_leases.micros, EXCLUDED.micros), expires_at = EXCLUDED.expires_at,
                         updated_at = now()
           RETURNING micros
         )
         SELECT lease.micros::text AS micros, free.micros::text AS free, free.held::text AS held FROM lease, free`,
        [teamId, this.holder, need.toString(), this.opts.ttlMs, headroom.toString()],
      );
      const row = rows[0];
      return row
        ? { lease: BigInt(row.micros), free: BigInt(row.free), heldByOthers: BigInt(row.held) }
        : { lease: 0n, free: 0n, heldByOthers: 0n };
    });
    // Charges settled during the round trip may have committed after the acquire's snapshot (the
    // flush waits on the team lock, then its answer can be handled before this one): take them
    // off again. When they had committed before, they are taken off twice — an under-count, which
    // refuses rather than overspends (module header). Assigning `view.lease` alone let the
    // lease count credit already charged, and the flush then capped another process's charge
    // at the balance (CI, session 7; test/credit.test.ts reproduces it with a delay).
    const chargedDuring = t.charged - chargedBefore;
    t.leased = view.lease > chargedDuring ? view.lease - chargedDuring : 0n;
    return view;
  }

  /** Gives back the part of this holder's lease that no request of this process has promised. */
  private async shrink(teamId: string, t: TeamLease): Promise<void> {
    const keep = t.promised;
    if (t.leased > keep) t.leased = keep; // before the round trip, as in `release`
    this.stats.releases++;
    await this.ds.query(
      "UPDATE credit_leases SET micros = LEAST(micros, $3::bigint), updated_at = now() WHERE team_id = $1 AND holder = $2",
      [teamId, this.holder, keep.toString()],
    );
  }

  /** Gives back idle leases, renews the others, and now and then sweeps long-expired rows. */
  private async tick(): Promise<void> {
    const now = Date.now();
    const renew: string[] = [];
    const releases: Array<Promise<void>> = [];
    for (const [teamId, t] of this.teams) {
      if (t.busy) continue;
      const idle = t.promised === 0n && t.idleSince !== null && now - t.idleSince >= this.opts.idleReleaseMs;
      // Forgotten only when nothing refers to it: no operation under way (a waiting request
      // would be waiting on one), nothing leased, nothing promised.
      if (idle && t.leased === 0n) this.teams.delete(teamId);
      else if (idle) releases.push(this.serialised(t, () => this.release(teamId, t)));
      else if (t.leased > 0n) renew.push(teamId);
    }
    try {
      await Promise.all(releases);
      if (renew.length > 0 && now - this.lastRenew >= this.opts.renewEveryMs) {
        this.lastRenew = now;
        this.stats.renewals++;
        await this.ds.query(
          `UPDATE credit_leases SET expires_at = now() + $3::integer * interval '1 millisecond'
            WHERE holder = $1 AND team_id = ANY($2::uuid[])`,
          [this.holder, renew, this.opts.ttlMs],
        );
      }
      if (now - this.lastSweep >= 60_000) {
        this.lastSweep = now;
        await this.ds.query("DELETE FROM credit_leases WHERE expires_at < now() - interval '10 minutes'");
      }
    } catch (err) {
      this.logger.warn({ err: { code: (err as { code?: string }).code } }, "credit lease upkeep failed");
    }
  }

  private async release(teamId: string, t: TeamLease): Promise<void> {
    if (t.promised !== 0n) return;
    this.stats.releases++;
    // Before the round trip: a request arriving meanwhile must not reserve from the lease being
    // deleted; it waits for this operation and acquires anew.
    t.leased = 0n;
    await this.ds.query("DELETE FROM credit_leases WHERE team_id = $1 AND holder = $2", [teamId, this.holder]);
  }
}
