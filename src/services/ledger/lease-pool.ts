/**
 * The lease protocol behind every reservation of money (DESIGN §3 Money; issue 5, item 2), for any
 * kind of account whose micro-USD must never be overspent by the API processes sharing the
 * database: a team's credit (`credit.service.ts`) and, since issue 29, item 1, an API key's
 * budget (`key-budget.service.ts`). A `LeaseKind` says where an account's spendable amount is
 * read and where the leases live; the protocol is the same for both.
 *
 * The rule. A request may start engine work only when its worst-case cost is covered by the
 * account's spendable micro-USD not already promised to other in-flight requests, in every API
 * process on the database. It then settles at its real cost (≤ the worst case) and releases the
 * rest.
 *
 * The protocol: leases. Each process (a `holder`, a random UUID per start) holds per account a
 * lease row: micro-USD of the account set aside for that process. The invariant kept in the
 * database is
 *
 *     spendable(account) ≥ Σ micros of the account's unexpired leases
 *
 * and each process keeps, per account, `leased` (its lease as far as it knows; never more than the
 * row) and `promised` (the worst cases of its in-flight requests). A request reserves its worst
 * case locally — no database round trip — when `leased − promised` covers it. Otherwise the
 * process *acquires*: in one transaction it locks the account's row (`FOR NO KEY UPDATE`, the lock
 * the metering flush takes, so acquires and charges of every process serialise per account), then,
 * in a new statement (a fresh snapshot after the lock, so no other holder's committed lease is
 * missed), sets its lease to `min(free, need + min(headroom, (free − need) / 2))`, where `free` is
 * the spendable amount less every other unexpired lease, `need` is `promised` plus this request's
 * worst case, and `headroom` is 32 worst cases. The headroom is what keeps the common case local;
 * taking at most half of what is left beyond the need leaves room for the other processes of an
 * account running low. An acquire never lowers the holder's own row (which covers its in-flight
 * requests), and when the free amount does not cover the need it changes nothing: a refused
 * request takes nothing from anyone. When other processes hold leases, the short process asks
 * them (NOTIFY `<shrink topic>:<account>`) to give back what they have not promised, and
 * re-acquires after 50, 150 and 300 ms before it refuses with what is available to it (the free
 * amount less its own promises, or its own unpromised lease when that is more).
 *
 * Charging. The metering group commit (`MeteringService.write`) takes a request's real cost off
 * the account and off the charging process's lease in the same statement, so the invariant holds
 * after every commit. Locally a settled request gives back its whole worst case to `promised` and
 * takes its real charge off `leased`. `leased` only ever under-counts the row (an acquire
 * overwrites it with the row's value less every charge settled during its round trip; such a
 * charge that had committed before the acquire is taken off twice), which errs on the side of
 * refusing, never of overspending.
 *
 * Releasing. An account idle in this process (nothing promised) for `idleReleaseMs` gives its
 * lease back (row deleted), so other processes can use it; a shrink request gives back at once
 * what is not promised. Leases are renewed every `renewEveryMs` and expire after `ttlMs`: the
 * lease of a process that died stops counting then. Lease operations of one account are
 * serialised in-process (`AccountLease.busy`), so a release cannot delete a lease an acquire has
 * just granted. Shutdown deletes every lease of the holder.
 *
 * Residual risk, by design: a process that stops renewing for longer than `ttlMs` (an event loop
 * frozen for 30 s) while requests are in flight could see its lease granted elsewhere; the group
 * commit then still caps charges at what the account has left (a team's balance never below zero,
 * a key's spend never above its budget), so the ledger stays consistent and the loss is bounded
 * by those requests.
 */
import { randomUUID } from "node:crypto";
import type { Logger } from "pino";
import type { DataSource } from "typeorm";
import { queryRows } from "../../db/sql.js";
import type { AppError } from "../../shared/errors.js";
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

/** A reservation of nothing: free requests (zero prices) and unlimited accounts never touch a lease. */
export const FREE: CreditReservation = { micros: 0n, settle() {}, release() {} };

/** One reservation of the same worst case from two accounts (a key's budget and its team's credit). */
export function jointReservation(a: CreditReservation, b: CreditReservation): CreditReservation {
  return {
    micros: a.micros > b.micros ? a.micros : b.micros,
    settle: (charged) => {
      a.settle(charged);
      b.settle(charged);
    },
    release: () => {
      a.release();
      b.release();
    },
  };
}

/** What an acquire saw: this holder's lease, the amount not leased to others, and what others hold (µUSD). */
export interface LeaseView {
  lease: bigint;
  free: bigint;
  heldByOthers: bigint;
  /** What the kind's `freeSql` adds for its refusal (a key's budget, period, spend, reset). */
  info: Record<string, unknown> | null;
  /** No row for the account: it has nothing to lease out (`LeaseKind.missing`). */
  missing: boolean;
}

/** One kind of account the protocol protects (see the module header). */
export interface LeaseKind {
  /** The lease table, keyed by (`column`, `holder`), with `micros`, `expires_at`, `updated_at`. */
  table: string;
  /** The account column of `table`. */
  column: string;
  /** Cache-bus topic asking every process to give back the unpromised part of an account's lease. */
  shrinkTopic: string;
  /** The lock an acquire takes first, on the row the group commit locks to charge ($1: the account). */
  lockSql: string;
  /**
   * The body of a CTE `free` with one row for the account: `id`, `micros` (spendable less
   * `held.micros`, never below 0), `held` (= `held.micros`) and `info` (jsonb or null). It reads
   * the CTE `held` (other holders' unexpired leases); $1 is the account.
   */
  freeSql: string;
  /** What an account without a row is: `refused` (a team gone) or `unlimited` (a key without a budget). */
  missing: "refused" | "unlimited";
  /** The refusal when the available amount (µUSD) does not cover the worst case. */
  refusal(
    accountId: string,
    worstMicros: bigint,
    availableMicros: bigint,
    info: Record<string, unknown> | null,
  ): AppError;
}

interface AccountLease {
  /** Micro-USD of this holder's lease row, as far as this process knows (≤ the row). */
  leased: bigint;
  /** Σ worst cases of this process's in-flight requests of the account. */
  promised: bigint;
  /** The lease operation (acquire, release) under way; others wait for it. */
  busy?: Promise<void>;
  /** When `promised` last dropped to zero (ms); null while requests are in flight. */
  idleSince: number | null;
  /**
   * Σ micro-USD charged by this process's settled requests of the account since it started (only
   * grows). An acquire reads it before and after its round trip: a charge whose flush committed
   * after the acquire's snapshot may settle before the acquire's answer is handled, and must
   * still come off the lease the acquire read.
   */
  charged: bigint;
}

/** Waits before the re-acquires that follow a shrink request, ms (total ≈ 0.5 s before a refusal). */
const SHRINK_RETRY_DELAYS_MS = [50, 150, 300];

/** The per-process side of the lease protocol for one kind of account (see the module header). */
export class LeasePool {
  /** This process's holder id, also passed to the metering group commit. */
  readonly holder: string;
  private readonly accounts = new Map<string, AccountLease>();
  private readonly opts: CreditLeaseOptions;
  private readonly acquireSql: string;
  private timer?: NodeJS.Timeout;
  private lastSweep = 0;
  private lastRenew = 0;
  private ticking?: Promise<void>;
  /** Round trips to the database for leases (acquire, renew, release), for tests and benchmarks. */
  readonly stats = { acquires: 0, releases: 0, renewals: 0 };

  constructor(
    protected ds: DataSource,
    private readonly bus: CacheBus,
    private readonly logger: Logger,
    private readonly kind: LeaseKind,
    opts: Partial<CreditLeaseOptions> = {},
    /** The holder id; by default a fresh one (pools of one process share it: one holder per process). */
    holder: string = randomUUID(),
  ) {
    this.holder = holder;
    this.opts = { ...DEFAULTS, ...opts };
    const { table, column } = kind;
    this.acquireSql = `WITH held AS (
         SELECT coalesce(sum(micros), 0) AS micros FROM ${table}
          WHERE ${column} = $1 AND holder <> $2 AND expires_at > now()
       ),
       free AS (${kind.freeSql}),
       lease AS (
         INSERT INTO ${table} (${column}, holder, micros, expires_at, updated_at)
         SELECT id, $2,
                CASE WHEN micros >= $3::bigint
                     THEN LEAST(micros, $3::bigint + LEAST($5::bigint, (micros - $3::bigint) / 2))
                     ELSE 0 END,
                now() + $4::integer * interval '1 millisecond', now()
           FROM free
         ON CONFLICT (${column}, holder)
         DO UPDATE SET micros = GREATEST(${table}.micros, EXCLUDED.micros), expires_at = EXCLUDED.expires_at,
                       updated_at = now()
         RETURNING micros
       )
       SELECT lease.micros::text AS micros, free.micros::text AS free, free.held::text AS held, free.info
         FROM lease, free`;
    // Another process is short of what this one holds: give back what is not promised.
    bus.on(kind.shrinkTopic, (accountId) => this.giveBackUnpromised(accountId));
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
   * Reserves `worstMicros` of the account for one request.
   * @throws AppError `kind.refusal` when what is not promised to other in-flight requests, in every
   *   process, does not cover it; the database's error when the lease cannot be read.
   */
  async reserve(accountId: string, worstMicros: bigint): Promise<CreditReservation> {
    if (worstMicros <= 0n) return FREE;
    const t = this.account(accountId);
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
      if (last?.missing && this.kind.missing === "unlimited") return FREE;
      // Short because other processes hold leases: ask them to give back what they have not
      // promised (NOTIFY), then try again a few times before refusing.
      if (last && last.heldByOthers > 0n && tries <= SHRINK_RETRY_DELAYS_MS.length) {
        if (tries === 1) await this.bus.publish(this.kind.shrinkTopic, accountId, this.ds).catch(() => undefined);
        await new Promise((r) => setTimeout(r, SHRINK_RETRY_DELAYS_MS[tries - 1]));
      } else if (last) {
        const free = last.free > t.promised ? last.free - t.promised : 0n;
        const available = free > t.leased - t.promised ? free : t.leased - t.promised;
        throw this.kind.refusal(accountId, worstMicros, available, last.info);
      }
      await this.serialised(t, async () => {
        last = await this.acquire(accountId, t, worstMicros);
      });
      tries++;
    }
  }

  /** Gives back, now, the part of this holder's lease of `accountId` that no request here has promised. */
  giveBackUnpromised(accountId: string): void {
    const t = this.accounts.get(accountId);
    if (t && !t.busy && t.leased > t.promised) void this.serialised(t, () => this.shrink(accountId, t)).catch(() => {});
  }

  /** Stops the background work and gives back every lease of this holder. */
  async close(): Promise<void> {
    if (this.timer) clearInterval(this.timer);
    await this.ticking;
    await Promise.allSettled([...this.accounts.values()].map((t) => t.busy));
    this.accounts.clear();
    await this.ds
      .query(`DELETE FROM ${this.kind.table} WHERE holder = $1`, [this.holder])
      .catch((err: unknown) => this.logger.warn({ err, table: this.kind.table }, "could not release leases"));
  }

  private account(accountId: string): AccountLease {
    let t = this.accounts.get(accountId);
    if (!t) {
      t = { leased: 0n, promised: 0n, idleSince: Date.now(), charged: 0n };
      this.accounts.set(accountId, t);
    }
    return t;
  }

  private hold(t: AccountLease, micros: bigint): CreditReservation {
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

  /** Runs one lease operation of an account at a time. */
  private async serialised(t: AccountLease, op: () => Promise<void>): Promise<void> {
    const run = op();
    t.busy = run;
    try {
      await run;
    } finally {
      if (t.busy === run) t.busy = undefined;
    }
  }

  /**
   * Sets this holder's lease to what the request and headroom need when the free amount covers
   * the need; otherwise leaves the lease as it is (a refused request takes nothing from others).
   */
  private async acquire(accountId: string, t: AccountLease, worstMicros: bigint): Promise<LeaseView> {
    this.stats.acquires++;
    const need = t.promised + worstMicros;
    const headroom = worstMicros * BigInt(this.opts.headroomRequests);
    const chargedBefore = t.charged;
    const view = await this.ds.transaction(async (em): Promise<LeaseView> => {
      await em.query(this.kind.lockSql, [accountId]);
      // A new statement, so a fresh snapshot: every lease committed before the lock is seen.
      const rows = await queryRows<{
        micros: string;
        free: string;
        held: string;
        info: Record<string, unknown> | null;
      }>(em, this.acquireSql, [accountId, this.holder, need.toString(), this.opts.ttlMs, headroom.toString()]);
      const row = rows[0];
      return row
        ? {
            lease: BigInt(row.micros),
            free: BigInt(row.free),
            heldByOthers: BigInt(row.held),
            info: row.info,
            missing: false,
          }
        : { lease: 0n, free: 0n, heldByOthers: 0n, info: null, missing: true };
    });
    // Charges settled during the round trip may have committed after the acquire's snapshot (the
    // flush waits on the account's lock, then its answer can be handled before this one): take
    // them off again. When they had committed before, they are taken off twice — an under-count,
    // which refuses rather than overspends (module header). Assigning `view.lease` alone let the
    // lease count credit already charged, and the flush then capped another process's charge
    // at the balance (CI, session 7; test/ledger-concurrency.test.ts reproduces it with a delay).
    const chargedDuring = t.charged - chargedBefore;
    t.leased = view.lease > chargedDuring ? view.lease - chargedDuring : 0n;
    return view;
  }

  /** Gives back the part of this holder's lease that no request of this process has promised. */
  private async shrink(accountId: string, t: AccountLease): Promise<void> {
    const keep = t.promised;
    if (t.leased > keep) t.leased = keep; // before the round trip, as in `release`
    this.stats.releases++;
    await this.ds.query(
      `UPDATE ${this.kind.table} SET micros = LEAST(micros, $3::bigint), updated_at = now()
        WHERE ${this.kind.column} = $1 AND holder = $2`,
      [accountId, this.holder, keep.toString()],
    );
  }

  /** Gives back idle leases, renews the others, and now and then sweeps long-expired rows. */
  private async tick(): Promise<void> {
    const now = Date.now();
    const renew: string[] = [];
    const releases: Array<Promise<void>> = [];
    for (const [accountId, t] of this.accounts) {
      if (t.busy) continue;
      const idle = t.promised === 0n && t.idleSince !== null && now - t.idleSince >= this.opts.idleReleaseMs;
      // Forgotten only when nothing refers to it: no operation under way (a waiting request
      // would be waiting on one), nothing leased, nothing promised.
      if (idle && t.leased === 0n) this.accounts.delete(accountId);
      else if (idle) releases.push(this.serialised(t, () => this.release(accountId, t)));
      else if (t.leased > 0n) renew.push(accountId);
    }
    try {
      await Promise.all(releases);
      if (renew.length > 0 && now - this.lastRenew >= this.opts.renewEveryMs) {
        this.lastRenew = now;
        this.stats.renewals++;
        await this.ds.query(
          `UPDATE ${this.kind.table} SET expires_at = now() + $3::integer * interval '1 millisecond'
            WHERE holder = $1 AND ${this.kind.column} = ANY($2::uuid[])`,
          [this.holder, renew, this.opts.ttlMs],
        );
      }
      if (now - this.lastSweep >= 60_000) {
        this.lastSweep = now;
        await this.ds.query(`DELETE FROM ${this.kind.table} WHERE expires_at < now() - interval '10 minutes'`);
      }
    } catch (err) {
      this.logger.warn(
        { err: { code: (err as { code?: string }).code }, table: this.kind.table },
        "lease upkeep failed",
      );
    }
  }

  private async release(accountId: string, t: AccountLease): Promise<void> {
    if (t.promised !== 0n) return;
    this.stats.releases++;
    // Before the round trip: a request arriving meanwhile must not reserve from the lease being
    // deleted; it waits for this operation and acquires anew.
    t.leased = 0n;
    await this.ds.query(`DELETE FROM ${this.kind.table} WHERE ${this.kind.column} = $1 AND holder = $2`, [
      accountId,
      this.holder,
    ]);
  }
}
