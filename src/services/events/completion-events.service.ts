/**
 * The completion events feed (issue 6, items 6 and 7; DESIGN §3 "Completion events feed"): one
 * event per finished inference request (every create operation: chat, responses, embeddings,
 * messages; status `completed` (`incomplete` for a Response cut at its token limit), `failed` or
 * `cancelled` — every request the metering group commit
 * records; refusals such as 400, 402 and 429 are never recorded, so make no event). The
 * `completion_events` row is written by the same group commit as the activity row
 * (`metering.service.ts`, CTE `events`), and tokens, cost, status, result and error are read from
 * that activity row, so they always equal it.
 *
 * Ordering — why `position`: `completion_id` is a UUIDv7 allocated before commit, and concurrent
 * flushes (of this or another process) can commit out of id order, so a cursor on ids could skip
 * an event that committed after a later one. Instead every flush takes a transaction-level
 * advisory lock (`EVENTS_POSITION_LOCK`) as the first step of its statement, draws its events'
 * positions from a sequence while holding it, and keeps it until commit: positions are handed out
 * in commit order, and every event committed later has a higher position than any a reader has
 * already seen (PostgreSQL makes a commit visible before it releases the transaction's locks,
 * and `nextval` ignores snapshots, so the next holder's positions are higher). The lock is taken
 * in a CTE that every row-locking part of the flush waits on (a one-time filter), so it always
 * comes before row locks and cannot deadlock with them; being in the same statement, the flush
 * stays one round trip. The feed orders by `position`; a `completion_id` cursor is mapped to its
 * position. The cost: flushes are serialised across the database (each flush batches many
 * requests, so this is one short critical section per batch, not per request). Holding back
 * unsafe events instead (by transaction ids and snapshots) was the alternative; it needs no lock
 * but delays every reader behind the oldest open transaction of the whole database.
 *
 * Cursors: `starting_after` / `ending_before` must be an event of the caller's team still in the
 * feed; anything else (malformed, unknown, another team's, past retention) is a 400 naming the
 * field, so a client never silently restarts from an unrelated place. Both at once are a 400.
 *
 * `wait_ms` holds a page with no cursor or `starting_after` while it is empty; an `ending_before`
 * page (history) answers at once. A subscription delivers events committed after it starts.
 *
 * Waking: the flush NOTIFYs `event:<team id>` on the cache bus (one LISTEN connection per
 * process); long-polls (`wait_ms`) and GraphQL subscriptions wait in memory on that signal and
 * then read the database. Subscriptions of one team share one reader per process. Retention: 30
 * days (`RETENTION_DAYS`); reads never show older events and `start` deletes them hourly.
 */
import type { Logger } from "pino";
import type { DataSource } from "typeorm";
import { z } from "zod";
import { queryRows } from "../../db/sql.js";
import { AppError, parseInput } from "../../shared/errors.js";
import type { CacheBus } from "../platform/cache-bus.js";
import { type RequestContext, requirePrincipal } from "../platform/context.js";
import { optionalQuery, queryInt } from "../platform/validation.js";

/** Cache-bus topic announcing new events of a team (`event:<team id>`). */
export const EVENT_TOPIC = "event";
/** Advisory-lock key every metering flush holds while it positions its events (see header). */
export const EVENTS_POSITION_LOCK = 7_240_620;
/** Events older than this are gone from the feed. */
export const RETENTION_DAYS = 30;
/** Events deleted per statement by the retention cleanup. */
const EXPIRY_BATCH = 10_000;
/** Longest `wait_ms`, in ms. */
export const MAX_WAIT_MS = 30_000;
/** A subscriber more than this many events behind is ended (it cannot keep up). */
const MAX_SUBSCRIBER_BACKLOG = 10_000;

/** spec: Response event (completion feed item), plus `stream_id`, `batch_id` (issue 7, item 8) and `model`. */
export interface CompletionEvent {
  completion_id: string;
  response_id: string;
  custom_id: string | null;
  stream_id: string | null;
  /** The batch of a batch item, else null. */
  batch_id: string | null;
  model: string;
  status: string;
  result: unknown;
  error: unknown;
  prompt_tokens: number;
  completion_tokens: number;
  total_tokens: number;
  /** Micro-USD. */
  cost_micros: number;
  /** ISO 8601. */
  completed_at: string;
}

export interface CompletionEventList {
  object: "list";
  data: CompletionEvent[];
  has_more: boolean;
}

/** `GET /v1/responses/events` query (DESIGN §3 Completion events feed). */
export const eventsQuery = z.object({
  limit: optionalQuery(queryInt(1, 100)),
  starting_after: optionalQuery(z.uuid()),
  ending_before: optionalQuery(z.uuid()),
  stream_id: optionalQuery(z.uuid()),
  wait_ms: optionalQuery(queryInt(0, MAX_WAIT_MS)),
});

/** A feed page request as values (GraphQL passes its arguments so); validated by `list`. */
const pageInput = z.object({
  limit: z.number().int().min(1).max(100).optional(),
  starting_after: z.uuid().optional(),
  ending_before: z.uuid().optional(),
  stream_id: z.uuid().optional(),
  wait_ms: z.number().int().min(0).max(MAX_WAIT_MS).optional(),
});

/** A feed page request (GraphQL builds it from its arguments). */
export interface EventsPageInput {
  limit?: number;
  startingAfter?: string;
  endingBefore?: string;
  streamId?: string;
  waitMs?: number;
}

interface EventRow extends Omit<CompletionEvent, "cost_micros" | "completed_at"> {
  position: string;
  cost_micros: string;
  completed_at: Date;
}

/**
 * An event's status: the activity's, except that a Response that ended at its token limit says
 * `incomplete`, as the Response itself does (issue 27, item 9: the feed said `completed`).
 */
const EVENT_STATUS = `CASE WHEN a.status = 'completed' AND a.result_json->>'object' = 'response'
  AND a.result_json->>'status' = 'incomplete' THEN 'incomplete' ELSE a.status END`;

const EVENT_COLUMNS = `e.position::text AS position, e.completion_id, e.response_id, a.custom_id, e.stream_id, a.batch_id,
  a.model, ${EVENT_STATUS} AS status, a.result_json AS result, a.error_json AS error, a.prompt_tokens, a.completion_tokens,
  a.total_tokens, a.cost_micros::text AS cost_micros, e.completed_at`;
const EVENT_FROM = `completion_events e JOIN activity a ON a.id = e.response_id`;
const RETAINED = `e.completed_at > now() - interval '${RETENTION_DAYS} days'`;

function toEvent(r: EventRow): CompletionEvent {
  return {
    completion_id: r.completion_id,
    response_id: r.response_id,
    custom_id: r.custom_id,
    stream_id: r.stream_id,
    batch_id: r.batch_id,
    model: r.model,
    status: r.status,
    result: r.result ?? null,
    error: r.error ?? null,
    prompt_tokens: r.prompt_tokens,
    completion_tokens: r.completion_tokens,
    total_tokens: r.total_tokens,
    cost_micros: Number(r.cost_micros),
    completed_at: r.completed_at.toISOString(),
  };
}

/** One in-memory waiter for a team's next signal. */
interface Armed {
  fired: Promise<void>;
  cancel(): void;
}

/** A GraphQL subscriber: events of one team (optionally one stream) after it joined. */
interface Subscriber {
  streamId: string | null;
  /** Events queued for it but not yet taken. */
  queue: CompletionEvent[];
  /** Set while `next()` waits on an empty queue. */
  wake?: () => void;
  ended: boolean;
  error?: unknown;
}

/** Per team with subscribers in this process: one reader that tails the feed for all of them. */
interface TeamTail {
  /** Position of the newest event delivered (null until the first read). */
  last: bigint | null;
  subscribers: Set<Subscriber>;
  reading: boolean;
  /** Its starting position is known: events committed from now on reach its subscribers. */
  live: boolean;
  /** A signal arrived while reading: read again. */
  again: boolean;
  ready: Promise<void>;
}

/**
 * Reads the completion events feed for a team (REST and GraphQL), long-polls and tails it
 * through the cache bus's `event` signals. One per process; see the module header.
 */
export class CompletionEventsService {
  private readonly waiters = new Map<string, Set<() => void>>();
  private readonly tails = new Map<string, TeamTail>();
  private cleanupTimer?: NodeJS.Timeout;
  private closed = false;

  constructor(
    private readonly ds: DataSource,
    bus: CacheBus,
    private readonly logger: Logger,
  ) {
    bus.on(EVENT_TOPIC, (teamId) => this.signal(teamId));
    // After the listener reconnects, anything may have been missed: every waiter and tail looks again.
    bus.on("*", () => {
      for (const teamId of new Set([...this.waiters.keys(), ...this.tails.keys()])) this.signal(teamId);
    });
  }

  /** Long-polls of this process now waiting for an event (for tests and metrics). */
  get waiting(): number {
    let n = 0;
    for (const set of this.waiters.values()) n += set.size;
    return n;
  }

  /** GraphQL subscribers in this process that receive every event committed from now on. */
  get subscribers(): number {
    let n = 0;
    for (const tail of this.tails.values()) if (tail.live) n += tail.subscribers.size;
    return n;
  }

  /** Deletes events past retention now and then every hour (the timer does not keep the process alive). */
  start(): void {
    const cleanup = () =>
      void this.deleteExpired().catch((err: unknown) => this.logger.warn({ err }, "completion events cleanup failed"));
    cleanup();
    this.cleanupTimer = setInterval(cleanup, 3_600_000).unref();
  }

  /** Stops the cleanup timer, answers waiting long-polls and ends every subscription (shutdown). */
  close(): void {
    this.closed = true;
    clearInterval(this.cleanupTimer);
    // Long-polls answer now (with what is there) instead of holding the HTTP drain.
    for (const teamId of [...this.waiters.keys()]) this.signal(teamId);
    for (const tail of this.tails.values()) for (const s of tail.subscribers) this.end(s);
    this.tails.clear();
  }

  /**
   * Deletes events older than the retention, 10,000 at a time (each its own short statement, so a
   * large backlog never holds one long delete against the feed's writers; issue 12, item 4).
   * @returns how many.
   */
  async deleteExpired(): Promise<number> {
    let deleted = 0;
    for (;;) {
      const rows = await queryRows<{ n: number }>(
        this.ds,
        `WITH due AS (
           SELECT ctid FROM completion_events e WHERE NOT (${RETAINED}) LIMIT ${EXPIRY_BATCH}
         ), d AS (DELETE FROM completion_events WHERE ctid IN (SELECT ctid FROM due) RETURNING 1)
         SELECT count(*)::int AS n FROM d`,
      );
      const n = rows[0]?.n ?? 0;
      deleted += n;
      if (n < EXPIRY_BATCH || this.closed) return deleted;
    }
  }

  /**
   * `GET /v1/responses/events`: parses the query string and answers a page.
   * @throws AppError 400 (`limit`, `wait_ms`, `stream_id`, a cursor), 401.
   */
  async listFromQuery(ctx: RequestContext, query: unknown, abort?: AbortSignal): Promise<CompletionEventList> {
    const q = parseInput(eventsQuery, query);
    return this.list(
      ctx,
      {
        limit: q.limit,
        startingAfter: q.starting_after,
        endingBefore: q.ending_before,
        streamId: q.stream_id,
        waitMs: q.wait_ms,
      },
      abort,
    );
  }

  /**
   * A page of the caller's team's feed (DESIGN §3): no cursor → the newest `limit` (default 20),
   * newest first; `startingAfter` → up to `limit` after it, oldest first; `endingBefore` → up to
   * `limit` before it, newest first. `has_more`: more exist in that direction. With `waitMs`, an
   * empty page (tailing or whole feed) waits up to that many ms for an event, then answers.
   * `abort` ends a wait early (the client went away).
   * @throws AppError 400 for both cursors, an unknown cursor, values out of range; 401.
   */
  async list(ctx: RequestContext, input: EventsPageInput, abort?: AbortSignal): Promise<CompletionEventList> {
    const teamId = requirePrincipal(ctx).teamId;
    const q = parseInput(pageInput, {
      limit: input.limit,
      starting_after: input.startingAfter,
      ending_before: input.endingBefore,
      stream_id: input.streamId,
      wait_ms: input.waitMs,
    });
    const limit = q.limit ?? 20;
    const waitMs = q.wait_ms ?? 0;
    if (q.starting_after && q.ending_before) {
      throw AppError.invalid("Give at most one cursor", [
        { field: "ending_before", message: "cannot be combined with starting_after" },
      ]);
    }
    const streamId = q.stream_id ?? null;
    if (q.ending_before) {
      const before = await this.position(teamId, "ending_before", q.ending_before);
      return this.page(teamId, streamId, limit, { before });
    }
    const after = q.starting_after ? await this.position(teamId, "starting_after", q.starting_after) : null;
    const deadline = Date.now() + waitMs;
    for (;;) {
      // Armed before reading, so an event committed between the read and the wait still wakes it.
      const armed = waitMs > 0 ? this.arm(teamId) : undefined;
      const page = await this.page(teamId, streamId, limit, after === null ? {} : { after });
      const remaining = deadline - Date.now();
      if (page.data.length > 0 || !armed || remaining <= 0 || abort?.aborted || this.closed) {
        armed?.cancel();
        return page;
      }
      await this.waitFor(armed, remaining, abort);
    }
  }

  /**
   * Events of the team (of `streamId` when given) committed after the call, as they commit in
   * any process on the database, oldest first. Ends when the consumer returns or `close` runs.
   */
  subscribe(teamId: string, streamId: string | null): AsyncIterableIterator<CompletionEvent> {
    const sub: Subscriber = { streamId, queue: [], ended: false };
    let tail = this.tails.get(teamId);
    if (!tail) {
      const created: TeamTail = {
        last: null,
        subscribers: new Set(),
        reading: false,
        live: false,
        again: false,
        ready: Promise.resolve(),
      };
      created.ready = this.newestPosition(teamId).then(
        (p) => {
          created.last ??= p;
          created.live = true;
        },
        (err: unknown) => {
          for (const s of created.subscribers) this.end(s, err);
        },
      );
      this.tails.set(teamId, created);
      tail = created;
    }
    tail.subscribers.add(sub);
    const leave = () => {
      this.end(sub);
      const t = this.tails.get(teamId);
      if (t) {
        t.subscribers.delete(sub);
        if (t.subscribers.size === 0) this.tails.delete(teamId);
      }
    };
    const ready = tail.ready;
    const iterator: AsyncIterableIterator<CompletionEvent> = {
      next: async () => {
        await ready;
        for (;;) {
          const event = sub.queue.shift();
          if (event) return { value: event, done: false };
          if (sub.error) {
            leave();
            throw sub.error;
          }
          if (sub.ended) return { value: undefined, done: true };
          await new Promise<void>((resolve) => (sub.wake = resolve));
          sub.wake = undefined;
        }
      },
      return: async () => {
        leave();
        return { value: undefined, done: true };
      },
      [Symbol.asyncIterator]: () => iterator,
    };
    return iterator;
  }

  /** Wakes the team's long-polls and tails its feed for its subscribers. */
  private signal(teamId: string): void {
    const waiting = this.waiters.get(teamId);
    if (waiting) {
      this.waiters.delete(teamId);
      for (const wake of waiting) wake();
    }
    const tail = this.tails.get(teamId);
    if (tail) void this.readTail(teamId, tail);
  }

  /** Reads the team's events after `tail.last` (in pages) and hands them to its subscribers. */
  private async readTail(teamId: string, tail: TeamTail): Promise<void> {
    if (tail.reading) {
      tail.again = true;
      return;
    }
    tail.reading = true;
    try {
      await tail.ready;
      do {
        tail.again = false;
        for (;;) {
          const rows = await queryRows<EventRow>(
            this.ds,
            `SELECT ${EVENT_COLUMNS} FROM ${EVENT_FROM}
              WHERE e.team_id = $1 AND e.position > $2::bigint ORDER BY e.position LIMIT 500`,
            [teamId, (tail.last ?? 0n).toString()],
          );
          for (const r of rows) {
            const event = toEvent(r);
            for (const s of tail.subscribers) {
              if (s.ended || (s.streamId !== null && s.streamId !== event.stream_id)) continue;
              if (s.queue.length >= MAX_SUBSCRIBER_BACKLOG) {
                this.end(s, AppError.invalid("Subscriber too slow: more than 10000 events behind"));
                continue;
              }
              s.queue.push(event);
              s.wake?.();
            }
            tail.last = BigInt(r.position);
          }
          if (rows.length < 500) break;
        }
      } while (tail.again && this.tails.get(teamId) === tail);
    } catch (err) {
      this.logger.warn({ err, teamId }, "completion events subscription read failed; retrying on the next event");
    } finally {
      tail.reading = false;
    }
  }

  private end(sub: Subscriber, error?: unknown): void {
    if (sub.ended) return;
    sub.ended = true;
    sub.error = error;
    sub.wake?.();
  }

  private arm(teamId: string): Armed {
    let wake!: () => void;
    const fired = new Promise<void>((resolve) => (wake = resolve));
    let set = this.waiters.get(teamId);
    if (!set) this.waiters.set(teamId, (set = new Set()));
    set.add(wake);
    return {
      fired,
      cancel: () => {
        const s = this.waiters.get(teamId);
        s?.delete(wake);
        if (s?.size === 0) this.waiters.delete(teamId);
      },
    };
  }

  private async waitFor(armed: Armed, ms: number, abort?: AbortSignal): Promise<void> {
    let timer: NodeJS.Timeout | undefined;
    let onAbort: (() => void) | undefined;
    try {
      await Promise.race([
        armed.fired,
        new Promise<void>((resolve) => (timer = setTimeout(resolve, ms))),
        new Promise<void>((resolve) => {
          onAbort = () => resolve();
          abort?.addEventListener("abort", onAbort, { once: true });
        }),
      ]);
    } finally {
      clearTimeout(timer);
      if (onAbort) abort?.removeEventListener("abort", onAbort);
      armed.cancel();
    }
  }

  /** @throws AppError 400 naming `field` when `id` is not an event of the team in the feed. */
  private async position(teamId: string, field: string, id: string): Promise<bigint> {
    const rows = await queryRows<{ position: string }>(
      this.ds,
      `SELECT e.position::text AS position FROM completion_events e
        WHERE e.completion_id = $1 AND e.team_id = $2 AND ${RETAINED}`,
      [id, teamId],
    );
    if (!rows[0]) {
      throw AppError.invalid("Unknown cursor", [{ field, message: "not an event in this team's feed" }]);
    }
    return BigInt(rows[0].position);
  }

  private async newestPosition(teamId: string): Promise<bigint> {
    const rows = await queryRows<{ p: string | null }>(
      this.ds,
      "SELECT max(position)::text AS p FROM completion_events WHERE team_id = $1",
      [teamId],
    );
    return BigInt(rows[0]?.p ?? 0);
  }

  private async page(
    teamId: string,
    streamId: string | null,
    limit: number,
    cursor: { after?: bigint; before?: bigint },
  ): Promise<CompletionEventList> {
    const params: unknown[] = [teamId, streamId, limit + 1];
    let where = "";
    let order = "DESC";
    if (cursor.after !== undefined) {
      params.push(cursor.after.toString());
      where = "AND e.position > $4::bigint";
      order = "ASC";
    } else if (cursor.before !== undefined) {
      params.push(cursor.before.toString());
      where = "AND e.position < $4::bigint";
    }
    const rows = await queryRows<EventRow>(
      this.ds,
      `SELECT ${EVENT_COLUMNS} FROM ${EVENT_FROM}
        WHERE e.team_id = $1 AND ($2::uuid IS NULL OR e.stream_id = $2) AND ${RETAINED} ${where}
        ORDER BY e.position ${order} LIMIT $3`,
      params,
    );
    return { object: "list", data: rows.slice(0, limit).map(toEvent), has_more: rows.length > limit };
  }
}
