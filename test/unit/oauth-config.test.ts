/**
 * `SWITCHYARD_OAUTH_PROVIDERS` / `oauthProviders` (issue 8, item 2): a JSON array in the
 * environment or an array in the config file; https issuers (plain http only on loopback),
 * unique names, `openid` in the scopes, redirect URIs without query or fragment.
 */
import { mkdtempSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { ConfigError, loadConfig } from "../../src/config/config.js";

const tmp = () => mkdtempSync(path.join(os.tmpdir(), "switchyard-config-"));

const acme = {
  name: "acme",
  issuer: "https://login.acme.example",
  client_id: "switchyard",
  client_secret: "s3cret",
  redirect_uri: "https://app.example.com/oauth/callback",
};

function withProviders(value: unknown) {
  return loadConfig({
    SWITCHYARD_DATA_DIR: tmp(),
    SWITCHYARD_OAUTH_PROVIDERS: typeof value === "string" ? value : JSON.stringify(value),
  });
}

test("when nothing is set, then no provider is configured", () => {
  expect(loadConfig({ SWITCHYARD_DATA_DIR: tmp() }).oauthProviders).toEqual([]);
});

test("when the environment holds a JSON array, then each provider is read with the default scopes", () => {
  const cfg = withProviders([
    acme,
    { ...acme, name: "local", issuer: "http://127.0.0.1:4000", client_secret: undefined },
  ]);
  expect(cfg.oauthProviders).toEqual([
    {
      name: "acme",
      issuer: acme.issuer,
      clientId: "switchyard",
      clientSecret: "s3cret",
      redirectUri: acme.redirect_uri,
      scopes: "openid email profile",
    },
    {
      name: "local",
      issuer: "http://127.0.0.1:4000",
      clientId: "switchyard",
      clientSecret: undefined,
      redirectUri: acme.redirect_uri,
      scopes: "openid email profile",
    },
  ]);
});

test("when the config file holds the array, then it is read from there", () => {
  const dir = tmp();
  const file = path.join(dir, "switchyard.config.json");
  writeFileSync(file, JSON.stringify({ oauthProviders: [{ ...acme, scopes: "openid email" }] }));
  const cfg = loadConfig({ SWITCHYARD_DATA_DIR: dir, SWITCHYARD_CONFIG: file });
  expect(cfg.oauthProviders.map((p) => [p.name, p.scopes])).toEqual([["acme", "openid email"]]);
});

test.each([
  ["not JSON", "[{", /SWITCHYARD_OAUTH_PROVIDERS: expected a JSON array/],
  ["not an array", { name: "acme" }, /SWITCHYARD_OAUTH_PROVIDERS/],
  [
    "plain http off loopback",
    [{ ...acme, issuer: "http://login.acme.example" }],
    /\[0\]\.issuer: expected an https URL/,
  ],
  ["a bad name", [{ ...acme, name: "Acme Corp" }], /\[0\]\.name/],
  ["duplicate names", [acme, acme], /unique/],
  ["no openid scope", [{ ...acme, scopes: "email profile" }], /\[0\]\.scopes: must include openid/],
  ["a redirect URI with a query", [{ ...acme, redirect_uri: `${acme.redirect_uri}?x=1` }], /\[0\]\.redirect_uri/],
  ["no client id", [{ ...acme, client_id: "" }], /\[0\]\.client_id/],
])("when the providers have %s, then ConfigError names the setting", (_what, value, message) => {
  expect(() => withProviders(value)).toThrow(ConfigError);
  expect(() => withProviders(value)).toThrow(message);
});
