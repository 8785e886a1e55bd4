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
import PgBoss from "pg-boss";
import type { Logger } from "pino";
import type { JobData, JobName, JobSender, SendOptions, SqlExecutor } from "../services/platform/job-queue.port.js";

/** pg-boss's schema (its default, which `JobQueue` keeps). */
const PG_BOSS_SCHEMA = "pgboss";

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
}

/**
 * One pg-boss instance per process: sends jobs (every role) and runs handlers (worker roles).
 * Handlers get one job at a time; `work(name, n, …)` runs up to `n` of them at once.
 */
export class JobQueue implements JobSender {
  private readonly boss: PgBoss;
  private started = false;
  /** Queues this process works on, and handlers running now. */
  private readonly worked = new Set<JobName>();
  private running = 0;

  constructor(private readonly opts: JobQueueOptions) {
    this.boss = new PgBoss({
      connectionString: opts.databaseUrl,
      application_name: "switchyard-jobs",
      max: 4,
      supervise: opts.supervise,
      schedule: false,
      migrate: true,
    });
    // pg-boss reports its own connection and maintenance errors here; without a listener they would throw.
    this.boss.on("error", (err) => opts.logger.warn({ err }, "job queue error"));
  }

  /**
   * Creates or migrates pg-boss's schema and the queues of `JOB_NAMES`.
   * @throws the driver's error when the database is unreachable.
   */
  async start(): Promise<void> {
    await this.boss.start();
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
    const id = await this.boss.send(name, data, sendOptions);
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
          for (const job of jobs) await handler(job.data);
        } finally {
          this.running--;
          // pg-boss waits out the polling interval after every fetch, busy or not: a worker would
          // run at most one job per interval (4 workers, 0.5 s: 8 background responses a second).
          if (jobs.length > 0 && worker.id) this.boss.notifyWorker(worker.id);
        }
      });
    }
  }

  /**
   * Stops fetching, waits up to `timeoutMs` for running handlers, then closes pg-boss's pool.
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
