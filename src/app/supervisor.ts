/**
 * Several API processes on one machine (issue 31, item 1): with `SWITCHYARD_API_PROCESSES` N > 1
 * (or `auto`, the CPU cores) `npm start` becomes a supervisor. It forks N API processes that share
 * the port (the supervisor listens, accepts each connection and hands it to the next API process
 * in turn over its IPC channel), plus one worker process when the role is `all` (job workers stay out of the API processes, as with
 * `SWITCHYARD_ROLE`). It owns the embedded PostgreSQL when `DATABASE_URL` is unset (one data dir,
 * one postmaster; the children get its URL), restarts a child that dies (after 1 s, doubling to
 * 30 s while it keeps dying within a minute of its start), and on SIGTERM / SIGINT stops every
 * child (each drains as a single process does: in-flight metering written) before the database.
 *
 * One engine per machine (issue 31, item 2): when the catalog has embedded models
 * (`SWITCHYARD_ENGINE_PROCESS=auto`, or `on`), it first forks an engine process
 * (`SWITCHYARD_ROLE=engine`, `engine-process.ts`) on a free loopback port with a fresh secret,
 * and only once that serves the others, with `SWITCHYARD_ENGINE_URL` and `SWITCHYARD_ENGINE_TOKEN`:
 * the models are loaded once, there, not once per API process. A dead engine process is restarted
 * on the same port (its callers answer 503 meanwhile); at shutdown it stops last, after the
 * processes whose requests it serves have drained.
 *
 * The hand-off is the supervisor's own, not node:cluster's (issue 31, item 4): cluster's primary
 * keeps its copy of a connection until the process it handed it to says it took it, and forgets
 * it, open, when that process dies first, so its client waited forever (so does Node's own
 * handle passing, whose copy waits for an acknowledgement a dead process never sends). Here the
 * supervisor keeps its copy until the API process says it took the connection
 * (`HANDED_CONNECTION_TAKEN`), closes the copies of a process that exits, and sends one that
 * cannot be sent to the next process: a client of a dying process gets an error, never a wait.
 *
 * Every API or worker child is a whole Switchyard of its role; they share nothing but PostgreSQL
 * (and the engine process), which already carries what processes must agree on (balances,
 * revocations, the events feed: DESIGN §2).
 */
import cluster, { type Worker } from "node:cluster";
import { randomBytes } from "node:crypto";
import net from "node:net";
import os from "node:os";
import type { Logger } from "pino";
import { loadCatalog } from "../config/catalog.js";
import type { Config } from "../config/config.js";
import { type EmbeddedDatabase, startEmbeddedPostgres } from "../db/embedded.js";
import { embeddedPostgresOptions } from "./database.js";
import { localUrl } from "./exposure.js";

/** The message that comes with each connection the supervisor hands to an API process (`http.ts`), with its `id`. */
export const HANDED_CONNECTION = "switchyard:connection";
/** An API process's answer once it serves a handed connection (same `id`): the supervisor closes its copy. */
export const HANDED_CONNECTION_TAKEN = "switchyard:connection-taken";

/** What a supervisor's child is: an API process, the worker, or the engine process. */
export type ChildRole = "api" | "worker" | "engine";

/** What a child tells the supervisor once it serves (API, engine: with its URL) or runs (worker). */
export interface ChildReady {
  type: "switchyard:ready";
  role: ChildRole;
  url: string;
  port: number;
}

/** How many API processes `config.apiProcesses` asks for on this machine. */
export function apiProcessCount(config: Pick<Config, "apiProcesses">): number {
  return config.apiProcesses === "auto" ? os.availableParallelism() : config.apiProcesses;
}

/**
 * Whether this process should supervise children rather than serve: the primary, not a worker or
 * engine role, with N > 1 API processes or `SWITCHYARD_ENGINE_PROCESS=on`.
 */
export function supervises(config: Pick<Config, "apiProcesses" | "role" | "engineProcess">): boolean {
  if (!cluster.isPrimary || config.role === "worker" || config.role === "engine") return false;
  return apiProcessCount(config) > 1 || config.engineProcess === "on";
}

/**
 * Whether the supervisor starts an engine process (issue 31, item 2): `on`, or `auto` with N > 1
 * API processes and an embedded (`llama_cpp`) model in the catalog; never with `off` or when
 * `SWITCHYARD_ENGINE_URL` names an engine process already.
 * @throws ConfigError for an unreadable catalog (under `auto`).
 */
export function runsEngineProcess(
  config: Pick<Config, "apiProcesses" | "engineProcess" | "engineUrl" | "catalogPath">,
): boolean {
  if (config.engineUrl || config.engineProcess === "off") return false;
  if (config.engineProcess === "on") return true;
  if (apiProcessCount(config) < 2) return false;
  return loadCatalog(config.catalogPath).models.some(
    (m) => m.engine.type === "llama_cpp" && m.platformStatus !== "coming_soon",
  );
}

/** A running supervisor: `stop` ends every child, then the embedded PostgreSQL. */
export interface Supervisor {
  /** The base URL the API processes listen on (once the first is ready). */
  url: string;
  stop(): Promise<void>;
}

/** A child's slot: its role and the restarts it has had. */
interface Slot {
  role: ChildRole;
  worker?: Worker;
  startedAt: number;
  delayMs: number;
  /** Times it reported ready (the later ones are restarts coming back). */
  readies: number;
  /** An API process that reported ready and has not exited: it is handed connections. */
  serving: boolean;
  /** Connections handed to it that it has not said it took, by id (the supervisor's copies). */
  handing: Map<number, net.Socket>;
}

const FIRST_DELAY_MS = 1_000;
const MAX_DELAY_MS = 30_000;
/** A child that lived this long is healthy again: its next restart waits FIRST_DELAY_MS. */
const HEALTHY_AFTER_MS = 60_000;
/** How long `stop` waits for the children to drain before it kills them. */
const DRAIN_MS = 35_000;

/**
 * Starts the embedded PostgreSQL (when `config.databaseUrl` is unset), the engine process (when
 * `runsEngineProcess`) and, once it serves, the other children; resolves once every API process
 * listens (it logs "Switchyard supervisor ready" with the URL and pids).
 * @throws EmbeddedPostgresError when the embedded PostgreSQL cannot start; Error when a child
 *   exits before every API process was ready (its own log says why).
 */
export async function startSupervisor(config: Config, logger: Logger): Promise<Supervisor> {
  let embedded: EmbeddedDatabase | undefined;
  let databaseUrl = config.databaseUrl;
  if (!databaseUrl) {
    embedded = await startEmbeddedPostgres(embeddedPostgresOptions(config, logger));
    databaseUrl = embedded.url;
    logger.info({ port: embedded.port, postgresPid: embedded.pid }, "embedded PostgreSQL started");
  }
  const slot = (role: ChildRole): Slot => ({
    role,
    startedAt: 0,
    delayMs: FIRST_DELAY_MS,
    readies: 0,
    serving: false,
    handing: new Map(),
  });
  const apiCount = apiProcessCount(config);
  const engineSlot = runsEngineProcess(config) ? slot("engine") : undefined;
  const slots: Slot[] = [
    ...Array.from({ length: apiCount }, () => slot("api")),
    ...(config.role === "all" ? [slot("worker")] : []),
  ];
  // The engine process's address (its first start picks a free port; restarts keep it, so the
  // other children's SWITCHYARD_ENGINE_URL stays right) and the secret its callers send.
  const engine = { url: "", port: 0, token: engineSlot ? randomBytes(32).toString("base64url") : "" };
  let stopping = false;
  /** While starting: the slots not yet ready, and how the start ends. */
  let starting: { waiting: Set<Slot>; resolve: () => void; reject: (err: Error) => void } | undefined;

  // The port: connections that come before the first API process serves wait for it.
  const listener = net.createServer({ pauseOnConnect: true, noDelay: true });
  const early: net.Socket[] = [];
  let started = false;
  let turn = 0;
  let handed = 0;
  /** Hands `socket` to the next serving API process; one that cannot be sent tries the others. */
  const handOff = (socket: net.Socket, tries = 0): void => {
    const serving = slots.filter((s) => s.serving && s.worker?.isConnected());
    if (stopping || serving.length === 0) {
      socket.destroy();
      return;
    }
    const s = serving[turn++ % serving.length];
    const { handing } = s;
    const id = ++handed;
    handing.set(id, socket);
    // keepOpen: this copy stays until the process says it took the connection, or exits.
    s.worker!.send({ type: HANDED_CONNECTION, id }, socket, { keepOpen: true }, (err) => {
      if (!err || !handing.delete(id)) return;
      if (tries + 1 < serving.length) handOff(socket, tries + 1);
      else socket.destroy();
    });
  };
  listener.on("connection", (socket) => {
    socket.on("error", () => undefined);
    if (started) handOff(socket);
    else early.push(socket);
  });
  const port = await new Promise<number>((resolve, reject) => {
    listener.once("error", reject);
    listener.listen(config.port, config.host, () => resolve((listener.address() as net.AddressInfo).port));
  }).catch(async (err: unknown) => {
    await embedded?.stop();
    throw err;
  });
  const url = localUrl(config, port);

  const envFor = (s: Slot): Record<string, string> =>
    s.role === "engine"
      ? {
          SWITCHYARD_ROLE: "engine",
          SWITCHYARD_API_PROCESSES: "1",
          HOST: "127.0.0.1",
          PORT: String(engine.port),
          SWITCHYARD_ENGINE_TOKEN: engine.token,
        }
      : {
          SWITCHYARD_ROLE: s.role,
          SWITCHYARD_API_PROCESSES: "1",
          // The port the supervisor holds: the API processes name it (they listen on none).
          PORT: String(port),
          DATABASE_URL: databaseUrl,
          // A direct URL only goes with a DATABASE_URL of one's own, never with the embedded one.
          ...(config.databaseUrl ? {} : { DATABASE_DIRECT_URL: "" }),
          ...(engineSlot ? { SWITCHYARD_ENGINE_URL: engine.url, SWITCHYARD_ENGINE_TOKEN: engine.token } : {}),
        };

  const fork = (s: Slot) => {
    const worker = cluster.fork(envFor(s));
    s.worker = worker;
    s.startedAt = Date.now();
    worker.on("message", (msg: ChildReady | { type: typeof HANDED_CONNECTION_TAKEN; id: number }) => {
      if (msg?.type === HANDED_CONNECTION_TAKEN) {
        s.handing.get(msg.id)?.destroy();
        s.handing.delete(msg.id);
        return;
      }
      if (msg?.type !== "switchyard:ready") return;
      if (msg.role === "api") s.serving = !stopping;
      if (msg.role === "engine") Object.assign(engine, { url: msg.url, port: msg.port });
      if (++s.readies > 1) logger.info({ role: s.role, pid: worker.process.pid }, "Switchyard process back");
      if (starting?.waiting.delete(s) && starting.waiting.size === 0) starting.resolve();
    });
    worker.on("exit", (code, signal) => {
      if (s.worker !== worker) return;
      s.worker = undefined;
      s.serving = false;
      // Connections it had not said it took: closed, their clients see an error.
      for (const socket of s.handing.values()) socket.destroy();
      s.handing.clear();
      if (stopping) return;
      if (starting) {
        starting.reject(new Error(`a ${s.role} process exited (${signal ?? code}) before every API process was ready`));
        return;
      }
      const lived = Date.now() - s.startedAt;
      if (lived >= HEALTHY_AFTER_MS) s.delayMs = FIRST_DELAY_MS;
      logger.warn(
        { role: s.role, pid: worker.process.pid, code, signal, restartInMs: s.delayMs },
        "a Switchyard process exited; restarting it",
      );
      const delay = s.delayMs;
      s.delayMs = Math.min(MAX_DELAY_MS, s.delayMs * 2);
      setTimeout(() => {
        if (!stopping) fork(s);
      }, delay).unref();
    });
  };

  /** Forks `group` (in reverse order) and waits until each of `awaited` reported ready. */
  const startGroup = (group: Slot[], awaited: Slot[]) =>
    new Promise<void>((resolve, reject) => {
      starting = { waiting: new Set(awaited), resolve, reject };
      for (const s of [...group].reverse()) fork(s);
    }).finally(() => (starting = undefined));

  /** SIGTERMs the children of `group`, SIGKILLs those still running after DRAIN_MS. */
  const stopGroup = async (group: Slot[]) => {
    const running = group.map((s) => s.worker).filter((w): w is Worker => !!w && !w.isDead());
    const exits = running.map(
      (w) => new Promise<void>((resolve) => (w.isDead() ? resolve() : w.once("exit", resolve))),
    );
    for (const w of running) w.process.kill("SIGTERM");
    const killer = setTimeout(() => {
      for (const w of running) if (!w.isDead()) w.process.kill("SIGKILL");
    }, DRAIN_MS);
    await Promise.all(exits);
    clearTimeout(killer);
  };

  const stop = async () => {
    if (stopping) return;
    stopping = true;
    // No new connections; the API processes and the worker drain first: what they have in
    // flight needs the engine.
    listener.close();
    for (const s of slots) s.serving = false;
    for (const socket of early.splice(0)) socket.destroy();
    await stopGroup(slots);
    if (engineSlot) await stopGroup([engineSlot]);
    await embedded?.stop();
  };

  try {
    // The engine process first: the others are told its URL. Then the worker first, so its
    // migrations (an advisory lock) run while the API processes start.
    if (engineSlot) await startGroup([engineSlot], [engineSlot]);
    await startGroup(
      slots,
      slots.filter((s) => s.role === "api"),
    );
  } catch (err) {
    await stop();
    throw err;
  }
  started = true;
  for (const socket of early.splice(0)) handOff(socket);
  logger.info(
    {
      url,
      apiProcesses: apiCount,
      workerProcess: config.role === "all",
      engineProcess: engineSlot ? engine.url : null,
      pids: [...(engineSlot ? [engineSlot] : []), ...slots].map((s) => ({ role: s.role, pid: s.worker?.process.pid })),
    },
    "Switchyard supervisor ready",
  );
  return { url, stop };
}

/** In a child: tells the supervisor this process serves (API, engine: with its URL) or runs (worker). */
export function reportReady(role: ChildRole, url: string, port: number): void {
  if (!cluster.isWorker || !process.send) return;
  const msg: ChildReady = { type: "switchyard:ready", role, url, port };
  process.send(msg);
}
