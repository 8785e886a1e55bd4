/**
 * The database side of the composition root: PostgreSQL (embedded when `DATABASE_URL` is unset)
 * with migrations, the cache bus's LISTEN connection, and this process's credit and key budget leases.
 */
import path from "node:path";
import type { Logger } from "pino";
import type { DataSource } from "typeorm";
import type { Config } from "../config/config.js";
import { DatabaseCircuit } from "../db/circuit.js";
import { type SessionTimeouts, openDatabase, sessionSettings } from "../db/data-source.js";
import { type EmbeddedOptions, startEmbeddedPostgres } from "../db/embedded.js";
import { CreditService } from "../services/ledger/credit.service.js";
import { KeyBudgetService } from "../services/ledger/key-budget.service.js";
import { CacheBus } from "../services/platform/cache-bus.js";
import type { Lifecycle } from "./lifecycle.js";

/**
 * How this data dir's embedded PostgreSQL starts (folder `<dataDir>/pg`, database `switchyard`),
 * its log lines going to `logger`; the one definition for a single process (`startDatabase`)
 * and for the supervisor of several (`supervisor.ts`).
 */
export function embeddedPostgresOptions(config: Config, logger: Logger): EmbeddedOptions {
  return {
    dir: path.join(config.dataDir, "pg"),
    database: "switchyard",
    onLog: (line) => logger.trace({ pg: line.trim() }, "postgres"),
    onFirstStart: (dir) => logger.info({ dir }, "initialising embedded PostgreSQL (first start)"),
    onLeftover: (pid) =>
      logger.warn({ postgresPid: pid }, "stopping the embedded PostgreSQL a previous Switchyard left running"),
  };
}

/** What every later part is built on. */
export interface DatabaseParts {
  /** `config.databaseUrl`, or the embedded PostgreSQL's URL when that is unset. */
  databaseUrl: string;
  /**
   * A URL that keeps sessions, for LISTEN and pg-boss: `config.databaseDirectUrl` when set (then
   * `databaseUrl` may be a transaction-mode pooler, issue 31 item 3), else `databaseUrl`.
   */
  sessionUrl: string;
  dataSource: DataSource;
  /** The database circuit (issue 28, item 1): every pool of this process runs under it. */
  circuit: DatabaseCircuit;
  /** The sessions' bounds of the pools (config `dbStatementTimeoutMs` …). */
  timeouts: SessionTimeouts;
  bus: CacheBus;
  credit: CreditService;
  /** API key budgets (issue 29, item 1): leases under the same holder as `credit`. */
  keyBudgets: KeyBudgetService;
}

/**
 * Starts the components "embedded PostgreSQL" (only when `config.databaseUrl` is unset; its
 * folder is `<dataDir>/pg`), "database pool" (migrations run), "cache listener", "credit
 * leases" and "key budget leases", in that order.
 * @throws EmbeddedPostgresError when the embedded PostgreSQL cannot start; the driver's error
 *   when PostgreSQL is unreachable.
 */
export async function startDatabase(config: Config, logger: Logger, life: Lifecycle): Promise<DatabaseParts> {
  let databaseUrl = config.databaseUrl;
  if (!databaseUrl) {
    const started = Date.now();
    const embedded = await life.start({
      name: "embedded PostgreSQL",
      start: () => startEmbeddedPostgres(embeddedPostgresOptions(config, logger)),
      stop: (db) => db.stop(),
    });
    databaseUrl = embedded.url;
    logger.info(
      { port: embedded.port, postgresPid: embedded.pid, ms: Date.now() - started },
      "embedded PostgreSQL started",
    );
  }
  const url = databaseUrl;
  // A direct URL only means something beside a DATABASE_URL of one's own (not the embedded one).
  const directUrl = config.databaseUrl ? config.databaseDirectUrl : undefined;
  const sessionUrl = directUrl ?? url;
  const timeouts: SessionTimeouts = {
    statementTimeoutMs: config.dbStatementTimeoutMs,
    lockTimeoutMs: config.dbLockTimeoutMs,
    idleInTransactionTimeoutMs: config.dbIdleInTxTimeoutMs,
  };
  const { dataSource, circuit } = await life.start({
    name: "database pool",
    start: async () => {
      const circuit = new DatabaseCircuit({
        databaseUrl: url,
        probeTimeoutMs: config.dbProbeTimeoutMs,
        connectTimeoutMs: config.dbConnectTimeoutMs,
        // A live server answers a COMMIT well within the statement timeout.
        commitWaitMs: config.dbStatementTimeoutMs || 30_000,
        logger,
      });
      try {
        const dataSource = await openDatabase(url, {
          timeouts,
          connectTimeoutMs: config.dbConnectTimeoutMs,
          circuit,
          directUrl,
          logger,
        });
        return { dataSource, circuit };
      } catch (err) {
        await circuit.close();
        throw err;
      }
    },
    stop: async ({ dataSource, circuit }) => {
      try {
        await dataSource.destroy();
      } finally {
        await circuit.close();
      }
    },
  });
  const bus = await life.start({
    name: "cache listener",
    start: async () => {
      const bus = new CacheBus(sessionUrl, logger, {
        ...sessionSettings(timeouts),
        connectionTimeoutMillis: config.dbConnectTimeoutMs,
      });
      await bus.start();
      return bus;
    },
    stop: (bus) => bus.close(),
  });
  const credit = await life.start({
    name: "credit leases",
    start: () => {
      const credit = new CreditService(dataSource, bus, logger);
      credit.start();
      return credit;
    },
    stop: (credit) => credit.close(),
  });
  const keyBudgets = await life.start({
    name: "key budget leases",
    start: () => {
      const keyBudgets = new KeyBudgetService(dataSource, bus, logger, credit.holder);
      keyBudgets.start();
      return keyBudgets;
    },
    stop: (keyBudgets) => keyBudgets.close(),
  });
  return { databaseUrl: url, sessionUrl, dataSource, circuit, timeouts, bus, credit, keyBudgets };
}
