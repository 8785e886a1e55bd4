/**
 * The composition root (DESIGN §2 "Components and how they start"; issue 25, item 4): database
 * (`database.ts`), models and engines (`models.ts`), services (`services.ts`), background work
 * (`workers.ts`), the control plane and resolvers (`control.ts`), HTTP (`http.ts`) and GraphQL
 * (`graphql.ts`). Every part with something to stop starts through one `Lifecycle`, in the order
 * of `COMPONENTS` (`lifecycle.ts`); `close` and a failed start stop them in the reverse order.
 */
import "reflect-metadata";
import type { Logger } from "pino";
import type { DataSource } from "typeorm";
import { type Config, ConfigError } from "../config/config.js";
import type { EngineRouter } from "../inference/engine-router.js";
import { withSafeErrors } from "../logging.js";
import type { CompletionEventsService } from "../services/events/completion-events.service.js";
import type { CreditService } from "../services/ledger/credit.service.js";
import type { InFlightActivity } from "../services/metering/in-flight-activity.js";
import type { MeteringService } from "../services/metering/metering.service.js";
import type { PriceBook } from "../services/metering/price-book.service.js";
import type { ModelCatalogService } from "../services/models/model-catalog.service.js";
import type { Mailer } from "../services/platform/mail/mailer.js";
import { ControlLoaders } from "../services/teams/control-loaders.js";
import type { RetentionService } from "../services/usage/retention.service.js";
import { startControlPlane } from "./control.js";
import { startDatabase } from "./database.js";
import { refuseUnsafeExposure } from "./exposure.js";
import { startGraphql } from "./graphql.js";
import { createHttp, listen } from "./http.js";
import { COMPONENTS, Lifecycle, startOrUnwind } from "./lifecycle.js";
import { createLogger } from "./logger.js";
import { startModels } from "./models.js";
import { startServices } from "./services.js";
import { startWorkers } from "./workers.js";
import { createTracing, keepsBodies } from "./tracing.js";

/** A started Switchyard, API or worker process. */
export interface Switchyard {
  /** Base URL, e.g. `http://127.0.0.1:8080` ("" for a `worker` process, which serves no HTTP). */
  url: string;
  port: number;
  config: Config;
  logger: Logger;
  dataSource: DataSource;
  engines: EngineRouter;
  catalog: ModelCatalogService;
  metering: MeteringService;
  credit: CreditService;
  /** Early activity rows of requests in flight (issue 10). */
  inFlight: InFlightActivity;
  /** Model price versions (issue 10, item 3). */
  prices: PriceBook;
  /** The completion events feed (issue 6, item 6). */
  events: CompletionEventsService;
  /** Outgoing mail (issue 8): the outbox, and SMTP when configured. */
  mailer: Mailer;
  /** Request-body retention (issue 12, item 4); it runs on its own in worker processes. */
  retention: RetentionService;
  /** The control plane's per-request DataLoaders (issue 8; their query counts, for tests). */
  loaders: ControlLoaders;
  /** Stops serving, writes pending metering, releases engines and the database. */
  close(): Promise<void>;
}

/** Options of `startSwitchyard`. */
export interface StartOptions {
  /** The logger to use (default: `createLogger` from the config's level and format). */
  logger?: Logger;
  /** Write the GraphQL schema to this file (development). */
  emitSchemaFile?: string;
  /**
   * An API process of the supervisor (`supervisor.ts`): its connections come from the supervisor,
   * which holds `config.port`, instead of a socket of its own (`http.ts`, `listen`).
   */
  handedConnections?: boolean;
}

/**
 * Starts every component and listens on `config.port` (0 = a free port); a `worker` process
 * (config `role`) stops short of HTTP. A start that fails stops what had started, in reverse.
 * @throws ConfigError for unusable settings (missing model file, bad catalog, the local payment
 *   provider on a bind others can reach: `refuseUnsafeExposure`); the database
 *   driver's error when PostgreSQL is unreachable.
 */
export async function startSwitchyard(config: Config, opts: StartOptions = {}): Promise<Switchyard> {
  // Error logs never carry SQL parameters or bodies (issue 5, item 4): one serializer for every line.
  // Before anything starts: an exposed bind with free top-ups stops here (issue 27, item 2).
  refuseUnsafeExposure(config);
  if (config.role === "engine") {
    throw new ConfigError("SWITCHYARD_ROLE=engine runs the engine process (startEngineProcess), not Switchyard");
  }
  const logger = withSafeErrors(opts.logger ?? createLogger(config.logLevel, config.logFormat));
  const life = new Lifecycle(COMPONENTS, logger);
  return startOrUnwind(life, async () => {
    // Traces (issue 29, item 2): started first, stopped last; whether a team keeps bodies is
    // asked of the database, once it is up.
    const teams: { ds?: DataSource } = {};
    const tracing = await createTracing(config, logger, (teamId) => keepsBodies(teams.ds, teamId));
    if (tracing.enabled) await life.start({ name: "tracing", start: () => tracing, stop: (t) => t.close() });
    const db = await startDatabase(config, logger, life);
    teams.ds = db.dataSource;
    // The second metering drain (after the engines stop) writes through the metering service,
    // which is built after the engines.
    let meteringBuilt: MeteringService | undefined;
    const models = await startModels(
      config,
      logger,
      life,
      db,
      async () => {
        await meteringBuilt?.drainAll();
      },
      tracing,
    );
    models.metrics.gaugeFrom(
      "switchyard_database_available",
      "1 while the database circuit is closed; 0 while requests get 503 because the database is unavailable",
      [],
      async () => [{ labels: {}, value: db.circuit.state === "closed" ? 1 : 0 }],
    );
    const services = await startServices(config, logger, life, db, models, (m) => (meteringBuilt = m));
    const workers = await startWorkers(config, logger, life, db, models, services);
    const loaders = new ControlLoaders(db.dataSource);
    // What the caller gets: a worker-only process serves no HTTP (no URL, port 0).
    const handle = (url: string, port: number): Switchyard => ({
      url,
      port,
      config,
      logger,
      dataSource: db.dataSource,
      engines: models.engines,
      catalog: models.catalog,
      metering: services.metering,
      credit: db.credit,
      inFlight: services.inFlight,
      prices: models.prices,
      events: services.events,
      mailer: services.mailer,
      retention: workers.retention,
      loaders,
      close: () => life.stop(),
    });
    if (config.role === "worker") {
      logger.info({ concurrency: config.workerConcurrency }, "Switchyard worker started");
      return handle("", 0);
    }

    const deps = await startControlPlane(config, logger, life, db, models, services, workers, loaders);
    const web = createHttp(config, logger, deps, services.credentials, models.metrics, tracing, db.circuit);
    await startGraphql(life, {
      config,
      logger,
      ...web,
      resolvers: deps.resolvers,
      credentials: services.credentials,
      bus: db.bus,
      events: services.events,
      emitSchemaFile: opts.emitSchemaFile,
    });
    const { url, port } = await listen(config, logger, web, opts.handedConnections);
    return handle(url, port);
  });
}
