/**
 * The Express application: request ids and the `x-switchyard-overhead-ms` header, the headers
 * every answer carries and CORS (`http-headers.ts`), JSON bodies with a size limit, credentials,
 * the two REST tables, and the error envelope for everything else. GraphQL is mounted by the
 * server on the same app (`/graphql`).
 */
import { createHash, randomUUID, timingSafeEqual } from "node:crypto";
import http, { type IncomingMessage, type ServerResponse } from "node:http";
import express, { type Express, type NextFunction, type Request, type RequestHandler, type Response } from "express";
import type { Logger } from "pino";
import type { CredentialService } from "../services/accounts/credential.service.js";
import type { RequestContext } from "../services/platform/context.js";
import type { DatabaseAvailability } from "../shared/database-errors.js";
import { AppError, ErrorCode } from "../shared/errors.js";
import type { Metrics } from "../shared/metrics.js";
import { SeriesCache } from "../shared/lean-metrics.js";
import type { Tracing } from "../shared/tracing.js";
import { controlRoutes } from "./control.routes.js";
import { mountDashboard } from "./dashboard.js";
import { dataPlaneRoutes } from "./data-plane.routes.js";
import { GATED_PREFIXES, databaseGate } from "./database-gate.js";
import { errorMiddleware } from "./error-envelope.js";
import { type HotRoute, expressMessageClasses, hotPathListener } from "./hot-path.js";
import { homePage } from "./home.js";
import { hostHeaderRule } from "./host-header.js";
import { jsonBody } from "./json-body.js";
import { loggedPath } from "./log-path.js";
import { mountOpenApi } from "./openapi.js";
import { singleQueryValues } from "./query-params.js";
import type { DataPlaneDeps } from "./handlers/deps.js";
import { cors, securityHeaders } from "./http-headers.js";
import { inRequestScope, requestTraceFields, traceRequests } from "./http-tracing.js";

/**
 * One log line per request (request id, method, path, status, ms) at `level`: `debug` for JSON
 * logs (off at the default `info`), `info` for readable logs in a terminal (issue 13, item 5).
 * `path` is the full path as sent, mount prefixes kept and query secrets blanked (`loggedPath`,
 * issue 27, item 4).
 */
function accessLog(logger: Logger, level: "debug" | "info"): RequestHandler {
  return (req, res, next) => {
    if (!logger.isLevelEnabled(level)) return next();
    const started = performance.now();
    res.on("finish", () =>
      logger[level](
        {
          ...requestTraceFields(res),
          requestId: res.locals.requestId as string,
          method: req.method,
          path: loggedPath(req.originalUrl),
          status: res.statusCode,
          ms: Math.round(performance.now() - started),
        },
        "request",
      ),
    );
    next();
  };
}

/** Where `httpMetrics` keeps a request's start (ms, `performance.now()`) until its answer is counted. */
const METRICS_STARTED = Symbol("metricsStarted");

/**
 * Counts every answer and its duration by method, route pattern and status (issue 13, item 4):
 * the pattern the request matched (`/v1/responses/:id`), `/graphql`, or `unmatched`, so ids never
 * become label values. Per request only its start time is kept (on the response) and one shared
 * listener is added for `finish` and `close`; the series of a label set is looked up once
 * (issue 30, item 3: no closures, label objects or label hashing per request).
 */
function httpMetrics(metrics: Metrics): RequestHandler {
  const series = new SeriesCache<{ count: (n?: number) => void; observe: (seconds: number) => void }>();
  const child = (method: string, route: string, status: string) =>
    series.get(`${method} ${status} ${route}`, () => {
      const labels = { method, route, status };
      return { count: metrics.httpRequests.child(labels), observe: metrics.httpDuration.child(labels) };
    });
  function observe(this: Response & { [METRICS_STARTED]?: number }) {
    const started = this[METRICS_STARTED];
    if (started === undefined) return;
    this[METRICS_STARTED] = undefined;
    const req = this.req;
    const route =
      (req.route as { path?: string } | undefined)?.path ??
      (req.originalUrl.startsWith("/graphql") ? "/graphql" : "unmatched");
    const labelled = child(req.method, route, String(this.statusCode));
    labelled.count();
    labelled.observe((performance.now() - started) / 1000);
  }
  return (_req, res, next) => {
    (res as Response & { [METRICS_STARTED]?: number })[METRICS_STARTED] = performance.now();
    res.on("finish", observe);
    res.on("close", observe);
    next();
  };
}

/** Addresses of this machine's own clients. */
const LOOPBACK = new Set(["127.0.0.1", "::1", "::ffff:127.0.0.1"]);

/**
 * `GET /metrics` (issue 13, item 4): with `token` set, only for `Authorization: Bearer <token>`
 * (401 otherwise); without, only for loopback clients (403 otherwise; put a token on it before a
 * reverse proxy on the same machine forwards outside traffic to it).
 */
function metricsRoute(metrics: Metrics, token: string | undefined): RequestHandler {
  const digest = (v: string) => createHash("sha256").update(v).digest();
  const expected = token === undefined ? undefined : digest(token);
  return async (req, res) => {
    if (expected) {
      const presented = /^Bearer\s+(\S+)\s*$/i.exec(req.get("authorization") ?? "")?.[1];
      if (presented === undefined || !timingSafeEqual(digest(presented), expected)) {
        throw AppError.unauthenticated("Send Authorization: Bearer <SWITCHYARD_METRICS_TOKEN>");
      }
    } else if (!LOOPBACK.has(req.socket.remoteAddress ?? "")) {
      throw new AppError(
        ErrorCode.Forbidden,
        "Metrics are served to loopback clients only while SWITCHYARD_METRICS_TOKEN is unset",
      );
    }
    const text = await metrics.render();
    res.status(200).type(metrics.contentType).send(text);
  };
}

export interface AppOptions {
  deps: DataPlaneDeps;
  credentials: CredentialService;
  logger: Logger;
  bodyLimitBytes: number;
  /** Origins allowed by CORS (config `corsOrigins`); empty = CORS off. */
  corsOrigins: readonly string[];
  /**
   * Express `trust proxy` (config `trustProxy`): which proxies' `X-Forwarded-For` names the client
   * (`req.ip`, used for throttling). Unset: the socket peer is the client.
   */
  trustProxy?: boolean | number | string;
  /** Prometheus metrics: counted for every answer and served at `/metrics`. */
  metrics?: Metrics;
  /** Config `metricsToken`: the bearer token `/metrics` asks for; unset = loopback clients only. */
  metricsToken?: string;
  /** Level of the one line per request: `debug` (default; JSON logs) or `info` (readable logs). */
  accessLogLevel?: "debug" | "info";
  /** Traces (issue 29, item 2): a span per request when enabled (`http-tracing.ts`). */
  tracing?: Tracing;
  /** The database circuit: while it refuses, `/v1`, `/control` and `/graphql` answer 503 (`database-gate.ts`). */
  database?: DatabaseAvailability;
}

/** A credential as presented: its value, and whether the header it came in takes API keys only. */
export interface PresentedCredential {
  /** Empty when an Authorization header came that is not `Bearer` (and no `x-api-key`). */
  value: string;
  /** True for `x-api-key`, which takes API keys only (issue 5, item 6), never access tokens. */
  apiKeyOnly: boolean;
}

/** The credential a request presents: `Authorization: Bearer …`, else `x-api-key`; undefined = none. */
export function presentedCredential(req: Pick<Request, "get">): PresentedCredential | undefined {
  const bearer = /^Bearer\s+(\S+)\s*$/i.exec(req.get("authorization") ?? "")?.[1];
  if (bearer !== undefined) return { value: bearer, apiKeyOnly: false };
  // A non-Bearer Authorization (e.g. a proxy's Basic) does not hide an x-api-key.
  const apiKey = req.get("x-api-key");
  if (apiKey !== undefined) return { value: apiKey, apiKeyOnly: true };
  return req.get("authorization") ? { value: "", apiKeyOnly: false } : undefined;
}

/** `protocol://host` of a request, for absolute links on the same origin; undefined without a Host header. */
export function requestOrigin(req: Pick<Request, "protocol" | "get">): string | undefined {
  const host = req.get("host");
  return host ? `${req.protocol}://${host}` : undefined;
}

/**
 * The client address of a request Express did not route (a graphql-ws upgrade), by the app's
 * `trust proxy` rule: what `req.ip` says for a routed one.
 */
export function clientIp(app: Express, request: IncomingMessage): string | undefined {
  const view = Object.create(app.request, {
    app: { value: app },
    headers: { value: request.headers },
    socket: { value: request.socket },
  }) as Request;
  return view.ip;
}

/**
 * Builds the request context; with `auth: required`, 401 unless valid credentials came; with
 * `optional`, a caller when valid credentials came (refused ones are kept as `credentialError`).
 */
async function contextFor(
  req: Request,
  res: Response,
  credentials: CredentialService,
  auth: "required" | "optional" | "none",
): Promise<RequestContext> {
  const ctx: RequestContext = { requestId: res.locals.requestId as string, origin: requestOrigin(req), ip: req.ip };
  if (auth === "none") return ctx;
  const credential = presentedCredential(req);
  if (auth === "optional") {
    if (credential === undefined) return ctx;
    try {
      ctx.principal = await credentials.authenticate(credential.value, { apiKeyOnly: credential.apiKeyOnly });
    } catch (err) {
      if (!(err instanceof AppError)) throw err;
      ctx.credentialError = err;
    }
    return ctx;
  }
  if (credential === undefined) throw AppError.unauthenticated("Missing credentials: send Authorization: Bearer <key>");
  ctx.principal = await credentials.authenticate(credential.value, { apiKeyOnly: credential.apiKeyOnly });
  if (!ctx.principal) throw AppError.unauthenticated("Missing credentials: send Authorization: Bearer <key>");
  return ctx;
}

/** Where `timing` keeps a request's start (ms, `performance.now()`) for its overhead header. */
const TIMING_STARTED = Symbol("timingStarted");

type TimedResponse = Response & { [TIMING_STARTED]?: number };

/**
 * Sets `x-request-id` and, when the headers go out, `x-switchyard-overhead-ms`: the time spent so
 * far minus the engine's share (`res.locals.engineMs`). For streams the headers leave when the
 * engine accepts, so there it is the overhead before the first token. The header is added by
 * the app's `writeHead` (`overheadHeader`), once for all requests, not by a closure per request.
 */
const timing: RequestHandler = (_req, res, next) => {
  (res as TimedResponse)[TIMING_STARTED] = performance.now();
  const requestId = randomUUID();
  res.locals.requestId = requestId;
  res.setHeader("x-request-id", requestId);
  next();
};

/** Makes the responses of `app` add `x-switchyard-overhead-ms` as their headers go out (see `timing`). */
function overheadHeader(app: Express): void {
  const writeHead = http.ServerResponse.prototype.writeHead;
  app.response.writeHead = function overheadWriteHead(this: TimedResponse, ...args: unknown[]) {
    const started = this[TIMING_STARTED];
    if (started !== undefined && !this.headersSent) {
      const overhead = Math.max(0, performance.now() - started - ((this.locals.engineMs as number | undefined) ?? 0));
      this.setHeader("x-switchyard-overhead-ms", overhead.toFixed(2));
    }
    return (writeHead as (...a: unknown[]) => Response).apply(this, args);
  } as typeof app.response.writeHead;
}

/** The POSTs where a request's fixed cost is most of it (issue 30, item 3): served by `hot-path.ts`. */
const HOT_PATHS = new Set(["/v1/chat/completions", "/v1/responses", "/v1/embeddings", "/v1/messages"]);

/** The Express app, and the server's request listener: the hot routes first (`hot-path.ts`), else the app. */
export interface RestApp {
  app: Express;
  listener: (req: IncomingMessage, res: ServerResponse) => void;
  /** The server's request and response classes (`expressMessageClasses`); undefined: Node's own. */
  messageClasses?: ReturnType<typeof expressMessageClasses>;
}

/**
 * Builds the Express app with both REST tables mounted, the OpenAPI document at `/schema/openapi.json`
 * (`.yaml`), its reference page at `/docs`, the dashboard at `/dashboard`, the links of `GET /`
 * (and `/metrics` when `metrics` is given);
 * the server adds `/graphql`, the 404 and the error middleware after it. The listener returned
 * beside it serves the four hot POSTs through the same handlers without the router.
 */
export function createApp(opts: AppOptions): RestApp {
  const app = express();
  app.disable("x-powered-by");
  app.set("etag", false);
  if (opts.trustProxy !== undefined) app.set("trust proxy", opts.trustProxy);
  // node:querystring (Express 5's default, named so it cannot change under us): a repeated key
  // is an array, `a[]` and `a[b]` are keys of their own (`query-params.ts` refuses both).
  app.set("query parser", "simple");
  overheadHeader(app);
  // Every request's middleware, in order; the hot routes run the same list (`hot-path.ts`).
  const global: RequestHandler[] = [timing];
  if (opts.tracing?.enabled) global.push(traceRequests(opts.tracing));
  // Exactly one valid Host (RFC 9112 §3.2; issue 28, item 4), before anything else answers.
  global.push(securityHeaders, hostHeaderRule, cors(opts.corsOrigins));
  global.push(accessLog(opts.logger, opts.accessLogLevel ?? "debug"));
  if (opts.metrics) global.push(httpMetrics(opts.metrics));
  for (const handler of global) app.use(handler);
  if (opts.metrics) app.get("/metrics", metricsRoute(opts.metrics, opts.metricsToken));
  // The OpenAPI document and the reference page (issue 13, items 1 and 2): no credentials.
  mountOpenApi(app);
  // The dashboard (issue 13, item 3): the Vite build, served from this process.
  mountDashboard(app);
  // Where to go from the root (issue 27, item 4).
  app.get("/", homePage);
  // While the database is unavailable, 503 before any body is read (issue 28, item 1).
  const gate = opts.database ? databaseGate(opts.database) : undefined;
  if (gate) app.use(GATED_PREFIXES, gate);
  // Routes that read their own body (batches) skip the JSON parser; raw control routes (the Stripe
  // webhook, whose signature covers the exact bytes) get them as a Buffer.
  const rawBodies = new Set(
    [...dataPlaneRoutes, ...controlRoutes]
      .filter((r) => r.body === "raw")
      .map((r) => `${r.method.toUpperCase()} ${r.path}`),
  );
  const parseRaw = express.raw({ type: () => true, limit: opts.bodyLimitBytes });
  const parseJson = jsonBody(opts.bodyLimitBytes);
  // Routes with a smaller body limit of their own (decisions: 1 MiB) get their own parser.
  const ownLimits = new Map(
    dataPlaneRoutes
      .filter((r) => r.bodyLimitBytes !== undefined)
      .map((r) => [`${r.method.toUpperCase()} ${r.path}`, jsonBody(Math.min(r.bodyLimitBytes!, opts.bodyLimitBytes))]),
  );
  app.use(["/v1", "/control/v1"], (req, res, next) => {
    const path = req.originalUrl.split("?")[0].replace(/\/+$/, "").toLowerCase();
    if (rawBodies.has(`${req.method} ${path}`)) return next();
    return (ownLimits.get(`${req.method} ${path}`) ?? parseJson)(req, res, next);
  });

  // A documented query parameter is given once, as one value (issue 28, item 4).
  const queryRule = (doc: { query?: { shape: object } } | undefined): RequestHandler[] =>
    doc?.query ? [singleQueryValues(Object.keys(doc.query.shape))] : [];
  const hot: HotRoute[] = [];
  for (const route of dataPlaneRoutes) {
    const handlers: RequestHandler[] = [
      ...queryRule(route.doc),
      // Inside the request's span (when traced), errors passed on from there: their log line carries its trace id.
      (req: Request, res: Response, next: NextFunction) =>
        inRequestScope(res, async () => {
          const ctx = await contextFor(req, res, opts.credentials, route.auth);
          await route.handler(opts.deps, req, res, ctx);
        }).catch(next),
    ];
    app[route.method](route.path, ...handlers);
    if (route.method === "post" && HOT_PATHS.has(route.path) && route.body !== "raw" && !route.bodyLimitBytes) {
      hot.push({ path: route.path, before: [...global, ...(gate ? [gate] : []), parseJson], route: handlers });
    }
  }
  for (const route of controlRoutes) {
    const handlers: RequestHandler[] = [...queryRule(route.doc), ...(route.body === "raw" ? [parseRaw] : [])];
    app[route.method](route.path, ...handlers, (req: Request, res: Response, next: NextFunction) =>
      inRequestScope(res, async () => {
        const ctx = await contextFor(req, res, opts.credentials, route.auth);
        const result = await route.call(
          opts.deps.resolvers,
          {
            body: req.body,
            params: req.params as Record<string, string>,
            query: req.query as Record<string, unknown>,
            header: (name) => req.get(name),
          },
          ctx,
        );
        if (route.status === 204) res.status(204).end();
        else res.status(route.status).json(result);
      }).catch(next),
    );
  }
  return {
    app,
    listener: hotPathListener(app, hot, errorMiddleware(opts.logger)),
    messageClasses: expressMessageClasses(app),
  };
}
