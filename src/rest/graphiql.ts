/**
 * GraphiQL (issue 27, item 7) at `GET /graphql` for browsers: the page Vite builds from
 * `graphiql/` into `dist/graphiql/` at `npm run build`, served from this process (no CDN, no
 * external network; Apollo's own landing page, which loaded its code from a CDN, is disabled).
 *
 * - `GET /graphql` whose `Accept` prefers `text/html` over the GraphQL answer types (a browser
 *   opening the address): the page, never cached, with a Content-Security-Policy that allows this
 *   origin only. Any other `GET` (a client asking for JSON, or saying nothing) and every `POST`
 *   go on to Apollo unchanged, and the graphql-ws upgrade never reaches Express.
 * - `/graphiql/assets/*`: the hashed bundles (GraphiQL, React, Monaco and its workers), cached
 *   for a year (`immutable`); a missing one is the ordinary 404 envelope.
 * - Not built (a checkout that ran no `npm run build`): 404 with the command to run.
 *
 * The page holds no credentials of its own: it sends the dashboard's access token of the tab, or
 * what the user pastes (see graphiql/src/credential.ts).
 */
import { existsSync } from "node:fs";
import path from "node:path";
import express, { type Express, type Request, type RequestHandler } from "express";
import { packageRoot } from "../config/config.js";
import { AppError, echo } from "../shared/errors.js";

/** Where `vite build --config graphiql/vite.config.ts` writes the page. */
export const GRAPHIQL_DIR = path.join(packageRoot, "dist/graphiql");

/**
 * The page's policy: everything from this origin (scripts, Monaco's workers, `/graphql` over fetch
 * and WebSocket); `'unsafe-inline'` styles because Monaco and GraphiQL's panels position their
 * elements with style attributes and injected `<style>` rules; `data:` fonts and images, which
 * GraphiQL's stylesheet carries inline.
 */
const CSP = [
  "default-src 'self'",
  "script-src 'self'",
  "worker-src 'self'",
  "style-src 'self' 'unsafe-inline'",
  "font-src 'self' data:",
  "img-src 'self' data:",
  "connect-src 'self'",
  "frame-ancestors 'none'",
  "base-uri 'none'",
  "form-action 'self'",
].join("; ");

/** The types a GraphQL-over-HTTP client asks for; `text/html` must beat all of them. */
const GRAPHQL_TYPES = ["application/graphql-response+json", "application/json", "multipart/mixed"];

/**
 * True when the request prefers an HTML page to a GraphQL answer (the rule of Apollo's landing
 * page: a browser's `text/html,…,*\/*;q=0.8` does, `application/json` or no `Accept` does not).
 */
export function prefersHtml(req: Pick<Request, "accepts" | "get">): boolean {
  if (!req.get("accept")) return false;
  return req.accepts([...GRAPHQL_TYPES, "text/html"]) === "text/html";
}

/**
 * Mounts the page's assets on `app` and returns the handler for `app.get("/graphql", …)` that
 * serves the page to browsers and passes everything else on (to Apollo, mounted after it).
 * @param dir the built files; by default `dist/graphiql`.
 */
export function mountGraphiql(app: Express, dir: string = GRAPHIQL_DIR): RequestHandler {
  const index = path.join(dir, "index.html");
  app.use(
    "/graphiql/assets",
    express.static(path.join(dir, "assets"), {
      index: false,
      fallthrough: true,
      dotfiles: "ignore",
      // The global `no-store` (http-headers.ts) is replaced: these names change with their content.
      setHeaders: (res) => res.setHeader("Cache-Control", "public, max-age=31536000, immutable"),
    }),
  );
  app.get("/graphiql/assets/{*rest}", (req) => {
    throw AppError.notFound(`No GraphiQL asset at ${echo(req.path)}`);
  });
  return (req, res, next) => {
    if (!prefersHtml(req)) return next();
    if (!existsSync(index)) throw AppError.notFound("GraphiQL is not built: run npm run build");
    res.setHeader("Content-Security-Policy", CSP);
    res.setHeader("Referrer-Policy", "no-referrer");
    res.setHeader("Vary", "Accept");
    res.sendFile(index, { headers: { "Cache-Control": "no-store" }, cacheControl: false, lastModified: false });
  };
}
