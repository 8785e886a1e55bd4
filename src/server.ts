/**
 * The composition root (DESIGN §2 "Components and how they start"): database (embedded when
 * `DATABASE_URL` is unset) with migrations, model catalog and engines, services, resolvers,
 * GraphQL (HTTP and graphql-ws on `/graphql`, both behind the limits of
 * `schema/graphql-limits.ts`), the REST tables, one HTTP server with timeouts, a connection cap
 * and the error envelope on Node's own refusals (issue 5). `close` stops them in reverse order
 * after in-flight metering is written.
 */
import "reflect-metadata";
import { randomUUID } from "node:crypto";
import http from "node:http";
import type { AddressInfo } from "node:net";
import path from "node:path";
import { ApolloServer } from "@apollo/server";
import { unwrapResolverError } from "@apollo/server/errors";
import { ApolloServerPluginDrainHttpServer } from "@apollo/server/plugin/drainHttpServer";
import { expressMiddleware } from "@as-integrations/express5";
import express from "express";
import type { GraphQLFormattedError } from "graphql";
import { useServer } from "graphql-ws/use/ws";
import { pino, type Logger, type TransportSingleOptions } from "pino";
import type { DataSource } from "typeorm";
import { WebSocketServer } from "ws";
import { loadCatalog } from "./config/catalog.js";
import { type Config, packageRoot } from "./config/config.js";
import { openDatabase } from "./db/data-source.js";
import { type EmbeddedDatabase, startEmbeddedPostgres } from "./db/embedded.js";
import { EngineRouter } from "./inference/engine-router.js";
import { measuredEngine } from "./inference/measured-engine.js";
import { RetentionService } from "./services/usage/retention.service.js";
import { InFlightActivity } from "./services/metering/in-flight-activity.js";
import { Metrics } from "./shared/metrics.js";
import { queryRows } from "./db/sql.js";
import { withSafeErrors } from "./logging.js";
import { LlamaCppEngine } from "./inference/engines/llama-cpp/llama-cpp.engine.js";
import { LocalModelFiles } from "./inference/engines/llama-cpp/model-store.js";
import { OpenAiCompatibleEngine } from "./inference/engines/openai-compatible/openai-compatible.engine.js";
import { workBackgroundResponses } from "./jobs/background-response.jobs.js";
import { workBatches } from "./jobs/batch.jobs.js";
import { workDeployments } from "./jobs/deployment.jobs.js";
import { JobQueue } from "./jobs/job-queue.js";
import { ApiKeyResolver } from "./resolvers/api-key.resolver.js";
import { CompletionEventsResolver, completionEventsPubSub } from "./resolvers/completion-events.resolver.js";
import { AuthResolver } from "./resolvers/auth.resolver.js";
import { BatchResolver } from "./resolvers/batch.resolver.js";
import { DecisionResolver } from "./resolvers/decision.resolver.js";
import { DeploymentResolver } from "./resolvers/deployment.resolver.js";
import { ModelResolver } from "./resolvers/model.resolver.js";
import { ResponseResolver } from "./resolvers/response.resolver.js";
import { StreamResolver } from "./resolvers/stream.resolver.js";
import { TeamMemberResolver, TeamResolver } from "./resolvers/team.resolver.js";
import { ActivityResolver } from "./resolvers/activity.resolver.js";
import { BillingSummaryResolver } from "./resolvers/billing-summary.resolver.js";
import { BillingResolver } from "./resolvers/billing.resolver.js";
import { type PresentedCredential, clientIp, createApp, presentedCredential, requestOrigin } from "./rest/app.js";
import { verifyJsonDepth } from "./rest/json-body.js";
import { abortOnClose } from "./rest/handlers/generation.js";
import {
  clientErrorHandler,
  errorMiddleware,
  expectationFailedHandler,
  graphqlErrorMiddleware,
  notFoundHandler,
} from "./rest/error-envelope.js";
import { type Resolvers, schemaResolvers } from "./resolvers/index.js";
import { buildGraphqlSchema } from "./schema/build-schema.js";
import { formatGraphqlError } from "./schema/error-formatter.js";
import { DEFAULT_GRAPHQL_LIMITS, graphqlSizeGuard, prepareDocument, shapeLimitRule } from "./schema/graphql-limits.js";
import { AccountService } from "./services/accounts/account.service.js";
import { ApiKeyService } from "./services/accounts/api-key.service.js";
import { BackgroundResponsesService } from "./services/inference/responses/background-responses.service.js";
import { BatchRunner } from "./services/batches/batch-runner.js";
import { BatchesService } from "./services/batches/batches.service.js";
import { CacheBus } from "./services/platform/cache-bus.js";
import { SocketSessions } from "./services/accounts/socket-sessions.js";
import { CompletionEventsService } from "./services/events/completion-events.service.js";
import { ControlLoaders } from "./services/teams/control-loaders.js";
import type { RequestContext } from "./services/platform/context.js";
import { CreditService } from "./services/ledger/credit.service.js";
import { CredentialService } from "./services/accounts/credential.service.js";
import { AppError } from "./shared/errors.js";
import { HealthService } from "./services/models/health.service.js";
import { InferenceService } from "./services/inference/inference.service.js";
import { DecisionsService } from "./services/decisions/decisions.service.js";
import { type Mailer, OutboxMailer } from "./services/platform/mail/mailer.js";
import { MemberService } from "./services/teams/member.service.js";
import { MeteringService } from "./services/metering/metering.service.js";
import { ModelCatalogService } from "./services/models/model-catalog.service.js";
import { CustomModelsService } from "./services/models/custom-models.service.js";
import { DeploymentReconciler } from "./services/models/deployment-reconciler.js";
import { DeploymentsService } from "./services/models/deployments.service.js";
import { PlatformModels } from "./services/models/model-sources.js";
import { loadServedModels, logModelBanner, pullAtStart } from "./services/models/start-models.js";
import { SecretBox } from "./services/models/secret-box.js";
import { TeamModelDirectory } from "./services/models/team-models.js";
import { RateLimitService } from "./services/metering/rate-limit.service.js";
import { OAuthService } from "./services/accounts/oauth/oauth.service.js";
import { OidcProviders } from "./services/accounts/oauth/oidc-providers.js";
import { PasswordResetService } from "./services/accounts/password-reset.service.js";
import { ResponsesService } from "./services/inference/responses/responses.service.js";
import { StreamDirectory } from "./services/inference/responses/stream-directory.js";
import { StreamsService } from "./services/inference/responses/streams.service.js";
import { TeamService } from "./services/teams/team.service.js";
import { ActivityService } from "./services/usage/activity.service.js";
import { PriceBook } from "./services/metering/price-book.service.js";
import { BillingSummaryService } from "./services/usage/billing-summary.service.js";
import { BillingService } from "./services/billing/billing.service.js";
import { LocalPaymentProvider, warnOfLocalPayments } from "./services/billing/payment-provider.js";
import { StripePaymentProvider } from "./services/billing/stripe-provider.js";
import { AuthThrottle } from "./services/platform/auth-throttle.js";
import { DEFAULT_ENGINE_SEQUENCES } from "./inference/engines/llama-cpp/engine-tuning.js";
import { TokenService } from "./services/platform/tokens.js";
import { WebhookDispatcher } from "./services/events/webhooks/webhook-dispatcher.js";

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

export interface StartOptions {
  logger?: Logger;
  /** Write the GraphQL schema to this file (development). */
  emitSchemaFile?: string;
}

/**
 * Starts every component and listens on `config.port` (0 = a free port).
 * @throws ConfigError for unusable settings (missing model file, bad catalog); the database
 *   driver's error when PostgreSQL is unreachable.
 */
export async function startSwitchyard(config: Config, opts: StartOptions = {}): Promise<Switchyard> {
  // Error logs never carry SQL parameters or bodies (issue 5, item 4): one serializer for every line.
  const logger = withSafeErrors(opts.logger ?? createLogger(config.logLevel, config.logFormat));
  const cleanup: Array<[string, () => Promise<void>]> = [];
  const closeAll = async () => {
    for (const [name, step] of cleanup.splice(0).reverse()) {
      const started = Date.now();
      await step().catch((err) => logger.warn({ err, step: name }, "shutdown step failed"));
      logger.debug({ step: name, ms: Date.now() - started }, "stopped");
    }
  };
  try {
    let databaseUrl = config.databaseUrl;
    if (!databaseUrl) {
      const started = Date.now();
      const embedded: EmbeddedDatabase = await startEmbeddedPostgres({
        dir: path.join(config.dataDir, "pg"),
        database: "switchyard",
        onLog: (line) => logger.trace({ pg: line.trim() }, "postgres"),
        onFirstStart: (dir) => logger.info({ dir }, "initialising embedded PostgreSQL (first start)"),
        onLeftover: (pid) =>
          logger.warn({ postgresPid: pid }, "stopping the embedded PostgreSQL a previous Switchyard left running"),
      });
      cleanup.push(["embedded PostgreSQL", () => embedded.stop()]);
      databaseUrl = embedded.url;
      logger.info(
        { port: embedded.port, postgresPid: embedded.pid, ms: Date.now() - started },
        "embedded PostgreSQL started",
      );
    }
    const ds = await openDatabase(databaseUrl);
    cleanup.push(["database pool", () => ds.destroy()]);

    const bus = new CacheBus(databaseUrl, logger);
    await bus.start();
    cleanup.push(["cache listener", () => bus.close()]);

    // Leases are given back only after the last charges are written (both metering drains run
    // before this step), so no in-flight charge lands on credit another process leased meanwhile.
    const credit = new CreditService(ds, bus, logger);
    credit.start();
    cleanup.push(["credit leases", () => credit.close()]);

    // Issue 17: files of the catalog's models. The start pulls only what it is told to (and a
    // missing default model); a model whose file is not here is listed as not downloaded.
    const platformCatalog = loadCatalog(config.catalogPath);
    const modelDirs = { modelsDir: config.modelsDir, dataDir: config.dataDir };
    await pullAtStart(platformCatalog, { ...config, ...modelDirs }, logger);
    const localFiles = new LocalModelFiles(modelDirs);
    const platform = new PlatformModels(platformCatalog, localFiles);
    // Pricing history (issue 10, item 3): the catalog's prices become the latest stored versions.
    const prices = new PriceBook(ds, bus, logger);
    await prices.start(platform.catalog.models);
    // Upstream OpenAI-compatible servers (issue 9, item 3): the endpoints of SWITCHYARD_UPSTREAMS.
    const upstream = new OpenAiCompatibleEngine({
      endpoints: config.upstreams,
      connectTimeoutMs: config.upstreamConnectMs,
      headersTimeoutMs: config.upstreamHeadersMs,
      bodyTimeoutMs: config.upstreamIdleMs,
      healthIntervalMs: config.upstreamProbeMs,
      scoringTimeLimitMs: config.decisionsTimeLimitMs,
      logger,
    });
    upstream.checkCatalog(platform.catalog.models);
    const embedded = new LlamaCppEngine({
      threads: config.engineThreads,
      sequences: config.engineSequences,
      embeddingContexts: config.engineEmbeddingContexts,
      batchWhileInteractive: config.batchWhileInteractive,
      modelsDir: config.modelsDir,
      dataDir: config.dataDir,
      gpu: config.gpu,
      scoringTimeLimitMs: config.decisionsTimeLimitMs,
      logger,
    });
    // Prometheus metrics (issue 13, item 4): one registry per server; engines observed by model.
    const metrics = new Metrics();
    const engines = new EngineRouter({
      openai_compatible: measuredEngine(upstream, metrics),
      llama_cpp: measuredEngine(embedded, metrics),
    });
    // Failures recorded while the engines shut down are written by a second drain, after them.
    let drainAfterEngines = async () => {};
    cleanup.push(["metering (after engines)", () => drainAfterEngines()]);
    cleanup.push(["engines", () => engines.close()]);
    const loadStarted = Date.now();
    // An upstream that is down at start does not stop the service: its models answer 503 until
    // a health check finds an endpoint serving them. Models whose file is not here are not loaded
    // (issue 17: listed as not downloaded, 404 with the pull command).
    const offered = platform.catalog.models.filter((m) => m.platformStatus !== "coming_soon");
    // A model whose file fails to load is marked not usable, not a failed start (issue 17 review).
    const served = await loadServedModels(
      engines,
      offered.filter((m) => platform.unavailable(m) === undefined),
      localFiles,
      logger,
    );
    logger.info({ ms: Date.now() - loadStarted, models: served.length }, "models loaded");
    // Engine scheduling (issue 12, item 3): threads and sequences as measured for the first
    // generation model (or configured); the batch runner and custom models size themselves by it.
    const tuning = embedded.chosenTuning();
    const engineSequences =
      config.engineSequences === "auto" ? (tuning?.sequences ?? DEFAULT_ENGINE_SEQUENCES) : config.engineSequences;
    logModelBanner(
      logger,
      served,
      offered.filter((m) => !served.includes(m)).map((m) => ({ model: m, reason: platform.unavailable(m) })),
      // Starting llama.cpp only to name its backend costs ~2 s when no embedded model loaded.
      served.some((m) => m.engine.type === "llama_cpp") ? await embedded.backend() : "idle",
      tuning,
    );

    // Issue 9: each team's custom models and deployments, in memory (NOTIFY keeps them fresh), so
    // the catalog resolves a team's models without a database round trip per request.
    const customSlots = { generation: engineSequences, embedding: config.engineEmbeddingContexts };
    const teamModels = new TeamModelDirectory(ds, bus, platform, engines, logger, customSlots);
    await teamModels.start();
    const catalog = new ModelCatalogService(platform, teamModels);

    const tokens = new TokenService(config.jwtSecret, config.accessTokenTtlS);
    // Mail (issue 8): the outbox, and SMTP when SMTP_URL is set.
    const mailer = new OutboxMailer(ds, logger, { smtpUrl: config.smtpUrl, from: config.mailFrom });
    cleanup.push(["mailer", async () => mailer.close()]);
    const credentials = new CredentialService(ds, tokens, bus, config.authCacheTtlMs);
    const metering = new MeteringService(
      ds,
      bus,
      logger,
      config.groupCommitMaxRows,
      config.authCacheTtlMs,
      credit.holder,
      config.durability,
    );
    cleanup.push(["metering", () => metering.drainAll()]);
    drainAfterEngines = () => metering.drainAll();

    // Completion webhooks (issue 6, item 3): the dispatcher sends what the group commit put in the
    // outbox. Stopped before metering drains: deliveries written by that last drain stay in the
    // outbox for the next process.
    const webhooks = new WebhookDispatcher(ds, bus, logger, {
      allowPrivate: config.webhookAllowPrivate,
      retryDelaysMs: config.webhookRetryDelaysMs,
      timeoutMs: config.webhookTimeoutMs,
      onAttempt: (outcome) => metrics.webhookAttempts.inc({ outcome }),
    });
    webhooks.start();
    metering.onFlush = (rows, seconds) => {
      metrics.meteringFlushRows.observe(rows);
      metrics.meteringFlushSeconds.observe(seconds);
    };
    metrics.counterFrom(
      "switchyard_metering_flushes_total",
      "Group commits (flushes) of finished requests",
      () => metering.stats.flushes,
    );
    metrics.counterFrom(
      "switchyard_metering_flush_rows_total",
      "Requests written by group commits (÷ flushes = flush size)",
      () => metering.stats.rows,
    );
    metrics.counterFrom(
      "switchyard_metering_flush_seconds_total",
      "Time group commits took, seconds (÷ flushes = flush latency)",
      () => metering.stats.flushMs / 1000,
    );
    cleanup.push(["webhook dispatcher", () => webhooks.stop()]);

    // Completion events feed and subscription (issue 6, items 6–7): reads the table the metering
    // flush writes, woken by the cache bus's `event` NOTIFY; hourly retention cleanup.
    const events = new CompletionEventsService(ds, bus, logger);
    events.start();

    // Streams (issue 6, item 4, helper S): the cached stream owner lookup the create operations use.
    const streamDirectory = new StreamDirectory(ds, bus);
    const rateLimits = new RateLimitService(ds, logger);
    // Early `pending`/`running` activity rows of requests in flight past SWITCHYARD_ACTIVITY_IN_FLIGHT_AFTER_MS.
    const inFlight = new InFlightActivity(ds, logger, { afterMs: config.activityInFlightAfterMs });
    cleanup.push(["in-flight activity", () => inFlight.close()]);
    const inference = new InferenceService(
      engines,
      metering,
      credit,
      config.maxQueueWaitS,
      streamDirectory,
      rateLimits,
      prices,
      inFlight,
      logger,
    );
    const responses = new ResponsesService(ds);

    // Issue 6 (helper J): the durable job queue (every role sends jobs) and background responses;
    // workers run unless the role is `api`, and a `worker` process serves no HTTP. Stopped before
    // metering and the engines, after HTTP: running generations finish and are recorded.
    const runsWorkers = config.role !== "api";
    const jobs = new JobQueue({ databaseUrl, logger, supervise: runsWorkers });
    await jobs.start();
    metrics.gaugeFrom(
      "switchyard_job_queue_depth",
      "Jobs waiting to run (created or waiting for a retry), by queue",
      ["queue"],
      () => jobQueueReading(ds, "count(*)::float8"),
    );
    metrics.gaugeFrom(
      "switchyard_job_queue_oldest_age_seconds",
      "Age of the oldest job waiting to run, by queue, seconds",
      ["queue"],
      () => jobQueueReading(ds, "extract(epoch FROM now() - min(created_on))::float8"),
    );
    const background = new BackgroundResponsesService(ds, inference, metering, catalog, responses, bus, jobs, logger);
    // Stopped after the job queue (cleanup runs in reverse): the queue's stop waits for running
    // generations while they are still heartbeated; what still runs after it is left, unrecorded,
    // to another worker, as after a SIGKILL.
    if (runsWorkers) cleanup.push(["background reconciler", async () => background.stopWorker()]);
    cleanup.push(["job queue", () => jobs.stop()]);
    if (runsWorkers) {
      await workBackgroundResponses(jobs, background, config.workerConcurrency);
      background.startWorker();
    }
    // Batches (issue 7): the API side here, the runner in worker processes. The runner stops
    // before the job queue: items in flight finish and are recorded, then its batches are given up.
    const batches = new BatchesService(ds, catalog, metering, jobs, bus, logger, {
      windowS: config.batchWindowS,
      limits: { maxItems: config.batchMaxItems, maxMemberBytes: config.bodyLimitBytes },
      publicUrl: config.publicUrl,
    });
    if (runsWorkers) {
      const runner = new BatchRunner(ds, inference, catalog, batches, jobs, bus, logger, {
        concurrency: config.batchConcurrency ?? Math.max(1, engineSequences - 1),
      });
      await workBatches(jobs, runner, batches);
      runner.start();
      cleanup.push(["batch runner", () => runner.stop()]);
    }
    // Deployments and custom models (issue 9): the reconciler brings them up in worker processes;
    // it stops before the job queue (what it was loading is left to its lease).
    if (runsWorkers) {
      const reconciler = new DeploymentReconciler(ds, bus, engines, platform, teamModels, logger, {
        intervalMs: config.reconcileIntervalMs,
        maxSlots: config.deploymentMaxSlots,
        dedicatedSlots: config.dedicatedSlots,
        teamDedicatedSlots: config.teamDedicatedSlots,
        customSlots,
        modelsDir: config.modelsDir,
        dataDir: config.dataDir,
      });
      await workDeployments(jobs, reconciler);
      reconciler.start();
      cleanup.push(["deployment reconciler", () => reconciler.stop()]);
    }
    // Request bodies past SWITCHYARD_BODY_RETENTION_DAYS are cleared hourly by worker processes.
    const retention = new RetentionService(ds, logger, { bodyRetentionDays: config.bodyRetentionDays });
    if (runsWorkers) inFlight.start(); // ends rows in flight that a stopped process left behind
    if (runsWorkers) {
      retention.start();
      cleanup.push(["body retention", () => retention.stop()]);
    }
    const loaders = new ControlLoaders(ds);
    // What the caller gets: a worker-only process serves no HTTP (no URL, port 0).
    const handle = (url: string, port: number): Switchyard => ({
      url,
      port,
      config,
      logger,
      dataSource: ds,
      engines,
      catalog,
      metering,
      credit,
      inFlight,
      prices,
      events,
      mailer,
      retention,
      loaders,
      close: closeAll,
    });
    if (config.role === "worker") {
      logger.info({ concurrency: config.workerConcurrency }, "Switchyard worker started");
      return handle("", 0);
    }

    const streams = new StreamsService(ds, streamDirectory, background);
    // Issue 8 (helper P): login and forgot-password throttling, password reset mail. Mail still
    // being sent when HTTP stops is finished before the mailer and the database close.
    const throttle = new AuthThrottle(ds, logger, { max: config.authThrottleMax, windowS: config.authThrottleWindowS });
    const passwordResets = new PasswordResetService(ds, mailer, throttle, bus, logger, {
      resetUrl: config.passwordResetUrl ?? `${config.publicUrl}/reset-password`,
    });
    cleanup.push(["password reset mail", () => passwordResets.drain()]);
    // Members and invitations (issue 8): per-request DataLoaders for the control plane's relations.
    const members = new MemberService(ds, bus, loaders, mailer, tokens, config.publicUrl);
    const accounts = new AccountService(ds, tokens, config.signupCreditMicros, throttle, members);
    // Issue 8 (helper O): OpenID Connect sign-in and linking.
    const oauth = new OAuthService(ds, accounts, new OidcProviders(config.oauthProviders, logger), members);
    const modelQuotas = { maxDeployments: config.teamMaxDeployments, maxCustomModels: config.teamMaxCustomModels };
    const decisions = new DecisionsService(inference, catalog);
    const resolvers: Resolvers = {
      auth: new AuthResolver(accounts, passwordResets, oauth),
      apiKeys: new ApiKeyResolver(new ApiKeyService(ds, bus), members),
      models: new ModelResolver(
        catalog,
        new CustomModelsService(
          ds,
          bus,
          jobs,
          platform,
          teamModels,
          new SecretBox(config.jwtSecret, "model-hub-token"),
          modelQuotas,
        ),
      ),
      responses: new ResponseResolver(background),
      events: new CompletionEventsResolver(events, streams),
      // Teams (issue 8, item 3; the webhook signing secret of issue 6, item 3).
      teams: new TeamResolver(new TeamService(ds), members),
      streams: new StreamResolver(streams),
      batches: new BatchResolver(batches),
      teamMembers: new TeamMemberResolver(members),
      deployments: new DeploymentResolver(new DeploymentsService(ds, bus, jobs, teamModels, modelQuotas)),
      // Activity and usage (issue 10, items 1 and 2).
      activity: new ActivityResolver(new ActivityService(ds)),
      // Billing summary with the pricing used (issue 10, item 3).
      billingSummary: new BillingSummaryResolver(new BillingSummaryService(ds, platform)),
      // Transactions, top-ups and invoices (issue 10, items 4–6).
      billing: new BillingResolver(billingService(ds, bus, logger, config)),
      // Decisions (issue 11): the same service as POST /v1/decisions.
      decisions: new DecisionResolver(decisions),
    };

    const deps = {
      resolvers,
      catalog,
      inference,
      responses,
      background,
      events,
      streams,
      health: new HealthService(ds, engines, catalog),
      batches,
      decisions,
      batchMaxBytes: config.batchMaxBytes,
    };

    const app = createApp({
      deps,
      credentials,
      logger,
      bodyLimitBytes: config.bodyLimitBytes,
      corsOrigins: config.corsOrigins,
      trustProxy: config.trustProxy,
      metrics,
      metricsToken: config.metricsToken,
      // A person at a terminal sees one line per request (with its id); JSON logs keep it at debug.
      accessLogLevel: usesPrettyLogs(config.logFormat) ? "info" : "debug",
    });
    // requestTimeout bounds receiving a request (headers and body), never the answer, so long
    // SSE streams are not cut; Node checks both timeouts every connectionsCheckingInterval.
    const server = http.createServer(
      {
        requestTimeout: config.requestTimeoutMs,
        headersTimeout: config.headersTimeoutMs,
        connectionsCheckingInterval: Math.min(30_000, Math.max(250, Math.floor(config.headersTimeoutMs / 4))),
      },
      app,
    );
    server.keepAliveTimeout = 65_000;
    server.maxConnections = config.maxConnections;
    server.on("clientError", clientErrorHandler());
    server.on("checkExpectation", expectationFailedHandler);
    const limits = DEFAULT_GRAPHQL_LIMITS;
    const schema = await buildGraphqlSchema(
      schemaResolvers(resolvers),
      opts.emitSchemaFile ?? false,
      completionEventsPubSub(events),
    );

    // Refused credentials fail only the operations that need a caller (login works with a stale token).
    const contextFromCredential = async (
      credential: PresentedCredential | undefined,
      requestId: string,
      origin?: string,
      ip?: string,
    ): Promise<RequestContext> => {
      try {
        const principal = await credentials.authenticate(credential?.value, { apiKeyOnly: credential?.apiKeyOnly });
        return { requestId, principal, origin, ip };
      } catch (err) {
        if (err instanceof AppError) return { requestId, credentialError: err, origin, ip };
        throw err;
      }
    };

    // graphql-ws: credentials are checked when the socket connects, and a socket that presents
    // refused ones is closed with 4403 (a long-lived subscription should not start on a bad token;
    // over HTTP each request stands alone, so there only operations needing a caller fail). They
    // are checked again for every operation, and a revocation that concerns an open socket (its
    // key revoked, its user removed, moved or reset) closes it with 4403 (`SocketSessions`). Each operation passes the same limits as over HTTP (`prepareDocument`); a refused one
    // gets a graphql-ws `error` message, the socket stays open. Frames above
    // graphqlMaxPayloadBytes close the socket (1009) before they are read. Errors leave through
    // the same formatter as over HTTP.
    // Internal errors leave as an opaque 500; the log keeps what happened (safe fields only).
    // Over HTTP the failure is logged with the request id by the plugin below (issue 13, item 5);
    // over the socket here, where no HTTP request is behind the operation.
    const logInternal = (error: unknown, requestId?: string) =>
      logger.error({ err: unwrapResolverError(error), requestId }, "GraphQL operation failed");
    const formatError = (formatted: GraphQLFormattedError, error: unknown): GraphQLFormattedError =>
      formatGraphqlError(formatted, error);
    const formatSocketError = (formatted: GraphQLFormattedError, error: unknown): GraphQLFormattedError => {
      const out = formatGraphqlError(formatted, error);
      if (out.extensions?.code === "INTERNAL") logInternal(error);
      return out;
    };
    const wss = new WebSocketServer({ server, path: "/graphql", maxPayload: config.graphqlMaxPayloadBytes });
    const sockets = new SocketSessions(credentials, bus);
    const wsServer = useServer<Record<string, unknown>>(
      {
        schema,
        onConnect: async (ctx) => {
          const raw = ctx.connectionParams?.authorization ?? ctx.connectionParams?.Authorization;
          const credential = typeof raw === "string" ? /^Bearer\s+(\S+)$/i.exec(raw)?.[1] : undefined;
          return sockets.open(ctx.extra.socket, credential);
        },
        onClose: (ctx) => sockets.close(ctx.extra.socket),
        onSubscribe: (_ctx, _id, payload) => {
          const prepared = prepareDocument(schema, payload.query, limits);
          if ("errors" in prepared) return prepared.errors;
          return {
            schema,
            document: prepared.document,
            operationName: payload.operationName,
            variableValues: payload.variables,
          };
        },
        onError: (_ctx, _id, _payload, errors) => errors.map((e) => formatSocketError(e.toJSON(), e)),
        context: async (ctx): Promise<RequestContext> => {
          const base = { requestId: randomUUID(), ip: clientIp(app, ctx.extra.request) };
          try {
            return { ...base, principal: await sockets.principal(ctx.extra.socket) };
          } catch (err) {
            if (err instanceof AppError) return { ...base, credentialError: err };
            throw err;
          }
        },
        onNext: (_ctx, _id, _payload, _args, result) =>
          "errors" in result && result.errors
            ? { ...result, errors: result.errors.map((e) => formatSocketError(e.toJSON(), e)) }
            : undefined,
      },
      wss,
    );
    const apollo = new ApolloServer<RequestContext>({
      // No automatic persisted queries: every operation comes with its document (and its limits).
      persistedQueries: false,
      schema,
      formatError,
      includeStacktraceInErrorResponses: false,
      parseOptions: { maxTokens: limits.maxTokens },
      validationRules: [shapeLimitRule(limits)],
      introspection: true,
      // Shutdown is ours (main.ts): Apollo's own signal handlers would stop it and re-raise the signal.
      stopOnTerminationSignals: false,
      plugins: [
        ApolloServerPluginDrainHttpServer({ httpServer: server }),
        {
          async requestDidStart() {
            return {
              async didEncounterErrors({ errors, contextValue }) {
                for (const error of errors) {
                  if (formatGraphqlError(error.toJSON(), error).extensions?.code === "INTERNAL")
                    logInternal(error, contextValue.requestId);
                }
              },
            };
          },
        },
        {
          async serverWillStart() {
            return {
              async drainServer() {
                await wsServer.dispose();
              },
            };
          },
        },
      ],
    });
    await apollo.start();
    cleanup.push(["HTTP and GraphQL", () => apollo.stop()]);
    // Completion events (issue 6): long-polls and subscriptions end before the HTTP drain waits on them.
    cleanup.push(["completion events", async () => events.close()]);
    app.use(
      "/graphql",
      express.json({ limit: config.graphqlMaxPayloadBytes, verify: verifyJsonDepth }),
      graphqlSizeGuard(limits),
      expressMiddleware(apollo, {
        // The signal lets long mutations (createDecision) stop when the client leaves (review 11b, L2).
        context: async ({ req, res }) => ({
          ...(await contextFromCredential(
            presentedCredential(req),
            res.locals.requestId as string,
            requestOrigin(req),
            req.ip,
          )),
          signal: abortOnClose(res),
        }),
      }),
    );
    app.use("/graphql", graphqlErrorMiddleware(logger));
    app.use(notFoundHandler);
    app.use(errorMiddleware(logger));

    await new Promise<void>((resolve, reject) => {
      server.once("error", reject);
      server.listen(config.port, config.host, () => resolve());
    });
    const port = (server.address() as AddressInfo).port;
    const host = config.host === "0.0.0.0" || config.host === "::" ? "127.0.0.1" : config.host;
    const url = `http://${host}:${port}`;
    logger.info({ url, graphql: `${url}/graphql` }, "Switchyard listening");

    return handle(url, port);
  } catch (err) {
    await closeAll();
    throw err;
  }
}

/**
 * The billing service with its payment provider (config `paymentProvider`: `local` by default, or
 * `stripe`). The local provider always verifies confirm links; Stripe webhooks are served when a
 * Stripe secret key is configured.
 */
function billingService(ds: DataSource, bus: CacheBus, logger: Logger, config: Config): BillingService {
  const local = new LocalPaymentProvider(config.jwtSecret, config.publicUrl);
  const stripe = config.stripeSecretKey
    ? new StripePaymentProvider(ds, logger, {
        secretKey: config.stripeSecretKey,
        webhookSecret: config.stripeWebhookSecret,
        apiBase: config.stripeApiBase,
        publicUrl: config.publicUrl,
      })
    : undefined;
  const provider = config.paymentProvider === "stripe" && stripe ? stripe : local;
  warnOfLocalPayments(logger, provider.name, config.publicUrl);
  return new BillingService(ds, bus, provider, local, logger, stripe, {
    perTeam: config.providerCallsPerTeam,
    perProcess: config.providerCallsPerProcess,
  });
}

/** The committed `schema.graphql` at the repository root. */
export const SCHEMA_FILE = path.join(packageRoot, "schema.graphql");

/** One reading per pg-boss queue of the jobs waiting to run (`value`: an SQL aggregate over them). */
async function jobQueueReading(
  ds: DataSource,
  value: string,
): Promise<Array<{ labels: { queue: string }; value: number }>> {
  const rows = await queryRows<{ name: string; value: number }>(
    ds,
    `SELECT name, ${value} AS value FROM pgboss.job WHERE state IN ('created', 'retry') GROUP BY name`,
  );
  return rows.map((r) => ({ labels: { queue: r.name }, value: r.value }));
}

/**
 * Logs for people (issue 13, item 5): readable lines (pino-pretty) when `format` is `pretty`, or
 * `auto` with stdout a terminal; JSON lines otherwise (the default when stdout is a pipe or file).
 * @param isTTY whether stdout is a terminal (default: `process.stdout.isTTY`).
 */
export function usesPrettyLogs(
  format: "auto" | "json" | "pretty",
  isTTY: boolean = process.stdout.isTTY === true,
): boolean {
  return format === "pretty" || (format === "auto" && isTTY);
}

/**
 * The service's logger: JSON lines, or pino-pretty's readable lines (in a worker thread) where
 * `usesPrettyLogs` says so. `destination`: a file instead of stdout (tests read it).
 */
export function createLogger(
  level: Config["logLevel"],
  format: "auto" | "json" | "pretty",
  destination?: string,
): Logger {
  if (usesPrettyLogs(format)) {
    const transport: TransportSingleOptions = {
      target: "pino-pretty",
      options: {
        translateTime: "SYS:HH:MM:ss.l",
        ignore: "pid,hostname",
        singleLine: true,
        ...(destination ? { destination, mkdir: true } : {}),
      },
    };
    return pino({ level, transport });
  }
  return destination ? pino({ level }, pino.destination({ dest: destination, sync: true })) : pino({ level });
}
