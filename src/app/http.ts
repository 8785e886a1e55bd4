/**
 * The HTTP side of the composition root (issue 5): the Express app with the REST tables, one
 * HTTP server with timeouts and a connection cap, and the error envelope on Node's own refusals
 * and on whatever no route answered.
 */
import http from "node:http";
import { type AddressInfo, Socket } from "node:net";
import type { Express } from "express";
import type { Logger } from "pino";
import type { Config } from "../config/config.js";
import { createApp } from "../rest/app.js";
import {
  clientErrorHandler,
  errorMiddleware,
  expectationFailedHandler,
  notFoundHandler,
} from "../rest/error-envelope.js";
import type { DataPlaneDeps } from "../rest/handlers/deps.js";
import type { CredentialService } from "../services/accounts/credential.service.js";
import type { DatabaseAvailability } from "../shared/database-errors.js";
import type { Metrics } from "../shared/metrics.js";
import { Tracing } from "../shared/tracing.js";
import { localUrl, startBanner } from "./exposure.js";
import { HANDED_CONNECTION, HANDED_CONNECTION_TAKEN } from "./supervisor.js";
import { usesPrettyLogs } from "./logger.js";

/** The app (routes still open: GraphQL is mounted next) and the server that will serve it. */
export interface HttpParts {
  app: Express;
  server: http.Server;
}

/**
 * Builds the Express app over `deps` and an HTTP server for it; nothing listens yet. While
 * `database` (the database circuit) refuses, the app answers 503 (`rest/database-gate.ts`).
 * `requestTimeout` bounds receiving a request (headers and body), never the answer, so long SSE
 * streams are not cut; Node checks both timeouts every `connectionsCheckingInterval` (¼ of the
 * headers timeout, within 250 ms … 30 s).
 */
export function createHttp(
  config: Config,
  logger: Logger,
  deps: DataPlaneDeps,
  credentials: CredentialService,
  metrics: Metrics,
  tracing: Tracing = Tracing.off,
  database?: DatabaseAvailability,
): HttpParts {
  const { app, listener, messageClasses } = createApp({
    deps,
    credentials,
    logger,
    bodyLimitBytes: config.bodyLimitBytes,
    corsOrigins: config.corsOrigins,
    trustProxy: config.trustProxy,
    metrics,
    metricsToken: config.metricsToken,
    tracing,
    // A person at a terminal sees one line per request (with its id); JSON logs keep it at debug.
    accessLogLevel: usesPrettyLogs(config.logFormat) ? "info" : "debug",
    database,
  });
  const server = http.createServer(
    {
      requestTimeout: config.requestTimeoutMs,
      headersTimeout: config.headersTimeoutMs,
      connectionsCheckingInterval: Math.min(30_000, Math.max(250, Math.floor(config.headersTimeoutMs / 4))),
      // Node's own Host check answers a bare 400; the app's answers the envelope (`host-header.ts`).
      requireHostHeader: false,
      // Requests and responses born with Express's prototypes (`expressMessageClasses`).
      ...messageClasses,
    },
    listener,
  );
  server.keepAliveTimeout = 65_000;
  server.maxConnections = config.maxConnections;
  server.on("clientError", clientErrorHandler());
  server.on("checkExpectation", expectationFailedHandler);
  return { app, server };
}

/**
 * Closes the app's routes (the error envelope's 404 and error handler) and listens on
 * `config.port` (0 = a free port) and `config.host`; logs the start banner ("Switchyard
 * listening": the address really bound and what is in force, `startBanner`). With `handed`
 * (an API process of the supervisor) nothing listens here: the supervisor holds the port
 * `config.port` and hands each connection over (`serveHandedConnections`).
 * @returns the base URL (a wildcard host is named `127.0.0.1`) and the port listened on.
 * @throws the server's `error` (e.g. EADDRINUSE) when it cannot listen.
 */
export async function listen(
  config: Config,
  logger: Logger,
  { app, server }: HttpParts,
  handed = false,
): Promise<{ url: string; port: number }> {
  app.use(notFoundHandler);
  app.use(errorMiddleware(logger));

  let bound: AddressInfo;
  if (handed) {
    serveHandedConnections(server);
    bound = { address: config.host, family: config.host.includes(":") ? "IPv6" : "IPv4", port: config.port };
  } else {
    await new Promise<void>((resolve, reject) => {
      server.once("error", reject);
      server.listen(config.port, config.host, () => resolve());
    });
    bound = server.address() as AddressInfo;
  }
  const url = localUrl(config, bound.port);
  logger.info(startBanner(config, bound, url), "Switchyard listening");
  return { url, port: bound.port };
}

/**
 * Serves the connections the supervisor hands to this process over its IPC channel (issue 31,
 * item 4: instead of node:cluster's own hand-off, which keeps a connection open forever when the
 * process it was given to dies first), saying it took each (`HANDED_CONNECTION_TAKEN`) so the
 * supervisor closes its copy. Each one goes through the HTTP server as one it had
 * accepted itself: `maxConnections`, the header and request timeouts (their checks start on
 * `listening`), and `close()` waiting for it (the server's connection count, as net.Server keeps
 * it for the sockets it accepts).
 */
function serveHandedConnections(server: http.Server): void {
  const counted = server as http.Server & { _connections: number };
  server.emit("listening");
  process.on("message", (msg: { type?: unknown; id?: unknown } | null, socket: unknown) => {
    if (msg?.type !== HANDED_CONNECTION || !(socket instanceof Socket)) return;
    // Taken (served, or refused as over the cap): the supervisor may close its copy.
    process.send?.({ type: HANDED_CONNECTION_TAKEN, id: msg.id });
    if (server.maxConnections > 0 && counted._connections >= server.maxConnections) {
      socket.destroy();
      return;
    }
    counted._connections++;
    Object.assign(socket, { server, _server: server });
    server.emit("connection", socket);
  });
}
