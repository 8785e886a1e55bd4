/**
 * Hostile bytes (issue 28, item 4), each through the real HTTP server: invalid UTF-8 in a body is
 * a 400 and never stored; client values an error repeats are cut to 200 characters; an answer to
 * HEAD never has a body (Express's and Node's own refusals alike); query parameters are one plain,
 * non-empty value; a body must say it is JSON (415 otherwise, on REST and GraphQL); and exactly
 * one valid Host header (RFC 9112 §3.2). Raw sockets where a client library would not send the
 * request (two Host headers, none, HEAD answers read byte for byte).
 */
import { randomUUID } from "node:crypto";
import {
  CHAT_MODEL,
  type TestServer,
  createTestCaller,
  expectEnvelope,
  expectInvalid,
  http,
  startTestServer,
} from "./support/harness.js";
import { RawConnection, exchange, expectRawEnvelope } from "./support/raw-http.js";

let server: TestServer;
let caller: Awaited<ReturnType<typeof createTestCaller>>;
beforeAll(async () => {
  server = await startTestServer();
  caller = await createTestCaller(server.url);
});
afterAll(() => server.close());

/** POSTs raw bytes with a content type (default JSON) and credentials; the answer as `http` gives it. */
async function postBytes(path: string, body: Uint8Array | string, opts: { type?: string | null; token?: string } = {}) {
  const headers: Record<string, string> = {};
  if (opts.token !== undefined) headers.authorization = `Bearer ${opts.token}`;
  if (opts.type !== null) headers["content-type"] = opts.type ?? "application/json";
  const res = await fetch(server.url + path, { method: "POST", headers, body });
  const text = await res.text();
  let parsed: any = text;
  try {
    parsed = JSON.parse(text);
  } catch {
    /* not JSON */
  }
  return { status: res.status, body: parsed, text, headers: res.headers };
}

/** `json` as UTF-8 bytes with `bad` (raw bytes) put where `@@` stands. */
function withBytes(json: string, bad: number[]): Buffer {
  const [before, after] = json.split("@@");
  return Buffer.concat([Buffer.from(before, "utf8"), Buffer.from(bad), Buffer.from(after, "utf8")]);
}

async function count(sql: string, params: unknown[] = []): Promise<number> {
  const [row] = await server.db<{ n: string }>(sql, params);
  return Number(row.n);
}

const chat = (extra: Record<string, unknown> = {}) =>
  JSON.stringify({ model: CHAT_MODEL, max_tokens: 2, messages: [{ role: "user", content: "Hi" }], ...extra });

describe("invalid UTF-8 in a body", () => {
  const INVALID: Record<string, number[]> = {
    "a lone continuation byte": [0x80],
    "bytes 0xFF 0xFE 0xFD": [0xff, 0xfe, 0xfd],
    "a truncated 3-byte sequence": [0xe2, 0x82],
    "an overlong slash": [0xc0, 0xaf],
    "an encoded surrogate": [0xed, 0xa0, 0x80],
  };

  for (const [label, bytes] of Object.entries(INVALID)) {
    it(`when a custom model id holds ${label}, then 400 naming body and nothing is stored`, async () => {
      const before = await count("SELECT count(*) AS n FROM custom_models WHERE team_id = $1", [caller.teamId]);
      const res = await postBytes(
        "/control/v1/models/custom",
        withBytes('{"model_id":"a@@(","architecture":"llama"}', bytes),
        { token: caller.token },
      );
      expectInvalid(res, "body");
      expect(res.body.detail).toMatch(/not valid UTF-8/);
      expect(await count("SELECT count(*) AS n FROM custom_models WHERE team_id = $1", [caller.teamId])).toBe(before);
    });
  }

  it("when the same id is valid UTF-8 (the control), then it is created as sent, U+FFFD included", async () => {
    const id = `ok-\u00e9\u20ac\ud83d\ude80\ufffd-${randomUUID().slice(0, 8)}`;
    const res = await postBytes(
      "/control/v1/models/custom",
      Buffer.from(JSON.stringify({ model_id: id, architecture: "llama" }), "utf8"),
      { token: caller.token },
    );
    expect(res.status).toBe(201);
    const [row] = await server.db<{ model_id: string }>(
      "SELECT model_id FROM custom_models WHERE team_id = $1 AND model_id = $2",
      [caller.teamId, id],
    );
    expect(row?.model_id).toBe(id);
  });

  it("when a chat prompt holds invalid UTF-8, then 400 naming body and nothing is recorded", async () => {
    const before = await count("SELECT count(*) AS n FROM activity WHERE team_id = $1", [caller.teamId]);
    const body = withBytes(
      `{"model":"${CHAT_MODEL}","max_tokens":2,"messages":[{"role":"user","content":"Hi @@"}]}`,
      [0xff],
    );
    expectInvalid(await postBytes("/v1/chat/completions", body, { token: caller.key }), "body");
    await server.app.metering.drainAll();
    expect(await count("SELECT count(*) AS n FROM activity WHERE team_id = $1", [caller.teamId])).toBe(before);
  });

  it("when a batch body holds invalid UTF-8, then 400 naming body and no batch is made", async () => {
    const before = await count("SELECT count(*) AS n FROM batches WHERE team_id = $1", [caller.teamId]);
    const body = withBytes(
      `{"requests":[{"custom_id":"a@@","url":"/v1/chat/completions","body":${chat()}}]}`,
      [0xc3, 0x28],
    );
    expectInvalid(await postBytes("/v1/batches", body, { token: caller.key }), "body");
    expect(await count("SELECT count(*) AS n FROM batches WHERE team_id = $1", [caller.teamId])).toBe(before);
  });

  it("when a UTF-16 body holds a lone surrogate, then 400 naming body", async () => {
    const text = '{"model_id":"x\ud800","architecture":"llama"}';
    const utf16 = Buffer.from(text, "utf16le");
    const res = await postBytes("/control/v1/models/custom", utf16, {
      token: caller.token,
      type: "application/json; charset=utf-16le",
    });
    expectInvalid(res, "body");
  });

  it("when a GraphQL body holds invalid UTF-8, then a 400 request error", async () => {
    const body = withBytes('{"query":"{ __typename }","variables":{"x":"@@"}}', [0xfe]);
    const res = await postBytes("/graphql", body);
    expect(res.status).toBe(400);
    expect(res.body.errors[0].extensions).toEqual(expect.objectContaining({ code: "BAD_REQUEST", status_code: 400 }));
    expect(res.body.errors[0].message).toMatch(/not valid UTF-8/);
  });
});

describe("client values repeated in errors", () => {
  /** Asserts `text` repeats 150–200 characters of a run of `char` (with what came before it), then the cut marker. */
  function expectCut(text: string, char: string) {
    const run = new RegExp(`${char}{201}`);
    expect(text).not.toMatch(run);
    expect(text).toMatch(new RegExp(`${char}{150,200}…\\(\\+\\d+ characters\\)`));
  }

  it("when chat names a 1,048,000-character model, then the 404 repeats 200 of them", async () => {
    const res = await postBytes("/v1/chat/completions", chat({ model: "m".repeat(1_048_000) }), { token: caller.key });
    expectEnvelope(res, 404);
    expect(res.text.length).toBeLessThan(2_000);
    expectCut(res.body.detail, "m");
    expect(res.body.detail).toContain("…(+1047800 characters)");
  });

  it("when a path or a model id in the path is long, then the 404 repeats 200 characters of it", async () => {
    const model = await http(server.url, "GET", `/v1/models/${"q".repeat(8_000)}`, { token: caller.key });
    expectEnvelope(model, 404);
    expectCut(model.body.detail, "q");
    const route = await http(server.url, "GET", `/no/such/${"z".repeat(8_000)}`);
    expectEnvelope(route, 404);
    expectCut(route.body.detail, "z");
    const custom = await http(server.url, "DELETE", `/control/v1/models/custom?model_id=${"k".repeat(500)}`, {
      token: caller.token,
    });
    expectEnvelope(custom, 404);
    expectCut(custom.body.detail, "k");
  });

  it("when tool_choice names a long tool that is not in tools, then the 400 repeats 200 characters of it", async () => {
    const res = await postBytes(
      "/v1/chat/completions",
      chat({
        tools: [{ type: "function", function: { name: "f", parameters: { type: "object" } } }],
        tool_choice: { type: "function", function: { name: "t".repeat(50_000) } },
      }),
      { token: caller.key },
    );
    expectEnvelope(res, 400);
    expect(res.text.length).toBeLessThan(3_000);
    expectCut(res.body.detail, "t");
  });

  it("when a refused field's name is a client's long key, then the field named is cut", async () => {
    const res = await http(server.url, "POST", "/v1/decisions", {
      token: caller.key,
      body: { model: CHAT_MODEL, state: 1, questions: { ["w".repeat(20_000)]: { type: "yes_no" } } },
    });
    expectEnvelope(res, 400);
    expect(res.text.length).toBeLessThan(4_000);
    expect(res.text).not.toMatch(/w{201}/);
    expect(res.body.extra[0].field).toMatch(/^questions\.w{190,}…\(\+\d+ characters\)$/);
  });

  it("when a GraphQL variable carries a long refused value, then the message is cut", async () => {
    const res = await http(server.url, "POST", "/graphql", {
      body: { query: "query ($b: Boolean!) { __typename @include(if: $b) }", variables: { b: "v".repeat(100_000) } },
    });
    expect(res.status).toBe(400);
    expect(res.text.length).toBeLessThan(2_000);
    expect(res.body.errors[0].message).toMatch(/…\(\+\d+ characters\)$/);
  });
});

describe("HEAD never gets a body", () => {
  /** Sends `request` on a fresh connection; the HEAD answer, and the bytes after it once the server closed. */
  async function headOnce(request: string) {
    const conn = new RawConnection(server.url);
    try {
      await conn.connected;
      conn.write(request);
      const answer = await conn.answer(true);
      await conn.whenClosed();
      return { answer: answer!, after: conn.unread().toString("latin1") };
    } finally {
      conn.destroy();
    }
  }

  it("when HEAD carries a 64 KiB query, then Node's 431 has headers and no body", async () => {
    const { answer, after } = await headOnce(`HEAD /v1/health?q=${"a".repeat(65_536)} HTTP/1.1\r\nHost: x\r\n\r\n`);
    expect(answer.status).toBe(431);
    expect(answer.headers["content-type"]).toMatch(/^application\/json/);
    expect(after).toBe("");
    // The control: GET with the same query gets the envelope.
    const get = await exchange(server.url, `GET /v1/health?q=${"a".repeat(65_536)} HTTP/1.1\r\nHost: x\r\n\r\n`);
    expectRawEnvelope(get, 431);
  });

  it("when HEAD has oversized headers, malformed framing or an unknown Expect, then no body", async () => {
    const big = await headOnce(`HEAD /v1/health HTTP/1.1\r\nHost: x\r\nX-Big: ${"b".repeat(20_000)}\r\n\r\n`);
    expect(big.answer.status).toBe(431);
    expect(big.after).toBe("");
    const framing = await headOnce(
      "HEAD /v1/health HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n",
    );
    expect(framing.answer.status).toBe(400);
    expect(framing.after).toBe("");
    const expect417 = await headOnce(
      "HEAD /v1/health HTTP/1.1\r\nHost: x\r\nExpect: teapot\r\nConnection: close\r\n\r\n",
    );
    expect(expect417.answer.status).toBe(417);
    expect(expect417.after).toBe("");
  });

  it("when HEAD gets a 4xx from a route (404, 401, 400) on a kept-alive connection, then the next answer follows at once", async () => {
    const conn = new RawConnection(server.url);
    try {
      await conn.connected;
      for (const [path, status] of [
        ["/no/such/route", 404],
        ["/v1/models", 401],
        [`/v1/responses?limit=x`, 400],
      ] as const) {
        const auth = status === 400 ? `Authorization: Bearer ${caller.key}\r\n` : "";
        conn.write(`HEAD ${path} HTTP/1.1\r\nHost: x\r\n${auth}\r\n`);
        const head = await conn.answer(true);
        expect(head!.status).toBe(status);
        expect(Number(head!.headers["content-length"])).toBeGreaterThan(0);
        // Were a body sent, these bytes would come before the next status line.
        conn.write("GET /v1/health HTTP/1.1\r\nHost: x\r\n\r\n");
        const next = await conn.answer();
        expect(next!.status).toBe(200);
        expect(next!.body.status).toBe("ok");
      }
    } finally {
      conn.destroy();
    }
  });
});

describe("query parameters", () => {
  const list = (query: string, token = caller.key) => http(server.url, "GET", `/v1/responses?${query}`, { token });

  it.each(["limit[]=1", "limit[a]=1", "limit=1&limit=2", "limit[]=1&limit[]=2", "stream_id[0]=x"])(
    "when %s, then 400 naming the parameter",
    async (query) => {
      const res = await list(query);
      expectInvalid(res, query.split(/[[=]/)[0]);
      expect(res.body.extra[0].message).toMatch(/once, as one plain value/);
    },
  );

  it("when a control-plane parameter is an array or object, then 400 naming it", async () => {
    expectInvalid(await http(server.url, "GET", "/control/v1/usage/daily?days[]=7", { token: caller.token }), "days");
    expectInvalid(
      await http(server.url, "GET", "/control/v1/activity?page[x]=1&model=a&model=b", { token: caller.token }),
      "page",
    );
  });

  it.each([
    ["/control/v1/activity?model=%FF", "model"],
    ["/control/v1/activity?model=a%C3", "model"],
    ["/control/v1/activity?model=%ED%A0%80", "model"],
    ["/control/v1/models/search?q=x%C0%AF", "q"],
  ])("when %s (not UTF-8 once decoded), then 400 naming %s, as a body's invalid UTF-8 is", async (path, field) => {
    // Review of issue 28: node:querystring put U+FFFD in place of the bytes and the filter answered 200.
    const res = await http(server.url, "GET", path, { token: caller.token });
    expectInvalid(res, field);
    expect(res.body.extra[0].message).toMatch(/valid UTF-8/);
  });

  it("when a value is valid percent-encoded UTF-8, or a parameter the route does not take is not, then it is served (the control)", async () => {
    for (const path of ["/control/v1/activity?model=%C3%A9%F0%9F%9A%80", "/control/v1/activity?other=%FF&page=1"]) {
      expect((await http(server.url, "GET", path, { token: caller.token })).status).toBe(200);
    }
  });

  it("when a parameter the route does not take comes as an array, then it is ignored (the control)", async () => {
    expect((await list("include[]=x&include[]=y&limit=2")).status).toBe(200);
  });

  it.each([
    ["/v1/responses?limit=", "limit"],
    ["/v1/responses?stream_id=", "stream_id"],
    ["/control/v1/usage/daily?days=", "days"],
    ["/control/v1/billing/summary?days=", "days"],
    ["/control/v1/activity?model=", "model"],
    ["/control/v1/models/search?q=", "q"],
  ])("when %s (an empty value), then 400 naming %s", async (path, field) => {
    const res = await http(server.url, "GET", path, { token: caller.token });
    expectInvalid(res, field);
    expect(res.body.extra[0].message).toMatch(/must not be empty/);
  });

  it("when a value is the text null, then it is not special: an invalid uuid, or a name nothing has", async () => {
    expectInvalid(
      await http(server.url, "GET", "/control/v1/usage/daily?user_id=null", { token: caller.token }),
      "user_id",
    );
    expectInvalid(await list("stream_id=null"), "stream_id");
    const byModel = await http(server.url, "GET", "/control/v1/activity?model=null", { token: caller.token });
    expect(byModel.status).toBe(200);
    expect(byModel.body.items).toEqual([]);
  });

  it("when GraphQL passes an empty argument, then the same 400 names it", async () => {
    const res = await http(server.url, "POST", "/graphql", {
      token: caller.token,
      body: { query: '{ activityRecords(model: "") { total } }' },
    });
    expect(res.body.errors[0].extensions).toEqual(
      expect.objectContaining({ status_code: 400, extra: [expect.objectContaining({ field: "model" })] }),
    );
  });

  it("when the OpenAPI document lists a query parameter, then it says the rule and takes no empty value", async () => {
    const doc = (await http(server.url, "GET", "/schema/openapi.json")).body;
    const params = doc.paths["/v1/responses"].get.parameters as Array<{
      name: string;
      description: string;
      schema: any;
    }>;
    const limit = params.find((p) => p.name === "limit")!;
    expect(limit.description).toMatch(/empty value/);
    // A bounded integer, as OpenAPI spells a query integer: the empty value is not one.
    expect(limit.schema).toEqual(expect.objectContaining({ type: "integer", minimum: 1 }));
    const q = (doc.paths["/control/v1/models/search"].get.parameters as typeof params).find((p) => p.name === "q")!;
    expect(q.schema.minLength).toBe(1);
    // Every query parameter of the document says so: its schema refuses the empty value.
    const takesEmpty: string[] = [];
    for (const [path, item] of Object.entries(doc.paths as Record<string, Record<string, any>>)) {
      for (const [method, op] of Object.entries(item)) {
        for (const p of (op.parameters ?? []) as typeof params) {
          if ((p as { in?: string }).in !== "query") continue;
          const s = p.schema;
          const refusesEmpty =
            s.type === "integer" || (Array.isArray(s.enum) && !s.enum.includes("")) || s.minLength >= 1;
          if (!refusesEmpty || !/empty value/.test(p.description)) takesEmpty.push(`${method} ${path} ${p.name}`);
        }
      }
    }
    expect(takesEmpty).toEqual([]);
  });
});

describe("content types", () => {
  it.each([
    "text/plain",
    "text/plain;charset=UTF-8",
    "application/x-www-form-urlencoded",
    "multipart/form-data; boundary=x",
    "application/xml",
    "application/jsonx",
    "application/json-patch",
  ])("when a chat body comes as %s, then 415 and nothing is recorded", async (type) => {
    const before = await count("SELECT count(*) AS n FROM activity WHERE team_id = $1", [caller.teamId]);
    const res = await postBytes("/v1/chat/completions", chat(), { token: caller.key, type });
    expectEnvelope(res, 415);
    expect(res.body.detail).toMatch(/application\/json/);
    await server.app.metering.drainAll();
    expect(await count("SELECT count(*) AS n FROM activity WHERE team_id = $1", [caller.teamId])).toBe(before);
  });

  it("when a body comes without a Content-Type, then 415 saying to send one", async () => {
    const res = await postBytes("/v1/chat/completions", Buffer.from(chat()), { token: caller.key, type: null });
    expectEnvelope(res, 415);
    expect(res.body.detail).toMatch(/needs Content-Type: application\/json/);
    // Unauthenticated and on the control plane alike: the type is judged before anything else.
    const login = await postBytes("/control/v1/auth/login", '{"email":"a@example.com","password":"x"}', {
      type: "text/plain",
    });
    expectEnvelope(login, 415);
  });

  it("when a JSON type has a charset, other case or a +json suffix, then the body is read (the control)", async () => {
    for (const type of ["application/json; charset=utf-8", "Application/JSON", "application/vnd.example+json"]) {
      expect((await postBytes("/v1/chat/completions", chat(), { token: caller.key, type })).status).toBe(200);
    }
  });

  it("when a POST that takes no body comes bare (no Content-Type, no or an empty body), then it is served", async () => {
    const created = await http(server.url, "POST", "/v1/responses", {
      token: caller.key,
      body: { model: CHAT_MODEL, input: "Hi", max_output_tokens: 2 },
    });
    expect(created.status).toBe(200);
    const bare = await exchange(
      server.url,
      `POST /v1/responses/${created.body.id}/cancel HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${caller.key}\r\nConnection: close\r\n\r\n`,
    );
    expect(bare.status).toBe(200);
    const empty = await exchange(
      server.url,
      `POST /v1/responses/${created.body.id}/cancel HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${caller.key}\r\nContent-Type: text/plain\r\nContent-Length: 0\r\nConnection: close\r\n\r\n`,
    );
    expect(empty.status).toBe(200);
  });

  it("when a batch body comes as text/plain, then 415 and no batch is made", async () => {
    const before = await count("SELECT count(*) AS n FROM batches WHERE team_id = $1", [caller.teamId]);
    const body = JSON.stringify({ requests: [{ url: "/v1/chat/completions", body: JSON.parse(chat()) }] });
    expectEnvelope(await postBytes("/v1/batches", body, { token: caller.key, type: "text/plain" }), 415);
    expect(await count("SELECT count(*) AS n FROM batches WHERE team_id = $1", [caller.teamId])).toBe(before);
  });

  it("when a GraphQL body is a form or text type, then 415 in the GraphQL error format; JSON is answered", async () => {
    for (const type of ["text/plain", "application/x-www-form-urlencoded"]) {
      const res = await postBytes("/graphql", '{"query":"{ __typename }"}', { type });
      expect(res.status).toBe(415);
      expect(res.body.errors[0].extensions).toEqual({ code: "UNSUPPORTED_MEDIA_TYPE", status_code: 415, extra: null });
    }
    const ok = await postBytes("/graphql", '{"query":"{ __typename }"}', { type: "application/vnd.example+json" });
    expect(ok.status).toBe(200);
    expect(ok.body.data).toEqual({ __typename: "Query" });
  });

  it("when the OpenAPI document lists an operation with a JSON body, then it lists 415 and 431", async () => {
    const doc = (await http(server.url, "GET", "/schema/openapi.json")).body;
    expect(Object.keys(doc.paths["/v1/chat/completions"].post.responses)).toEqual(
      expect.arrayContaining(["415", "431"]),
    );
    expect(Object.keys(doc.paths["/graphql"].post.responses)).toEqual(expect.arrayContaining(["415", "431"]));
    expect(doc.paths["/v1/models"].get.responses["415"]).toBeUndefined();
  });
});

describe("the Host header", () => {
  it("when a request has two Host headers, then 400 in the envelope naming host, and the connection closes", async () => {
    const conn = new RawConnection(server.url);
    try {
      await conn.connected;
      conn.write("GET /v1/health HTTP/1.1\r\nHost: a.example\r\nHost: b.example\r\n\r\n");
      const answer = await conn.answer();
      expectRawEnvelope(answer!, 400);
      expect(answer!.body.extra).toEqual([{ field: "host", message: "must be sent exactly once" }]);
      await conn.whenClosed();
    } finally {
      conn.destroy();
    }
  });

  it("when an HTTP/1.1 request has no Host, then 400 in the envelope (not Node's bare 400)", async () => {
    const answer = await exchange(server.url, "GET /v1/health HTTP/1.1\r\n\r\n");
    expectRawEnvelope(answer, 400);
    expect(answer.body.detail).toMatch(/Host header is required/);
    expect(answer.headers["x-request-id"]).toBeDefined();
  });

  it("when a Host value is not a host, then 400; bracketed IPv6, a port and HTTP/1.0 without Host are served", async () => {
    expectRawEnvelope(await exchange(server.url, "GET /v1/health HTTP/1.1\r\nHost: a b/c\r\n\r\n"), 400);
    expectRawEnvelope(await exchange(server.url, "GET /v1/health HTTP/1.1\r\nHost: a@b\r\n\r\n"), 400);
    for (const host of ["[::1]:8080", "localhost:3000", "127.0.0.1", "api.example.com"]) {
      expect((await exchange(server.url, `GET /v1/health HTTP/1.1\r\nHost: ${host}\r\n\r\n`)).status).toBe(200);
    }
    expect((await exchange(server.url, "GET /v1/health HTTP/1.0\r\n\r\n")).status).toBe(200);
  });

  it("when two Host headers come to GraphQL, then 400", async () => {
    const answer = await exchange(
      server.url,
      'POST /graphql HTTP/1.1\r\nHost: a\r\nHost: b\r\nContent-Type: application/json\r\nContent-Length: 27\r\n\r\n{"query":"{ __typename }"}',
    );
    expect(answer.status).toBe(400);
  });
});
