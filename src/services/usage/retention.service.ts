/**
 * Retention of stored request bodies (issue 12, item 4): with `bodyRetentionDays` set (config
 * `SWITCHYARD_BODY_RETENTION_DAYS`), activity rows older than that many days lose their request
 * and result bodies (`body_json`, `result_json`: what the activity detail shows); their tokens,
 * costs, status and every aggregate stay. Unset (the default), bodies are kept.
 *
 * Runs in worker processes at start and every `intervalMs` (default 1 h), in batches of
 * `batchRows` rows, each its own short transaction, so it never holds locks the group commit
 * (which only inserts activity rows) waits for, and a large backlog is worked through without one
 * long statement. Several workers may run it at once: a batch touches rows that still hold bodies,
 * and clearing one twice changes nothing. Completion events have their own 30-day retention
 * (`CompletionEventsService`, also batched).
 */
import type { Logger } from "pino";
import type { DataSource } from "typeorm";
import { queryRows } from "../../db/sql.js";

export interface RetentionOptions {
  /** Days request bodies are kept; undefined = kept for good. */
  bodyRetentionDays?: number;
  /** How often to run, ms (default one hour). */
  intervalMs?: number;
  /** Rows cleared per transaction (default 5000). */
  batchRows?: number;
}

const HOUR_MS = 3_600_000;

/** Clears stored bodies past their retention (see the module header). */
export class RetentionService {
  private timer?: NodeJS.Timeout;
  private running?: Promise<number>;
  private stopped = false;

  constructor(
    private readonly ds: DataSource,
    private readonly logger: Logger,
    private readonly opts: RetentionOptions,
  ) {}

  /** Runs now and every `intervalMs` while bodies have a retention; the timer keeps no process alive. */
  start(): void {
    if (this.opts.bodyRetentionDays === undefined) return;
    const run = () =>
      void this.runOnce().catch((err: unknown) => this.logger.warn({ err }, "request body retention failed"));
    run();
    this.timer = setInterval(run, this.opts.intervalMs ?? HOUR_MS).unref();
  }

  /** Stops the timer and waits for a run in progress to finish its batch. */
  async stop(): Promise<void> {
    this.stopped = true;
    clearInterval(this.timer);
    await this.running?.catch(() => undefined);
  }

  /**
   * Clears the bodies of every activity row past the retention, batch by batch.
   * @returns how many rows were cleared (0 without a retention).
   * @throws the database's error (the rows cleared so far stay cleared).
   */
  runOnce(): Promise<number> {
    this.running ??= this.clearBodies().finally(() => (this.running = undefined));
    return this.running;
  }

  private async clearBodies(): Promise<number> {
    const days = this.opts.bodyRetentionDays;
    if (days === undefined) return 0;
    const batch = this.opts.batchRows ?? 5000;
    let cleared = 0;
    for (;;) {
      if (this.stopped) break;
      // The partial index `activity_bodies_created_idx` lists exactly the rows that hold bodies.
      const [row] = await queryRows<{ n: number }>(
        this.ds,
        `WITH due AS (
           SELECT id FROM activity
            WHERE created_at < now() - make_interval(days => $1)
              AND (body_json IS NOT NULL OR result_json IS NOT NULL)
            ORDER BY created_at
            LIMIT $2
            FOR UPDATE SKIP LOCKED
         ), cleared AS (
           UPDATE activity a SET body_json = NULL, result_json = NULL FROM due WHERE a.id = due.id RETURNING 1
         )
         SELECT count(*)::int AS n FROM cleared`,
        [days, batch],
      );
      cleared += row.n;
      if (row.n < batch) break;
    }
    if (cleared > 0) this.logger.info({ rows: cleared, days }, "request bodies past retention cleared");
    return cleared;
  }
}
