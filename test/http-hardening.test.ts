/**
 * HTTP hardening through the real server (issue 5, items 3 and 6): `x-api-key` takes API keys
 * only; `Cache-Control: no-store` and `X-Content-Type-Options: nosniff` on every answer; CORS
 * answered deliberately (off by default, preflights never 404); timeouts for slow requests that
 * do not cut answers, keep-alive or websockets; a connection cap; and Node's own refusals of
 * malformed HTTP in the error envelope. Raw sockets (node:net) where a client library would
 * refuse to send what the test needs.
 */
import { createClient } from "graphql-ws";
import WebSocket from "ws";
import { ConfigError, loadConfig } from "../src/config/config.js";
import {
  CHAT_MODEL,
  type TestServer,
  createTestCaller,
  eventually,
  expectEnvelope,
  http,
  startTestServer,
} from "./support/harness.js";
import { RawConnection, exchange, expectRawEnvelope } from "./support/raw-http.js";

const ORIGIN = "https://app.example.com";

/** Defaults: CORS off, stock timeouts. */
let server: TestServer;
/** CORS for ORIGIN, 1 s request and header timeouts; same database. */
let tuned: TestServer;
/** At most 2 connections; same database. Only raw sockets talk to it. */
let capped: TestServer;
beforeAll(async () => {
  server = await startTestServer();
  tuned = await startTestServer({ corsOrigins: ORIGIN, requestTimeoutMs: 1000, headersTimeoutMs: 1000 }, server);
  capped = await startTestServer({ maxConnections: 2 }, server);
}, 60_000);
afterAll(async () => {
  await capped?.close();
  await tuned?.close();
  await server?.close();
});

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

describe("x-api-key", () => {
  test("when x-api-key carries an access token, then 401 on REST, the data plane and GraphQL", async () => {
    const caller = await createTestCaller(server.url);
    const headers = { "x-api-key": caller.token };
    const me = await http(server.url, "GET", "/control/v1/auth/me", { headers });
    expectEnvelope(me, 401);
    expect(me.body.detail).toMatch(/API keys only/);
    expectEnvelope(await http(server.url, "GET", "/v1/models", { headers }), 401);
    const gql = await http(server.url, "POST", "/graphql", { headers, body: { query: "{ me { id } }" } });
    expect(gql.body.errors[0].extensions).toMatchObject({ code: "UNAUTHENTICATED", status_code: 401 });
  });

  test("when x-api-key carries an API key, or Bearer an access token, then both are accepted", async () => {
    const caller = await createTestCaller(server.url);
    expect((await http(server.url, "GET", "/v1/models", { headers: { "x-api-key": caller.key } })).status).toBe(200);
    expect((await http(server.url, "GET", "/control/v1/auth/me", { token: caller.token })).status).toBe(200);
    expect((await http(server.url, "GET", "/v1/models", { token: caller.key })).status).toBe(200);
  });
});

describe("headers on every answer", () => {
  test("when answers carry tokens or keys, or anything else, then each has Cache-Control: no-store and nosniff", async () => {
    const caller = await createTestCaller(server.url);
    const answers = [
      await http(server.url, "POST", "/control/v1/auth/signup", {
        body: { email: `nostore-${Date.now()}@example.com`, password: "correct horse battery" },
      }),
      await http(server.url, "POST", "/control/v1/auth/login", {
        body: { email: caller.email, password: caller.password },
      }),
      await http(server.url, "POST", "/control/v1/auth/api-keys", { token: caller.token, body: { name: "k" } }),
      await http(server.url, "POST", "/graphql", {
        body: {
          query: "mutation ($i: LoginInput!) { login(input: $i) { accessToken } }",
          variables: { i: { email: caller.email, password: caller.password } },
        },
      }),
      await http(server.url, "GET", "/v1/models", { token: caller.key }),
      await http(server.url, "GET", "/v1/health"),
      await http(server.url, "GET", "/no/such/route"),
      await http(server.url, "GET", "/v1/models"),
    ];
    expect(answers.map((a) => a.status)).toEqual([201, 200, 201, 200, 200, 200, 404, 401]);
    for (const answer of answers) {
      expect(answer.headers.get("cache-control")).toBe("no-store");
      expect(answer.headers.get("x-content-type-options")).toBe("nosniff");
    }
  });
});

describe("CORS", () => {
  const preflight = (origin: string) => ({
    origin,
    "access-control-request-method": "POST",
    "access-control-request-headers": "authorization, content-type",
  });

  test("when CORS is off (the default), then a preflight gets 204 without CORS headers, not the 404 envelope", async () => {
    const res = await http(server.url, "OPTIONS", "/v1/chat/completions", { headers: preflight(ORIGIN) });
    expect(res.status).toBe(204);
    expect(res.headers.get("access-control-allow-origin")).toBeNull();
    expect(res.text).toBe("");
    const plain = await http(server.url, "OPTIONS", "/no/such/route");
    expect(plain.status).toBe(204);
    const get = await http(server.url, "GET", "/v1/health", { headers: { origin: ORIGIN } });
    expect(get.headers.get("access-control-allow-origin")).toBeNull();
  });

  test("when an allowed origin sends a preflight, then 204 allows it, its method and its headers", async () => {
    const res = await http(tuned.url, "OPTIONS", "/v1/chat/completions", { headers: preflight(ORIGIN) });
    expect(res.status).toBe(204);
    expect(res.headers.get("access-control-allow-origin")).toBe(ORIGIN);
    expect(res.headers.get("access-control-allow-methods")).toContain("POST");
    expect(res.headers.get("access-control-allow-headers")).toBe("authorization, content-type");
    expect(res.headers.get("access-control-max-age")).toBe("600");
    expect(res.headers.get("access-control-allow-credentials")).toBeNull();
    expect(res.headers.get("vary")).toMatch(/Origin/);
  });

  test("when another origin sends a preflight, then 204 without CORS headers", async () => {
    const res = await http(tuned.url, "OPTIONS", "/v1/chat/completions", {
      headers: preflight("https://evil.example.com"),
    });
    expect(res.status).toBe(204);
    expect(res.headers.get("access-control-allow-origin")).toBeNull();
    expect(res.headers.get("access-control-allow-methods")).toBeNull();
  });

  test("when an allowed origin makes a request, then the answer names it and exposes the request id", async () => {
    const res = await http(tuned.url, "GET", "/v1/health", { headers: { origin: ORIGIN } });
    expect(res.headers.get("access-control-allow-origin")).toBe(ORIGIN);
    expect(res.headers.get("access-control-expose-headers")).toContain("x-request-id");
    const other = await http(tuned.url, "GET", "/v1/health", { headers: { origin: "https://evil.example.com" } });
    expect(other.headers.get("access-control-allow-origin")).toBeNull();
  });

  test("when SWITCHYARD_CORS_ORIGINS is a comma list, then it is parsed; a path or garbage is a ConfigError", () => {
    const base = { jwtSecret: "x".repeat(32) };
    const cfg = loadConfig({ SWITCHYARD_CORS_ORIGINS: "https://a.example, http://b.example:8443" }, base);
    expect(cfg.corsOrigins).toEqual(["https://a.example", "http://b.example:8443"]);
    expect(loadConfig({}, base).corsOrigins).toEqual([]);
    expect(() => loadConfig({ SWITCHYARD_CORS_ORIGINS: "https://a.example/path" }, base)).toThrow(ConfigError);
    expect(() => loadConfig({ SWITCHYARD_CORS_ORIGINS: "a.example" }, base)).toThrow(ConfigError);
  });
});

describe("timeouts and the connection cap", () => {
  test("when a body arrives too slowly, then 408 in the envelope and the connection closes", async () => {
    const conn = new RawConnection(tuned.url);
    await conn.connected;
    conn.write(
      "POST /control/v1/auth/login HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{",
    );
    const answer = await conn.answer();
    expectRawEnvelope(answer!, 408);
    await conn.whenClosed();
  });

  test("when headers never finish, then 408 in the envelope and the connection closes", async () => {
    const conn = new RawConnection(tuned.url);
    await conn.connected;
    conn.write("GET /v1/health HTTP/1.1\r\nHost: x\r\n");
    expectRawEnvelope((await conn.answer())!, 408);
    await conn.whenClosed();
  });

  test("when a connection sends nothing at all, then it is closed after the headers timeout", async () => {
    const conn = new RawConnection(tuned.url);
    await conn.connected;
    expectRawEnvelope((await conn.answer())!, 408);
    await conn.whenClosed();
  });

  test("when a connection idles between requests past the request timeout, then keep-alive still serves it", async () => {
    const conn = new RawConnection(tuned.url);
    try {
      await conn.connected;
      conn.write("GET /v1/health HTTP/1.1\r\nHost: x\r\n\r\n");
      expect((await conn.answer())!.status).toBe(200);
      await sleep(2_500);
      conn.write("GET /v1/health HTTP/1.1\r\nHost: x\r\n\r\n");
      expect((await conn.answer())!.status).toBe(200);
    } finally {
      conn.destroy();
    }
  });

  test("when a graphql-ws socket lives past the request timeout, then it is not cut", async () => {
    let connections = 0;
    const client = createClient({
      url: `${tuned.url.replace(/^http/, "ws")}/graphql`,
      webSocketImpl: WebSocket,
      retryAttempts: 0,
      lazy: false,
      onNonLazyError: () => undefined,
    });
    client.on("connected", () => connections++);
    try {
      const run = async () => {
        const out: unknown[] = [];
        for await (const r of client.iterate({ query: "{ __typename }" })) out.push(r);
        return out;
      };
      expect(await run()).toEqual([{ data: { __typename: "Query" } }]);
      await sleep(2_500);
      expect(await run()).toEqual([{ data: { __typename: "Query" } }]);
      expect(connections).toBe(1);
    } finally {
      await client.dispose();
    }
  });

  test("when an SSE answer is read for longer than the request timeout, then it arrives whole", async () => {
    const caller = await createTestCaller(tuned.url);
    const res = await fetch(`${tuned.url}/v1/chat/completions`, {
      method: "POST",
      headers: { authorization: `Bearer ${caller.key}`, "content-type": "application/json" },
      body: JSON.stringify({
        model: CHAT_MODEL,
        messages: [{ role: "user", content: "Tom" }],
        max_tokens: 20,
        stream: true,
      }),
    });
    expect(res.status).toBe(200);
    const reader = res.body!.getReader();
    const first = await reader.read();
    expect(first.done).toBe(false);
    await sleep(2_500);
    let text = new TextDecoder().decode(first.value);
    for (let r = await reader.read(); !r.done; r = await reader.read()) text += new TextDecoder().decode(r.value);
    expect(text.trimEnd().endsWith("data: [DONE]")).toBe(true);
  });

  test("when the connection cap is reached, then further connections are closed unanswered until one frees", async () => {
    const held = [new RawConnection(capped.url), new RawConnection(capped.url)];
    try {
      for (const conn of held) {
        await conn.connected;
        conn.write("GET /v1/health HTTP/1.1\r\nHost: x\r\n\r\n");
        expect((await conn.answer())!.status).toBe(200); // accepted and kept alive
      }
      const refused = new RawConnection(capped.url);
      refused.write("GET /v1/health HTTP/1.1\r\nHost: x\r\n\r\n");
      expect(await refused.answer()).toBeUndefined();
      held.pop()!.destroy();
      expect(
        await eventually(async () => {
          try {
            return (await exchange(capped.url, "GET /v1/health HTTP/1.1\r\nHost: x\r\n\r\n")).status === 200;
          } catch {
            return false;
          }
        }),
      ).toBe(true);
    } finally {
      for (const conn of held) conn.destroy();
    }
  });

  test("when the headers timeout exceeds the request timeout, then the configuration is refused", () => {
    expect(() =>
      loadConfig(
        { SWITCHYARD_REQUEST_TIMEOUT_MS: "5000", SWITCHYARD_HEADERS_TIMEOUT_MS: "6000" },
        { jwtSecret: "x".repeat(32) },
      ),
    ).toThrow(/HEADERS_TIMEOUT/);
  });
});

describe("malformed HTTP gets the envelope", () => {
  test("when the request line is garbage, then 400 in the envelope", async () => {
    expectRawEnvelope(await exchange(server.url, "THIS IS NOT HTTP\r\n\r\n"), 400);
  });

  test("when headers are larger than Node accepts, then 431 in the envelope", async () => {
    const answer = await exchange(
      server.url,
      `GET /v1/health HTTP/1.1\r\nHost: x\r\nX-Big: ${"a".repeat(20_000)}\r\n\r\n`,
    );
    expectRawEnvelope(answer, 431);
  });

  test("when Content-Length and Transfer-Encoding conflict, then 400 in the envelope", async () => {
    const answer = await exchange(
      server.url,
      "POST /v1/health HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
    );
    expectRawEnvelope(answer, 400);
  });

  test("when a chunk extension is oversized, then 413 in the envelope", async () => {
    const answer = await exchange(
      server.url,
      `POST /control/v1/auth/login HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n1;${"e".repeat(20_000)}\r\n{\r\n`,
    );
    expectRawEnvelope(answer, 413);
  });

  test("when Expect names something other than 100-continue, then 417 in the envelope", async () => {
    const answer = await exchange(server.url, "GET /v1/health HTTP/1.1\r\nHost: x\r\nExpect: teapot\r\n\r\n");
    expectRawEnvelope(answer, 417);
  });
});
