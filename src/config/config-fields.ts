/**
 * The building blocks of the configuration schema (`config.ts`): environment integers, `auto`
 * or a number, URLs that must be https off loopback, and the OAuth provider and upstream engine
 * entries (JSON in the environment or a file).
 */
import { z } from "zod";

export const LOG_LEVELS = ["fatal", "error", "warn", "info", "debug", "trace", "silent"] as const;

export const intFromEnv = (min: number, max: number) => z.coerce.number().int().min(min).max(max);

/**
 * `auto` (measured from the machine, issue 12 item 3) or a whole number in [min, max]; anything
 * else fails naming both forms.
 */
export const autoOrInt = (min: number, max: number) => {
  const error = `expected auto or a whole number from ${min} to ${max}`;
  return z.union([z.literal("auto"), z.coerce.number().int({ error }).min(min, { error }).max(max, { error })], {
    error,
  });
};

/** True for `localhost`, 127.0.0.0/8 and `[::1]`: the only hosts plain `http` is allowed for. */
export function isLoopbackHost(hostname: string): boolean {
  return hostname === "localhost" || /^127(\.\d{1,3}){3}$/.test(hostname) || hostname === "[::1]";
}

/**
 * True when binding `host` (config `host`, `HOST`) serves this machine only (issue 27, item 2):
 * `localhost`, 127.0.0.0/8, `::1` (bracketed or not) and `::ffff:127.x.x.x`. Anything else, the
 * wildcards `0.0.0.0` and `::` among them, may be reached from the network.
 */
export function isLoopbackBind(host: string): boolean {
  const h = host
    .trim()
    .toLowerCase()
    .replace(/^\[(.*)\]$/, "$1");
  return h === "localhost" || /^(::ffff:)?127(\.\d{1,3}){3}$/.test(h) || h === "::1" || /^(0+:){7}0*1$/.test(h);
}

/**
 * Why others can reach this service, or null when only this machine can (issue 27, item 2): a
 * `host` that is not loopback, a public URL whose host is not loopback, or a trusted proxy in front
 * (a reverse proxy on this machine binds loopback but serves the network). Used for the signup
 * default, the local payment provider's refusal and the start banner.
 */
export function exposure(cfg: {
  host: string;
  publicUrl?: string;
  trustProxy?: boolean | number | string;
}): string | null {
  if (!isLoopbackBind(cfg.host)) return `HOST=${cfg.host}`;
  if (cfg.publicUrl) {
    let host = "";
    try {
      host = new URL(cfg.publicUrl).hostname;
    } catch {
      host = "";
    }
    if (host && !isLoopbackBind(host)) return `SWITCHYARD_PUBLIC_URL=${cfg.publicUrl}`;
  }
  if (cfg.trustProxy !== undefined && cfg.trustProxy !== false && cfg.trustProxy !== 0) {
    return `SWITCHYARD_TRUST_PROXY=${String(cfg.trustProxy)}`;
  }
  return null;
}

/** An `https` URL, or `http` on a loopback host (a provider on this machine, as in tests). */
export const secureUrl = z
  .string()
  .url()
  .refine((v) => {
    const url = new URL(v);
    return url.protocol === "https:" || (url.protocol === "http:" && isLoopbackHost(url.hostname));
  }, "expected an https URL (plain http only on a loopback host)");

/**
 * One OpenID Connect provider (issue 8, item 2). `name` is the `{provider}` of the routes;
 * `issuer` is discovered (`/.well-known/openid-configuration`); `redirect_uri` is the web client's
 * callback registered at the provider, the only one the authorize helper uses; `scopes` are
 * requested (`openid` is required).
 */
export const oauthProviderSchema = z
  .object({
    name: z.string().regex(/^[a-z0-9][a-z0-9_-]{0,63}$/, "expected lowercase letters, digits, - and _ (1–64)"),
    issuer: secureUrl,
    client_id: z.string().min(1),
    /** Absent for a public client (PKCE only, no client authentication). */
    client_secret: z.string().min(1).optional(),
    redirect_uri: secureUrl.refine((v) => {
      const url = new URL(v);
      return url.search === "" && url.hash === "";
    }, "must have no query string or fragment (the provider's answer adds its own)"),
    scopes: z
      .string()
      .regex(/(^| )openid( |$)/, "must include openid")
      .default("openid email profile"),
  })
  .transform((p) => ({
    name: p.name,
    issuer: p.issuer,
    clientId: p.client_id,
    clientSecret: p.client_secret,
    redirectUri: p.redirect_uri,
    scopes: p.scopes,
  }));

/** A configured OpenID Connect provider (config `oauthProviders`). */
export type OAuthProviderConfig = z.infer<typeof oauthProviderSchema>;

/**
 * One upstream OpenAI-compatible endpoint (issue 9, item 3): a vLLM, SGLang, llama.cpp server or
 * another Switchyard. `base_url` is the OpenAI base URL (as given to the `openai` client, usually
 * ending in `/v1`); `models` the upstream model ids it serves; `weight` its share of the traffic
 * among healthy replicas; `max_concurrency` the most requests sent to it at once (also its
 * connection pool size; more wait for a free one, up to the request's queue wait).
 */
export const upstreamSchema = z
  .object({
    name: z.string().regex(/^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$/, "expected letters, digits, . - and _ (1–64)"),
    base_url: z
      .string()
      .url()
      .refine((v) => /^https?:$/.test(new URL(v).protocol), "expected an http or https URL")
      .refine((v) => {
        const url = new URL(v);
        return url.search === "" && url.hash === "" && url.username === "" && url.password === "";
      }, "must have no query string, fragment or credentials (use api_key)"),
    api_key: z.string().min(1).optional(),
    models: z.array(z.string().min(1).max(512)).min(1),
    weight: z.number().positive().max(1000).default(1),
    max_concurrency: z.number().int().min(1).max(4096).default(64),
  })
  .transform((u) => ({
    name: u.name,
    baseUrl: u.base_url.replace(/\/+$/, ""),
    apiKey: u.api_key,
    models: u.models,
    weight: u.weight,
    maxConcurrency: u.max_concurrency,
  }));

/** A configured upstream endpoint (config `upstreams`). */
export type UpstreamConfig = z.infer<typeof upstreamSchema>;

/** A JSON array given as a string (environment) or as an array (config file). */
export const jsonArray = (what: string) =>
  z.union([z.array(z.unknown()), z.string()]).transform((v, ctx) => {
    if (Array.isArray(v)) return v;
    try {
      return JSON.parse(v) as unknown;
    } catch {
      ctx.addIssue({ code: "custom", message: `expected a JSON array of ${what}` });
      return z.NEVER;
    }
  });

export const upstreamList = z
  .array(upstreamSchema)
  .max(256)
  .refine((list) => new Set(list.map((u) => u.name)).size === list.length, "endpoint names must be unique");
