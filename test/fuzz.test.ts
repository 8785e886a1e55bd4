/**
 * Fuzzing every served REST endpoint (and GraphQL) with fast-check (issue 5, Checks): wrong
 * types, missing and extra fields, huge and deep values, odd bytes (NUL, lone surrogates, control
 * characters), raw non-JSON bodies, odd content types and credentials. For every request:
 * no 5xx; every error answers the envelope `{status_code, detail, extra?}`; and a refused request
 * changes nothing stored (row counts of users, teams, api keys, activity, ledger, responses,
 * revoked keys, and the sum of team balances, compared before and after it).
 *
 * Requests run one at a time, so a change seen after a refusal is that refusal's. Accepted
 * generations are cheap (templates ask for 2 tokens of a 260K-parameter model). Each property
 * stops after its time budget (a slow machine runs fewer cases), but a property that ran fewer
 * than its minimum number of cases fails (issue 28, item 6: a busy machine must not pass having
 * checked almost nothing); the request it was waiting for is awaited before the next property
 * starts, so its effects are not blamed on another request. A failure prints fast-check's seed
 * and the shrunk request; `FUZZ_SEED`, `FUZZ_RUNS` (a multiplier) and `FUZZ_BUDGET_MS` replay or
 * widen a run.
 */
import { randomUUID } from "node:crypto";
import fc from "fast-check";
import { controlRoutes } from "../src/rest/control.routes.js";
import { dataPlaneRoutes } from "../src/rest/data-plane.routes.js";
import {
  CHAT_MODEL,
  ERROR_BODY_KEYS,
  EMBED_MODEL,
  type TestServer,
  createTestApiKey,
  createTestCaller,
  startTestServer,
} from "./support/harness.js";

const RUNS = Number(process.env.FUZZ_RUNS ?? 1);
const SEED = process.env.FUZZ_SEED === undefined ? undefined : Number(process.env.FUZZ_SEED);
/** Wall-clock budget per property, ms: a slow machine runs fewer cases rather than time out (but at least MIN_CASES). */
const BUDGET_MS = Number(process.env.FUZZ_BUDGET_MS ?? 20_000);
/** Fewest cases a property must run within its budget, else it fails (times `FUZZ_RUNS`). */
const MIN_CASES = 100;

let server: TestServer;
let caller: Awaited<ReturnType<typeof createTestCaller>>;
/** A key the fuzzer may revoke (the caller's own key must keep working). */
let spareKeyId: string;
/** A stored response of the caller's team, so reads and deletes can hit a real row. */
let storedResponseId: string;

beforeAll(async () => {
  server = await startTestServer();
  caller = await createTestCaller(server.url);
  spareKeyId = (await createTestApiKey(server.url, caller.token, "spare")).id;
  const res = await send({
    method: "POST",
    path: "/v1/responses",
    auth: "key",
    body: JSON.stringify({ model: CHAT_MODEL, input: "Hi", max_output_tokens: 2 }),
  });
  storedResponseId = JSON.parse(res.text).id;
}, 60_000);
afterAll(() => server.close());

// ---------------------------------------------------------------------------------------------
// Requests

type Auth = "key" | "token" | "none" | "garbage-bearer" | "garbage-key" | "x-api-key" | "basic" | "odd-token";

interface FuzzRequest {
  method: string;
  path: string;
  auth: Auth;
  /** Raw body bytes (or text); undefined sends none. */
  body?: string | Uint8Array;
  contentType?: string;
  contentEncoding?: string;
}

function authHeaders(auth: Auth): Record<string, string> {
  switch (auth) {
    case "key":
      return { authorization: `Bearer ${caller.key}` };
    case "token":
      return { authorization: `Bearer ${caller.token}` };
    case "none":
      return {};
    case "garbage-bearer":
      return { authorization: "Bearer not.a.token" };
    case "garbage-key":
      return { authorization: `Bearer sk_${"x".repeat(48)}` };
    case "x-api-key":
      return { "x-api-key": caller.key };
    case "basic":
      return { authorization: "Basic dXNlcjpwYXNz" };
    case "odd-token":
      return { authorization: `Bearer ${caller.token.slice(0, -4)}AAAA` };
  }
}

/** The request under way: a property interrupted by its time budget leaves it running. */
let inflight: Promise<unknown> = Promise.resolve();
beforeEach(() => inflight.catch(() => undefined));

function send(req: FuzzRequest): Promise<{ status: number; text: string; contentType: string }> {
  const answer = sendNow(req);
  inflight = answer;
  return answer;
}

async function sendNow(req: FuzzRequest): Promise<{ status: number; text: string; contentType: string }> {
  const headers: Record<string, string> = authHeaders(req.auth);
  if (req.contentType !== undefined) headers["content-type"] = req.contentType;
  if (req.contentEncoding !== undefined) headers["content-encoding"] = req.contentEncoding;
  const res = await fetch(server.url + req.path, {
    method: req.method,
    headers,
    body: req.method === "GET" || req.method === "HEAD" ? undefined : req.body,
  });
  return { status: res.status, text: await res.text(), contentType: res.headers.get("content-type") ?? "" };
}

// ---------------------------------------------------------------------------------------------
// Stored state

async function snapshot(): Promise<Record<string, string>> {
  const [row] = await server.db<Record<string, string>>(`SELECT
      (SELECT count(*) FROM users)::text AS users,
      (SELECT count(*) FROM teams)::text AS teams,
      (SELECT count(*) FROM api_keys)::text AS api_keys,
      (SELECT count(*) FROM api_keys WHERE revoked_at IS NOT NULL)::text AS revoked_keys,
      (SELECT count(*) FROM activity)::text AS activity,
      (SELECT count(*) FROM credit_ledger)::text AS ledger,
      (SELECT count(*) FROM responses)::text AS responses,
      (SELECT coalesce(sum(credit_balance_micros), 0) FROM teams)::text AS balances`);
  return row;
}

// ---------------------------------------------------------------------------------------------
// Values

const surrogate = fc.integer({ min: 0xd800, max: 0xdfff }).map((c) => String.fromCharCode(c));
const control = fc.integer({ min: 0, max: 0x1f }).map((c) => String.fromCharCode(c));

/** Ordinary text with one character PostgreSQL or a parser may choke on. */
const taintedText = fc
  .tuple(
    fc.string({ maxLength: 12 }),
    fc.constantFrom("\u0000", "\ud800", "\udfff", "\u001b", "\u007f", "\u2028", "\\u0000"),
    fc.string({ maxLength: 12 }),
  )
  .map(([a, odd, b]) => a + odd + b);

/** Strings a careless or hostile client sends: NUL, lone surrogates, control characters, any code point. */
const oddString = fc.oneof(
  { weight: 2, arbitrary: taintedText },
  fc.string({ unit: "binary", maxLength: 40 }),
  fc.string({
    unit: fc.oneof(surrogate, control, fc.constantFrom("\u0000", "a", "é", "🚀", "\\", '"')),
    maxLength: 20,
  }),
  fc.constantFrom("", " ", "\u0000", "a\u0000b", "\ud800", "x\udc00", "\ufeff", "null", "0x10", "1e3", "-1"),
  fc.constantFrom("x".repeat(100_000), "é".repeat(30_000)),
);

/** A value nested `depth` arrays deep. */
const deepValue = fc.integer({ min: 2, max: 200 }).map((depth) => {
  let v: unknown = 1;
  for (let i = 0; i < depth; i++) v = [v];
  return v;
});

const oddNumber = fc.oneof(
  fc.integer(),
  fc.double(),
  fc.constantFrom(0, -1, 1.5, 2 ** 31, 2 ** 53 + 2, 1e308, -1e308, Number.MIN_VALUE),
);

/** Any wrong-typed, huge, deep or odd value for a field. */
const oddValue: fc.Arbitrary<unknown> = fc.oneof(
  { weight: 3, arbitrary: oddString },
  { weight: 2, arbitrary: oddNumber },
  { weight: 1, arbitrary: fc.constantFrom(null, true, false, [], {}) },
  { weight: 1, arbitrary: fc.array(oddString, { maxLength: 4 }) },
  { weight: 1, arbitrary: fc.dictionary(oddString, oddString, { maxKeys: 3 }) },
  { weight: 1, arbitrary: deepValue },
  { weight: 1, arbitrary: fc.jsonValue({ maxDepth: 3 }) },
);

/** Valid bodies of each create operation: the fuzzer mutates these. */
const TEMPLATES: Record<string, () => Record<string, unknown>> = {
  "/v1/chat/completions": () => ({ model: CHAT_MODEL, max_tokens: 2, messages: [{ role: "user", content: "Hi" }] }),
  "/v1/messages": () => ({ model: CHAT_MODEL, max_tokens: 2, messages: [{ role: "user", content: "Hi" }] }),
  "/v1/responses": () => ({ model: CHAT_MODEL, max_output_tokens: 2, input: "Hi" }),
  "/v1/embeddings": () => ({ model: EMBED_MODEL, input: "Hi" }),
  "/control/v1/auth/signup": () => ({ email: `f${randomUUID()}@example.com`, password: "correct horse battery" }),
  "/control/v1/auth/login": () => ({ username: caller.email, password: caller.password }),
  "/control/v1/auth/api-keys": () => ({ name: "fuzz" }),
  "/control/v1/auth/forgot-password": () => ({ email: caller.email }),
  "/control/v1/auth/reset-password": () => ({ token: "fuzz".repeat(11), password: "correct horse battery" }),
};

type Mutation =
  | { kind: "replace"; field: number; value: unknown }
  | { kind: "remove"; field: number }
  | { kind: "extra"; key: string; value: unknown }
  | { kind: "message"; key: string; value: unknown }
  | { kind: "whole"; value: unknown };

const mutation: fc.Arbitrary<Mutation> = fc.oneof(
  { weight: 4, arbitrary: fc.record({ kind: fc.constant("replace" as const), field: fc.nat(), value: oddValue }) },
  { weight: 2, arbitrary: fc.record({ kind: fc.constant("remove" as const), field: fc.nat() }) },
  { weight: 2, arbitrary: fc.record({ kind: fc.constant("extra" as const), key: oddString, value: oddValue }) },
  {
    weight: 2,
    arbitrary: fc.record({
      kind: fc.constant("message" as const),
      key: fc.constantFrom("role", "content", "name", "type", "text", "__proto__", "constructor"),
      value: oddValue,
    }),
  },
  { weight: 1, arbitrary: fc.record({ kind: fc.constant("whole" as const), value: oddValue }) },
);

/** Applies `mutations` to a template body (a field index picks one of its keys). */
function mutate(template: Record<string, unknown>, mutations: Mutation[]): unknown {
  let body: unknown = template;
  for (const m of mutations) {
    // fast-check's values must stay as generated (for replay and shrinking): work on copies.
    const value = "value" in m ? structuredClone(m.value) : undefined;
    if (m.kind === "whole") {
      body = value;
      continue;
    }
    if (typeof body !== "object" || body === null || Array.isArray(body)) continue;
    const obj = body as Record<string, unknown>;
    const keys = Object.keys(obj);
    if (m.kind === "replace" && keys.length > 0) obj[keys[m.field % keys.length]] = value;
    else if (m.kind === "remove" && keys.length > 0) delete obj[keys[m.field % keys.length]];
    else if (m.kind === "extra")
      Object.defineProperty(obj, m.key, { value, enumerable: true, writable: true, configurable: true });
    else if (m.kind === "message") {
      const list = (obj.messages ?? obj.input) as unknown;
      if (Array.isArray(list) && typeof list[0] === "object" && list[0] !== null) {
        Object.defineProperty(list[0], m.key, { value, enumerable: true, writable: true, configurable: true });
      } else if (typeof list === "string") {
        obj.input = [{ role: "user", content: "Hi", [m.key]: value }];
      }
    }
  }
  return body;
}

const contentType = fc.oneof(
  { weight: 6, arbitrary: fc.constant("application/json") },
  {
    weight: 3,
    arbitrary: fc.constantFrom(
      undefined,
      "text/plain",
      "application/x-www-form-urlencoded",
      "multipart/form-data; boundary=x",
      "application/json; charset=utf-16",
      "application/json; charset=latin1",
      "application/json; charset=utf-32",
      "application/json; charset=bogus",
      "application/octet-stream",
      "",
    ),
  },
);

/**
 * Adds a field nested `depth` levels to a JSON object's text. Written as text: JSON.stringify
 * itself overflows the stack on values some thousand levels deep.
 */
function withDeepField(json: string, depth: number | null): string {
  if (depth === null || !json.endsWith("}")) return json;
  const deep = `"deep":${"[".repeat(depth)}1${"]".repeat(depth)}`;
  return json === "{}" ? `{${deep}}` : `${json.slice(0, -1)},${deep}}`;
}

/** A mutated template body (sometimes with a very deep extra field), as JSON text. */
function mutatedBody(path: string, minMutations: number): fc.Arbitrary<string> {
  return fc
    .tuple(
      fc.array(mutation, { minLength: minMutations, maxLength: 3 }),
      fc.option(fc.integer({ min: 30, max: 20_000 }), { freq: 8 }),
    )
    .map(([ms, depth]) => withDeepField(JSON.stringify(mutate(TEMPLATES[path](), ms)), depth));
}

/** A body as sent: JSON of the mutated template, or raw text/bytes that are not JSON at all. */
function rawBody(path: string): fc.Arbitrary<{ body?: string | Uint8Array; contentEncoding?: string }> {
  const json = TEMPLATES[path]
    ? mutatedBody(path, 0).map((body) => ({ body }))
    : oddValue.map((v) => ({ body: JSON.stringify(v) }));
  return fc.oneof(
    { weight: 8, arbitrary: json },
    {
      weight: 2,
      arbitrary: fc.oneof(
        fc.string({ unit: "binary", maxLength: 200 }).map((body) => ({ body })),
        fc.uint8Array({ maxLength: 200 }).map((body) => ({ body })),
        fc.integer({ min: 60, max: 20_000 }).map((d) => ({ body: `{"a":${"[".repeat(d)}1${"]".repeat(d)}}` })),
        fc.constantFrom(
          { body: "" },
          { body: "null" },
          { body: "[]" },
          { body: '"string"' },
          { body: "{" },
          { body: '{"a":1}', contentEncoding: "gzip" },
          { body: '{"a":1}', contentEncoding: "br" },
          { body: '{"a":1}', contentEncoding: "bogus" },
          { body: '{"__proto__":{"admin":true},"constructor":{"prototype":{}}}' },
        ),
      ),
    },
  );
}

/** Values for path parameters: garbage, a random UUID, or a real id. */
function pathParam(name: string): fc.Arbitrary<string> {
  const real = name === "key_id" ? [spareKeyId] : name === "response_id" ? [storedResponseId] : [CHAT_MODEL];
  return fc.oneof(
    fc.uuid(),
    fc.constantFrom(...real, "events", "0", "x".repeat(300), "%00", "%F0%9F%9A%80", "%ED%A0%80", "..%2F..%2Fetc"),
    fc.string({ unit: "grapheme-ascii", minLength: 1, maxLength: 40 }).map(encodeURIComponent),
  );
}

const queryString = fc.oneof(
  fc.constant(""),
  fc
    .array(
      fc.tuple(
        fc.constantFrom("limit", "stream_id", "beta", "after", "x"),
        fc.oneof(
          oddString.filter((s) => s.length < 200),
          fc.nat().map(String),
          fc.uuid(),
        ),
      ),
      { maxLength: 3 },
    )
    .map(
      (pairs) =>
        "?" + pairs.map(([k, v]) => `${k}=${encodeURIComponent(v.replace(/[\ud800-\udfff]/g, "?"))}`).join("&"),
    ),
);

/** Every served REST route, with the arbitrary of its requests. */
function routeRequests(): fc.Arbitrary<FuzzRequest> {
  const routes = [
    ...dataPlaneRoutes.map((r) => ({ method: r.method, path: r.path })),
    ...controlRoutes.map((r) => ({ method: r.method, path: r.path })),
  ];
  const auth = fc.oneof(
    { weight: 8, arbitrary: fc.constantFrom<Auth>("key", "token") },
    {
      weight: 2,
      arbitrary: fc.constantFrom<Auth>("none", "garbage-bearer", "garbage-key", "x-api-key", "basic", "odd-token"),
    },
  );
  return fc.constantFrom(...routes).chain((route) => {
    const params = [...route.path.matchAll(/:(\w+)/g)].map((m) => m[1]);
    const path = fc
      .tuple(...params.map(pathParam))
      .map((values) => params.reduce((p, name, i) => p.replace(`:${name}`, values[i]), route.path));
    return fc
      .record({ path, query: queryString, auth, contentType, body: rawBody(route.path) })
      .map(({ path: p, query, auth: a, contentType: ct, body }) => ({
        method: route.method.toUpperCase(),
        path: p + query,
        auth: a,
        contentType: ct,
        ...body,
      }));
  });
}

// ---------------------------------------------------------------------------------------------
// The property

/** Sends one request and checks the invariants. @throws Error describing the first that broke. */
async function check(req: FuzzRequest): Promise<void> {
  const before = await snapshot();
  const res = await send(req);
  const label = `${req.method} ${req.path} (${res.status}): ${res.text.slice(0, 300)}`;
  if (res.status >= 500) throw new Error(`5xx for ${label}`);
  if (res.status >= 400) {
    let body: any;
    try {
      body = JSON.parse(res.text);
    } catch {
      throw new Error(`non-JSON error for ${label}`);
    }
    const keysOk = Object.keys(body).every((k) => ERROR_BODY_KEYS.includes(k));
    if (
      body.status_code !== res.status ||
      typeof body.detail !== "string" ||
      !keysOk ||
      body.error?.message !== body.detail
    ) {
      throw new Error(`not the envelope for ${label}`);
    }
    const after = await snapshot();
    if (JSON.stringify(after) !== JSON.stringify(before)) {
      throw new Error(
        `refused request changed stored data ${JSON.stringify(before)} → ${JSON.stringify(after)}: ${label}`,
      );
    }
  }
}

function params(runs: number): fc.Parameters<unknown> {
  return { numRuns: runs * RUNS, seed: SEED, interruptAfterTimeLimit: BUDGET_MS };
}

/**
 * Runs `property` for `runs` cases or until the time budget, like `fc.assert`, and then fails
 * unless at least `minimum` cases ran: a budget that ran out early is a failed check, not a pass.
 * @throws Error with fast-check's report (seed, shrunk counterexample) when the property failed.
 */
async function assertAtLeast(property: fc.IAsyncProperty<[FuzzRequest]>, runs: number, minimum: number) {
  const details = await fc.check(property, params(runs));
  if (details.failed) throw new Error(await fc.asyncDefaultReportMessage(details));
  if (details.numRuns < minimum * RUNS) {
    throw new Error(
      `only ${details.numRuns} cases ran in ${BUDGET_MS} ms (at least ${minimum * RUNS} wanted, seed ${details.seed}): ` +
        "the machine is too slow for this budget; raise FUZZ_BUDGET_MS",
    );
  }
}

describe("fuzzing the REST surface", () => {
  it(
    "when every served endpoint gets wrong, missing, extra, huge, deep and odd input, then no 5xx, always the envelope, and refusals change nothing",
    async () => {
      await assertAtLeast(
        fc.asyncProperty(routeRequests(), (req) => check(req)),
        400,
        MIN_CASES,
      );
    },
    BUDGET_MS + 50_000,
  );

  it(
    "when the create operations, signup and login get mutated valid bodies with valid credentials, then the same holds",
    async () => {
      const creates = fc
        .constantFrom(
          "/v1/chat/completions",
          "/v1/messages",
          "/v1/responses",
          "/v1/embeddings",
          "/control/v1/auth/api-keys",
          "/control/v1/auth/signup",
          "/control/v1/auth/login",
        )
        .chain((path) =>
          mutatedBody(path, 1).map((body): FuzzRequest => ({
            method: "POST",
            path,
            auth: path === "/control/v1/auth/api-keys" ? "token" : path.startsWith("/control") ? "none" : "key",
            contentType: "application/json",
            body,
          })),
        );
      await assertAtLeast(
        fc.asyncProperty(creates, (req) => check(req)),
        300,
        MIN_CASES,
      );
    },
    BUDGET_MS + 50_000,
  );
});

describe("fuzzing GraphQL", () => {
  /** Each operation with valid variables; the fuzzer mutates the input object (or the variables). */
  const OPERATIONS: Array<[string, () => Record<string, unknown>, "input" | "variables"]> = [
    [
      "mutation ($input: SignupInput!) { signup(input: $input) { accessToken } }",
      () => ({ input: { email: `g${randomUUID()}@example.com`, password: "correct horse battery", name: "G" } }),
      "input",
    ],
    [
      "mutation ($input: LoginInput!) { login(input: $input) { accessToken } }",
      () => ({ input: { username: caller.email, password: caller.password } }),
      "input",
    ],
    [
      "mutation ($input: CreateApiKeyInput!) { createApiKey(input: $input) { id } }",
      () => ({ input: { name: "g" } }),
      "input",
    ],
    ["mutation ($id: String!) { revokeApiKey(id: $id) }", () => ({ id: spareKeyId }), "variables"],
    ["query ($id: String!) { model(id: $id) { id } }", () => ({ id: CHAT_MODEL }), "variables"],
    [
      "mutation ($email: String!) { forgotPassword(email: $email) { message } }",
      () => ({ email: caller.email }),
      "variables",
    ],
    [
      "mutation ($token: String!, $password: String!) { resetPassword(token: $token, password: $password) { message } }",
      () => ({ token: "fuzz".repeat(11), password: "correct horse battery" }),
      "variables",
    ],
    ["query { me { id } apiKeys { items { id } } models { id } }", () => ({}), "variables"],
  ];

  it(
    "when operations get mutated variables, then no 5xx, no internal error, and refusals change nothing",
    async () => {
      const requests = fc
        .tuple(fc.nat({ max: OPERATIONS.length - 1 }), fc.array(mutation, { minLength: 1, maxLength: 3 }))
        .map(([i, ms]): FuzzRequest => {
          const [query, template, target] = OPERATIONS[i];
          const variables = template();
          // Non-object `variables` are a request-shape error (issue 5 item 1, GraphQL), not fuzzed here.
          const withinObject = ms.filter((m) => m.kind !== "whole");
          const mutated =
            target === "input"
              ? { ...variables, input: mutate(variables.input as Record<string, unknown>, ms) }
              : mutate(variables, withinObject);
          return {
            method: "POST",
            path: "/graphql",
            auth: "token",
            contentType: "application/json",
            body: JSON.stringify({ query, variables: mutated }),
          };
        });
      await assertAtLeast(
        fc.asyncProperty(requests, async (req) => {
          const before = await snapshot();
          const res = await send(req);
          const label = `${String(req.body).slice(0, 300)} (${res.status}): ${res.text.slice(0, 300)}`;
          if (res.status >= 500) throw new Error(`5xx for ${label}`);
          const body = JSON.parse(res.text);
          const codes = ((body.errors ?? []) as Array<{ extensions?: { status_code?: number } }>).map(
            (e) => e.extensions?.status_code,
          );
          if (codes.some((c) => typeof c !== "number" || c >= 500)) throw new Error(`internal error for ${label}`);
          if (codes.length > 0 && !body.data) {
            const after = await snapshot();
            if (JSON.stringify(after) !== JSON.stringify(before))
              throw new Error(
                `refusal changed stored data ${JSON.stringify(before)} → ${JSON.stringify(after)}: ${label}`,
              );
          }
        }),
        200,
        MIN_CASES,
      );
    },
    BUDGET_MS + 50_000,
  );
});
