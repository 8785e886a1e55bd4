/**
 * The durable job queue (issue 6, item 1): pg-boss 10 on the service's own PostgreSQL, in its
 * own `pgboss` schema, which pg-boss creates and migrates itself at start (under its advisory
 * lock, so any number of processes may start at once on one database).
 *
 * Why pg-boss over graphile-worker: pg-boss 10 runs on Node 20 and plain `pg` (which we already
 * use), needs no separate CLI or schema-migration step, and — what background responses need —
 * sends a job through any SQL executor (`send(…, {db})`), so a response row and its jobs commit
 * in one transaction of ours; delayed jobs (`startAfter`, our deadlines) and retries come built in.
 * graphile-worker 0.16 would also do, but adds its own migration runner and a TypeScript build
 * pipeline of its own (task files / crontab), for features we do not use.
 */
import type { EventEmitter } from "node:events";
import { createRequire } from "node:module";
import pg from "pg";
import PgBoss from "pg-boss";
import type { Logger } from "pino";
import type { DatabaseCircuit } from "../db/circuit.js";
import { DEFAULT_SESSION_TIMEOUTS, type SessionTimeouts, sessionSettings } from "../db/data-source.js";
import { guardPool, guardedClientClass } from "../db/pool-guard.js";
import { isDatabaseUnavailable } from "../shared/database-errors.js";
import type { JobData, JobName, JobSender, SendOptions, SqlExecutor } from "../services/platform/job-queue.port.js";
import { SpanKind, type Tracing, currentTraceparent } from "../shared/tracing.js";

/** pg-boss's schema (its default, which `JobQueue` keeps). */
const PG_BOSS_SCHEMA = "pgboss";

/**
 * pg-boss 10 completes or fails each job a worker ran without awaiting it (`manager.watch`:
 * `this.complete(…)` / `this.fail(…)` after the handler). With the database down at that moment
 * the rejection goes unhandled, which ends the process (Node's default) — a sick database must not
 * take the service down (issue 28, item 1). Here both report their failure as pg-boss's `error`
 * event instead (logged by `JobQueue`) and answer "nothing changed"; the job stays active until it
 * expires and is retried, as pg-boss does with any lost completion. Patched once per loaded copy.
 */
const requireCjs = createRequire(import.meta.url);
const Manager = requireCjs("pg-boss/src/manager.js") as {
  prototype: Record<string, unknown> & { __switchyardSettled?: boolean };
};
if (!Manager.prototype.__switchyardSettled) {
  Manager.prototype.__switchyardSettled = true;
  for (const name of ["complete", "fail"] as const) {
    const settle = Manager.prototype[name] as (this: EventEmitter, ...args: unknown[]) => Promise<unknown>;
    Manager.prototype[name] = async function settled(this: EventEmitter, ...args: unknown[]): Promise<unknown> {
      try {
        return await settle.apply(this, args);
      } catch (err) {
        this.emit("error", err);
        return { jobs: [], requested: 0, affected: 0 };
      }
    };
  }
}

/** The period of pg-boss's watch over stopping workers (`manager.offWork`: `delay(1000)`), ms. */
const PG_BOSS_WATCH_MS = 1000;

/** Every queue this build uses; created (idempotently) at start. */
export const JOB_NAMES: readonly JobName[] = [
  "response-generate",
  "response-deadline",
  "batch-run",
  "batch-expire",
  "deployment-reconcile",
];

/** Options of a `JobQueue`. */
export interface JobQueueOptions {
  databaseUrl: string;
  logger: Logger;
  /** Runs pg-boss's maintenance (expiry, archive) in this process: true where workers run. */
  supervise: boolean;
  /**
   * Traces (issue 29, item 2), when on: a job sent inside a span carries its `traceparent`, and
   * each job runs in a span `job <queue>`, child of the span that sent it (else a root).
   */
  tracing?: Tracing;
  /**
   * The bounds of the queue pool's sessions (issue 28, item 1): the pools' lock and
   * idle-in-transaction timeouts (pg-boss takes its advisory locks under a local `lock_timeout`
   * of its own), with `statementTimeoutMs` for statements instead (default 10 min): its
   * maintenance archives and deletes finished jobs in statements as long as the queue is large.
   */
  timeouts?: SessionTimeouts;
  statementTimeoutMs?: number;
  /** Most time to get a connection, ms (default 10 s). */
  connectTimeoutMs?: number;
  /** The database circuit the queue's pool runs under (`db/circuit.ts`). */
  circuit?: DatabaseCircuit;
}

/** The field of a job's data holding the `traceparent` of the span that sent it (tracing on only). */
const TRACEPARENT_FIELD = "traceparent";

/**
 * One pg-boss instance per process: sends jobs (every role) and runs handlers (worker roles).
 * Handlers get one job at a time; `work(name, n, …)` runs up to `n` of them at once.
 */
export class JobQueue implements JobSender {
  private readonly boss: PgBoss;
  /** pg-boss's connections: our pool, so that it has the session bounds and the circuit. */
  private readonly pool: pg.Pool;
  private started = false;
  /** Queues this process works on, and handlers running now. */
  private readonly worked = new Set<JobName>();
  private running = 0;

  constructor(private readonly opts: JobQueueOptions) {
    const timeouts = opts.timeouts ?? DEFAULT_SESSION_TIMEOUTS;
    this.pool = new pg.Pool({
      connectionString: opts.databaseUrl,
      application_name: "switchyard-jobs",
      max: 4,
      connectionTimeoutMillis: opts.connectTimeoutMs ?? 10_000,
      keepAlive: true,
      ...sessionSettings({ ...timeouts, statementTimeoutMs: opts.statementTimeoutMs ?? 600_000 }),
      ...(opts.circuit ? { Client: guardedClientClass(opts.circuit) } : {}),
    });
    if (opts.circuit) guardPool(this.pool, opts.circuit);
    // Idle connections report their errors here; without a listener they would throw.
    this.pool.on("error", (err) => this.onError(err));
    this.boss = new PgBoss({
      // As pg-boss's own pool adapter: nothing is run once the pool is closing (a worker's last poll).
      db: {
        executeSql: (text, values) => (this.pool.ending ? Promise.resolve(undefined!) : this.pool.query(text, values)),
      },
      supervise: opts.supervise,
      schedule: false,
      migrate: true,
    });
    // pg-boss reports its own connection and maintenance errors here; without a listener they would throw.
    this.boss.on("error", (err) => this.onError(err));
  }

  /**
   * A pg-boss or pool error: a warning, except while the database is unavailable, when every
   * worker's every poll fails alike and the database circuit has said so once (debug then).
   */
  private onError(err: unknown): void {
    const circuit = this.opts.circuit;
    if (circuit && circuit.state !== "closed" && isDatabaseUnavailable(err)) {
      this.opts.logger.debug({ err }, "job queue error (database unavailable)");
    } else {
      this.opts.logger.warn({ err }, "job queue error");
    }
  }

  /**
   * Creates or migrates pg-boss's schema and the queues of `JOB_NAMES`.
   * @throws the driver's error when the database is unreachable.
   */
  async start(): Promise<void> {
    try {
      await this.boss.start();
    } catch (err) {
      await this.pool.end().catch(() => undefined);
      throw err;
    }
    this.started = true;
    for (const name of JOB_NAMES) await this.createQueue(name);
  }

  /**
   * pg-boss's `createQueue`, tried again (up to 5 times) when PostgreSQL picks it as a deadlock's
   * victim: processes starting together on a fresh database (a supervisor's children, issue 31)
   * create the same queue at once, and two creations (an insert, then a partition attached to
   * the job table) can deadlock. The retry finds the queue created and does nothing.
   */
  private async createQueue(name: JobName): Promise<void> {
    for (let attempt = 1; ; attempt++) {
      try {
        return await this.boss.createQueue(name);
      } catch (err) {
        if ((err as { code?: string }).code !== "40P01" || attempt >= 5) throw err;
        this.opts.logger.info({ queue: name, attempt }, "job queue creation deadlocked with another process; retrying");
        await new Promise((r) => setTimeout(r, 50 * attempt + Math.random() * 100));
      }
    }
  }

  /**
   * Sends one job; with `options.db` it is written through that executor (inside its transaction).
   * @returns the job id.
   */
  async send<N extends JobName>(name: N, data: JobData[N], options: SendOptions = {}): Promise<string> {
    // pg-boss checks `key in options`, so absent settings must be absent, not undefined.
    const sendOptions: PgBoss.SendOptions = { retryLimit: options.retryLimit ?? 3, retryDelay: 5 };
    if (options.startAfter) sendOptions.startAfter = options.startAfter;
    if (options.expireInSeconds) sendOptions.expireInSeconds = options.expireInSeconds;
    if (options.priority) sendOptions.priority = options.priority;
    if (options.db) sendOptions.db = toPgBossDb(options.db);
    const traceparent = this.opts.tracing?.enabled ? currentTraceparent() : undefined;
    const sent = traceparent ? { ...data, [TRACEPARENT_FIELD]: traceparent } : data;
    const id = await this.boss.send(name, sent, sendOptions);
    if (!id) throw new Error(`job ${name} was not created`);
    return id;
  }

  /**
   * See `JobSender.waitingSql`. pg-boss's states are ordered (`created` < `retry` < `active` < …):
   * `state < 'active'` is a job not yet fetched, which pg-boss's own fetch index (`job_i5`) covers.
   * `name` and `field` are the typed constants of `JobData`, never caller input.
   */
  waitingSql<N extends JobName>(name: N, field: keyof JobData[N] & string, value: string): string {
    if (!JOB_NAMES.includes(name) || !/^[A-Za-z]+$/.test(field)) throw new Error(`not a job field: ${name}.${field}`);
    return `EXISTS (SELECT 1 FROM ${PG_BOSS_SCHEMA}.job j
                     WHERE j.name = '${name}' AND j.state < 'active' AND j.data ->> '${field}' = (${value}))`;
  }

  /**
   * Runs `handler` for jobs of `name`, up to `concurrency` at once. An idle worker polls every
   * `pollingIntervalSeconds` (at least 0.5); one that just ran a job fetches the next at once.
   * A handler that throws fails the job, which pg-boss retries up to its `retryLimit`.
   */
  async work<N extends JobName>(
    name: N,
    concurrency: number,
    handler: (data: JobData[N]) => Promise<void>,
    pollingIntervalSeconds = 0.5,
  ): Promise<void> {
    this.worked.add(name);
    for (let i = 0; i < concurrency; i++) {
      const worker: { id?: string } = {};
      worker.id = await this.boss.work<JobData[N]>(name, { pollingIntervalSeconds, batchSize: 1 }, async (jobs) => {
        // A fetch that was under way when the stop began still hands its job over: it is failed
        // instead (pg-boss retries it; if the pool closed first, the job expires and the
        // reconcilers of background responses and batches re-send what it was for).
        if (!this.started) throw new Error(`job queue stopping: ${name} job left for a retry`);
        this.running++;
        try {
          for (const job of jobs) await this.run(name, job, handler);
        } finally {
          this.running--;
          // pg-boss waits out the polling interval after every fetch, busy or not: a worker would
          // run at most one job per interval (4 workers, 0.5 s: 8 background responses a second).
          if (jobs.length > 0 && worker.id) this.boss.notifyWorker(worker.id);
        }
      });
    }
  }

  /** Runs one job's handler, inside its span when tracing is on (see `JobQueueOptions.tracing`). */
  private run<N extends JobName>(
    name: N,
    job: PgBoss.Job<JobData[N]>,
    handler: (data: JobData[N]) => Promise<void>,
  ): Promise<void> {
    const tracing = this.opts.tracing;
    if (!tracing?.enabled) return handler(job.data);
    const traceparent = (job.data as Record<string, unknown> | null)?.[TRACEPARENT_FIELD];
    return tracing.inSpan(
      `job ${name}`,
      {
        kind: SpanKind.CONSUMER,
        parent: typeof traceparent === "string" ? { traceparent } : "root",
        attributes: {
          "messaging.system": "pg-boss",
          "messaging.operation.name": "process",
          "messaging.destination.name": name,
          "messaging.message.id": job.id,
        },
      },
      () => handler(job.data),
    );
  }

  /**
   * Stops fetching, waits up to `timeoutMs` for running handlers, then closes the queue's pool.
   * Jobs still running after that are failed by pg-boss and retried elsewhere. Handlers are
   * awaited here, before pg-boss's own stop: pg-boss watches stopping workers from a 1 s timer
   * loop that outlives its `stop()` while a handler runs (and, under Jest, then fails after the
   * test file's teardown).
   */
  async stop(timeoutMs = 10_000): Promise<void> {
    if (!this.started) return;
    this.started = false;
    const deadline = Date.now() + timeoutMs;
    for (const name of this.worked) await this.boss.offWork(name).catch(() => undefined);
    while (this.running > 0 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 25));
    await this.boss.stop({ graceful: true, wait: true, timeout: Math.max(1000, deadline - Date.now()) });
    // pg-boss closes only a pool of its own: ours ends here, once its queries are back (or
    // abandoned by the database circuit), waited for until the deadline.
    await Promise.race([
      this.pool.end().catch(() => undefined),
      new Promise((resolve) => setTimeout(resolve, Math.max(1000, deadline - Date.now())).unref()),
    ]);
    // pg-boss's stopping-worker watch wakes every second until its workers report stopped, and
    // each wake-up loads a module. Its workers stop as the pool closes, so one more wake-up sees
    // them stopped and ends the watch: wait for it here, while the process (or a Jest file) is
    // still whole, rather than let it run after the caller moved on.
    await new Promise((resolve) => setTimeout(resolve, PG_BOSS_WATCH_MS + 100));
  }
}

function toPgBossDb(db: SqlExecutor): PgBoss.Db {
  return { executeSql: async (text, values) => ({ rows: await db(text, values) }) };
}
