/**
 * Batches, the worker side (issue 7, items 2, 5–7, 9): runs a batch's items through
 * `runBatchItem` (the synchronous endpoints' path), a bounded number at once per process.
 *
 * Exactly once: an item's activity id (`request_id`) is fixed at create, and the activity record
 * (written with its charge by the metering group commit, `ON CONFLICT DO NOTHING`) is the truth an
 * item row is finalised from. A runner that dies leaves items `running`; whoever claims the batch
 * next finalises those whose activity exists and puts the rest back to `pending` — so no item is
 * charged or given a result twice, and none is lost.
 *
 * Who runs a batch: the `batch-run` job (one queued and one active per batch) claims it (`runner`
 * = this process, heartbeat every 2 s); a runner silent for 10 s is replaced: every worker's
 * reconciler re-sends the job of such batches, and expires batches whose window passed.
 *
 * Scheduling policy (DESIGN §3 Batches, issue 7 item 2): a worker process has at most
 * `concurrency` items at once in the engine across all its batches (default: engine sequences − 1,
 * so one slot stays for interactive requests), and in the engine's slot queue a batch item waits
 * behind every interactive request. An item refused for capacity (429) goes back to `pending` and
 * is retried. An item gives its slot back as soon as its engine work succeeded, not after its
 * record and row are written (issue 30, Targets: the next item's engine work overlaps them).
 */
import { randomUUID } from "node:crypto";
import type { Logger } from "pino";
import type { DataSource } from "typeorm";
import { queryRows } from "../../db/sql.js";
import { AppError, ErrorCode } from "../../shared/errors.js";
import type { JobSender } from "../platform/job-queue.port.js";
import type { CacheBus } from "../platform/cache-bus.js";
import type { Principal } from "../platform/context.js";
import type { FailureRecord } from "../inference/inference-calls.js";
import type { InferenceService } from "../inference/inference.service.js";
import type { ModelCatalogService } from "../models/model-catalog.service.js";
import { type BatchItemUrl, runBatchItem } from "./batch-operations.js";
import { BATCH_JOB_EXPIRE_S, type BatchesService } from "./batches.service.js";

/** Heartbeat and reconcile period of a worker process, ms. */
export const BATCH_HEARTBEAT_MS = 2_000;
/** A batch runner silent this long is taken for dead, seconds. */
export const BATCH_RUNNER_STALE_S = 10;
/** A progress line per running batch this often, ms. */
const PROGRESS_LOG_MS = 10_000;
/** Pause before an item refused for capacity is offered again, ms. */
const RETRY_PAUSE_MS = 1_000;

export interface BatchRunnerOptions {
  /** Items run at once by this process, across its batches. */
  concurrency: number;
}

interface RunningBatch {
  batchId: string;
  principal: Principal;
  total: number;
  /** Items this runner finished. */
  done: number;
  startedAt: number;
  lastLog: number;
  /** Items in flight here, by index. */
  controllers: Map<number, AbortController>;
  /** Set when another process took the batch over (this one was silent too long): claim no more. */
  lost: boolean;
}

interface ClaimedItem {
  idx: number;
  request_id: string;
  custom_id: string | null;
  url: BatchItemUrl;
  body_json: Record<string, unknown>;
}

/** A FIFO counting semaphore. */
class Slots {
  private free: number;
  private readonly waiters: Array<() => void> = [];
  constructor(size: number) {
    this.free = size;
  }
  /** Takes a free slot without waiting; false when none is free. */
  tryAcquire(): boolean {
    if (this.free === 0) return false;
    this.free--;
    return true;
  }
  async acquire(): Promise<void> {
    if (this.free > 0) {
      this.free--;
      return;
    }
    await new Promise<void>((resolve) => this.waiters.push(resolve));
  }
  release(): void {
    const next = this.waiters.shift();
    if (next) next();
    else this.free++;
  }
}

/** Runs batches in a worker process: the `batch-run` handler, heartbeats, reconciling. One per process. */
export class BatchRunner {
  /** This process as a runner of batches. */
  readonly holder = randomUUID();
  private readonly running = new Map<string, RunningBatch>();
  private readonly slots: Slots;
  private ticker?: NodeJS.Timeout;
  private stopping = false;
  private ticks = 0;

  constructor(
    private readonly ds: DataSource,
    private readonly inference: InferenceService,
    private readonly catalog: ModelCatalogService,
    private readonly batches: BatchesService,
    private readonly jobs: JobSender,
    bus: CacheBus,
    private readonly logger: Logger,
    opts: BatchRunnerOptions,
  ) {
    this.slots = new Slots(opts.concurrency);
    // An expired batch's running items are aborted wherever they run (issue 7, item 5).
    bus.on("batch-abort", (batchId) => {
      const batch = this.running.get(batchId);
      if (!batch) return;
      for (const c of batch.controllers.values()) {
        c.abort(new AppError(ErrorCode.ClientClosed, "The batch ended"));
      }
    });
  }

  /**
   * The `batch-run` job: claims the batch (unless a live runner has it, or it ended), finalises
   * what a dead runner left, runs every pending item, and ends the batch when none is left.
   * @throws when the database fails (the queue retries; the claim lapses after 10 s).
   */
  async run(batchId: string): Promise<void> {
    if (this.running.has(batchId) || this.stopping) return;
    const [claimed] = await queryRows<{
      was: string;
      principal_json: Principal;
      request_count: number;
      overdue: boolean;
    }>(
      this.ds,
      `WITH before AS (SELECT id, status FROM batches WHERE id = $1 FOR NO KEY UPDATE)
       UPDATE batches b SET runner = $2, runner_seen_at = now(), updated_at = now(),
                            status = CASE WHEN b.status = 'pending' THEN 'running' ELSE b.status END
         FROM before
        WHERE b.id = before.id AND b.status IN ('pending', 'running')
          AND (b.runner IS NULL OR b.runner = $2 OR b.runner_seen_at < now() - make_interval(secs => $3))
        RETURNING before.status AS was, b.principal_json, b.request_count, b.expires_at <= now() AS overdue`,
      [batchId, this.holder, BATCH_RUNNER_STALE_S],
    );
    if (!claimed) return;
    if (claimed.overdue) {
      await this.batches.expire(batchId);
      return;
    }
    if (claimed.was === "pending") {
      this.logger.info({ batchId, status: "running", items: claimed.request_count }, "batch state changed");
    }
    const batch: RunningBatch = {
      batchId,
      principal: claimed.principal_json,
      total: claimed.request_count,
      done: 0,
      startedAt: Date.now(),
      lastLog: Date.now(),
      controllers: new Map(),
      lost: false,
    };
    this.running.set(batchId, batch);
    const inFlight = new Set<Promise<void>>();
    try {
      for (;;) {
        // Items another runner left `running` (it died, or was silent for too long).
        await this.recover(batchId);
        while (!this.stopping && !batch.lost) {
          // One slot, plus every other slot free now: their items are claimed in one round trip
          // (claiming one at a time, the claims' latency, not the engine, bounded a batch's pace).
          await this.slots.acquire();
          let slots = 1;
          while (this.slots.tryAcquire()) slots++;
          let items: ClaimedItem[] = [];
          try {
            items = this.stopping || batch.lost ? [] : await this.claimItems(batchId, slots);
          } catch (err) {
            for (let i = 0; i < slots; i++) this.slots.release();
            throw err;
          }
          for (let i = items.length; i < slots; i++) this.slots.release();
          if (items.length === 0) break;
          for (const item of items) {
            const p: Promise<void> = this.runItem(batch, item).finally(() => {
              inFlight.delete(p);
            });
            inFlight.add(p);
          }
        }
        await Promise.all(inFlight);
        if (this.stopping || batch.lost) break;
        // Items put back for a retry (429, credit promised to sibling items) are claimed again;
        // items another runner still holds are waited for; otherwise the batch ends here.
        const open = await this.openItems(batchId);
        if (open.pending === 0 && open.running === 0) break;
        if (open.pending === 0) await new Promise((r) => setTimeout(r, BATCH_HEARTBEAT_MS));
      }
      if (!this.stopping && !batch.lost) await this.finish(batch);
    } finally {
      // Never leave items in flight behind (a database error above): they finish and are recorded.
      await Promise.allSettled(inFlight);
      this.running.delete(batchId);
      await this.ds
        .query(`UPDATE batches SET runner = NULL WHERE id = $1 AND runner = $2`, [batchId, this.holder])
        .catch(() => undefined);
    }
  }

  /**
   * Items another runner left `running`: finalised from their activity record when it exists,
   * else put back to `pending` once nobody has touched them for `BATCH_RUNNER_STALE_S` (a live
   * runner refreshes `started_at` of its items with every heartbeat).
   */
  private async recover(batchId: string): Promise<void> {
    await this.finalizeFromActivity(batchId, null);
    await this.ds.query(
      `UPDATE batch_items SET status = 'pending', started_at = NULL
        WHERE batch_id = $1 AND status = 'running' AND started_at < now() - make_interval(secs => $2)`,
      [batchId, BATCH_RUNNER_STALE_S],
    );
  }

  /**
   * Claims the next `limit` pending items in input order while the batch is running and still
   * this runner's; [] when none. The batch row is locked (shared) before the items, in the order a
   * cancel takes them, so a claim either sees the cancel or finishes before it.
   */
  private async claimItems(batchId: string, limit: number): Promise<ClaimedItem[]> {
    const items = await queryRows<ClaimedItem>(
      this.ds,
      `WITH batch AS (
         SELECT id FROM batches WHERE id = $1 AND status = 'running' AND runner = $2 FOR SHARE
       ),
       next AS (
         SELECT batch_id, idx FROM batch_items
          WHERE batch_id = (SELECT id FROM batch) AND status = 'pending'
          ORDER BY idx LIMIT $3 FOR UPDATE SKIP LOCKED
       )
       UPDATE batch_items i SET status = 'running', started_at = now()
         FROM next WHERE i.batch_id = next.batch_id AND i.idx = next.idx
       RETURNING i.idx, i.request_id, i.custom_id, i.url, i.body_json`,
      [batchId, this.holder, limit],
    );
    return items.sort((a, b) => a.idx - b.idx);
  }

  /** Unfinished items of a running batch (none once it ended). */
  private async openItems(batchId: string): Promise<{ pending: number; running: number }> {
    const [row] = await queryRows<{ pending: number; running: number }>(
      this.ds,
      `SELECT count(*) FILTER (WHERE status = 'pending')::int AS pending,
              count(*) FILTER (WHERE status = 'running')::int AS running
         FROM batch_items
        WHERE batch_id = $1 AND status IN ('pending', 'running')
          AND EXISTS (SELECT FROM batches WHERE id = $1 AND status = 'running')`,
      [batchId],
    );
    return row ?? { pending: 0, running: 0 };
  }

  /**
   * Runs one claimed item and finalises its row; holds one of this process's slots until its
   * engine work succeeded (then its record and row are written while the next item runs), or until
   * it ends otherwise (a retry's pause included).
   */
  private async runItem(batch: RunningBatch, item: ClaimedItem): Promise<void> {
    let slotHeld = true;
    const releaseSlot = () => {
      if (!slotHeld) return;
      slotHeld = false;
      this.slots.release();
    };
    const controller = new AbortController();
    batch.controllers.set(item.idx, controller);
    let retry = false;
    try {
      await runBatchItem(
        this.inference,
        this.catalog,
        { requestId: randomUUID(), principal: batch.principal },
        {
          requestId: item.request_id,
          batchId: batch.batchId,
          customId: item.custom_id,
          url: item.url,
          body: item.body_json,
        },
        controller.signal,
        (err): FailureRecord | null =>
          isRetryable(err) || creditPromisedToSiblings(err, batch)
            ? null
            : { status: "failed", errorJson: errorJson(err) },
        releaseSlot,
      );
      await this.finalizeFromActivity(batch.batchId, [item.idx]);
    } catch (err) {
      if (isRetryable(err) || creditPromisedToSiblings(err, batch)) {
        // Capacity (429), credit held by this batch's other items in flight, or an abort before
        // the engine started: nothing was recorded. An expired batch's items were ended already;
        // anything else runs again.
        retry = !controller.signal.aborted;
      } else {
        // The failure was recorded through onFailure (then the row follows its activity), or was
        // thrown before any record (e.g. the stored body's model left the catalog).
        this.logger.debug({ err, batchId: batch.batchId, idx: item.idx }, "batch item failed");
        const finalized = await this.finalizeFromActivity(batch.batchId, [item.idx]).catch(() => 0);
        if (finalized === 0) await this.failItem(batch.batchId, item.idx, errorJson(err)).catch(() => undefined);
      }
    } finally {
      batch.controllers.delete(item.idx);
      batch.done++;
      if (retry) {
        batch.done--;
        await new Promise((resolve) => setTimeout(resolve, RETRY_PAUSE_MS));
        await this.ds
          .query(
            `UPDATE batch_items SET status = 'pending', started_at = NULL
              WHERE batch_id = $1 AND idx = $2 AND status = 'running'`,
            [batch.batchId, item.idx],
          )
          .catch(() => undefined);
      }
      releaseSlot();
    }
  }

  /**
   * Copies the outcome of items (all `running` ones when `idxs` is null) from their activity
   * records: status, result, error. Only rows still `running` change (a cancel or expiry that
   * ended an item first keeps its end).
   * @returns how many rows changed.
   */
  private async finalizeFromActivity(batchId: string, idxs: number[] | null): Promise<number> {
    return finalizeItems(this.ds, batchId, idxs);
  }

  private async failItem(batchId: string, idx: number, error: unknown): Promise<void> {
    await this.ds.query(
      `WITH ended AS (
         UPDATE batch_items SET status = 'failed', error_json = $3::jsonb, completed_at = now()
          WHERE batch_id = $1 AND idx = $2 AND status = 'running'
          RETURNING batch_id
       )
       UPDATE batches SET updated_at = now() WHERE id IN (SELECT batch_id FROM ended)`,
      [batchId, idx, JSON.stringify(error)],
    );
  }

  /** Ends a running batch whose items have all ended: `completed` if any completed, else `failed`. */
  private async finish(batch: RunningBatch): Promise<void> {
    const [row] = await queryRows<{ status: string }>(
      this.ds,
      `UPDATE batches b
          SET status = CASE WHEN EXISTS (SELECT FROM batch_items WHERE batch_id = b.id AND status = 'completed')
                            THEN 'completed' ELSE 'failed' END,
              completed_at = now(), updated_at = now(), runner = NULL
        WHERE id = $1 AND status = 'running'
          AND NOT EXISTS (SELECT FROM batch_items WHERE batch_id = $1 AND status IN ('pending', 'running'))
        RETURNING status`,
      [batch.batchId],
    );
    if (row) {
      const seconds = (Date.now() - batch.startedAt) / 1000;
      this.logger.info(
        {
          batchId: batch.batchId,
          status: row.status,
          items: batch.total,
          ranHere: batch.done,
          seconds: Math.round(seconds * 10) / 10,
        },
        "batch state changed",
      );
    }
  }

  /** Starts heartbeats, progress lines and the reconciler (worker processes). */
  start(): void {
    this.ticker = setInterval(() => void this.tick(), BATCH_HEARTBEAT_MS);
    this.ticker.unref();
  }

  /**
   * Stops claiming items, waits for the items in flight here (they finish and are recorded), and
   * gives the batches up so another process takes them at once.
   */
  async stop(): Promise<void> {
    this.stopping = true;
    clearInterval(this.ticker);
    const deadline = Date.now() + 30_000;
    while (this.running.size > 0 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50));
    await this.ds.query(`UPDATE batches SET runner = NULL WHERE runner = $1`, [this.holder]).catch(() => undefined);
  }

  private async tick(): Promise<void> {
    try {
      const ids = [...this.running.keys()];
      if (ids.length > 0) {
        const kept = await queryRows<{ id: string }>(
          this.ds,
          `UPDATE batches SET runner_seen_at = now() WHERE runner = $1 AND id = ANY($2::uuid[]) RETURNING id`,
          [this.holder, ids],
        );
        const ours = new Set(kept.map((r) => r.id));
        for (const id of ids) {
          const b = this.running.get(id);
          // Taken over (this process was silent too long) or ended: claim nothing more.
          if (b && !ours.has(id) && !b.lost) {
            b.lost = true;
            this.logger.warn({ batchId: id }, "batch no longer run by this process; finishing the items in flight");
          }
        }
        // The items in flight here are alive: a new runner leaves them alone.
        const items = [...this.running.values()].flatMap((b) =>
          [...b.controllers.keys()].map((idx) => [b.batchId, idx]),
        );
        if (items.length > 0) {
          await this.ds.query(
            `UPDATE batch_items i SET started_at = now()
               FROM jsonb_to_recordset($1::jsonb) AS x(batch_id uuid, idx int)
              WHERE i.batch_id = x.batch_id AND i.idx = x.idx AND i.status = 'running'`,
            [JSON.stringify(items.map(([batchId, idx]) => ({ batch_id: batchId, idx })))],
          );
        }
      }
      await this.logProgress();
      // Reconcile every other tick (4 s): expire overdue batches, re-send the run job of batches
      // nobody runs (a runner died, or the job was lost).
      if (this.ticks++ % 2 === 0) await this.reconcile();
    } catch (err) {
      this.logger.warn({ err }, "batch heartbeat failed");
    }
  }

  /** A progress line per running batch every 10 s: items ended / total (from the database, so a takeover counts what others did), and this runner's items/s. */
  private async logProgress(): Promise<void> {
    const now = Date.now();
    const due = [...this.running.values()].filter((b) => now - b.lastLog >= PROGRESS_LOG_MS);
    if (due.length === 0) return;
    const rows = await queryRows<{ batch_id: string; ended: number }>(
      this.ds,
      `SELECT batch_id, count(*) FILTER (WHERE status IN ('completed', 'failed', 'cancelled'))::int AS ended
         FROM batch_items WHERE batch_id = ANY($1::uuid[]) GROUP BY 1`,
      [due.map((b) => b.batchId)],
    );
    const ended = new Map(rows.map((r) => [r.batch_id, r.ended]));
    for (const b of due) {
      b.lastLog = now;
      const seconds = (now - b.startedAt) / 1000;
      this.logger.info(
        {
          batchId: b.batchId,
          done: ended.get(b.batchId) ?? 0,
          total: b.total,
          running: b.controllers.size,
          ranHere: b.done,
          itemsPerS: Math.round((b.done / Math.max(seconds, 0.001)) * 10) / 10,
        },
        "batch progress",
      );
    }
  }

  private async reconcile(): Promise<void> {
    const overdue = await queryRows<{ id: string }>(
      this.ds,
      `SELECT id FROM batches WHERE status IN ('pending', 'running') AND expires_at <= now() LIMIT 100`,
    );
    for (const { id } of overdue) await this.batches.expire(id);
    const orphans = await queryRows<{ id: string }>(
      this.ds,
      `UPDATE batches SET nudged_at = now()
        WHERE id IN (
          SELECT id FROM batches
           WHERE created_at < now() - interval '5 seconds'
             AND (
               -- a runner that went silent (died), or a batch given up at a graceful stop: at once;
               (status = 'running' AND (runner IS NULL OR runner_seen_at < now() - make_interval(secs => $1))
                AND (nudged_at IS NULL OR nudged_at < now() - interval '30 seconds'))
               -- a pending batch whose job may be lost: its job normally waits for a free worker
               -- (re-sending it sooner would only pile up duplicates behind busy workers).
               OR (status = 'pending' AND created_at < now() - interval '5 minutes'
                   AND (nudged_at IS NULL OR nudged_at < now() - interval '5 minutes')))
           LIMIT 100)
        RETURNING id`,
      [BATCH_RUNNER_STALE_S],
    );
    // Items left `running` in batches that ended (cancelled or expired) after their runner died:
    // they end as their activity record says, else as the batch did.
    const stranded = await queryRows<{ batch_id: string; status: string }>(
      this.ds,
      `SELECT DISTINCT i.batch_id, b.status FROM batch_items i JOIN batches b ON b.id = i.batch_id
        WHERE i.status = 'running' AND i.started_at < now() - make_interval(secs => $1)
          AND b.status IN ('completed', 'failed', 'cancelled')
        LIMIT 100`,
      [BATCH_RUNNER_STALE_S],
    );
    for (const { batch_id: batchId, status } of stranded) {
      await finalizeItems(this.ds, batchId, null);
      await this.ds.query(
        `UPDATE batch_items SET status = $2, error_json = $3::jsonb, completed_at = now()
          WHERE batch_id = $1 AND status = 'running' AND started_at < now() - make_interval(secs => $4)`,
        [
          batchId,
          status === "cancelled" ? "cancelled" : "failed",
          status === "cancelled" ? null : JSON.stringify({ code: "expired", message: "The batch's window passed" }),
          BATCH_RUNNER_STALE_S,
        ],
      );
    }
    for (const { id } of orphans) {
      await this.jobs.send("batch-run", { batchId: id }, { retryLimit: 10, expireInSeconds: BATCH_JOB_EXPIRE_S });
    }
  }
}

/**
 * Copies the outcome of items (all `running` ones when `idxs` is null) from their ended activity
 * records — status, result, error — and moves the batch's `updated_at`. Only rows still `running`
 * change (a cancel or expiry that ended an item first keeps its end).
 * @returns how many rows changed.
 */
async function finalizeItems(db: DataSource, batchId: string, idxs: number[] | null): Promise<number> {
  const rows = await queryRows<{ idx: number }>(
    db,
    `WITH ended AS (
       UPDATE batch_items i
          SET status = CASE a.status WHEN 'completed' THEN 'completed' WHEN 'cancelled' THEN 'cancelled'
                                     ELSE 'failed' END,
              result_json = a.result_json, error_json = a.error_json, completed_at = COALESCE(a.completed_at, now())
         FROM activity a
        WHERE i.batch_id = $1 AND ($2::int[] IS NULL OR i.idx = ANY($2::int[])) AND i.status = 'running'
          AND a.id = i.request_id
          -- Only ended records: an item still in flight has an early row (services/metering/in-flight-activity.ts)
          -- and follows the stale-runner rule (back to pending), not this copy.
          AND a.status IN ('completed', 'failed', 'cancelled')
        RETURNING i.idx
     ),
     touched AS (
       UPDATE batches SET updated_at = now() WHERE id = $1 AND EXISTS (SELECT FROM ended)
     )
     SELECT idx FROM ended`,
    [batchId, idxs],
  );
  return rows.length;
}

/**
 * A 402 while other items of the same batch run here: their reservations hold the credit this one
 * needs, so it waits for them (issue 7, item 6: `insufficient_credit` only when the credit is
 * really gone when the item's turn comes).
 */
function creditPromisedToSiblings(err: unknown, batch: RunningBatch): boolean {
  return err instanceof AppError && err.code === ErrorCode.InsufficientCredit && batch.controllers.size > 1;
}

/** Failures that leave an item to run again: capacity (429), or an abort before any record. */
function isRetryable(err: unknown): boolean {
  return err instanceof AppError && (err.code === ErrorCode.RateLimited || err.code === ErrorCode.ClientClosed);
}

/** An item's `error_json`: `{code, message}` (`insufficient_credit`, `invalid_request`, engine codes …). */
function errorJson(err: unknown): { code: string; message: string } {
  if (err instanceof AppError) return { code: err.code, message: err.detail };
  return { code: ErrorCode.Internal, message: "Internal error" };
}
