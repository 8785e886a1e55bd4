/**
 * One valid and one invalid request per operation of the OpenAPI document (issue 13, Checks: "a
 * test sends one valid and one invalid request per operation built from the document and checks
 * the answers against its schemas"), over a real server.
 *
 * For every operation the document lists, the valid request is built from the document: path
 * parameters that fit their schema (real ids made through the API), the required query parameters,
 * and a body that is the request schema's smallest instance (required fields only) with the
 * fields that need real values (a model, an email) set on top — checked against the schema before
 * it is sent. Its answer must carry a documented success status and fit the documented schema of
 * its media type. The invalid request changes one thing the document constrains (a required body
 * field left out, a query parameter outside its schema, a path id that is not a uuid or names
 * nothing, no credentials where the operation requires them); its answer must be a status the
 * operation documents and the error envelope.
 *
 * A new operation in the document fails the coverage test until it gets a row here; operations
 * that take no input and no credentials (health probes, the document itself, `/docs`) have no
 * invalid request and are named as such.
 */
import { randomUUID } from "node:crypto";
import { dereference } from "@readme/openapi-parser";
import { Validator } from "@cfworker/json-schema";
import Stripe from "stripe";
import {
  CHAT_MODEL,
  EMBED_MODEL,
  type TestServer,
  type TestUser,
  createTestApiKey,
  createTestCaller,
  createTestUser,
  eventually,
  http,
  startTestServer,
  passwordResetToken,
} from "./support/harness.js";
import { type TestOidcProvider, startOidcProvider } from "./support/oidc-provider.js";
import { freshEmail, invite, joinTeam } from "./support/teams.js";
import { schemaExample } from "./support/schema-example.js";
import { parameterValue } from "./support/openapi-fuzz.js";

type Json = Record<string, any>;

/** A request to send: every part optional; `token: null` sends no credentials. */
interface Req {
  path?: Record<string, string>;
  query?: Record<string, string>;
  /** Fields set on top of the body built from the schema. */
  set?: Json;
  /** A body sent as it is (raw bytes, or JSON not built from a schema). */
  body?: unknown;
  headers?: Record<string, string>;
  token?: string | null;
  /** Another server (the Stripe-configured one). */
  server?: TestServer;
}

/** What makes the invalid request invalid, and the (documented) status it gets. */
interface Invalid extends Req {
  /** Leave out this required body field (default: the schema's first required field). */
  drop?: string | true;
  status: number;
}

interface Case {
  valid?: () => Promise<Req> | Req;
  /** The invalid request as a change of the valid one; `none` for operations without input. */
  invalid: Invalid | ((valid: Req) => Promise<Invalid> | Invalid) | "none";
}

const WEBHOOK_SECRET = "whsec_openapi_operations";

let server: TestServer;
let stripeServer: TestServer;
let oidc: TestOidcProvider;
let owner: TestUser & { key: string };
let document: Json;

/** Fixtures made through the API once: a stored response, a stream, a batch, a member, a custom model. */
const fx = {} as {
  responseId: string;
  streamId: string;
  batchId: string;
  member: TestUser;
  customModelId: string;
};

beforeAll(async () => {
  oidc = await startOidcProvider();
  server = await startTestServer({ oauthProviders: [oidc.config("acme")] });
  stripeServer = await startTestServer({
    paymentProvider: "stripe",
    stripeSecretKey: "sk_test_switchyard",
    stripeWebhookSecret: WEBHOOK_SECRET,
    stripeApiBase: "http://127.0.0.1:9",
  });
  owner = await createTestCaller(server.url);
  const raw = (await http(server.url, "GET", "/schema/openapi.json")).body as Json;
  document = (await dereference(structuredClone(raw) as never)) as Json;

  fx.responseId = (await post("/v1/responses", { model: CHAT_MODEL, input: "Once", max_output_tokens: 2 })).id;
  fx.streamId = (await post("/v1/streams", { name: "fixture" })).id;
  fx.batchId = (
    await post("/v1/batches", {
      requests: [{ body: { model: CHAT_MODEL, messages: [{ role: "user", content: "Hi" }], max_tokens: 2 } }],
    })
  ).id;
  fx.member = await joinTeam(server.url, owner);
  fx.customModelId = await newCustomModel();
}, 120_000);
afterAll(async () => {
  await server?.close();
  await stripeServer?.close();
  await oidc?.close();
});

/** POST as the owner (API key on the data plane, access token on the control plane); @returns the body. */
async function post(path: string, body: unknown): Promise<Json> {
  const token = path.startsWith("/control/") ? owner.token : owner.key;
  const res = await http(server.url, "POST", path, { token, body });
  if (res.status >= 300) throw new Error(`${path}: ${res.status} ${res.text}`);
  return res.body as Json;
}

async function newCustomModel(): Promise<string> {
  const modelId = `ops-${randomUUID()}`;
  await post("/control/v1/models/custom", { model_id: modelId, architecture: "llama" });
  return modelId;
}

/**
 * A fresh failed webhook delivery of the owner's team: a response whose loopback callback the
 * default SSRF guard refuses. @returns its id and response id, once it has failed.
 */
async function failedDelivery(): Promise<{ id: string; responseId: string }> {
  const { id: responseId } = await post("/v1/responses", {
    model: CHAT_MODEL,
    input: "Once",
    max_output_tokens: 2,
    metadata: { completion_webhook: "http://127.0.0.1:9/ops" },
  });
  let id: string | undefined;
  await eventually(async () => {
    const [row] = await server.db<{ id: string }>(
      "SELECT id FROM webhook_deliveries WHERE response_id = $1 AND status = 'failed'",
      [responseId],
    );
    id = row?.id;
    return id !== undefined;
  }, 10_000);
  if (!id) throw new Error(`no failed delivery for ${responseId}`);
  return { id, responseId };
}

/** An OpenID Connect sign-in come back from the provider: the body of complete/link-oauth. */
async function oauthCode(token?: string): Promise<Json> {
  const started = await http(server.url, "GET", "/control/v1/auth/oauth/acme/authorize", { token });
  if (started.status !== 200) throw new Error(`authorize: ${started.status} ${started.text}`);
  const n = randomUUID().slice(0, 8);
  const back = await oidc.authorize(started.body.authorization_url, {
    sub: `sub-${n}`,
    email: `oidc-${n}@example.com`,
    email_verified: true,
  });
  return { provider: "acme", code: back.searchParams.get("code"), state: back.searchParams.get("state") };
}

const NOT_A_UUID = "not-a-uuid";
const noCredentials: Invalid = { token: null, status: 401 };
const badId = (name: string): Invalid => ({ path: { [name]: NOT_A_UUID }, status: 400 });
const dropRequired: Invalid = { drop: true, status: 400 };
const noInput = "none" as const;

/** Every operation of the document, by `operationId`. */
const CASES: Record<string, Case> = {
  // Health and the document's own paths: no input, no credentials.
  getV1Health: { invalid: noInput },
  headV1Health: { invalid: noInput },
  getV1HealthReady: { invalid: noInput },
  headV1HealthReady: { invalid: noInput },
  getSchemaOpenapiJson: { invalid: noInput },
  getSchemaOpenapiYaml: { invalid: noInput },
  getDocs: { invalid: noInput },
  // Without SWITCHYARD_METRICS_TOKEN a loopback client is let in; the 401/403 are metrics.test's.
  getMetrics: { invalid: noInput },
  postGraphql: {
    valid: () => ({ body: { query: "{ me { id role } }" } }),
    invalid: { body: { variables: {} }, status: 400 },
  },

  // Data plane
  getV1AuthMe: { invalid: noCredentials },
  getV1Models: { invalid: noCredentials },
  getV1ModelsModelId: {
    valid: () => ({ path: { model_id: CHAT_MODEL } }),
    invalid: { path: { model_id: "no-such-model" }, status: 404 },
  },
  postV1Responses: { valid: () => ({ set: { model: CHAT_MODEL, max_output_tokens: 4 } }), invalid: dropRequired },
  getV1Responses: { valid: () => ({ query: { limit: "5" } }), invalid: { query: { limit: "many" }, status: 400 } },
  getV1ResponsesEvents: {
    valid: () => ({ query: { limit: "5" } }),
    invalid: { query: { starting_after: NOT_A_UUID }, status: 400 },
  },
  getV1ResponsesResponseId: {
    valid: () => ({ path: { response_id: fx.responseId } }),
    invalid: badId("response_id"),
  },
  deleteV1ResponsesResponseId: {
    valid: async () => ({
      path: {
        response_id: (await post("/v1/responses", { model: CHAT_MODEL, input: "Once", max_output_tokens: 2 })).id,
      },
    }),
    invalid: { path: { response_id: randomUUID() }, status: 404 },
  },
  postV1ResponsesResponseIdCancel: {
    valid: () => ({ path: { response_id: fx.responseId } }),
    invalid: badId("response_id"),
  },
  postV1ChatCompletions: {
    valid: () => ({ set: { model: CHAT_MODEL, max_tokens: 4 } }),
    invalid: dropRequired,
  },
  postV1Embeddings: { valid: () => ({ set: { model: EMBED_MODEL } }), invalid: dropRequired },
  postV1Messages: {
    valid: () => ({ set: { model: CHAT_MODEL, max_tokens: 4 } }),
    invalid: { query: { beta: "maybe" }, status: 400 },
  },
  postV1Decisions: {
    valid: () => ({ set: { model: CHAT_MODEL, state: "Once", questions: { q: { type: "noul" } } } }),
    invalid: { drop: "model", status: 400 },
  },
  postV1Streams: { invalid: dropRequired },
  getV1Streams: { invalid: noCredentials },
  getV1StreamsStreamId: { valid: () => ({ path: { stream_id: fx.streamId } }), invalid: badId("stream_id") },
  patchV1StreamsStreamId: {
    valid: () => ({ path: { stream_id: fx.streamId }, set: { name: "renamed" } }),
    invalid: (v) => ({ ...v, set: { name: "" }, status: 400 }),
  },
  postV1Batches: {
    valid: () => ({
      set: { requests: [{ body: { model: CHAT_MODEL, messages: [{ role: "user", content: "Hi" }], max_tokens: 2 } }] },
    }),
    invalid: { set: { requests: [{}] }, status: 400 },
  },
  getV1Batches: { valid: () => ({ query: { limit: "5" } }), invalid: { query: { after: NOT_A_UUID }, status: 400 } },
  getV1BatchesBatchId: { valid: () => ({ path: { batch_id: fx.batchId } }), invalid: badId("batch_id") },
  postV1BatchesBatchIdCancel: { valid: () => ({ path: { batch_id: fx.batchId } }), invalid: badId("batch_id") },
  getV1BatchesBatchIdResults: { valid: () => ({ path: { batch_id: fx.batchId } }), invalid: badId("batch_id") },
  getV1BatchesBatchIdResultsJsonl: { valid: () => ({ path: { batch_id: fx.batchId } }), invalid: badId("batch_id") },

  // Control plane: auth
  postControlV1AuthSignup: {
    valid: () => ({ set: { email: freshEmail("ops"), password: "correct horse battery" } }),
    invalid: dropRequired,
  },
  postControlV1AuthLogin: {
    valid: () => ({ set: { username: owner.email, password: owner.password } }),
    invalid: { drop: "password", status: 400 },
  },
  getControlV1AuthMe: { invalid: noCredentials },
  getControlV1AuthApiKeys: { invalid: noCredentials },
  postControlV1AuthApiKeys: { valid: () => ({ set: { name: "ops" } }), invalid: { set: { name: "" }, status: 400 } },
  patchControlV1AuthApiKeysKeyId: {
    valid: async () => ({
      path: { key_id: (await createTestApiKey(server.url, owner.token)).id },
      set: { budget_micros: 1_000, budget_period: "month", allowed_models: [CHAT_MODEL] },
    }),
    invalid: (valid) => ({ ...valid, set: { rpm_limit: 0 }, status: 400 }),
  },
  deleteControlV1AuthApiKeysKeyId: {
    valid: async () => ({ path: { key_id: (await createTestApiKey(server.url, owner.token)).id } }),
    invalid: badId("key_id"),
  },
  getControlV1AuthOauthProviderAuthorize: {
    valid: () => ({ path: { provider: "acme" } }),
    invalid: { path: { provider: "nope" }, status: 404 },
  },
  postControlV1AuthOauthComplete: {
    valid: async () => ({ set: await oauthCode() }),
    invalid: async () => ({ set: await oauthCode(), drop: "state", status: 400 }),
  },
  postControlV1AuthLinkOauth: {
    valid: async () => ({ set: await oauthCode(owner.token) }),
    invalid: async () => ({ set: await oauthCode(owner.token), drop: "state", status: 400 }),
  },
  getControlV1AuthLinkedAccounts: { invalid: noCredentials },
  postControlV1AuthForgotPassword: { valid: () => ({ set: { email: freshEmail("forgot") } }), invalid: dropRequired },
  postControlV1AuthResetPassword: {
    valid: async () => ({ set: { token: await passwordResetToken(server), password: "another horse battery" } }),
    invalid: { drop: "password", set: { token: "t" }, status: 400 },
  },

  // Control plane: teams
  getControlV1TeamsMe: { invalid: noCredentials },
  patchControlV1TeamsMe: { valid: () => ({ set: { name: "Renamed" } }), invalid: { set: { name: "" }, status: 400 } },
  postControlV1TeamsMeMembers: { valid: () => ({ set: { email: freshEmail() } }), invalid: dropRequired },
  patchControlV1TeamsMeMembersUserId: {
    valid: () => ({ path: { user_id: fx.member.userId }, set: { role: "member" } }),
    invalid: (v) => ({ ...v, set: { role: "boss" }, status: 400 }),
  },
  deleteControlV1TeamsMeMembersUserId: {
    valid: async () => ({ path: { user_id: (await joinTeam(server.url, owner)).userId } }),
    invalid: badId("user_id"),
  },
  postControlV1TeamsInvitationsTokenAccept: {
    valid: async () => {
      const email = freshEmail();
      const token = (await invite(server.url, owner.token, email)).body.invite_token as string;
      const invitee = await createTestUser(server.url, { email });
      return { path: { token }, token: invitee.token };
    },
    // As the team's owner (the valid request's invitee has changed teams since).
    invalid: () => ({ path: { token: "no-such-invitation" }, status: 404 }),
  },

  // Control plane: models and deployments
  getControlV1ModelsCatalog: { invalid: noCredentials },
  getControlV1ModelsSearch: {
    valid: () => ({ query: { q: "tiny", status: "all" } }),
    invalid: { query: { status: "gone" }, status: 400 },
  },
  postControlV1ModelsCustom: {
    valid: () => ({ set: { model_id: `ops-${randomUUID()}`, architecture: "llama" } }),
    invalid: { set: { model_id: `ops-${randomUUID()}` }, drop: "architecture", status: 400 },
  },
  deleteControlV1ModelsCustom: {
    valid: async () => ({ query: { model_id: await newCustomModel() } }),
    invalid: () => ({ query: {}, status: 400 }),
  },
  postControlV1ModelsRequestDeployment: {
    valid: () => ({ set: { model_id: fx.customModelId } }),
    invalid: dropRequired,
  },
  getControlV1Deployments: { invalid: noCredentials },
  postControlV1Deployments: {
    valid: () => ({ set: { name: "ops", model_source: "platform", model_id: CHAT_MODEL } }),
    invalid: { set: { model_source: "platform", model_id: CHAT_MODEL }, drop: "name", status: 400 },
  },
  deleteControlV1DeploymentsDeploymentId: {
    valid: async () => ({
      path: {
        deployment_id: (
          await post("/control/v1/deployments", { name: "ops", model_source: "platform", model_id: "no-such-model" })
        ).id,
      },
    }),
    invalid: badId("deployment_id"),
  },

  // Control plane: activity, usage, billing
  getControlV1Activity: {
    valid: () => ({ query: { page: "1", page_size: "10" } }),
    invalid: { query: { page_size: "1000" }, status: 400 },
  },
  getControlV1ActivityModels: {
    valid: () => ({ query: { user_id: owner.userId } }),
    invalid: { query: { user_id: NOT_A_UUID }, status: 400 },
  },
  getControlV1ActivityRequestId: {
    valid: () => ({ path: { request_id: fx.responseId } }),
    invalid: badId("request_id"),
  },
  getControlV1UsageDaily: { valid: () => ({ query: { days: "7" } }), invalid: { query: { days: "0" }, status: 400 } },
  getControlV1UsageSummary: {
    valid: () => ({ query: { days: "7" } }),
    invalid: { query: { days: "366" }, status: 400 },
  },
  getControlV1BillingSummary: {
    valid: () => ({ query: { days: "7" } }),
    invalid: { query: { days: "x" }, status: 400 },
  },
  getControlV1BillingTransactions: {
    valid: () => ({ query: { limit: "5" } }),
    invalid: { query: { limit: "0" }, status: 400 },
  },
  postControlV1BillingTopups: {
    valid: () => ({ query: { nonce: randomUUID() }, set: { amount_usd: "5.00" } }),
    invalid: { query: { nonce: randomUUID() }, drop: "amount_usd", status: 400 },
  },
  getControlV1BillingTopupsLocalConfirm: {
    valid: async () => {
      const res = await post(`/control/v1/billing/topups?nonce=${randomUUID()}`, { amount_usd: "1.00" });
      const link = new URL(res.checkout_url as string);
      return { query: { session: link.searchParams.get("session")!, signature: link.searchParams.get("signature")! } };
    },
    invalid: (v) => ({ query: { ...v.query, signature: "forged" }, status: 400 }),
  },
  postControlV1BillingStripeWebhook: {
    // An event kind the service does not act on: acknowledged once its signature holds.
    valid: () => {
      const payload = JSON.stringify({
        id: `evt_${randomUUID()}`,
        object: "event",
        type: "customer.created",
        data: { object: {} },
      });
      const signature = Stripe.webhooks.generateTestHeaderString({ payload, secret: WEBHOOK_SECRET });
      return {
        server: stripeServer,
        body: payload,
        headers: { "stripe-signature": signature, "content-type": "application/json" },
      };
    },
    invalid: (v) => ({ ...v, headers: { ...v.headers, "stripe-signature": "t=1,v1=forged" }, status: 400 }),
  },
  postControlV1BillingInvoices: { invalid: { set: { period_start: 5 }, status: 400 } },
  getControlV1BillingInvoicesInvoiceId: {
    valid: async () => ({ path: { invoice_id: (await post("/control/v1/billing/invoices", {})).id } }),
    invalid: { path: { invoice_id: randomUUID() }, status: 404 },
  },

  // Control plane: webhook deliveries (issue 27, item 6)
  getControlV1WebhooksDeliveries: {
    valid: async () => ({ query: { limit: "5", response_id: (await failedDelivery()).responseId } }),
    invalid: { query: { status: "lost" }, status: 400 },
  },
  getControlV1WebhooksDeliveriesDeliveryId: {
    valid: async () => ({ path: { delivery_id: (await failedDelivery()).id } }),
    invalid: badId("delivery_id"),
  },
  postControlV1WebhooksDeliveriesDeliveryIdRedeliver: {
    valid: async () => ({ path: { delivery_id: (await failedDelivery()).id } }),
    invalid: { path: { delivery_id: randomUUID() }, status: 404 },
  },
};

const METHODS = ["get", "head", "post", "patch", "put", "delete"] as const;

function operations(): Array<{ id: string; path: string; method: string; op: Json }> {
  return Object.entries(document.paths as Record<string, Json>).flatMap(([path, item]) =>
    METHODS.filter((m) => item[m]).map((method) => ({
      id: item[method].operationId as string,
      path,
      method,
      op: item[method],
    })),
  );
}

/** Validation errors of `value` against a (dereferenced) JSON Schema 2020-12; empty when it fits. */
function schemaErrors(schema: Json, value: unknown): string[] {
  const result = new Validator(schema, "2020-12", false).validate(value);
  return result.errors.map((e) => `${e.instanceLocation}: ${e.error}`);
}

const example = (schema: Json): unknown => schemaExample(schema, { useDefaults: true });

/** The operation's JSON request schema, when it has one. */
function bodySchema(op: Json): Json | undefined {
  return op.requestBody?.content?.["application/json"]?.schema as Json | undefined;
}

/** The statuses an answer may have by the document: listed ones, or a range (`4XX`). */
function documented(op: Json, status: number): Json | undefined {
  return op.responses[String(status)] ?? op.responses[`${String(status)[0]}XX`];
}

/** Sends `req` to the operation; the body is the schema's example with `set` on top unless `body` is given. */
async function send(
  { path, method, op }: { path: string; method: string; op: Json },
  req: Req & { drop?: string | true },
): Promise<{ status: number; body: any; headers: Headers; text: string; sent: unknown }> {
  let url = path.replace(/\{([^}]+)\}/g, (_m, name: string) => encodeURIComponent(req.path?.[name] ?? ""));
  const query = new URLSearchParams(req.query ?? {});
  if ([...query.keys()].length) url += `?${query}`;
  let body: unknown = req.body;
  const schema = bodySchema(op);
  if (body === undefined && schema && (method === "post" || method === "patch")) {
    const built = { ...(example(schema) as Json), ...req.set };
    if (req.drop) delete built[req.drop === true ? (schema.required as string[])[0] : req.drop];
    body = built;
  }
  const token = req.token === null ? undefined : (req.token ?? (path.startsWith("/v1/") ? owner.key : owner.token));
  const res = await http((req.server ?? server).url, method.toUpperCase(), url, { token, body, headers: req.headers });
  return { ...res, sent: body };
}

test("every request body and every JSON answer of the document has a schema (none is left a generic object)", () => {
  expect(JSON.stringify(document)).not.toContain("shape not documented yet");
});

test("every operation of the document has a valid and an invalid request here (or is named as taking no input)", () => {
  expect(
    operations()
      .map((o) => o.id)
      .sort(),
  ).toEqual(Object.keys(CASES).sort());
});

describe.each(Object.keys(CASES).sort())("%s", (id) => {
  const target = () => {
    const found = operations().find((o) => o.id === id);
    if (!found) throw new Error(`${id} is not in the document`);
    return found;
  };
  let valid: Req;

  test("a valid request built from the document gets a documented success that fits its schema", async () => {
    const operation = target();
    valid = (await CASES[id].valid?.()) ?? {};
    // Path and query values fit the parameters' schemas.
    for (const p of (operation.op.parameters as Json[] | undefined) ?? []) {
      const value = p.in === "path" ? valid.path?.[p.name] : valid.query?.[p.name];
      if (p.required) expect({ param: p.name, value: value !== undefined }).toEqual({ param: p.name, value: true });
      if (value !== undefined)
        expect({ param: p.name, errors: schemaErrors(p.schema, parameterValue(p.schema, value)) }).toEqual({
          param: p.name,
          errors: [],
        });
    }
    const res = await send(operation, valid);
    const schema = bodySchema(operation.op);
    if (schema && typeof res.sent !== "string") expect(schemaErrors(schema, res.sent)).toEqual([]);
    const answer = operation.op.responses[String(res.status)] as Json | undefined;
    expect({
      status: res.status,
      success: /^2/.test(String(res.status)) && answer !== undefined,
      body: res.text.slice(0, 300),
    }).toMatchObject({
      success: true,
    });
    if (!answer!.content) {
      expect(res.text).toBe("");
      return;
    }
    const type = (res.headers.get("content-type") ?? "").split(";")[0].trim();
    expect(Object.keys(answer!.content)).toContain(type);
    if (type === "application/json") expect(schemaErrors(answer!.content[type].schema as Json, res.body)).toEqual([]);
  }, 60_000);

  test("an invalid request gets a documented error status and the error envelope", async () => {
    const operation = target();
    const rule = CASES[id].invalid;
    if (rule === "none") {
      // Nothing to get wrong: no parameters, no body, no credentials.
      expect(operation.op.parameters).toBeUndefined();
      expect(operation.op.requestBody).toBeUndefined();
      return;
    }
    const base = valid ?? (await CASES[id].valid?.()) ?? {};
    const bad = typeof rule === "function" ? await rule(base) : { ...base, ...rule, set: { ...base.set, ...rule.set } };
    if (typeof rule !== "function") {
      bad.path = { ...base.path, ...rule.path };
      bad.query = { ...base.query, ...rule.query };
    }
    const res = await send(operation, bad);
    expect({ status: res.status, body: res.body }).toMatchObject({ status: bad.status });
    const answer = documented(operation.op, res.status);
    expect({ status: res.status, documented: answer !== undefined }).toEqual({ status: res.status, documented: true });
    const schema = answer!.content["application/json"].schema as Json;
    expect(schemaErrors(schema, res.body)).toEqual([]);
    if (operation.path !== "/graphql") expect(res.body.status_code).toBe(res.status);
  }, 60_000);
});
