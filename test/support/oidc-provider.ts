/**
 * A real OpenID Connect provider for tests (`oidc-provider` 8, certified): one confidential client,
 * PKCE required, on a free loopback port. Its login and consent screens are replaced by an
 * interaction endpoint that signs in the account named by the `x-test-account` header and grants
 * what is asked, so a test drives a whole authorization over HTTP with `authorize()`: from the
 * authorization URL, through the provider's redirects (cookies kept), to the redirect URI with
 * `code`, `state` and `iss` — where the browser would land. The redirect URI itself is never called.
 */
import http from "node:http";
import type { AddressInfo } from "node:net";
import { exportJWK, generateKeyPair } from "jose";
import Provider, { type Adapter, type AdapterPayload, type ClientMetadata, type Configuration } from "oidc-provider";

/** What the provider says about a person. */
export interface TestAccount {
  sub: string;
  email?: string;
  email_verified?: boolean;
  name?: string;
}

export interface TestOidcProvider {
  issuer: string;
  clientId: string;
  clientSecret: string;
  redirectUri: string;
  /** A second client of the provider (another application), same redirect URI. */
  otherApp: { clientId: string; clientSecret: string };
  /** The provider entry for Switchyard's `oauthProviders` setting. */
  config(name: string): {
    name: string;
    issuer: string;
    client_id: string;
    client_secret: string;
    redirect_uri: string;
  };
  /** Makes `account` known to the provider (sign-in by its `sub`). */
  addAccount(account: TestAccount): void;
  /**
   * Follows `authorizationUrl` as a browser would, signing in as `account`; returns the URL the
   * provider finally redirects to (the redirect URI with `code`, `state`, `iss`, or an `error`).
   */
  authorize(authorizationUrl: string, account: TestAccount): Promise<URL>;
  close(): Promise<void>;
}

/**
 * Provider storage in a Map per provider and model (the provider warns about its own quick-start
 * adapter; expiry is not needed for tests that last seconds).
 */
function mapAdapter(): (model: string) => Adapter {
  const rows = new Map<string, AdapterPayload>();
  return (model) => {
    const key = (id: string) => `${model}:${id}`;
    const where = (pick: (p: AdapterPayload) => unknown, value: string) =>
      [...rows].find(([k, p]) => k.startsWith(`${model}:`) && pick(p) === value)?.[1];
    return {
      upsert: async (id, payload) => void rows.set(key(id), payload),
      find: async (id) => rows.get(key(id)),
      findByUid: async (uid) => where((p) => p.uid, uid),
      findByUserCode: async (code) => where((p) => p.userCode, code),
      consume: async (id) => {
        const row = rows.get(key(id));
        if (row) row.consumed = Math.floor(Date.now() / 1000);
      },
      destroy: async (id) => void rows.delete(key(id)),
      revokeByGrantId: async (grantId) => {
        for (const [k, p] of rows) if (p.grantId === grantId) rows.delete(k);
      },
    };
  };
}

/**
 * Starts a provider. `idTokenClaims`: put the profile and email claims in the ID token itself
 * (`conformIdTokenClaims: false`); by default they are served from userinfo only, as the
 * specification's conform mode says when an access token is issued.
 */
export async function startOidcProvider(opts: { idTokenClaims?: boolean } = {}): Promise<TestOidcProvider> {
  const accounts = new Map<string, TestAccount>();
  const clientId = `switchyard-${Math.random().toString(36).slice(2, 8)}`;
  const clientSecret = `secret-${Math.random().toString(36).slice(2)}-${Math.random().toString(36).slice(2)}`;
  const redirectUri = "http://127.0.0.1:9/oauth/callback";
  const otherApp = { clientId: `${clientId}-other-app`, clientSecret: `${clientSecret}-other-app` };
  const { privateKey } = await generateKeyPair("RS256", { extractable: true });
  const jwk = { ...(await exportJWK(privateKey)), kid: "test-key", alg: "RS256", use: "sig" };

  const server = http.createServer();
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const issuer = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;

  const configuration: Configuration = {
    adapter: mapAdapter(),
    clients: [
      ...[
        [clientId, clientSecret],
        [otherApp.clientId, otherApp.clientSecret],
      ].map(([id, secret]): ClientMetadata => ({
        client_id: id,
        client_secret: secret,
        redirect_uris: [redirectUri],
        grant_types: ["authorization_code"],
        response_types: ["code"],
        token_endpoint_auth_method: "client_secret_basic",
      })),
    ],
    jwks: { keys: [jwk] },
    cookies: { keys: ["test-cookie-key-0123456789"] },
    pkce: { required: () => true },
    conformIdTokenClaims: !opts.idTokenClaims,
    // Lifetimes in seconds, given so the provider does not print a notice for each default.
    ttl: { AccessToken: 600, AuthorizationCode: 60, Grant: 600, IdToken: 600, Interaction: 600, Session: 600 },
    claims: { openid: ["sub"], email: ["email", "email_verified"], profile: ["name"] },
    features: { devInteractions: { enabled: false } },
    interactions: { url: (_ctx, interaction) => `/interaction/${interaction.uid}` },
    findAccount: (_ctx, sub) => {
      const account = accounts.get(sub);
      if (!account) return undefined;
      return {
        accountId: sub,
        claims: () => {
          const claims: Record<string, unknown> = { sub };
          if (account.email !== undefined) claims.email = account.email;
          if (account.email_verified !== undefined) claims.email_verified = account.email_verified;
          if (account.name !== undefined) claims.name = account.name;
          return claims as { sub: string };
        },
      };
    },
  };
  const provider = new Provider(issuer, configuration);
  const callback = provider.callback();

  server.on("request", (req, res) => {
    if (!req.url?.startsWith("/interaction/")) return void callback(req, res);
    void interaction(provider, req, res).catch((err: unknown) => {
      res.statusCode = 500;
      res.end(String(err));
    });
  });

  return {
    issuer,
    clientId,
    clientSecret,
    redirectUri,
    otherApp,
    config: (name) => ({ name, issuer, client_id: clientId, client_secret: clientSecret, redirect_uri: redirectUri }),
    addAccount: (account) => void accounts.set(account.sub, account),
    async authorize(authorizationUrl, account) {
      accounts.set(account.sub, account);
      const jar = new Map<string, string>();
      let url = new URL(authorizationUrl);
      for (let hop = 0; hop < 20; hop++) {
        if (url.origin !== issuer) return url; // left the provider: the redirect URI
        const res = await fetch(url, {
          redirect: "manual",
          headers: {
            cookie: [...jar].map(([k, v]) => `${k}=${v}`).join("; "),
            "x-test-account": account.sub,
          },
        });
        for (const line of res.headers.getSetCookie()) {
          const [pair] = line.split(";");
          const eq = pair.indexOf("=");
          jar.set(pair.slice(0, eq).trim(), pair.slice(eq + 1).trim());
        }
        const location = res.headers.get("location");
        if (res.status < 300 || res.status >= 400 || !location) {
          throw new Error(`provider answered ${res.status} at ${url.pathname}: ${(await res.text()).slice(0, 500)}`);
        }
        url = new URL(location, url);
      }
      throw new Error("too many redirects");
    },
    async close() {
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}

/** Signs in the account of the `x-test-account` header, and grants every scope and claim asked. */
async function interaction(provider: Provider, req: http.IncomingMessage, res: http.ServerResponse): Promise<void> {
  const details = await provider.interactionDetails(req, res);
  const { prompt, params } = details;
  if (prompt.name === "login") {
    const accountId = req.headers["x-test-account"];
    if (typeof accountId !== "string") throw new Error("x-test-account header missing");
    await provider.interactionFinished(req, res, { login: { accountId } }, { mergeWithLastSubmission: false });
    return;
  }
  if (prompt.name === "consent") {
    const grant = details.grantId
      ? ((await provider.Grant.find(details.grantId)) as InstanceType<typeof provider.Grant>)
      : new provider.Grant({ accountId: details.session?.accountId as string, clientId: params.client_id as string });
    const missing = prompt.details as { missingOIDCScope?: string[]; missingOIDCClaims?: string[] };
    if (missing.missingOIDCScope) grant.addOIDCScope(missing.missingOIDCScope.join(" "));
    if (missing.missingOIDCClaims) grant.addOIDCClaims(missing.missingOIDCClaims);
    const grantId = await grant.save();
    await provider.interactionFinished(req, res, { consent: { grantId } }, { mergeWithLastSubmission: true });
    return;
  }
  throw new Error(`unexpected prompt ${prompt.name}`);
}
