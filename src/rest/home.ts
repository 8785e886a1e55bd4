/**
 * `GET /` (issue 27, item 4): where to go from the root, instead of the 404 envelope. JSON by
 * default (`{name, version, links}`); a small HTML page of the same links for a browser (a
 * request whose `Accept` prefers `text/html`). No credentials, nothing about callers.
 */
import type { RequestHandler } from "express";
import { packageVersion } from "../config/config.js";

/** The links `GET /` answers: relative paths on this server, with what each is. */
export const HOME_LINKS = {
  docs: { href: "/docs", title: "API reference (OpenAPI)" },
  dashboard: { href: "/dashboard", title: "Dashboard" },
  graphql: { href: "/graphql", title: "GraphQL endpoint (control plane)" },
  models: { href: "/v1/models", title: "Models (needs an API key)" },
  openapi: { href: "/schema/openapi.json", title: "OpenAPI document" },
  health: { href: "/v1/health/ready", title: "Readiness probe" },
} as const;

/** `GET /` body as JSON. */
export interface HomeDto {
  name: "Switchyard";
  version: string;
  links: Record<keyof typeof HOME_LINKS, string>;
}

/** The JSON answer of `GET /`. */
export function homeDto(): HomeDto {
  const links = Object.fromEntries(Object.entries(HOME_LINKS).map(([k, v]) => [k, v.href]));
  return { name: "Switchyard", version: packageVersion, links: links as HomeDto["links"] };
}

/** The HTML answer of `GET /` (every value is ours: nothing to escape). */
function homeHtml(): string {
  const items = Object.values(HOME_LINKS)
    .map((l) => `<li><a href="${l.href}">${l.title}</a> <code>${l.href}</code></li>`)
    .join("\n");
  return (
    `<!doctype html>\n<html lang="en"><head><meta charset="utf-8"><title>Switchyard ${packageVersion}</title></head>\n` +
    `<body><h1>Switchyard ${packageVersion}</h1>\n<ul>\n${items}\n</ul></body></html>\n`
  );
}

/** `GET /`: JSON, or HTML when the client prefers it (see the module header). */
export const homePage: RequestHandler = (req, res) => {
  if (req.accepts(["application/json", "text/html"]) === "text/html") {
    res.setHeader("Content-Security-Policy", "default-src 'none'; frame-ancestors 'none'");
    res.status(200).type("html").send(homeHtml());
    return;
  }
  res.status(200).json(homeDto());
};
