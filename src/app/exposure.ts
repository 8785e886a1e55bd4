/**
 * Safe by default (issue 27, item 2): what an API process refuses to serve on an interface others
 * can reach, and the start banner that says what is in force (the address really bound, who may
 * sign up, which payment provider, whether webhooks may reach private addresses).
 */
import type { AddressInfo } from "node:net";
import { type Config, ConfigError, exposure, isLoopbackBind, packageVersion } from "../config/config.js";

/**
 * Refuses to start an API process whose `host` others can reach while the `local` payment
 * provider — which credits any top-up without payment — is the configured one, unless
 * `localPayments` is `allow` (`SWITCHYARD_LOCAL_PAYMENTS=allow`).
 *
 * Why the start fails instead of the top-ups answering 4xx: a server that starts and then refuses
 * top-ups looks healthy until a customer meets the refusal, while a start that stops with one line
 * naming the settings is seen at once by whoever deploys it, before anyone can reach it. The
 * default bind (`127.0.0.1`) is loopback, so `npm start` with no configuration is unaffected.
 * A `worker` process serves no HTTP and is never refused. Exposed also means a loopback bind
 * behind a reverse proxy: a public `SWITCHYARD_PUBLIC_URL` or `SWITCHYARD_TRUST_PROXY` (`exposure`).
 * @throws ConfigError naming `HOST`, `SWITCHYARD_PAYMENT_PROVIDER` and `SWITCHYARD_LOCAL_PAYMENTS`.
 */
export function refuseUnsafeExposure(config: Config): void {
  const exposed = exposure(config);
  if (config.role === "worker" || !exposed) return;
  if (config.paymentProvider === "local" && config.localPayments !== "allow") {
    throw new ConfigError(
      `${exposed} means this service can be reached from the network, and the local payment provider credits ` +
        "top-ups without any payment. Set SWITCHYARD_PAYMENT_PROVIDER=stripe (with SWITCHYARD_STRIPE_SECRET_KEY), " +
        "or SWITCHYARD_LOCAL_PAYMENTS=allow to serve free top-ups anyway",
    );
  }
}

/** `host:port` as a URL writes it (`[::1]:8080` for IPv6). */
function hostPort(host: string, port: number): string {
  return `${host.includes(":") ? `[${host}]` : host}:${port}`;
}

/**
 * The base URL a client on this machine uses: the bound host, or `127.0.0.1` for the wildcards
 * `0.0.0.0` and `::`.
 */
export function localUrl(config: Pick<Config, "host">, port: number): string {
  const wildcard = config.host === "0.0.0.0" || config.host === "::" || config.host === "[::]";
  return `http://${hostPort(wildcard ? "127.0.0.1" : config.host.replace(/^\[(.*)\]$/, "$1"), port)}`;
}

/** The start banner's fields (the line "Switchyard listening"); `bound` is `server.address()`. */
export interface StartBanner {
  /** The address and port really bound, e.g. `127.0.0.1:8080` or `0.0.0.0:8080`. */
  address: string;
  /** `this machine only` (loopback bind) or `the network`. */
  reachableFrom: "this machine only" | "the network" | "the network, through a proxy";
  url: string;
  graphql: string;
  version: string;
  /** Config `signup` (`SWITCHYARD_SIGNUP`). */
  signup: Config["signup"];
  /** The provider of new top-ups and invoices. */
  payments: string;
  /** The webhook SSRF guard (`SWITCHYARD_WEBHOOK_ALLOW_PRIVATE`). */
  webhookGuard: string;
}

/** What the start banner says (issue 27, item 2). */
export function startBanner(config: Config, bound: AddressInfo, url: string): StartBanner {
  return {
    address: hostPort(bound.address, bound.port),
    reachableFrom: !isLoopbackBind(bound.address)
      ? "the network"
      : exposure(config)
        ? "the network, through a proxy"
        : "this machine only",
    url,
    graphql: `${url}/graphql`,
    version: packageVersion,
    signup: config.signup,
    payments:
      config.paymentProvider === "stripe"
        ? "stripe"
        : `local: top-ups credited without payment${exposure(config) ? " (SWITCHYARD_LOCAL_PAYMENTS=allow)" : ""}`,
    webhookGuard: config.webhookAllowPrivate
      ? "off: webhooks may reach private and loopback addresses (SWITCHYARD_WEBHOOK_ALLOW_PRIVATE=true)"
      : "on: webhooks to private and loopback addresses refused",
  };
}
