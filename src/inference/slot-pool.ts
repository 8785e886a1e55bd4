/**
 * A fixed set of engine slots (context sequences, embedding contexts) handed out one request at a
 * time, with a FIFO wait queue bounded in time. Requests never share a slot, so concurrent work
 * cannot corrupt each other's state, and N slots serve N requests at once.
 */
import { AppError, ErrorCode } from "../shared/errors.js";

interface Waiter<T> {
  pick?: (free: T[]) => T;
  /** Batch work (served after interactive waiters, bounded by `lowWhileInteractive`). */
  low: boolean;
  resolve: (slot: T) => void;
  reject: (err: unknown) => void;
  timer: NodeJS.Timeout;
  signal?: AbortSignal;
  onAbort?: () => void;
}

/** How many slots a pool has, how many are free right now, and how many requests wait. */
export interface SlotPoolStats {
  size: number;
  available: number;
  waiting: number;
}

/** A pool of `T` slots with a FIFO, time-bounded, abortable wait (429 when the wait runs out). */
export class SlotPool<T> {
  private readonly free: T[];
  private readonly waiters: Waiter<T>[] = [];
  /** Batch work (issue 7): served only when no interactive request waits. */
  private readonly lowWaiters: Waiter<T>[] = [];
  /** Slots the pool was built with. */
  readonly size: number;
  /** Set by `close`: every later `acquire` is refused with it. */
  private closedWith?: unknown;
  /** Callers of `whenIdle` waiting for every slot to come back. */
  private idleWaiters: Array<() => void> = [];
  /** Slots held by batch work (`low` acquires). */
  private readonly lowHeld = new Set<T>();

  /** When an interactive request last took or gave back a slot (performance.now(), ms). */
  private lastInteractiveAt = Number.NEGATIVE_INFINITY;
  /** Wakes batch waiters when interactive traffic has been quiet for `quietMs`. */
  private quietTimer?: NodeJS.Timeout;

  /**
   * @param lowWhileInteractive most slots batch work may hold while interactive traffic is on
   *   (issue 12, item 3): while an interactive request holds a slot, or one took or gave one back
   *   less than `quietMs` ago. Batch items already running finish, but no more start until batch
   *   work is within the bound or the interactive traffic has been quiet that long. Unbounded by
   *   default. (Bounding only while an interactive request holds a slot did not help: on 2 cores
   *   the batch slowed interactive requests through the CPU its items' bookkeeping and database
   *   writes take, at its full rate, in every phase of the request — bench/NOTES.md.)
   * @param quietMs see `lowWhileInteractive`.
   */
  constructor(
    slots: T[],
    private readonly lowWhileInteractive = Number.POSITIVE_INFINITY,
    private readonly quietMs = 0,
  ) {
    this.free = [...slots];
    this.size = slots.length;
  }

  /** Slots not in use right now. */
  get available(): number {
    return this.free.length;
  }

  /** Requests waiting for a slot. */
  get waiting(): number {
    return this.waiters.length + this.lowWaiters.length;
  }

  /** A read-only snapshot of the counts above (observability and tests: issue 14, item 2). */
  stats(): SlotPoolStats {
    return { size: this.size, available: this.free.length, waiting: this.waiting };
  }

  /**
   * Takes a free slot (the one `pick` prefers, else the first), waiting up to `maxWaitMs`.
   * `low` (batch items, issue 7 item 2): waits behind every interactive request, so a freed slot
   * goes to an interactive waiter first; among each kind the wait is FIFO.
   * @throws AppError RateLimited (429, Retry-After 1 s) when none frees up in time;
   *   the signal's reason when `signal` aborts first.
   */
  acquire(maxWaitMs: number, pick?: (free: T[]) => T, signal?: AbortSignal, low = false): Promise<T> {
    if (this.closedWith !== undefined) return Promise.reject(this.closedWith);
    if (signal?.aborted) return Promise.reject(signal.reason);
    if (
      this.free.length > 0 &&
      this.waiters.length === 0 &&
      (!low || (this.lowWaiters.length === 0 && this.lowMayStart()))
    ) {
      return Promise.resolve(this.take(pick, low));
    }
    return new Promise<T>((resolve, reject) => {
      const waiter: Waiter<T> = {
        pick,
        low,
        resolve,
        reject,
        signal,
        timer: setTimeout(() => {
          this.drop(waiter);
          reject(
            new AppError(
              ErrorCode.RateLimited,
              `No engine capacity within ${Math.round(maxWaitMs / 1000)} s; retry later`,
              undefined,
              1,
            ),
          );
        }, maxWaitMs),
      };
      if (signal) {
        waiter.onAbort = () => {
          this.drop(waiter);
          reject(signal.reason);
        };
        signal.addEventListener("abort", waiter.onAbort, { once: true });
      }
      (low ? this.lowWaiters : this.waiters).push(waiter);
    });
  }

  /**
   * Returns a slot; the oldest interactive waiter gets it at once, else the oldest batch waiters
   * (as many as may start: the last interactive slot coming back can let several start).
   */
  release(slot: T): void {
    if (!this.lowHeld.delete(slot)) this.lastInteractiveAt = performance.now();
    this.free.push(slot);
    const next = this.waiters.shift();
    if (next) {
      this.cleanup(next);
      next.resolve(this.take(next.pick, false));
    }
    this.wakeLow();
    if (this.free.length === this.size && this.idleWaiters.length > 0) {
      for (const wake of this.idleWaiters.splice(0)) wake();
    }
  }

  /**
   * Takes no more work (a deleted deployment, issue 9): rejects every waiter and every later
   * `acquire` with `err`. Slots in use stay with their requests until released.
   */
  close(err: unknown): void {
    this.closedWith = err;
    this.rejectAll(err);
  }

  /** Resolves once every slot is back in the pool (at once when none is in use). */
  whenIdle(): Promise<void> {
    if (this.free.length === this.size) return Promise.resolve();
    return new Promise((resolve) => this.idleWaiters.push(resolve));
  }

  /** Rejects every waiter (shutdown). */
  rejectAll(err: unknown): void {
    for (const w of [...this.waiters.splice(0), ...this.lowWaiters.splice(0)]) {
      this.cleanup(w);
      w.reject(err);
    }
  }

  private take(pick: ((free: T[]) => T) | undefined, low: boolean): T {
    const chosen = pick ? pick(this.free) : this.free[0];
    this.free.splice(this.free.indexOf(chosen), 1);
    if (low) this.lowHeld.add(chosen);
    else this.lastInteractiveAt = performance.now();
    return chosen;
  }

  /**
   * Whether one more batch slot may be taken now (see `lowWhileInteractive`); when only the quiet
   * period stands in the way, a timer wakes the batch waiters at its end.
   */
  private lowMayStart(): boolean {
    if (this.lowHeld.size < this.lowWhileInteractive) return true;
    const interactiveHeld = this.size - this.free.length - this.lowHeld.size;
    if (interactiveHeld > 0) return false;
    const quietIn = this.lastInteractiveAt + this.quietMs - performance.now();
    if (quietIn <= 0) return true;
    if (!this.quietTimer && this.lowWaiters.length > 0) {
      this.quietTimer = setTimeout(() => {
        this.quietTimer = undefined;
        this.wakeLow();
      }, Math.ceil(quietIn));
      this.quietTimer.unref();
    }
    return false;
  }

  /** Starts the batch waiters that may start now (oldest first). */
  private wakeLow(): void {
    while (this.free.length > 0 && this.lowWaiters.length > 0 && this.lowMayStart()) {
      const low = this.lowWaiters.shift()!;
      this.cleanup(low);
      low.resolve(this.take(low.pick, true));
    }
  }

  private drop(waiter: Waiter<T>): void {
    for (const queue of [this.waiters, this.lowWaiters]) {
      const i = queue.indexOf(waiter);
      if (i >= 0) queue.splice(i, 1);
    }
    this.cleanup(waiter);
  }

  private cleanup(waiter: Waiter<T>): void {
    clearTimeout(waiter.timer);
    if (waiter.signal && waiter.onAbort) waiter.signal.removeEventListener("abort", waiter.onAbort);
  }
}
