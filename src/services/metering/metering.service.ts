/**
 * Metering by group commit (DESIGN §1 "The data plane's hot path stays lean"): every finished
 * inference request hands its activity row, its usage charge and (for stored responses) its
 * Response row to `record`, which resolves once they are durably committed. Records that arrive
 * while a flush runs are written together by the next flush: one SQL statement (atomic; its
 * answer and its commit are two round trips) however many requests, lean for what the batch
 * needs (`group-commit-statement.ts`, issue 30 item 2). A request id is charged at most once
 * (activity primary key + the ledger's unique `(type, source_id)`), and `balance_after_micros`
 * never goes below zero.
 * Each new record also gets its completion event (issue 6, item 6), positioned in commit order
 * under an advisory lock every flush takes first (see `completion-events.service.ts`).
 * Zero data retention (issue 8, item 3) is applied here, where bodies are written: a team with
 * the flag on (as it stands at commit) gets no bodies in activity rows and no stored responses.
 * Also keeps the per-team balance cache that create operations consult for the 402 check.
 */
import type { Logger } from "pino";
import type { DataSource } from "typeorm";
import { type Queryable, queryPrepared, queryRows } from "../../db/sql.js";
import { type DatabaseAvailability, databaseUnavailable, isDatabaseUnavailable } from "../../shared/database-errors.js";
import type { CacheBus } from "../platform/cache-bus.js";
import { AppError, ErrorCode } from "../../shared/errors.js";
import { type SpanContext, Tracing, currentSpan, failSpan } from "../../shared/tracing.js";
import { activityRow, responseRow, webhookOf, webhookRow } from "./metering-rows.js";
import { type GroupCommitParam, groupCommitStatement } from "./group-commit-statement.js";
import type { UsageRecord } from "./usage-record.js";

export { activityRow } from "./metering-rows.js";

export type { StoredResponse, UsageRecord } from "./usage-record.js";

/** What the ledger did for one record. */
export interface MeteredCharge {
  /** Micro-USD actually debited (capped at the balance; 0 for duplicates and free requests). */
  chargedMicros: bigint;
  /** The team's balance after this charge, micro-USD. */
  balanceAfterMicros: bigint | null;
}

interface Pending {
  record: UsageRecord;
  /** The activity row as JSON text (serialised when queued, so flushes can be bounded by size). */
  activityJson: string;
  /** The stored Response row as JSON text, if any. */
  responseJson: string | null;
  /** The webhook outbox row as JSON text, if any. */
  webhookJson: string | null;
  resolve: (charge: MeteredCharge) => void;
  reject: (err: unknown) => void;
  /** The span of the request that queued it, linked from its flush's span (tracing on only). */
  link?: SpanContext;
}

interface CachedBalance {
  micros: bigint;
  at: number;
}

/**
 * The endpoint of Responses: a batch with one of them takes the statement's responses part (a
 * background response has its row from its create, whether or not its record stores one).
 */
const RESPONSES_ENDPOINT = "/v1/responses";

/** A flush carries at most this much JSON, whatever `maxRows` allows (V8 strings top out near 512 MB). */
const MAX_FLUSH_BYTES = 32 * 1024 * 1024;

/**
 * JSON text that PostgreSQL's `jsonb` accepts: NUL characters and unpaired surrogates (which
 * JSON.stringify writes as `\u0000` and `\udXXX` escapes, and jsonb refuses) become U+FFFD.
 * Scanning escape by escape keeps an escaped backslash from being read as the start of one.
 */
export function toJsonbText(value: unknown): string {
  const json = JSON.stringify(value);
  // Every escape replaced below starts with `\u`: most rows have none, and skip the scan.
  if (!json.includes("\\u")) return json;
  return json.replace(/\\(\\|u0000|ud[89a-f][0-9a-f]{2})/gi, (match) => (match === "\\\\" ? match : "\\ufffd"));
}

/**
 * Group-commit writer of activity rows, stored responses and ledger charges (amounts in micro-USD),
 * and the per-team balance cache behind the 402 check. One per process; see the module header.
 */
export class MeteringService {
  private queue: Pending[] = [];
  private flushing = false;
  private readonly balances = new Map<string, CachedBalance>();
  /** Balance lookups under way, shared by the requests of one team that miss the cache together. */
  private readonly balanceLookups = new Map<string, Promise<bigint>>();
  /** Bumped whenever a flush or a NOTIFY sets balances: a lookup that raced one is not cached. */
  private balanceGeneration = 0;
  /** When this process last refreshed each key's `last_used_at` (ms). */
  private readonly keysTouched = new Map<string, number>();
  /** Flushes done, rows written and time spent writing (ms), for logs and benchmarks. */
  readonly stats = { flushes: 0, rows: 0, flushMs: 0 };
  /** Called after each group commit with its rows and time (seconds): the metrics' histograms. */
  onFlush?: (rows: number, seconds: number) => void;
  /** Traces (issue 29, item 2): a span per flush when on. */
  tracing: Tracing = Tracing.off;
  private database?: DatabaseAvailability;

  constructor(
    private readonly ds: DataSource,
    bus: CacheBus,
    private readonly logger: Logger,
    private readonly maxRows: number,
    private readonly balanceTtlMs: number,
    /** This process's credit-lease holder (`CreditService.holder`): charges come off its lease. */
    private readonly leaseHolder: string | null = null,
    /**
     * `database`: a flush commits as the server's `synchronous_commit` says (on disk before it
     * returns, by PostgreSQL's default); `process`: once it is committed (`synchronous_commit =
     * off` for the flush's transaction only). Config
     * `SWITCHYARD_DURABILITY`; README "Durability".
     */
    private readonly durability: "database" | "process" = "database",
  ) {
    // Every flush announces the teams' new balances (`balance:<team>=<micros>`, in commit order).
    bus.on("balance", (key) => {
      const [teamId, micros] = key.split("=");
      this.balanceGeneration++;
      if (micros === undefined) this.balances.delete(teamId);
      else this.balances.set(teamId, { micros: BigInt(micros), at: Date.now() });
    });
    bus.on("*", () => this.balances.clear());
  }

  /**
   * While `database` (the database circuit) refuses, records fail at once with its 503 instead of
   * queueing behind a flush that waits on it, and those queued when it starts refusing fail too:
   * none of them was sent (issue 28, item 1). The flush under way ends as the circuit decides.
   */
  refuseWhileUnavailable(database: DatabaseAvailability): void {
    this.database = database;
    database.onUnavailable((refusal) => this.queue.splice(0).forEach((p) => p.reject(refusal)));
  }

  /**
   * Queues `record` for the next group commit.
   * @returns once it is committed, with what the ledger charged.
   * @throws AppError 503 when the database refused the record (nothing of it was written).
   */
  record(record: UsageRecord): Promise<MeteredCharge> {
    const refused = this.database?.refusal();
    if (refused) return Promise.reject(refused);
    const activityJson = toJsonbText(activityRow(record));
    const responseJson = record.response ? toJsonbText(responseRow(record)) : null;
    const webhook = webhookOf(record);
    const webhookJson = webhook ? toJsonbText(webhookRow(record, webhook)) : null;
    return new Promise((resolve, reject) => {
      const link = this.tracing.enabled ? currentSpan()?.spanContext() : undefined;
      this.queue.push({ record, activityJson, responseJson, webhookJson, resolve, reject, link });
      if (!this.flushing) {
        this.flushing = true;
        // Let the requests finishing in this turn of the event loop join the first flush.
        setImmediate(() => void this.drain());
      }
    });
  }

  /**
   * Raises 402 when the team has no credit (DESIGN §3 Money: "before any engine work").
   * Reads the cached balance (set by every flush here and, through NOTIFY, elsewhere).
   */
  async assertCredit(teamId: string): Promise<void> {
    const balance = await this.balance(teamId);
    if (balance <= 0n) {
      throw new AppError(ErrorCode.InsufficientCredit, "Insufficient credit: add credit to continue");
    }
  }

  /** The team's credit balance in micro-USD (cached for `balanceTtlMs`). */
  async balance(teamId: string): Promise<bigint> {
    const cached = this.balances.get(teamId);
    if (cached && Date.now() - cached.at <= this.balanceTtlMs) return cached.micros;
    let lookup = this.balanceLookups.get(teamId);
    if (!lookup) {
      const generation = this.balanceGeneration;
      lookup = queryRows<{ b: string }>(this.ds, "SELECT credit_balance_micros AS b FROM teams WHERE id = $1", [teamId])
        .then((rows) => {
          const micros = rows[0] ? BigInt(rows[0].b) : 0n;
          if (generation === this.balanceGeneration) this.balances.set(teamId, { micros, at: Date.now() });
          return micros;
        })
        .finally(() => this.balanceLookups.delete(teamId));
      this.balanceLookups.set(teamId, lookup);
    }
    return lookup;
  }

  /** Waits until everything queued so far is written. */
  async drainAll(): Promise<void> {
    while (this.flushing || this.queue.length > 0) await new Promise((r) => setTimeout(r, 5));
  }

  private async drain(): Promise<void> {
    try {
      while (this.queue.length > 0) {
        const batch = this.nextBatch();
        const started = performance.now();
        const outcome = await this.tracedWrite(batch);
        if (outcome.charges) {
          this.settle(batch, outcome.charges, started);
          continue;
        }
        const refused = new AppError(ErrorCode.EngineUnavailable, "Could not record the request; retry later");
        if (!isDataError(outcome.error)) {
          // The database is unreachable or overloaded: every record would fail the same way, and
          // the request with it (no answer without its charge), with a 503 and Retry-After.
          const unavailable = databaseUnavailable(
            "Could not record the request: the database is unavailable; retry later",
          );
          for (const p of batch) p.reject(isDatabaseUnavailable(outcome.error) ? unavailable : refused);
          continue;
        }
        // A record's data was refused: write them one by one so that one fails alone.
        for (const p of batch) {
          const one = await this.writeWithRetry([p]);
          if (one.charges) this.settle([p], one.charges, performance.now());
          else p.reject(refused);
        }
      }
    } finally {
      this.flushing = false;
    }
  }

  /** Takes queued records up to `maxRows` and `MAX_FLUSH_BYTES` (always at least one). */
  private nextBatch(): Pending[] {
    let bytes = 0;
    let n = 0;
    while (n < this.queue.length && n < this.maxRows) {
      const p = this.queue[n];
      const size = p.activityJson.length + (p.responseJson?.length ?? 0) + (p.webhookJson?.length ?? 0);
      if (n > 0 && bytes + size > MAX_FLUSH_BYTES) break;
      bytes += size;
      n++;
    }
    return this.queue.splice(0, n);
  }

  /**
   * `writeWithRetry` inside a `metering flush` span (issue 29, item 2) when tracing is on: a root
   * span (one flush writes many requests) linked to the spans of the requests it writes.
   */
  private tracedWrite(batch: Pending[]): ReturnType<MeteringService["writeWithRetry"]> {
    if (!this.tracing.enabled) return this.writeWithRetry(batch);
    const links = batch.flatMap((p) => (p.link ? [p.link] : []));
    const attributes = { "db.system.name": "postgresql", "switchyard.flush.rows": batch.length };
    return this.tracing.inSpan("metering flush", { parent: "root", links, attributes }, async (span) => {
      const outcome = await this.writeWithRetry(batch);
      if (span && outcome.error !== undefined) failSpan(span, outcome.error);
      return outcome;
    });
  }

  /** Two tries, 50 ms apart; the second failure is logged as an error and returned. */
  private async writeWithRetry(batch: Pending[]): Promise<{ charges?: Map<string, MeteredCharge>; error?: unknown }> {
    let error: unknown;
    for (let attempt = 0; attempt < 2; attempt++) {
      if (attempt > 0) await new Promise((r) => setTimeout(r, 50));
      try {
        return { charges: await this.write(this.ds, batch) };
      } catch (err) {
        error = err;
        const level = attempt === 0 ? "warn" : "error";
        this.logger[level]({ err, rows: batch.length, attempt }, "metering flush failed");
      }
    }
    return { error };
  }

  private settle(batch: Pending[], charges: Map<string, MeteredCharge>, started: number): void {
    this.stats.flushes++;
    this.stats.rows += batch.length;
    const ms = performance.now() - started;
    this.stats.flushMs += ms;
    this.onFlush?.(batch.length, ms / 1000);
    // A team's balance after the flush is the lowest `balance_after` of its charges (they only
    // go down); other processes learn it from the flush's NOTIFY.
    const lowest = new Map<string, bigint>();
    for (const p of batch) {
      const after = charges.get(p.record.id)?.balanceAfterMicros;
      const team = p.record.principal.teamId;
      if (after != null && (lowest.get(team) === undefined || after < lowest.get(team)!)) lowest.set(team, after);
    }
    const now = Date.now();
    if (lowest.size > 0) this.balanceGeneration++;
    for (const [team, micros] of lowest) this.balances.set(team, { micros, at: now });
    for (const p of batch) p.resolve(charges.get(p.record.id) ?? { chargedMicros: 0n, balanceAfterMicros: null });
  }

  /**
   * One group commit in one statement (atomic; `group-commit-statement.ts` builds it, lean for the
   * batch's shape): activity rows, stored responses, ledger charges, team balances, key use,
   * completion events, the webhook outbox and the activity roll-ups, as data-modifying CTEs, sent
   * as a prepared statement committed once its answer is back (`queryPrepared`).
   *
   * Charges: per team, rows are ordered by ledger id and `running` is the sum of costs so far;
   * with `before` the team's balance (row locked FOR NO KEY UPDATE, so concurrent flushes
   * serialise; FOR UPDATE would also block the foreign-key checks of other flushes' inserts,
   * which hold FOR KEY SHARE on the same team rows, and deadlock),
   * a row charges `min(cost, max(0, before − (running − cost)))` and leaves
   * `max(0, before − running)`: the balance never goes below zero and a charge that would cross
   * it is capped. Only requests whose activity row is new, or was in flight (`pending`/`running`), are charged (exactly once per id).
   * What is charged also comes off this process's credit lease (`credit.service.ts`), so the
   * balance keeps covering every unexpired lease. A request of an API key with a budget is first
   * capped at what the key has left in its window, and its charge is added to the key's spend and
   * taken off this process's key lease (`key-budget.service.ts`), in the same statement.
   * A request id queued twice in one batch is written once (the first).
   */
  private async write(db: Queryable, batch: Pending[]): Promise<Map<string, MeteredCharge>> {
    const seen = new Set<string>();
    const unique = batch
      .filter((p) => !seen.has(p.record.id) && seen.add(p.record.id))
      .sort((a, b) => (a.record.id < b.record.id ? -1 : a.record.id > b.record.id ? 1 : 0));
    const responses = unique.flatMap((p) => (p.responseJson ? [p.responseJson] : []));
    const webhooks = unique.flatMap((p) => (p.webhookJson ? [p.webhookJson] : []));
    const keyIds = this.keysToTouch(unique.map((p) => p.record));
    const statement = groupCommitStatement({
      responses: responses.length > 0 || unique.some((p) => p.record.endpoint === RESPONSES_ENDPOINT),
      webhooks: webhooks.length > 0,
      asyncCommit: this.durability === "process",
    });
    const values: Record<GroupCommitParam, unknown> = {
      activity: `[${unique.map((p) => p.activityJson).join(",")}]`,
      holder: this.leaseHolder,
      responses: `[${responses.join(",")}]`,
      webhooks: `[${webhooks.join(",")}]`,
      keys: keyIds,
    };
    const rows = await queryPrepared<{ source_id: string; charged: string; balance_after: string }>(
      db,
      "switchyard_group_commit",
      statement.text,
      statement.params.map((param) => values[param]),
    );
    return new Map(
      rows.map((r) => [r.source_id, { chargedMicros: BigInt(r.charged), balanceAfterMicros: BigInt(r.balance_after) }]),
    );
  }

  /** Keys whose `last_used_at` this process has not refreshed in the last second (fewer row locks). */
  private keysToTouch(records: UsageRecord[]): string[] {
    const now = Date.now();
    const ids = new Set<string>();
    for (const r of records) {
      const id = r.principal.apiKey?.id;
      if (!id || now - (this.keysTouched.get(id) ?? 0) < 1000) continue;
      ids.add(id);
      this.keysTouched.set(id, now);
    }
    if (this.keysTouched.size > 100_000) this.keysTouched.clear();
    return [...ids].sort();
  }
}

/**
 * True for errors about the data itself (SQLSTATE classes 22 data exception, 23 integrity
 * constraint, 54 program limit), which retrying the records one by one can isolate; false for
 * connection, resource and server errors, which would fail every record alike.
 */
function isDataError(err: unknown): boolean {
  const code = (err as { code?: unknown })?.code;
  return typeof code === "string" && /^(22|23|54)/.test(code);
}
