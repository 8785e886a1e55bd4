/**
 * Several API processes on one machine (issue 31, item 1): with `SWITCHYARD_API_PROCESSES` N > 1
 * (or `auto`, the CPU cores) `npm start` becomes a supervisor. It forks N API processes that share
 * the port (node:cluster: the supervisor accepts connections and hands them out in turn), plus one
 * worker process when the role is `all` (job workers stay out of the API processes, as with
 * `SWITCHYARD_ROLE`). It owns the embedded PostgreSQL when `DATABASE_URL` is unset (one data dir,
 * one postmaster; the children get its URL), restarts a child that dies (after 1 s, doubling to
 * 30 s while it keeps dying within a minute of its start), and on SIGTERM / SIGINT stops every
 * child (each drains as a single process does: in-flight metering written) before the database.
 *
 * Every child is a whole Switchyard of its role; they share nothing but PostgreSQL, which already
 * carries what processes must agree on (balances, revocations, the events feed: DESIGN §2). Each
 * API process loads the catalog's embedded models itself (memory × N).
 */
import cluster, { type Worker } from "node:cluster";
import os from "node:os";
import path from "node:path";
import type { Logger } from "pino";
import type { Config } from "../config/config.js";
import { type EmbeddedDatabase, startEmbeddedPostgres } from "../db/embedded.js";

/** What a child tells the supervisor once it serves (or, for the worker, runs). */
export interface ChildReady {
  type: "switchyard:ready";
  role: "api" | "worker";
  url: string;
  port: number;
}

/** How many API processes `config.apiProcesses` asks for on this machine. */
export function apiProcessCount(config: Pick<Config, "apiProcesses">): number {
  return config.apiProcesses === "auto" ? os.availableParallelism() : config.apiProcesses;
}

/** Whether this process should supervise children rather than serve (the primary, N > 1, not a worker role). */
export function supervises(config: Pick<Config, "apiProcesses" | "role">): boolean {
  return cluster.isPrimary && config.role !== "worker" && apiProcessCount(config) > 1;
}

/** A running supervisor: `stop` ends every child, then the embedded PostgreSQL. */
export interface Supervisor {
  /** The base URL the API processes listen on (once the first is ready). */
  url: string;
  stop(): Promise<void>;
}

/** A child's slot: its role and the restarts it has had. */
interface Slot {
  role: "api" | "worker";
  worker?: Worker;
  startedAt: number;
  delayMs: number;
}

const FIRST_DELAY_MS = 1_000;
const MAX_DELAY_MS = 30_000;
/** A child that lived this long is healthy again: its next restart waits FIRST_DELAY_MS. */
const HEALTHY_AFTER_MS = 60_000;
/** How long `stop` waits for the children to drain before it kills them. */
const DRAIN_MS = 35_000;

/**
 * Starts the embedded PostgreSQL (when `config.databaseUrl` is unset) and the children; resolves
 * once every API process listens (it logs "Switchyard supervisor ready" with the URL and pids).
 * @throws EmbeddedPostgresError when the embedded PostgreSQL cannot start; Error when an API
 *   process exits before every one was ready (its own log says why).
 */
export async function startSupervisor(config: Config, logger: Logger): Promise<Supervisor> {
  let embedded: EmbeddedDatabase | undefined;
  let databaseUrl = config.databaseUrl;
  if (!databaseUrl) {
    embedded = await startEmbeddedPostgres({
      dir: path.join(config.dataDir, "pg"),
      database: "switchyard",
      onLog: (line) => logger.trace({ pg: line.trim() }, "postgres"),
      onFirstStart: (dir) => logger.info({ dir }, "initialising embedded PostgreSQL (first start)"),
      onLeftover: (pid) =>
        logger.warn({ postgresPid: pid }, "stopping the embedded PostgreSQL a previous Switchyard left running"),
    });
    databaseUrl = embedded.url;
    logger.info({ port: embedded.port, postgresPid: embedded.pid }, "embedded PostgreSQL started");
  }
  const apiCount = apiProcessCount(config);
  const slots: Slot[] = [
    ...Array.from({ length: apiCount }, (): Slot => ({ role: "api", startedAt: 0, delayMs: FIRST_DELAY_MS })),
    ...(config.role === "all" ? [{ role: "worker" as const, startedAt: 0, delayMs: FIRST_DELAY_MS }] : []),
  ];
  let stopping = false;
  let url = "";
  let readyCount = 0;
  let settle: { resolve: () => void; reject: (err: Error) => void } | undefined;
  const allReady = new Promise<void>((resolve, reject) => (settle = { resolve, reject }));

  const fork = (slot: Slot) => {
    const worker = cluster.fork({
      SWITCHYARD_ROLE: slot.role,
      SWITCHYARD_API_PROCESSES: "1",
      DATABASE_URL: databaseUrl,
      // A direct URL only goes with a DATABASE_URL of one's own, never with the embedded one.
      ...(config.databaseUrl ? {} : { DATABASE_DIRECT_URL: "" }),
    });
    slot.worker = worker;
    slot.startedAt = Date.now();
    worker.on("message", (msg: ChildReady) => {
      if (msg?.type !== "switchyard:ready") return;
      if (msg.role === "api" && !url) url = msg.url;
      if (!settle) logger.info({ role: slot.role, pid: worker.process.pid }, "Switchyard process back");
      else if (msg.role === "api" && ++readyCount === apiCount) settle.resolve();
    });
    worker.on("exit", (code, signal) => {
      if (slot.worker !== worker) return;
      slot.worker = undefined;
      if (stopping) return;
      if (settle && readyCount < apiCount) {
        settle.reject(
          new Error(`a ${slot.role} process exited (${signal ?? code}) before every API process was ready`),
        );
        return;
      }
      const lived = Date.now() - slot.startedAt;
      if (lived >= HEALTHY_AFTER_MS) slot.delayMs = FIRST_DELAY_MS;
      logger.warn(
        { role: slot.role, pid: worker.process.pid, code, signal, restartInMs: slot.delayMs },
        "a Switchyard process exited; restarting it",
      );
      const delay = slot.delayMs;
      slot.delayMs = Math.min(MAX_DELAY_MS, slot.delayMs * 2);
      setTimeout(() => {
        if (!stopping) fork(slot);
      }, delay).unref();
    });
  };

  const stop = async () => {
    if (stopping) return;
    stopping = true;
    const running = slots.map((s) => s.worker).filter((w): w is Worker => !!w && !w.isDead());
    const exits = running.map(
      (w) => new Promise<void>((resolve) => (w.isDead() ? resolve() : w.once("exit", resolve))),
    );
    for (const w of running) w.process.kill("SIGTERM");
    const killer = setTimeout(() => {
      for (const w of running) if (!w.isDead()) w.process.kill("SIGKILL");
    }, DRAIN_MS);
    await Promise.all(exits);
    clearTimeout(killer);
    await embedded?.stop();
  };

  // The worker first: its migrations (an advisory lock) run while the API processes start.
  for (const slot of [...slots].reverse()) fork(slot);
  try {
    await allReady;
  } catch (err) {
    await stop();
    throw err;
  }
  settle = undefined;
  logger.info(
    {
      url,
      apiProcesses: apiCount,
      workerProcess: config.role === "all",
      pids: slots.map((s) => ({ role: s.role, pid: s.worker?.process.pid })),
    },
    "Switchyard supervisor ready",
  );
  return {
    get url() {
      return url;
    },
    stop,
  };
}

/** In a child: tells the supervisor this process serves (API, with its URL) or runs (worker). */
export function reportReady(role: "api" | "worker", url: string, port: number): void {
  if (!cluster.isWorker || !process.send) return;
  const msg: ChildReady = { type: "switchyard:ready", role, url, port };
  process.send(msg);
}
