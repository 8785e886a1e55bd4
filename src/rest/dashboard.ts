/**
 * The dashboard (issue 13, item 3) at `/dashboard`: the files Vite builds from `dashboard/` into
 * `dist/dashboard/` at `npm run build`, served from this process (no CDN, no external network).
 *
 * - `/dashboard/assets/*`: the hashed bundles, cached for a year (`immutable`); a missing one is
 *   the ordinary 404 envelope, never the page.
 * - Every other `GET` under `/dashboard`: `index.html` (the page routes in the browser), never
 *   cached, with a Content-Security-Policy that allows this origin only (scripts, styles, and
 *   `/graphql` over fetch and WebSocket).
 * - Not built (a checkout that ran no `npm run build`): 404 with the command to run.
 *
 * The page holds no credentials of its own: it signs in through `/graphql` and sends the access
 * token there (see dashboard/src/api.ts).
 */
import { existsSync } from "node:fs";
import path from "node:path";
import express, { type Express } from "express";
import { packageRoot } from "../config/config.js";
import { AppError, echo } from "../shared/errors.js";

/** Where `vite build --config dashboard/vite.config.ts` writes the dashboard. */
export const DASHBOARD_DIR = path.join(packageRoot, "dist/dashboard");

/**
 * The page's policy: everything from this origin; `'unsafe-inline'` styles for the chart
 * library's positioning, which sets style attributes.
 */
const CSP = [
  "default-src 'self'",
  "script-src 'self'",
  "style-src 'self' 'unsafe-inline'",
  "img-src 'self' data:",
  "connect-src 'self'",
  "frame-ancestors 'none'",
  "base-uri 'none'",
  "form-action 'self'",
].join("; ");

/** Mounts `/dashboard` on `app` (`dir`: the built files; by default `dist/dashboard`). */
export function mountDashboard(app: Express, dir: string = DASHBOARD_DIR): void {
  const index = path.join(dir, "index.html");
  app.use(
    "/dashboard/assets",
    express.static(path.join(dir, "assets"), {
      index: false,
      fallthrough: true,
      dotfiles: "ignore",
      // The global `no-store` (http-headers.ts) is replaced: these names change with their content.
      setHeaders: (res) => res.setHeader("Cache-Control", "public, max-age=31536000, immutable"),
    }),
  );
  app.get(["/dashboard", "/dashboard/{*rest}"], (req, res) => {
    if (req.path.startsWith("/dashboard/assets/")) {
      throw AppError.notFound(`No dashboard asset at ${echo(req.path)}`);
    }
    if (!existsSync(index)) {
      throw AppError.notFound("The dashboard is not built: run npm run build");
    }
    res.setHeader("Content-Security-Policy", CSP);
    res.setHeader("Referrer-Policy", "no-referrer");
    res.sendFile(index, { headers: { "Cache-Control": "no-store" }, cacheControl: false, lastModified: false });
  });
}
