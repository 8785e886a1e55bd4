/**
 * Quiet, useful logs (issue 27, item 4): a not-ready readiness probe logs one WARN per change of
 * state (and one INFO when ready again), never an error line with a stack per probe; the access
 * line names the full path (mount prefixes kept: `/graphql`, `/docs/…`) with query secrets and
 * credential-shaped path segments blanked, plus status, ms and the request id; `GET /` answers
 * the links a newcomer needs (JSON, or HTML for a browser).
 */
import { packageVersion } from "../src/config/config.js";
import { REDACTED, loggedPath } from "../src/rest/log-path.js";
import {
  type TestServer,
  createTestCaller,
  eventually,
  expectEnvelope,
  http,
  startTestServer,
} from "./support/harness.js";
import { captureLogs } from "./support/log-capture.js";

describe("loggedPath", () => {
  test.each([
    ["/v1/models", "/v1/models"],
    ["/v1/models?limit=5&after=abc", "/v1/models?limit=5&after=abc"],
    ["/v1/models?token=secret&limit=5", `/v1/models?token=${REDACTED}&limit=5`],
    [
      "/control/v1/billing/topups/local/confirm?session=s1&signature=sig1",
      `/control/v1/billing/topups/local/confirm?session=${REDACTED}&signature=${REDACTED}`,
    ],
    ["/cb?code=c&state=st&iss=https%3A%2F%2Fidp", `/cb?code=${REDACTED}&state=${REDACTED}&iss=https%3A%2F%2Fidp`],
    [
      "/x?api_key=k&Password=p&client_secret=s",
      `/x?api_key=${REDACTED}&Password=${REDACTED}&client_secret=${REDACTED}`,
    ],
    ["/x?access%5Ftoken=t", `/x?access%5Ftoken=${REDACTED}`],
    ["/x?q=sk_live_abc", `/x?q=${REDACTED}`],
    ["/x?sk_live_abc", `/x?${REDACTED}`],
    ["/control/v1/teams/invitations/inv_abc/accept", `/control/v1/teams/invitations/${REDACTED}/accept`],
  ])("%s is logged as %s", (url, logged) => {
    expect(loggedPath(url)).toBe(logged);
  });
});

describe("with a server", () => {
  let server: TestServer;
  const logs = captureLogs("debug");
  beforeAll(async () => {
    server = await startTestServer({}, undefined, { logger: logs.logger });
  }, 60_000);
  afterAll(() => server.close());

  /** The access line of the answer with request id `id`. */
  const accessLine = (id: string | null) => {
    const i = logs.lines.findIndex((l) => l.includes(`"requestId":"${id}"`) && l.includes('"msg":"request"'));
    return i < 0 ? undefined : { text: logs.lines[i], record: logs.records(i)[0] };
  };

  test("when a GraphQL request and a docs asset are answered, then their access lines name /graphql and /docs/…", async () => {
    const gql = await http(server.url, "POST", "/graphql", { body: { query: "{ __typename }" } });
    expect(gql.status).toBe(200);
    expect(accessLine(gql.headers.get("x-request-id"))?.record).toEqual(
      expect.objectContaining({
        level: 20,
        method: "POST",
        path: "/graphql",
        status: 200,
        ms: expect.any(Number),
        requestId: gql.headers.get("x-request-id"),
      }),
    );
    const asset = await fetch(`${server.url}/docs/assets/swagger-ui.css`);
    expect(asset.status).toBe(200);
    await asset.text();
    // The line is written when the answer finishes, which a streamed file does after its headers.
    const id = asset.headers.get("x-request-id");
    expect(await eventually(async () => accessLine(id) !== undefined)).toBe(true);
    expect(accessLine(id)?.record.path).toBe("/docs/assets/swagger-ui.css");
  });

  test("when a query carries a token, then the access line keeps the path and other parameters, never the secret", async () => {
    const caller = await createTestCaller(server.url);
    const res = await http(server.url, "GET", "/v1/models?token=s3cr3t-value&limit=5", { token: caller.key });
    expect(res.status).toBe(200);
    const line = accessLine(res.headers.get("x-request-id"))!;
    expect(line.record.path).toBe(`/v1/models?token=${REDACTED}&limit=5`);
    expect(line.text).not.toContain("s3cr3t-value");
    // A confirm link's session and signature, and an invitation token in the path.
    const confirm = await http(
      server.url,
      "GET",
      "/control/v1/billing/topups/local/confirm?session=x&signature=sig-s3cr3t",
    );
    expect(accessLine(confirm.headers.get("x-request-id"))!.text).not.toContain("sig-s3cr3t");
    const accept = await http(server.url, "POST", "/control/v1/teams/invitations/inv_s3cr3tTOKEN/accept", {
      token: caller.token,
    });
    expect([400, 404]).toContain(accept.status);
    const acceptLine = accessLine(accept.headers.get("x-request-id"))!;
    expect(acceptLine.record.path).toBe(`/control/v1/teams/invitations/${REDACTED}/accept`);
    expect(acceptLine.text).not.toContain("s3cr3tTOKEN");
  });

  test("when GET / is asked for JSON, then the version and links to the docs, dashboard, GraphQL and models", async () => {
    for (const accept of [undefined, "application/json", "*/*"]) {
      const res = await http(server.url, "GET", "/", { headers: accept ? { accept } : {} });
      expect(res.status).toBe(200);
      expect(res.headers.get("content-type")).toMatch(/^application\/json/);
      expect(res.body).toEqual({
        name: "Switchyard",
        version: packageVersion,
        links: {
          docs: "/docs",
          dashboard: "/dashboard",
          graphql: "/graphql",
          models: "/v1/models",
          openapi: "/schema/openapi.json",
          health: "/v1/health/ready",
        },
      });
    }
    // Every link is served (models asks for a key: 401, not 404).
    for (const link of ["/docs", "/schema/openapi.json", "/v1/health/ready"]) {
      expect((await fetch(server.url + link)).status).toBe(200);
    }
    expectEnvelope(await http(server.url, "GET", "/v1/models"), 401);
  });

  test("when a browser asks for GET /, then an HTML page with the same links", async () => {
    const res = await fetch(`${server.url}/`, {
      headers: { accept: "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8" },
    });
    expect(res.status).toBe(200);
    expect(res.headers.get("content-type")).toMatch(/^text\/html/);
    const html = await res.text();
    for (const href of ["/docs", "/dashboard", "/graphql", "/v1/models"]) expect(html).toContain(`href="${href}"`);
    expect(html).toContain(`Switchyard ${packageVersion}`);
  });

  test("when an unknown path under / is asked, then still the 404 envelope", async () => {
    expectEnvelope(await http(server.url, "GET", "/nothing-here"), 404);
  });
});

describe("readiness", () => {
  test("when readiness flaps, then one WARN per change to not ready, one INFO when ready again, never an error line", async () => {
    const logs = captureLogs("info");
    const server = await startTestServer({}, undefined, { logger: logs.logger });
    try {
      const probe = () => http(server.url, "GET", "/v1/health/ready");
      const start = logs.lines.length;
      expect((await probe()).status).toBe(200);

      await server.app.dataSource.destroy();
      for (let i = 0; i < 5; i++) {
        const res = await probe();
        expectEnvelope(res, 503);
        expect(res.body.extra).toMatchObject({ database: "unreachable" });
      }
      await server.app.dataSource.initialize();
      for (let i = 0; i < 3; i++) expect((await probe()).status).toBe(200);
      await server.app.dataSource.destroy();
      for (let i = 0; i < 4; i++) expect((await probe()).status).toBe(503);
      await server.app.dataSource.initialize();
      expect((await probe()).status).toBe(200);

      const records = logs.records(start);
      const readiness = records.filter((r) => r.readiness !== undefined);
      expect(readiness.map((r) => [r.level, r.msg])).toEqual([
        [40, "not ready: database unreachable, migrations unknown"],
        [30, "ready again"],
        [40, "not ready: database unreachable, migrations unknown"],
        [30, "ready again"],
      ]);
      expect(readiness[0].checks).toEqual({ database: "unreachable", migrations: "unknown" });
      // No probe logged an error line or a stack.
      const probeFailures = records.filter((r) => r.msg === "request failed");
      expect(probeFailures).toEqual([]);
      for (const r of readiness) expect(JSON.stringify(r)).not.toContain("stack");
    } finally {
      await server.close();
    }
  }, 60_000);
});
