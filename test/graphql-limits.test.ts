/**
 * GraphQL hardening (issue 5, item 1) through the real server: documents are bounded in size,
 * tokens, depth, aliases and fields before any expensive validation or execution, over HTTP and
 * graphql-ws alike; request errors answer 400 in the project's GraphQL error format with their
 * real message (never `INTERNAL`/500, never a stack trace); a refused operation over the socket
 * gets a graphql-ws `error` message and the socket stays usable; an oversized frame closes the
 * socket without disturbing anyone else.
 */
import { getIntrospectionQuery } from "graphql";
import { createClient } from "graphql-ws";
import WebSocket from "ws";
import { DEFAULT_GRAPHQL_LIMITS } from "../src/schema/graphql-limits.js";
import { type TestServer, createTestUser, http, startTestServer } from "./support/harness.js";

let server: TestServer;
beforeAll(async () => {
  server = await startTestServer();
});
afterAll(() => server.close());

const limits = DEFAULT_GRAPHQL_LIMITS;

interface GraphqlError {
  message: string;
  extensions: Record<string, unknown>;
}

/** POSTs a raw body to /graphql and returns status, content type and the parsed answer. */
async function post(body: string, headers: Record<string, string> = { "content-type": "application/json" }) {
  const res = await http(server.url, "POST", "/graphql", { body, headers });
  return { status: res.status, type: res.headers.get("content-type") ?? "", body: res.body, text: res.text };
}

const query = (q: string) => post(JSON.stringify({ query: q }));

/** Asserts a 400-class GraphQL answer: JSON, one error with its real message and a 4xx code. */
function expectRequestError(res: Awaited<ReturnType<typeof post>>, status: number, code: string): GraphqlError {
  expect(res.status).toBe(status);
  expect(res.type).toMatch(/^application\/json/);
  expect(res.body.data).toBeUndefined();
  expect(res.body.errors).toHaveLength(1);
  const error = res.body.errors[0] as GraphqlError;
  expect(error.message).not.toBe("Internal error");
  expect(error.extensions).toEqual({ code, status_code: status, extra: null });
  return error;
}

const aliases = (n: number) => `{ ${Array.from({ length: n }, (_, i) => `a${i}: __typename`).join(" ")} }`;

describe("document limits over HTTP", () => {
  test("when an unauthenticated query carries 700k aliases, then it is refused before parsing, in the GraphQL format", async () => {
    const res = await query(aliases(700_000));
    const error = expectRequestError(res, 413, "PAYLOAD_TOO_LARGE");
    expect(error.message).toMatch(/too large/i);
    // The server is still answering.
    expect((await http(server.url, "GET", "/v1/health")).status).toBe(200);
  });

  test("when the document is longer than the character cap, then 400 names the cap", async () => {
    const doc = `{ __typename } # ${"x".repeat(limits.maxDocumentChars)}`;
    const error = expectRequestError(await query(doc), 400, "BAD_REQUEST");
    expect(error.message).toContain(`the limit is ${limits.maxDocumentChars}`);
  });

  test("when the document has more tokens than the parser reads, then 400 GRAPHQL_PARSE_FAILED", async () => {
    const doc = `{ ${"__typename ".repeat(limits.maxTokens)} }`;
    expect(doc.length).toBeLessThan(limits.maxDocumentChars);
    const error = expectRequestError(await query(doc), 400, "GRAPHQL_PARSE_FAILED");
    expect(error.message).toMatch(/tokens/);
  });

  test("when a query is nested deeper than the limit, then 400 names depth and limit", async () => {
    const deep = `{ ${"me { ".repeat(limits.maxDepth)}id${" }".repeat(limits.maxDepth)} }`;
    const error = expectRequestError(await query(deep), 400, "GRAPHQL_VALIDATION_FAILED");
    expect(error.message).toBe(
      `Anonymous operation is nested ${limits.maxDepth + 1} fields deep; the limit is ${limits.maxDepth}`,
    );
  });

  test("when a query is nested deeper through fragments, then the fragments are expanded and it is refused", async () => {
    const n = limits.maxDepth + 1;
    const doc =
      "query Deep { ...F0 } " +
      Array.from(
        { length: n },
        (_, i) => `fragment F${i} on User { me: id ${i + 1 < n ? `... on User { ...F${i + 1} }` : ""} }`,
      )
        .join(" ")
        .replace("fragment F0 on User", "fragment F0 on Query");
    const res = await query(doc);
    expect(res.status).toBe(400);
    expect(res.body.errors[0].extensions).toMatchObject({ code: "GRAPHQL_VALIDATION_FAILED", status_code: 400 });
  });

  test("when a query uses more aliases than the limit (even of __typename), then 400", async () => {
    const error = expectRequestError(await query(aliases(limits.maxAliases + 1)), 400, "GRAPHQL_VALIDATION_FAILED");
    expect(error.message).toBe(
      `Anonymous operation uses ${limits.maxAliases + 1} aliases; the limit is ${limits.maxAliases}`,
    );
    const ok = await query(aliases(limits.maxAliases));
    expect(ok.status).toBe(200);
  });

  test("when a document breaks a limit and is invalid too, then only the limit is reported (graphql-js rules never see it)", async () => {
    const res = await query(`{ noSuchField ${aliases(limits.maxAliases + 1).slice(1)}`);
    expect(res.status).toBe(400);
    expect(res.body.errors.map((e: GraphqlError) => e.message)).toEqual([
      `Anonymous operation uses ${limits.maxAliases + 1} aliases; the limit is ${limits.maxAliases}`,
    ]);
  });

  test("when a query selects more fields than the limit without aliases, then 400 before graphql-js validation", async () => {
    const doc = `{ ${"me { id } ".repeat(limits.maxFields / 2 + 1)} }`;
    const error = expectRequestError(await query(doc), 400, "GRAPHQL_VALIDATION_FAILED");
    expect(error.message).toMatch(/selects \d+ fields/);
  });

  test("when fragments fan out exponentially, then the expanded count refuses it at once", async () => {
    const n = 60;
    const doc =
      "{ ...F0 } " +
      Array.from(
        { length: n },
        (_, i) => `fragment F${i} on Query { __typename ${i + 1 < n ? `...F${i + 1} ...F${i + 1}` : ""} }`,
      ).join(" ");
    const error = expectRequestError(await query(doc), 400, "GRAPHQL_VALIDATION_FAILED");
    expect(error.message).toMatch(/fields \(fragments expanded\)/);
  });

  test("when fragments spread each other in a cycle, then 400 (no stack overflow)", async () => {
    const res = await query("{ ...A } fragment A on Query { __typename ...B } fragment B on Query { ...A }");
    expect(res.status).toBe(400);
    expect(res.body.errors[0].message).toMatch(/within itself/);
    expect(res.body.errors[0].extensions).toMatchObject({ code: "GRAPHQL_VALIDATION_FAILED", status_code: 400 });
  });

  test("when a client sends the full introspection query, then it is within the limits and answered", async () => {
    const res = await query(
      getIntrospectionQuery({
        descriptions: true,
        specifiedByUrl: true,
        directiveIsRepeatable: true,
        schemaDescription: true,
        inputValueDeprecation: true,
      }),
    );
    expect(res.status).toBe(200);
    expect(res.body.data.__schema.queryType.name).toBe("Query");
  });
});

describe("request errors over HTTP", () => {
  test("when the body is empty, then 400 BAD_REQUEST with Apollo's message", async () => {
    const error = expectRequestError(await post(""), 400, "BAD_REQUEST");
    expect(error.message).toMatch(/POST body missing/);
  });

  test("when the body is text/plain, then 415 UNSUPPORTED_MEDIA_TYPE before Apollo reads it, as on REST", async () => {
    const res = await post(JSON.stringify({ query: "{ __typename }" }), { "content-type": "text/plain" });
    const error = expectRequestError(res, 415, "UNSUPPORTED_MEDIA_TYPE");
    expect(error.message).toMatch(/application\/json/);
  });

  test("when a GET query carries no preflight header, then Apollo's CSRF refusal is a 400 BAD_REQUEST with its message", async () => {
    const res = await http(server.url, "GET", `/graphql?query=${encodeURIComponent("{ __typename }")}`, {
      headers: { accept: "application/json" },
    });
    const error = expectRequestError(
      { status: res.status, type: res.headers.get("content-type") ?? "", body: res.body, text: res.text },
      400,
      "BAD_REQUEST",
    );
    expect(error.message).toMatch(/Cross-Site Request Forgery/);
  });

  test("when the body is a batch array, then 400 BAD_REQUEST says batching is off", async () => {
    const res = await post(JSON.stringify([{ query: "{ __typename }" }, { query: "{ __typename }" }]));
    const error = expectRequestError(res, 400, "BAD_REQUEST");
    expect(error.message).toMatch(/batching/i);
  });

  test("when the body is malformed JSON, then 400 in the GraphQL error format", async () => {
    const error = expectRequestError(await post('{"query": '), 400, "BAD_REQUEST");
    expect(error.message).toMatch(/malformed json/i);
  });

  test("when the body has no query, then 400 BAD_REQUEST", async () => {
    const error = expectRequestError(await post(JSON.stringify({ variables: {} })), 400, "BAD_REQUEST");
    expect(error.message).toMatch(/query/);
  });

  test("when the query has a syntax error, then 400 GRAPHQL_PARSE_FAILED without a stack trace", async () => {
    const error = expectRequestError(await query("{ me { "), 400, "GRAPHQL_PARSE_FAILED");
    expect(error.message).toMatch(/Syntax Error/);
    expect(JSON.stringify(error)).not.toMatch(/stacktrace|at .*\.js/);
  });

  test("when a subscription comes over HTTP, then 400 BAD_REQUEST pointing at graphql-ws, not an internal error; a query beside it in the document is answered", async () => {
    // Review of issue 28: graphql-js ran the subscription's field as a query, found no event and
    // answered "Internal error" (status_code 500), logged as an ERROR.
    const user = await createTestUser(server.url);
    const document = "subscription Live { completionEvents { responseId } } query Me { me { id } }";
    const send = (operationName: string) =>
      post(JSON.stringify({ query: document, operationName }), {
        "content-type": "application/json",
        authorization: `Bearer ${user.token}`,
      });
    const error = expectRequestError(await send("Live"), 400, "BAD_REQUEST");
    expect(error.message).toMatch(/graphql-ws/);
    const me = await send("Me");
    expect({ status: me.status, data: me.body.data }).toEqual({ status: 200, data: { me: { id: user.userId } } });
  });

  test("when a variable has the wrong type, then 400 BAD_USER_INPUT", async () => {
    const res = await post(
      JSON.stringify({ query: "mutation ($id: String!) { revokeApiKey(id: $id) }", variables: { id: 5 } }),
    );
    expectRequestError(res, 400, "BAD_USER_INPUT");
  });
});

describe("graphql-ws", () => {
  const wsUrl = () => `${server.url.replace(/^http/, "ws")}/graphql`;

  /** Not lazy: one socket for the client's whole life, so a closed socket shows. */
  function wsClient(authorization?: string) {
    return createClient({
      url: wsUrl(),
      webSocketImpl: WebSocket,
      connectionParams: authorization ? { authorization } : {},
      retryAttempts: 0,
      lazy: false,
      onNonLazyError: () => undefined,
    });
  }

  /** Runs one operation; resolves with its results, or with the errors of an `error` message. */
  async function run(client: ReturnType<typeof wsClient>, q: string) {
    const results: Array<{ data?: unknown; errors?: readonly GraphqlError[] }> = [];
    try {
      for await (const result of client.iterate({ query: q })) results.push(result as (typeof results)[number]);
      return { results };
    } catch (err) {
      if (Array.isArray(err)) return { errorMessage: err as GraphqlError[] };
      throw err;
    }
  }

  test("when a too-deep query comes over the socket, then an error message answers it and the socket stays open", async () => {
    const user = await createTestUser(server.url);
    const client = wsClient(`Bearer ${user.token}`);
    let connections = 0;
    let closed: unknown;
    client.on("connected", () => connections++);
    client.on("closed", (event) => (closed = event));
    try {
      const deep = `{ ${"me { ".repeat(limits.maxDepth)}id${" }".repeat(limits.maxDepth)} }`;
      const refused = await run(client, deep);
      expect(refused.errorMessage).toHaveLength(1);
      expect(refused.errorMessage![0].message).toMatch(/nested \d+ fields deep/);
      expect(refused.errorMessage![0].extensions).toEqual({
        code: "GRAPHQL_VALIDATION_FAILED",
        status_code: 400,
        extra: null,
      });
      // Same socket, next operation.
      const ok = await run(client, "{ me { id } }");
      expect(ok.results).toEqual([{ data: { me: { id: user.userId } } }]);
      expect(closed).toBeUndefined();
      expect(connections).toBe(1);
    } finally {
      await client.dispose();
    }
  });

  test("when a 700k-alias query comes over the socket, then the frame is refused and the server keeps answering", async () => {
    const socket = new WebSocket(wsUrl(), "graphql-transport-ws");
    const closedWith = new Promise<number>((resolve) => socket.on("close", (code) => resolve(code)));
    socket.on("error", () => undefined);
    await new Promise((resolve) => socket.on("open", resolve));
    socket.send(JSON.stringify({ type: "connection_init", payload: {} }));
    await new Promise((resolve) => socket.once("message", resolve));
    socket.send(JSON.stringify({ id: "1", type: "subscribe", payload: { query: aliases(700_000) } }));
    expect(await closedWith).toBe(1009); // message too big
    expect((await http(server.url, "GET", "/v1/health")).status).toBe(200);
  });

  test("when the document breaks a limit, has a syntax error or too many tokens, then each gets an error message", async () => {
    const client = wsClient();
    try {
      const cases: Array<[string, string, RegExp]> = [
        [aliases(limits.maxAliases + 1), "GRAPHQL_VALIDATION_FAILED", /aliases/],
        ["{ me { ", "GRAPHQL_PARSE_FAILED", /Syntax Error/],
        [`{ ${"__typename ".repeat(limits.maxTokens)} }`, "GRAPHQL_PARSE_FAILED", /tokens/],
        [`{ __typename } # ${"x".repeat(limits.maxDocumentChars)}`, "BAD_REQUEST", /too large/],
        ["{ noSuchField }", "GRAPHQL_VALIDATION_FAILED", /noSuchField/],
      ];
      for (const [doc, code, message] of cases) {
        const refused = await run(client, doc);
        expect(refused.errorMessage).toHaveLength(1);
        expect(refused.errorMessage![0].message).toMatch(message);
        expect(refused.errorMessage![0].extensions).toEqual({ code, status_code: 400, extra: null });
      }
      expect((await run(client, "{ __typename }")).results).toEqual([{ data: { __typename: "Query" } }]);
    } finally {
      await client.dispose();
    }
  });
});
