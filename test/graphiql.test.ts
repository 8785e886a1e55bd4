/**
 * GraphiQL at `/graphql` over plain HTTP (issue 27, item 7): a browser's `GET` gets the bundled
 * page (same-origin CSP, every file from this server), anything else keeps Apollo's answers.
 * test/graphiql.browser.test.ts runs the page in Chromium.
 */
import { GRAPHIQL_DIR } from "../src/rest/graphiql.js";
import { type TestServer, createTestUser, expectEnvelope, http, startTestServer } from "./support/harness.js";
import { ensureViteBuilt } from "./support/vite-build.js";

/** What Chromium sends when a person opens an address. */
const BROWSER_ACCEPT = "text/html,application/xhtml+xml,application/xml;q=0.9,image/avif,image/webp,*/*;q=0.8";

let server: TestServer;
beforeAll(async () => {
  await ensureViteBuilt("graphiql", GRAPHIQL_DIR);
  server = await startTestServer();
}, 120_000);
afterAll(() => server.close());

test("a browser's GET /graphql gets the GraphiQL page: no-store, a same-origin CSP, and every file it names from this server", async () => {
  const res = await http(server.url, "GET", "/graphql", { headers: { accept: BROWSER_ACCEPT } });
  expect(res.status).toBe(200);
  expect(res.headers.get("content-type")).toMatch(/^text\/html/);
  expect(res.headers.get("cache-control")).toBe("no-store");
  const csp = res.headers.get("content-security-policy") ?? "";
  expect(csp).toContain("default-src 'self'");
  expect(csp).toContain("script-src 'self';");
  expect(csp).toContain("connect-src 'self';");
  expect(res.text).toContain("<title>Switchyard GraphiQL</title>");
  // Apollo's landing page (the CDN's) is gone.
  expect(res.text).not.toMatch(/apollographql|embeddable-sandbox|cdn\./i);

  const assets = [...res.text.matchAll(/(?:src|href)="([^"#][^"]*)"/g)].map((m) => m[1]);
  expect(assets.length).toBeGreaterThan(0);
  for (const asset of assets) {
    expect(asset).toMatch(/^\/graphiql\/assets\//);
    const a = await fetch(server.url + asset);
    expect(a.status).toBe(200);
    expect(a.headers.get("cache-control")).toMatch(/immutable/);
    await a.arrayBuffer();
  }
  const missing = await http(server.url, "GET", "/graphiql/assets/nope.js");
  expectEnvelope(missing, 404);
});

test("a GET that does not prefer HTML keeps Apollo's answers: its CSRF refusal, 400 without a query, the data with one", async () => {
  const query = encodeURIComponent("{ __typename }");
  const accepts = [undefined, "*/*", "application/json", "application/graphql-response+json, application/json;q=0.9"];
  for (const accept of accepts) {
    const headers: Record<string, string> = accept ? { accept } : {};
    // Apollo's CSRF rule (a header a plain form or link cannot send) comes first...
    for (const path of ["/graphql", `/graphql?query=${query}`]) {
      const blocked = await http(server.url, "GET", path, { headers });
      expect({ accept, path, status: blocked.status }).toEqual({ accept, path, status: 400 });
      expect(blocked.body.errors[0].message).toMatch(/Cross-Site Request Forgery/);
    }
    // ...then a GET without a query is a bad request, and one with a query runs.
    headers["apollo-require-preflight"] = "true";
    const empty = await http(server.url, "GET", "/graphql", { headers });
    expect({ accept, status: empty.status }).toEqual({ accept, status: 400 });
    expect(empty.body.errors[0].message).toMatch(/non-empty `query`/);
    const ok = await http(server.url, "GET", `/graphql?query=${query}`, { headers });
    expect({ accept, status: ok.status }).toEqual({ accept, status: 200 });
    expect(ok.body).toEqual({ data: { __typename: "Query" } });
  }
});

test("POST /graphql is GraphQL whatever the Accept: the caller's team with a token, 401 in the error without one", async () => {
  const user = await createTestUser(server.url);
  const query = "{ me { email } team { id } }";
  const res = await http(server.url, "POST", "/graphql", {
    body: { query },
    token: user.token,
    headers: { accept: BROWSER_ACCEPT },
  });
  expect(res.headers.get("content-type")).toMatch(/json/);
  expect(res.body.data).toEqual({ me: { email: user.email }, team: { id: user.teamId } });
  const anonymous = await http(server.url, "POST", "/graphql", { body: { query } });
  expect(anonymous.body.errors[0].extensions.status_code).toBe(401);
});
