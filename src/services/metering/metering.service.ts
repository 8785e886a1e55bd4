/**
 * Metering by group commit (DESIGN §1 "The data plane's hot path stays lean"): every finished
 * inference request hands its activity row, its usage charge and (for stored responses) its
 * Response row to `record`, which resolves once they are durably committed. Records that arrive
 * while a flush runs are written together by the next flush: one SQL statement (one round trip,
 * atomic) however many requests. A request id is charged at most once (activity primary key
 * + the ledger's unique `(type, source_id)`), and `balance_after_micros` never goes below zero.
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
import { CACHE_CHANNEL, type CacheBus } from "../platform/cache-bus.js";
import { USAGE_CHARGE_CTES } from "../ledger/ledger.js";
import { KEY_BUDGET_CTES, KEY_SPEND_CTES } from "../ledger/key-budget.service.js";
import { EVENT_TOPIC, EVENTS_POSITION_LOCK } from "../events/completion-events.service.js";
import { AppError, ErrorCode } from "../../shared/errors.js";
import { type SpanContext, Tracing, currentSpan, failSpan } from "../../shared/tracing.js";
import { activityRow, responseRow, webhookOf, webhookRow } from "./metering-rows.js";
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
   * One group commit in one statement (one round trip, atomic): activity rows, stored responses,
   * ledger charges, team balances, key use and completion events, as data-modifying CTEs.
   *
   * Charges: per team, rows are ordered by request id and `running` is the sum of costs so far;
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
   */
  private async write(db: Queryable, batch: Pending[]): Promise<Map<string, MeteredCharge>> {
    const records = batch.map((p) => p.record);
    const activity = `[${batch.map((p) => p.activityJson).join(",")}]`;
    const responses = `[${batch.flatMap((p) => (p.responseJson ? [p.responseJson] : [])).join(",")}]`;
    const webhooks = `[${batch.flatMap((p) => (p.webhookJson ? [p.webhookJson] : [])).join(",")}]`;
    const keyIds = this.keysToTouch(records);
    const rows = await queryPrepared<{ source_id: string; charged: string; balance_after: string }>(
      db,
      "switchyard_group_commit",
      `WITH serial AS (
         -- Completion events feed (issue 6, item 6): flushes take their feed positions in commit
         -- order. This transaction-level lock is taken before anything else of the flush (every
         -- CTE that locks a row reads \`input\` or waits on this one-time filter) and held until
         -- commit; see services/events/completion-events.service.ts. The durability of this transaction's
         -- commit is set here too: \`synchronous_commit\` off, local to this transaction, in the
         -- \`process\` mode; in \`database\` mode the server's own setting stands.
         SELECT pg_advisory_xact_lock(${EVENTS_POSITION_LOCK}),
                CASE WHEN $6::text = 'off' THEN set_config('synchronous_commit', 'off', true) END
       ),
       input AS (
         -- One row per request id, even if a caller queued the same record twice in one flush.
         SELECT DISTINCT ON (id) * FROM jsonb_to_recordset($1::jsonb) AS x(
           id uuid, ledger_id uuid, team_id uuid, user_id uuid, api_key_id uuid, api_key_name text,
           api_key_prefix text, type text, status text, endpoint text, model text, custom_id text, stream_id uuid,
           batch_id uuid, prompt_tokens integer, completion_tokens integer, total_tokens integer, cached_prompt_tokens integer,
           cost_micros bigint, body_json jsonb, result_json jsonb, error_json jsonb, engine_ms integer,
           created_at timestamptz, completed_at timestamptz, completion_id uuid, service_tier text)
          WHERE EXISTS (SELECT FROM serial)
       ),
       given AS (
         SELECT * FROM jsonb_to_recordset($2::jsonb) AS r(
           id uuid, team_id uuid, user_id uuid, api_key_id uuid, model text, status text, background boolean,
           stream_id uuid, metadata jsonb, request_json jsonb, response_json jsonb, created_at timestamptz,
           completed_at timestamptz)
       ),
       zdr AS (
         -- Zero data retention (issue 8, item 3): teams of this flush that keep no request or
         -- result bodies, as the flag stands at commit. Their activity rows get no body_json or
         -- result_json, their responses are not stored, and a background response (kept while it
         -- runs) is deleted by its terminal record; tokens, cost and the charge are recorded alike.
         SELECT id FROM teams WHERE id IN (SELECT team_id FROM input) AND zero_data_retention_enabled
       ),
       bg AS (
         -- Background responses of this flush, locked (a locking read sees the latest row, and a
         -- cancel or deadline cannot end one until this commits). One that a cancel or deadline
         -- already ended keeps that end: its record takes the stored status and object, so the
         -- activity row, the event and the webhook say what GET /v1/responses/{id} says; the tokens
         -- it generated are still charged (issue 6, item 2).
         SELECT id, status, response_json FROM responses
          WHERE id IN (SELECT id FROM input) AND background
            FOR NO KEY UPDATE
       ),
       ended AS (
         -- A cancelled one keeps what its generation produced before the abort (output so far,
         -- usage): the record's object, with the cancel's status.
         SELECT b.id, b.status,
                CASE WHEN b.status = 'cancelled' AND g.id IS NOT NULL
                     THEN g.response_json || '{"status": "cancelled", "incomplete_details": null, "error": null}'::jsonb
                     ELSE b.response_json END AS response_json
           FROM bg b LEFT JOIN given g ON g.id = b.id
          WHERE b.status <> 'in_progress'
       ),
       ins AS (
         INSERT INTO activity (id, team_id, user_id, api_key_id, api_key_name, api_key_prefix, type, status, endpoint,
                               model, custom_id, stream_id, batch_id, prompt_tokens, completion_tokens, total_tokens,
                               cached_prompt_tokens, cost_micros, body_json, result_json, error_json, engine_ms,
                               created_at, completed_at, service_tier)
         SELECT i.id, team_id, user_id, api_key_id, api_key_name, api_key_prefix, type,
                CASE WHEN e.id IS NULL THEN i.status
                     WHEN e.status IN ('cancelled', 'failed') THEN e.status
                     ELSE 'completed' END,
                endpoint, model, custom_id, stream_id, batch_id, prompt_tokens, completion_tokens, total_tokens,
                cached_prompt_tokens, cost_micros,
                CASE WHEN i.team_id IN (SELECT id FROM zdr) THEN NULL ELSE body_json END,
                CASE WHEN i.team_id IN (SELECT id FROM zdr) THEN NULL
                     WHEN e.id IS NULL OR i.result_json IS NULL THEN i.result_json
                     ELSE e.response_json END,
                CASE WHEN e.status = 'failed' THEN e.response_json -> 'error' ELSE i.error_json END,
                engine_ms, created_at, completed_at, service_tier
           FROM input i LEFT JOIN ended e ON e.id = i.id
         -- A row in flight (\`pending\`/\`running\`, services/metering/in-flight-activity.ts) takes its terminal
         -- record; an ended row never changes, so a request is recorded and charged once per id.
         ON CONFLICT (id) DO UPDATE SET
           user_id = EXCLUDED.user_id, api_key_id = EXCLUDED.api_key_id, api_key_name = EXCLUDED.api_key_name,
           api_key_prefix = EXCLUDED.api_key_prefix, type = EXCLUDED.type, status = EXCLUDED.status,
           endpoint = EXCLUDED.endpoint, model = EXCLUDED.model, custom_id = EXCLUDED.custom_id,
           stream_id = EXCLUDED.stream_id, batch_id = EXCLUDED.batch_id, prompt_tokens = EXCLUDED.prompt_tokens,
           completion_tokens = EXCLUDED.completion_tokens, total_tokens = EXCLUDED.total_tokens,
           cached_prompt_tokens = EXCLUDED.cached_prompt_tokens, cost_micros = EXCLUDED.cost_micros,
           body_json = EXCLUDED.body_json, result_json = EXCLUDED.result_json, error_json = EXCLUDED.error_json,
           engine_ms = EXCLUDED.engine_ms, completed_at = EXCLUDED.completed_at, service_tier = EXCLUDED.service_tier
         WHERE activity.status IN ('pending', 'running') AND activity.team_id = EXCLUDED.team_id
         RETURNING id, team_id, cost_micros, model, endpoint
       ),
       stored AS (
         INSERT INTO responses (id, team_id, user_id, api_key_id, model, status, background, stream_id, metadata,
                                request_json, response_json, created_at, completed_at)
         SELECT g.id, g.team_id, g.user_id, g.api_key_id, g.model, COALESCE(e.status, g.status), g.background,
                g.stream_id, g.metadata, g.request_json, COALESCE(e.response_json, g.response_json), g.created_at,
                g.completed_at
           FROM given g LEFT JOIN ended e ON e.id = g.id
          WHERE g.id IN (SELECT id FROM ins)
            -- Never re-created: a background row deleted meanwhile stays deleted.
            AND (NOT g.background OR g.id IN (SELECT id FROM bg))
            AND g.team_id NOT IN (SELECT id FROM zdr)
         -- A background response's row exists (in_progress) from its create: its terminal record
         -- ends it, unless a cancel or the deadline ended it first (issue 6, item 2); a cancel's
         -- row takes what the aborted generation produced (\`ended\`), keeping its completed_at.
         ON CONFLICT (id) DO UPDATE
           SET status = EXCLUDED.status, response_json = EXCLUDED.response_json,
               completed_at = COALESCE(responses.completed_at, EXCLUDED.completed_at), updated_at = now()
         WHERE responses.background AND responses.status IN ('in_progress', 'cancelled')
       ),
       forgotten AS (
         -- A zero-data-retention team's background response ends here: readable while it ran, 404 after.
         DELETE FROM responses
          WHERE id IN (SELECT id FROM bg) AND id IN (SELECT id FROM ins) AND team_id IN (SELECT id FROM zdr)
       ),
       metered AS (
         SELECT ins.id, ins.team_id, ins.cost_micros, ins.model, ins.endpoint, input.ledger_id, input.api_key_id
           FROM ins JOIN input USING (id)
          WHERE ins.cost_micros > 0
       ),
       -- API key budgets (issue 29, item 1): each cost capped at what its key has left.
       ${KEY_BUDGET_CTES},
       billable AS (
         SELECT key_capped.*,
                -- In ledger id order, the order the entries are inserted in below: their created_at
                -- (clock_timestamp() per row) then follows their balance_after, and the
                -- transactions list (created_at, id) shows the balance step by step.
                sum(cost_micros) OVER (PARTITION BY team_id ORDER BY ledger_id) AS running
           FROM key_capped
       ),
       ${USAGE_CHARGE_CTES},
       ${KEY_SPEND_CTES},
       used AS (
         UPDATE api_keys SET last_used_at = now() WHERE id = ANY($3::uuid[]) AND EXISTS (SELECT FROM serial)
       ),
       leases AS (
         UPDATE credit_leases c SET micros = GREATEST(0, c.micros - s.total), updated_at = now()
           FROM (SELECT team_id, sum(charged) AS total FROM charges GROUP BY team_id) s
          WHERE c.team_id = s.team_id AND c.holder = $4::uuid
       ),
       events AS (
         -- One completion event per newly recorded request, positioned under \`serial\`; listeners
         -- learn of new events per team (NOTIFY folds duplicates within a transaction).
         INSERT INTO completion_events (completion_id, position, team_id, response_id, stream_id, completed_at)
         SELECT input.completion_id, nextval('completion_events_position_seq'), ins.team_id, ins.id, input.stream_id,
                COALESCE(input.completed_at, now())
           FROM ins JOIN input USING (id)
          ORDER BY ins.id
         RETURNING pg_notify('${CACHE_CHANNEL}', '${EVENT_TOPIC}:' || team_id)
       ),
       webhooks AS (
         -- Completion webhooks (issue 6, item 3): the outbox row commits with the terminal status,
         -- once per request id; the NOTIFY wakes the dispatchers at commit.
         INSERT INTO webhook_deliveries (id, team_id, response_id, url, token, body)
         SELECT w.id, w.team_id, w.response_id, w.url, w.token, COALESCE(e.response_json, w.body)
           FROM jsonb_to_recordset($5::jsonb) AS w(id uuid, team_id uuid, response_id uuid, url text, token text, body jsonb)
           LEFT JOIN ended e ON e.id = w.response_id
          WHERE w.response_id IN (SELECT id FROM ins)
         ON CONFLICT (response_id) DO NOTHING
         RETURNING pg_notify('${CACHE_CHANNEL}', 'webhook:')
       )
       SELECT c.id::text AS source_id, c.charged::text AS charged, c.balance_after::text AS balance_after
         FROM charges c JOIN ledger g ON g.source_id = c.id::text`,
      [activity, responses, keyIds, this.leaseHolder, webhooks, this.durability === "process" ? "off" : "on"],
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
