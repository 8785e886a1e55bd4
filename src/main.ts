/**
 * `npm start`: reads the configuration, starts Switchyard, and shuts it down cleanly on SIGINT or
 * SIGTERM (in-flight metering written, engines released, embedded PostgreSQL stopped).
 * Configuration problems print one line naming the setting, not a stack trace; so does an
 * embedded PostgreSQL that cannot start (e.g. its folder is in use by another Switchyard).
 */
import cluster from "node:cluster";
import { createLogger } from "./app/logger.js";
import { reportReady, startSupervisor, supervises } from "./app/supervisor.js";
import { ConfigError, loadConfig } from "./config/config.js";
import { EmbeddedPostgresError } from "./db/embedded.js";
import { lowerCpuPriority } from "./shared/process-priority.js";

/** Several API processes (`SWITCHYARD_API_PROCESSES` > 1): this process only supervises them. */
async function supervise(config: ReturnType<typeof loadConfig>): Promise<void> {
  const logger = createLogger(config.logLevel, config.logFormat);
  const supervisor = await startSupervisor(config, logger);
  let stopping = false;
  const stop = (signal: string) => {
    if (stopping) return;
    stopping = true;
    logger.info({ signal }, "shutting down");
    supervisor.stop().then(
      () => process.exit(0),
      (err) => {
        logger.error({ err }, "shutdown failed");
        process.exit(1);
      },
    );
  };
  process.on("SIGINT", () => stop("SIGINT"));
  process.on("SIGTERM", () => stop("SIGTERM"));
}

/**
 * `SWITCHYARD_ROLE=engine` (issue 31, item 2): the embedded models only, for the machine's other
 * processes; it stops (calls in flight finished) on SIGINT / SIGTERM or when its supervisor goes.
 */
async function serveEngine(config: ReturnType<typeof loadConfig>): Promise<void> {
  // Imported here: an engine process loads neither the HTTP API nor the ORM (start time, memory).
  const { startEngineProcess } = await import("./app/engine-process.js");
  const engine = await startEngineProcess(config);
  let stopping = false;
  const stop = (signal: string) => {
    if (stopping) return;
    stopping = true;
    engine.logger.info({ signal }, "shutting down");
    const force = setTimeout(() => process.exit(1), 40_000);
    force.unref();
    engine.close().then(
      () => process.exit(0),
      (err) => {
        engine.logger.error({ err }, "shutdown failed");
        process.exit(1);
      },
    );
  };
  process.on("SIGINT", () => stop("SIGINT"));
  process.on("SIGTERM", () => stop("SIGTERM"));
  if (cluster.isWorker) {
    reportReady("engine", engine.url, engine.port);
    process.on("disconnect", () => stop("supervisor gone"));
  }
}

async function main(): Promise<void> {
  const config = loadConfig();
  if (config.role === "engine") return serveEngine(config);
  if (supervises(config)) return supervise(config);
  // A worker process yields the CPU to API processes (issue 12, item 3). Done here, by the
  // process's entry point, before any thread of the engine exists (they inherit it), and never in
  // startSwitchyard: a host process embedding Switchyard keeps its own priority.
  const priority = config.role === "worker" && config.workerNice > 0 ? lowerCpuPriority(config.workerNice) : undefined;
  const { startSwitchyard } = await import("./server.js");
  // A supervisor's API process takes the connections the supervisor hands it (it holds the port).
  const app = await startSwitchyard(config, { handedConnections: cluster.isWorker && config.role === "api" });
  if (priority) {
    if (priority.failed > 0) {
      app.logger.warn(priority, `worker CPU priority: could not set nice ${priority.nice} on every thread`);
    } else if (priority.changed > 0) {
      app.logger.info(priority, `worker CPU priority lowered to nice ${priority.nice}`);
    } else {
      app.logger.info(priority, `worker CPU priority already at nice ${priority.nice} or a lower priority`);
    }
  }
  let stopping = false;
  const stop = (signal: string) => {
    if (stopping) return;
    stopping = true;
    app.logger.info({ signal }, "shutting down");
    const force = setTimeout(() => process.exit(1), 30_000);
    force.unref();
    app.close().then(
      () => process.exit(0),
      (err) => {
        app.logger.error({ err }, "shutdown failed");
        process.exit(1);
      },
    );
  };
  process.on("SIGINT", () => stop("SIGINT"));
  process.on("SIGTERM", () => stop("SIGTERM"));
  if (cluster.isWorker) {
    // A supervisor's child: it says when it serves, and ends with the supervisor (no orphans).
    reportReady(config.role === "worker" ? "worker" : "api", app.url, app.port);
    process.on("disconnect", () => stop("supervisor gone"));
  }
}

main().catch((err: unknown) => {
  if (err instanceof ConfigError || err instanceof EmbeddedPostgresError) {
    process.stderr.write(`switchyard: ${err.message}\n`);
  } else {
    process.stderr.write(`switchyard: failed to start: ${err instanceof Error ? err.stack : String(err)}\n`);
  }
  process.exit(1);
});
