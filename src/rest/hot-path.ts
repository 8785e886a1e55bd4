/**
 * The hot POSTs without Express's router (issue 30, item 3): `POST /v1/chat/completions`,
 * `/v1/responses`, `/v1/embeddings` and `/v1/messages` run the same middleware functions, in the
 * same order, as Express would run them for that path (`createApp` builds both from one list), but
 * the request does not walk the router's ~60 layers (a path match, a closure and a `next` per
 * layer) to reach them. Everything else — other paths, other methods, any spelling of these paths
 * that Express would also accept (upper case, a trailing slash) — goes to Express unchanged.
 *
 * What Express sets up for a request is set up the same way here (`app.handle`: the request and
 * response prototypes, `res.locals`; the router: `originalUrl`, `baseUrl`, `params`, `next`, and
 * `req.route` once the route is reached, so a refusal before it is counted and traced as
 * `unmatched` as in Express), and the chain runs under Express's rules: a middleware that throws
 * or whose promise rejects passes its error on, an error skips to the error handler (the envelope,
 * `errorMiddleware`), and a chain that ends unanswered is the 404 of an unknown route.
 */
import http, { type IncomingMessage, type ServerResponse } from "node:http";
import type { Socket } from "node:net";
import type { ErrorRequestHandler, Express, NextFunction, Request, RequestHandler, Response } from "express";
import { notFoundHandler } from "./error-envelope.js";

/** One hot route: its path as sent (lower case, no trailing slash) and the handlers Express would run for it. */
export interface HotRoute {
  path: string;
  /** Global and path-mounted middleware, in Express's order, up to (not including) the route. */
  before: RequestHandler[];
  /** The route's own handlers (query rule, the handler). */
  route: RequestHandler[];
}

/** What the router leaves on a routed request: the route (`path` is what metrics and spans read). */
interface RouteInfo {
  path: string;
  method: string;
}

/** Runs `handlers` in order as Express's router would; `fail` gets the first error passed on. */
function runChain(
  handlers: readonly RequestHandler[],
  req: Request,
  res: Response,
  fail: (err: unknown) => void,
): void {
  let at = 0;
  const next: NextFunction = (err?: unknown) => {
    // `next("route")` / `next("router")` are not used by these handlers; any other value is an error.
    if (err !== undefined && err !== null && err !== false && err !== "route") return fail(err);
    const handler = handlers[at++];
    if (handler === undefined) return notFoundHandler(req, res, next);
    try {
      const ret = handler(req, res, next) as unknown;
      if (ret !== null && typeof ret === "object" && typeof (ret as Promise<unknown>).then === "function") {
        (ret as Promise<unknown>).then(undefined, (rejected: unknown) =>
          next(rejected ?? new Error("Rejected promise")),
        );
      }
    } catch (thrown) {
      next(thrown);
    }
  };
  req.next = next;
  next();
}

/**
 * The server's request listener: the hot routes through their chains, everything else to `app`.
 * @param onError the app's error handler (the envelope; `errorMiddleware`), for errors on a hot route.
 */
export function hotPathListener(
  app: Express,
  routes: readonly HotRoute[],
  onError: ErrorRequestHandler,
): (req: IncomingMessage, res: ServerResponse) => void {
  const chains = new Map<string, { route: RouteInfo; handlers: RequestHandler[] }>();
  for (const r of routes) {
    const route: RouteInfo = { path: r.path, method: "post" };
    // Where the router would match the route layer: `req.route` and the route's params from here on.
    const reached: RequestHandler = (req, _res, next) => {
      req.route = route;
      req.params = {};
      next();
    };
    chains.set(r.path, { route, handlers: [...r.before, reached, ...r.route] });
  }
  return (incoming, outgoing) => {
    const url = incoming.url ?? "";
    const query = url.indexOf("?");
    const chain = incoming.method === "POST" ? chains.get(query < 0 ? url : url.slice(0, query)) : undefined;
    if (!chain) return void app(incoming, outgoing);
    // What `app.handle` sets up: the circular references, Express's prototypes, `res.locals`.
    const req = incoming as Request;
    const res = outgoing as Response;
    req.res = res;
    res.req = req;
    // A no-op for the server's own classes (`expressMessageClasses`).
    if (Object.getPrototypeOf(req) !== app.request) Object.setPrototypeOf(req, app.request);
    if (Object.getPrototypeOf(res) !== app.response) Object.setPrototypeOf(res, app.response);
    if (!res.locals) res.locals = Object.create(null) as Response["locals"];
    // What the router sets up before its first layer.
    req.baseUrl = "";
    req.originalUrl = url;
    req.params = {};
    runChain(chain.handlers, req, res, (err) => {
      try {
        onError(err, req, res, () => undefined);
      } catch {
        // The error handler itself failed (it only writes the envelope): end the answer as Express's final handler would.
        if (!res.headersSent) res.statusCode = 500;
        res.end();
      }
    });
  };
}

/** True when `fn` is a `class` (it cannot be called on an object made elsewhere). */
function isClass(fn: unknown): boolean {
  return /^class[\s{]/.test(Function.prototype.toString.call(fn));
}

/**
 * Request and response classes for the HTTP server whose objects are born with Express's
 * prototypes (`app.request`, `app.response`), so `app.handle` and `hotPathListener` find them set
 * and `Object.setPrototypeOf` changes nothing (issue 30, item 3). Changing an object's prototype
 * after it was made leaves every property added to it afterwards on V8's slow path: about 2 µs
 * per property here, for the ~15 that Express, the router and the middleware add per request.
 * Undefined where this Node's `IncomingMessage`/`ServerResponse` are classes (they cannot be
 * called on another object): the server then uses Node's own, and Express sets the prototypes.
 */
export function expressMessageClasses(
  app: Express,
): { IncomingMessage: typeof http.IncomingMessage; ServerResponse: typeof http.ServerResponse } | undefined {
  if (isClass(http.IncomingMessage) || isClass(http.ServerResponse)) return undefined;
  const Incoming = http.IncomingMessage as unknown as (this: unknown, socket: Socket) => void;
  const Outgoing = http.ServerResponse as unknown as (this: unknown, req: IncomingMessage, options?: unknown) => void;
  function AppRequest(this: unknown, socket: Socket) {
    Incoming.call(this, socket);
  }
  AppRequest.prototype = app.request;
  function AppResponse(this: unknown, req: IncomingMessage, options?: unknown) {
    Outgoing.call(this, req, options);
  }
  AppResponse.prototype = app.response;
  return {
    IncomingMessage: AppRequest as unknown as typeof http.IncomingMessage,
    ServerResponse: AppResponse as unknown as typeof http.ServerResponse,
  };
}
