/**
 * The database circuit (issue 28, item 1): while PostgreSQL is stopped, unreachable or frozen,
 * every request answers 503 with `Retry-After` at once instead of hanging on a pool connection
 * or a query that will not come back, and the service takes traffic again as soon as PostgreSQL
 * answers.
 *
 * States:
 * - `closed` (normal): work goes to the database. The circuit watches every query and every wait
 *   for a pool connection of the pools it guards (`pool-guard.ts`).
 * - `open`: the database did not answer a probe. Work is refused with the 503 before it reaches
 *   the pool (`refusal()`: the REST and GraphQL gate, the pool guard), and work already waiting
 *   on the database is abandoned with it: its connection is closed, so PostgreSQL rolls back
 *   whatever transaction it was in. A `COMMIT` already sent is the exception: its outcome decides
 *   whether the work happened (a metering flush: whether a request was charged), so it is waited
 *   for, up to `commitWaitMs`.
 * - `half_open`: open, with a probe under way; still refusing.
 *
 * What moves it:
 * - closed → probe: a query or connection failed with an "unavailable" error
 *   (`isDatabaseUnavailable`: refused or lost connections, shutdown, the statement, lock and
 *   idle-in-transaction timeouts), an idle pooled connection was lost, or an operation has been
 *   waiting `stallMs` while nothing else finished (a frozen server answers nothing; a slow but
 *   live one still finishes other work, and a lone long statement passes its probe).
 * - probe: `SELECT 1` on a connection of its own (outside the pools, so a full pool cannot
 *   starve it), which must answer within `probeTimeoutMs`; its success closes the circuit, its
 *   failure opens it — unless the server answered other work while the probe waited (then it is
 *   slow, or out of connections for the probe, but there).
 * - open → half_open → closed: a probe every `REPROBE_MS` while open. Such a probe usually has to
 *   make its connection afresh (a failed probe drops it), which against a far database (startup,
 *   password exchange, TLS: several round trips) can take longer than `probeTimeoutMs` on its own;
 *   so while open, making the connection may take `connectTimeoutMs`, as any pool connection may,
 *   and only its `SELECT 1` is held to `probeTimeoutMs`. (With the probe's whole bound at
 *   `probeTimeoutMs`, a database 200 ms away each way never passed a probe after an outage, and
 *   the circuit stayed open against a database that answered every query.) A frozen server makes
 *   that connection wait; its thaw answers it at once.
 * So a frozen database is refused within `stallMs` + `probeTimeoutMs` (+ one tick) and a
 * recovered one serves again within `REPROBE_MS` + one probe.
 */
import pg from "pg";
import type { Logger } from "pino";
import { type DatabaseAvailability, databaseUnavailable, isDatabaseUnavailable } from "../shared/database-errors.js";
import type { AppError } from "../shared/errors.js";

/** `closed`: serving; `open`: refusing; `half_open`: refusing while a probe is under way. */
export type CircuitState = "closed" | "open" | "half_open";

/** How often the circuit looks at what it watches, ms. */
const TICK_MS = 100;
/** While open, a probe this often, ms. */
const REPROBE_MS = 1_000;
/** While closed, at most one probe for stalled operations this often, ms. */
const STALL_PROBE_GAP_MS = 500;
/** Shortest gap between two probes started by failures, ms (a burst of errors sends one probe). */
const MIN_PROBE_GAP_MS = 200;
/** Default `stallMs`. */
const STALL_MS = 300;

/** Options of a `DatabaseCircuit`. */
export interface CircuitOptions {
  /** The PostgreSQL URL the probe connects to (the pools' own). */
  databaseUrl: string;
  /** Most time a probe (connecting if need be, and `SELECT 1`) may take, ms (config `dbProbeTimeoutMs`). */
  probeTimeoutMs: number;
  /**
   * While the circuit is open, most time a probe may take to make its connection, ms, before its
   * `SELECT 1` (config `dbConnectTimeoutMs`; default `probeTimeoutMs`). See the module header.
   */
  connectTimeoutMs?: number;
  /**
   * Most time a `COMMIT` already sent is waited for once the circuit opened, ms (the statement
   * timeout: a live server answers a COMMIT well within it). After it the transaction's outcome
   * is unknown and the work fails with the 503 like the rest.
   */
  commitWaitMs: number;
  /** Where opening (WARN) and closing (INFO) are logged, once each; every probe at DEBUG. */
  logger: Pick<Logger, "warn" | "info" | "debug">;
  /** How long an operation may wait, with nothing else finishing, before a probe, ms (default 300). */
  stallMs?: number;
}

/** One watched operation: a query, or a wait for a pool connection. */
export interface WatchedOperation {
  /** Call once it ended, with its error when it failed. */
  end(err?: unknown): void;
  /**
   * A `query` operation that has just sent its transaction's commit (a Sync ending an implicit
   * transaction, `sql.ts`) is a `commit` from now on: waited for, like a `COMMIT` sent, for up to
   * `commitWaitMs` from now, instead of abandoned when the circuit opens.
   * @returns false when the operation was already abandoned: the caller must not commit.
   */
  committing(): boolean;
}

/**
 * What a watched operation is: a `query`; a `commit` (a `COMMIT` already sent: not abandoned when
 * the circuit opens, see the module header); a `checkout` (a wait for a pool connection, which
 * an idle one may answer without the server: its end never counts as the server answering).
 */
export type OperationKind = "query" | "commit" | "checkout";

interface Operation {
  started: number;
  kind: OperationKind;
  abandon(err: AppError): void;
}

/**
 * True when `promise` fulfils within `ms`. A timer that fires after the event loop was held
 * (a long synchronous task) gives the answer that arrived meanwhile one more pass of the loop's
 * I/O before it counts as late, so a busy process does not take its own delay for the database's.
 */
function fulfilsWithin(promise: Promise<unknown>, ms: number): Promise<boolean> {
  return new Promise((resolve) => {
    let done = false;
    const finish = (ok: boolean) => {
      if (done) return;
      done = true;
      clearTimeout(timer);
      resolve(ok);
    };
    const timer = setTimeout(() => setImmediate(() => finish(false)), ms);
    promise.then(
      () => finish(true),
      () => finish(false),
    );
  });
}

/**
 * The circuit of one process over one database (see the module header). `watch` and `report` are
 * fed by the pool guard; `refusal()` is asked by the HTTP gate, the pool guard and readiness.
 */
export class DatabaseCircuit implements DatabaseAvailability {
  private current: CircuitState = "closed";
  private readonly operations = new Set<Operation>();
  /** When an operation last finished with an answer from the server (performance.now ms). */
  private lastProgress = performance.now();
  private lastProbe = -Infinity;
  private probing = false;
  /** A failure asked for a probe that the minimum gap put off. */
  private suspected = false;
  private probeClient: pg.Client | undefined;
  private openedAt = 0;
  private stopped = false;
  private readonly timer: NodeJS.Timeout;
  private readonly stallMs: number;
  private readonly listeners: Array<(refusal: AppError) => void> = [];

  constructor(private readonly opts: CircuitOptions) {
    this.stallMs = opts.stallMs ?? STALL_MS;
    this.timer = setInterval(() => this.tick(), TICK_MS);
    this.timer.unref();
  }

  /** The current state (see the module header). */
  get state(): CircuitState {
    return this.current;
  }

  /** The 503 to answer while the circuit is open or half-open; undefined while it is closed. */
  refusal(): AppError | undefined {
    return this.current === "closed" ? undefined : databaseUnavailable();
  }

  /**
   * Watches one operation from now until `end`. `abandon` is called (at most once, instead of
   * waiting for `end`) when the circuit opens while it runs; it must fail the operation with the
   * error given and close its connection.
   */
  watch(kind: OperationKind, abandon: (err: AppError) => void): WatchedOperation {
    const op: Operation = { started: performance.now(), kind, abandon };
    this.operations.add(op);
    return {
      end: (err?: unknown) => {
        if (!this.operations.delete(op)) return;
        if (err !== undefined && isDatabaseUnavailable(err)) this.suspect();
        else if (kind !== "checkout") this.lastProgress = performance.now();
      },
      committing: () => {
        if (!this.operations.has(op)) return false;
        op.kind = "commit";
        op.started = performance.now();
        // The statement's answer came back: the server made progress.
        this.lastProgress = op.started;
        return true;
      },
    };
  }

  /** Calls `listener` with the 503 each time the circuit opens (work queued in memory fails with it). */
  onUnavailable(listener: (refusal: AppError) => void): void {
    this.listeners.push(listener);
  }

  /** A failure outside any watched operation (an idle pooled connection lost): probes when it says "unavailable". */
  report(err: unknown): void {
    if (isDatabaseUnavailable(err)) this.suspect();
  }

  /** Stops watching and probing, and closes the probe's connection (at once: the server may be frozen). */
  async close(): Promise<void> {
    this.stopped = true;
    clearInterval(this.timer);
    this.dropProbeClient();
  }

  private suspect(): void {
    if (this.stopped) return;
    if (this.probing || performance.now() - this.lastProbe < MIN_PROBE_GAP_MS) this.suspected = true;
    else this.probe("failure");
  }

  private tick(): void {
    if (this.stopped) return;
    const now = performance.now();
    if (this.current !== "closed") {
      for (const op of this.operations) {
        if (op.kind !== "commit" || now - op.started >= this.opts.commitWaitMs) this.abandon(op);
      }
      if (!this.probing && now - this.lastProbe >= REPROBE_MS) this.probe("reprobe");
      return;
    }
    if (this.probing) return;
    if (this.suspected && now - this.lastProbe >= MIN_PROBE_GAP_MS) {
      this.probe("failure");
      return;
    }
    if (now - this.lastProgress < this.stallMs || now - this.lastProbe < STALL_PROBE_GAP_MS) return;
    for (const op of this.operations) {
      if (now - op.started >= this.stallMs) {
        this.probe("stall");
        return;
      }
    }
  }

  private probe(reason: "stall" | "failure" | "reprobe"): void {
    const sinceProgressMs = Math.round(performance.now() - this.lastProgress);
    this.probing = true;
    this.suspected = false;
    this.lastProbe = performance.now();
    if (this.current === "open") this.current = "half_open";
    const sent = performance.now();
    // While open, a connection made afresh may take as long as any connection (module header).
    const connectMs =
      this.current === "closed" || this.probeClient
        ? 0
        : Math.max(this.opts.connectTimeoutMs ?? 0, this.opts.probeTimeoutMs);
    const ping = this.ping(connectMs || this.opts.probeTimeoutMs);
    void fulfilsWithin(ping, connectMs + this.opts.probeTimeoutMs).then((ok) => {
      this.probing = false;
      if (this.stopped) return;
      this.opts.logger.debug(
        {
          ok,
          ms: Math.round(performance.now() - sent),
          answeredMeanwhile: this.lastProgress > sent,
          waiting: this.operations.size,
          reason,
          sinceProgressMs,
        },
        "database probe",
      );
      if (ok) {
        this.toClosed();
        return;
      }
      this.dropProbeClient();
      // The server answered other work meanwhile: it is slow or out of connections for the probe,
      // not away (a busy machine must not turn into 503s everywhere).
      if (this.current === "closed" && this.lastProgress > sent) return;
      this.toOpen();
    });
  }

  /** `SELECT 1` on the probe's own connection, made first (within `connectMs`) when there is none. */
  private async ping(connectMs: number): Promise<void> {
    let client = this.probeClient;
    if (!client) {
      const fresh = new pg.Client({
        connectionString: this.opts.databaseUrl,
        application_name: "switchyard-probe",
        connectionTimeoutMillis: connectMs,
        keepAlive: true,
      });
      // A lost probe connection (a shutdown reaches idle connections first) is itself a signal.
      fresh.on("error", (err) => {
        if (this.probeClient === fresh) this.probeClient = undefined;
        void fresh.end().catch(() => undefined);
        this.report(err);
      });
      this.probeClient = client = fresh;
      await client.connect();
    }
    await client.query("SELECT 1");
  }

  /** Closes the probe's connection (a late answer on it must not be taken for a live database). */
  private dropProbeClient(): void {
    const client = this.probeClient;
    this.probeClient = undefined;
    if (!client) return;
    void client.end().catch(() => undefined);
    (client as unknown as { connection?: { stream?: { destroy(): void } } }).connection?.stream?.destroy();
  }

  private toOpen(): void {
    if (this.current === "closed") {
      this.openedAt = performance.now();
      this.opts.logger.warn(
        { database: "unavailable", waiting: this.operations.size },
        "database unavailable: answering 503 until it answers again",
      );
    }
    const opening = this.current === "closed";
    this.current = "open";
    for (const op of this.operations) if (op.kind !== "commit") this.abandon(op);
    if (opening) for (const listener of this.listeners) listener(databaseUnavailable());
  }

  private toClosed(): void {
    if (this.current !== "closed") {
      this.opts.logger.info(
        { database: "available", downMs: Math.round(performance.now() - this.openedAt) },
        "database available again",
      );
    }
    this.current = "closed";
    this.lastProgress = performance.now();
  }

  private abandon(op: Operation): void {
    if (!this.operations.delete(op)) return;
    op.abandon(databaseUnavailable());
  }
}
