/**
 * Requests in flight in the activity list (DESIGN §3: activity `status` ∈ `pending`, `running`,
 * `completed`, `failed`, `cancelled`; issue 10, finding 6 of its review).
 *
 * A request's activity row is written by the group commit when it ends (`MeteringService`), with
 * its usage and charge. A request still in flight `afterMs` after its admission (default 1 s;
 * config `SWITCHYARD_ACTIVITY_IN_FLIGHT_AFTER_MS`) gets its row early: `pending` while it waits
 * for an engine slot, `running` once generation or scoring starts (a decision waits for a
 * scoring context; an embedding has no start signal: `running` from admission). Its terminal
 * record then updates that row in the flush (`ON CONFLICT … WHERE status IN ('pending',
 * 'running')`), so it is charged exactly once.
 * Requests that end sooner — most of them — cost nothing more: the hot path keeps one write.
 *
 * Order never matters: an early row is inserted `ON CONFLICT DO NOTHING` (it never overwrites an
 * ended row), and raised from `pending` to `running` only while it is `pending`. A request that
 * ends without a record (refused with 400/402/429 after waiting in the queue) deletes the row it
 * wrote, after that write. Usage (`usage_daily`) counts only ended rows (migration 1764840000000).
 *
 * A background response has its `pending` row from its create (written in the create's
 * transaction through `inFlightInsert`): it may wait in the job queue for long.
 *
 * A process that dies leaves its rows in flight: `sweepStale` (worker processes, every 10 min)
 * ends rows older than `staleAfterMs` (default 6 h) as `failed` with no charge, except background
 * responses, whatever their state (their own reconciler records their end, with its completion
 * event and webhook; a runner still aborting after a cancel must find its row in flight).
 */
import type { Logger } from "pino";
import type { DataSource, EntityManager } from "typeorm";
import { queryRows } from "../../db/sql.js";
import { activityRow, type UsageRecord } from "./metering.service.js";

/** What one early row may say. */
export type InFlightStatus = "pending" | "running";

/** Handle on one request's early row; call `end` exactly once when the request is over. */
export interface InFlightMark {
  /** Generation started (slot taken): the row says `running` from now on. */
  running(): void;
  /**
   * The request is over. `recorded`: its terminal record was written (the row, if any, was
   * updated by it); otherwise a row this mark inserted is deleted.
   * @returns once that delete is done (at once when there is none), or after `END_WAIT_MS` at
   *   the most: a refusal awaits it before it is answered, so a request answered 4xx or 503 does
   *   not show in the activity list afterwards, unless the database is that slow.
   */
  end(recorded: boolean): Promise<void>;
}

export interface InFlightOptions {
  /** A request still in flight this long after admission gets its row, ms (0: at once). */
  afterMs: number;
  /** Rows in flight older than this are ended as failed by `sweepStale`, ms. */
  staleAfterMs: number;
  /** How often worker processes sweep, ms. */
  sweepEveryMs: number;
}

/** Longest a refusal waits for its early row's delete before it is answered, ms. */
export const END_WAIT_MS = 2_000;

const DEFAULTS: InFlightOptions = { afterMs: 1000, staleAfterMs: 6 * 3_600_000, sweepEveryMs: 600_000 };

/**
 * The statement that writes early rows: inserts each (`jsonb_to_recordset` of `activityRow`s with
 * zero usage), or raises an existing `pending` row to `running`; never touches an ended row.
 * Request bodies of zero-data-retention teams are not stored (as in the group commit).
 * @returns per id whether this statement inserted the row.
 */
export async function inFlightInsert(
  db: DataSource | EntityManager,
  records: UsageRecord[],
): Promise<Map<string, boolean>> {
  const rows = await queryRows<{ id: string; inserted: boolean }>(
    db,
    `INSERT INTO activity AS a (id, team_id, user_id, api_key_id, api_key_name, api_key_prefix, type, status, endpoint,
                               model, custom_id, stream_id, batch_id, prompt_tokens, completion_tokens, total_tokens,
                               cached_prompt_tokens, cost_micros, body_json, created_at, completed_at, service_tier)
     SELECT x.id, x.team_id, x.user_id, x.api_key_id, x.api_key_name, x.api_key_prefix, x.type, x.status, x.endpoint,
            x.model, x.custom_id, x.stream_id, x.batch_id, 0, 0, 0, 0, 0,
            CASE WHEN t.zero_data_retention_enabled THEN NULL ELSE x.body_json END, x.created_at, NULL, x.service_tier
       FROM jsonb_to_recordset($1::jsonb) AS x(
              id uuid, team_id uuid, user_id uuid, api_key_id uuid, api_key_name text, api_key_prefix text, type text,
              status text, endpoint text, model text, custom_id text, stream_id uuid, batch_id uuid, body_json jsonb,
              created_at timestamptz, service_tier text)
       JOIN teams t ON t.id = x.team_id
      ORDER BY x.id
     ON CONFLICT (id) DO UPDATE SET status = 'running'
      WHERE a.status = 'pending' AND EXCLUDED.status = 'running' AND a.team_id = EXCLUDED.team_id
     RETURNING a.id::text AS id, (xmax = 0) AS inserted`,
    [JSON.stringify(records.map((r) => activityRow(r)))],
  );
  return new Map(rows.map((r) => [r.id, r.inserted]));
}

/** Writes early rows for requests in flight and sweeps the ones dead processes left (module header). */
export class InFlightActivity {
  private readonly opts: InFlightOptions;
  private timer?: NodeJS.Timeout;
  /** Writes under way, so `close` can wait for them. */
  private readonly writes = new Set<Promise<unknown>>();
  /** Early rows written, raised and deleted, for tests and metrics. */
  readonly stats = { written: 0, deleted: 0, swept: 0 };

  constructor(
    private readonly ds: DataSource,
    private readonly logger: Logger,
    opts: Partial<InFlightOptions> = {},
  ) {
    this.opts = { ...DEFAULTS, ...opts };
  }

  /**
   * Starts tracking a request admitted now. `record` is the request's record as it would be
   * written with no usage yet (id, principal, type, endpoint, model, labels, body, created_at), or
   * a function that builds it: called only when the row is written (most requests end first).
   */
  track(record: UsageRecord | (() => UsageRecord), status: InFlightStatus): InFlightMark {
    let built: UsageRecord | undefined = typeof record === "function" ? undefined : record;
    const recordNow = (): UsageRecord => (built ??= (record as () => UsageRecord)());
    let current: InFlightStatus = status;
    let written: InFlightStatus | null = null;
    let inserted = false;
    let ended = false;
    // Every write of one request runs after the previous one: a delete never overtakes its insert.
    let chain: Promise<void> = Promise.resolve();
    const enqueue = (op: () => Promise<void>): Promise<void> => {
      const run = chain.then(op).catch((err: unknown) => {
        this.logger.warn({ err, request_id: recordNow().id }, "could not write the in-flight activity row");
      });
      chain = run;
      this.writes.add(run);
      void run.finally(() => this.writes.delete(run));
      return run;
    };
    const write = () => {
      if (ended || written === current) return;
      const next = current;
      written = next;
      enqueue(async () => {
        const result = await inFlightInsert(this.ds, [{ ...recordNow(), status: next, completedAt: null }]);
        if (result.get(recordNow().id)) inserted = true;
        this.stats.written++;
      });
    };
    const timer = setTimeout(write, this.opts.afterMs);
    timer.unref();
    return {
      running: () => {
        current = "running";
        if (written !== null) write(); // raise the row already written; otherwise the timer writes `running`
      },
      end: async (recorded) => {
        if (ended) return;
        ended = true;
        clearTimeout(timer);
        if (recorded || written === null) return;
        const deleted = enqueue(async () => {
          if (!inserted) return;
          await this.ds.query(`DELETE FROM activity WHERE id = $1 AND status IN ('pending', 'running')`, [
            recordNow().id,
          ]);
          this.stats.deleted++;
        });
        // A slow or locked database must not hold a load-shedding answer (429, 402) for long:
        // past END_WAIT_MS the answer goes and the delete finishes on its own (or the sweep ends
        // the row).
        let timeout: NodeJS.Timeout | undefined;
        await Promise.race([deleted, new Promise<void>((r) => (timeout = setTimeout(r, END_WAIT_MS).unref()))]);
        clearTimeout(timeout);
      },
    };
  }

  /** Sweeps now and every `sweepEveryMs` (worker processes); the timer keeps no process alive. */
  start(): void {
    const run = () =>
      void this.sweepStale().catch((err: unknown) => this.logger.warn({ err }, "in-flight activity sweep failed"));
    run();
    this.timer = setInterval(run, this.opts.sweepEveryMs).unref();
  }

  /** Stops the sweep and waits for the early-row writes under way. */
  async close(): Promise<void> {
    clearInterval(this.timer);
    await Promise.allSettled([...this.writes]);
  }

  /**
   * Ends rows in flight for longer than `staleAfterMs` whose process is gone: `failed`, no usage,
   * no charge, `error.code` `server_error`. Background responses (any state) are left to
   * their reconciler (`BackgroundResponsesService`), which records their end.
   * @returns how many rows were ended.
   */
  async sweepStale(): Promise<number> {
    const rows = await queryRows<{ n: number }>(
      this.ds,
      `WITH stale AS (
         SELECT a.id FROM activity a
          WHERE a.status IN ('pending', 'running')
            AND a.created_at < now() - $1::integer * interval '1 millisecond'
            -- Background responses are their reconciler's (it records their end, with event and
            -- webhook, even after a cancel or deadline that found a live runner).
            AND NOT EXISTS (SELECT FROM responses r WHERE r.id = a.id AND r.background)
          ORDER BY a.created_at
          LIMIT 5000
            FOR UPDATE SKIP LOCKED
       ),
       ended AS (
         UPDATE activity a SET status = 'failed', completed_at = now(),
                error_json = jsonb_build_object('code', 'server_error',
                  'message', 'The server that ran this request stopped before it ended; it was not charged')
           FROM stale WHERE a.id = stale.id AND a.status IN ('pending', 'running')
         RETURNING 1
       )
       SELECT count(*)::int AS n FROM ended`,
      [this.opts.staleAfterMs],
    );
    const n = rows[0]?.n ?? 0;
    this.stats.swept += n;
    if (n > 0) this.logger.warn({ rows: n }, "ended in-flight activity rows left by a process that stopped");
    return n;
  }
}
