/** Health probes and the error envelope for transport-level failures. */
import { type TestServer, expectEnvelope, http, startTestServer } from "./support/harness.js";

let server: TestServer;
beforeAll(async () => {
  server = await startTestServer({ bodyLimitBytes: 64 * 1024 });
});
afterAll(() => server.close());

describe("health probes", () => {
  test("when GET /v1/health, then 200 with a string map and the overhead header", async () => {
    const res = await http(server.url, "GET", "/v1/health");
    expect(res.status).toBe(200);
    expect(res.body).toEqual({ status: "ok" });
    expect(Number(res.headers.get("x-switchyard-overhead-ms"))).toBeGreaterThanOrEqual(0);
  });

  test("when the database, migrations and engine are up, then /v1/health/ready answers 200", async () => {
    const res = await http(server.url, "GET", "/v1/health/ready");
    expect(res.status).toBe(200);
    expect(res.body).toEqual({ status: "ready", database: "ok", migrations: "ok", engine: "ok" });
    for (const value of Object.values(res.body)) expect(typeof value).toBe("string");
  });

  test("when HEAD on both probes, then 200 without a body", async () => {
    for (const path of ["/v1/health", "/v1/health/ready"]) {
      const res = await http(server.url, "HEAD", path);
      expect(res.status).toBe(200);
      expect(res.text).toBe("");
    }
  });

  test("when the database is gone, then ready answers 503 with the envelope naming the check", async () => {
    const other = await startTestServer();
    try {
      await other.app.dataSource.destroy();
      const res = await http(other.url, "GET", "/v1/health/ready");
      expectEnvelope(res, 503);
      expect(res.body.extra).toEqual(expect.objectContaining({ database: "unreachable" }));
      expect((await http(other.url, "HEAD", "/v1/health/ready")).status).toBe(503);
      expect((await http(other.url, "GET", "/v1/health")).status).toBe(200);
    } finally {
      await other.close();
    }
  });
});

describe("transport errors", () => {
  test("when the path is unknown, then 404 with the envelope", async () => {
    expectEnvelope(await http(server.url, "GET", "/v1/nope"), 404);
    expectEnvelope(await http(server.url, "POST", "/control/v1/nope", { body: {} }), 404);
  });

  test("when the JSON is malformed, then 400 with the envelope", async () => {
    const res = await http(server.url, "POST", "/control/v1/auth/login", { body: '{"username": ' });
    expectEnvelope(res, 400);
    expect(res.body.detail).toMatch(/JSON/);
  });

  test("when the body is over the limit, then 413 with the envelope", async () => {
    const res = await http(server.url, "POST", "/control/v1/auth/login", {
      body: { username: "x".repeat(100 * 1024), password: "p" },
    });
    expectEnvelope(res, 413);
  });
});
