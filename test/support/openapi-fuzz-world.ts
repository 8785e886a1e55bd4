/**
 * The world the OpenAPI-driven fuzzer (`openapi-fuzz.ts`) works in (issue 28, item 5): an owner
 * and what its requests can name, made through the API, and what the document cannot know —
 * hints, repairs and server-issued values (see `buildWorld`). Shared by
 * test/openapi-conformance.test.ts and bench/fuzz-openapi.bench.ts, so it imports nothing of Jest.
 */
import fc from "fast-check";
import type { FuzzWorld, Hints, Repair } from "./openapi-fuzz.js";

type Json = Record<string, any>;

/** JSON over HTTP for building the world. @throws Error on any status but the one wanted. */
async function call(
  url: string,
  method: string,
  path: string,
  token: string | undefined,
  body: unknown,
  want: number,
): Promise<any> {
  const res = await fetch(url + path, {
    method,
    headers: {
      ...(token ? { authorization: `Bearer ${token}` } : {}),
      ...(body === undefined ? {} : { "content-type": "application/json" }),
    },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await res.text();
  if (res.status !== want) throw new Error(`${method} ${path}: ${res.status} ${text.slice(0, 300)}`);
  return text ? JSON.parse(text) : undefined;
}

/** The models the world's requests name. */
export interface WorldModels {
  chat: string;
  embed: string;
}

/** GraphQL documents a fuzzed `/graphql` body carries: its `query` is GraphQL, which the document cannot draw. */
const GRAPHQL_QUERIES = ["{ me { id role } }", "{ models { id } }", "query Keys { apiKeys { items { id } } }"];

/** A function tool of the OpenAI dialects, and the conversations that call and answer it. */
const WEATHER = { name: "get_weather", description: "The weather", parameters: { type: "object", properties: {} } };

/** Chat conversations a model can take: plain turns, content parts, and a tool call answered. */
const CHAT_MESSAGES = [
  [{ role: "user", content: "Once upon a time" }],
  [
    { role: "system", content: "Be brief." },
    { role: "user", content: "Hi" },
  ],
  [
    { role: "user", content: "Hi" },
    { role: "assistant", content: "Hello" },
    { role: "user", content: [{ type: "text", text: "Go on" }] },
  ],
  [
    { role: "user", content: "Weather?" },
    {
      role: "assistant",
      content: null,
      tool_calls: [{ id: "call_1", type: "function", function: { name: "get_weather", arguments: "{}" } }],
    },
    { role: "tool", tool_call_id: "call_1", content: "Sunny" },
  ],
];

/** The same for the Responses API's `input`. */
const RESPONSE_INPUTS = [
  "Once upon a time",
  [{ role: "user", content: "Hi" }],
  [{ type: "message", role: "user", content: [{ type: "input_text", text: "Hi" }] }],
  [
    { role: "user", content: "Weather?" },
    { type: "function_call", call_id: "call_1", name: "get_weather", arguments: "{}" },
    { type: "function_call_output", call_id: "call_1", output: "Sunny" },
  ],
];

/** The same for Anthropic's Messages API. */
const ANTHROPIC_MESSAGES = [
  [{ role: "user", content: "Once upon a time" }],
  [
    { role: "user", content: "Hi" },
    { role: "assistant", content: [{ type: "text", text: "Hello" }] },
    { role: "user", content: [{ type: "text", text: "Go on" }] },
  ],
  [
    { role: "user", content: "Weather?" },
    { role: "assistant", content: [{ type: "tool_use", id: "toolu_1", name: "get_weather", input: {} }] },
    { role: "user", content: [{ type: "tool_result", tool_use_id: "toolu_1", content: "Sunny" }] },
  ],
];

/** Structured-output requests the model can decode (a schema the grammar supports). */
const SMALL_SCHEMA = { type: "object", properties: { a: { type: "string" } }, required: ["a"] };

/** Deletes `key` from `o` when `o` is an object; @returns `o`. */
function without(o: unknown, ...keys: string[]): unknown {
  if (o && typeof o === "object" && !Array.isArray(o)) for (const k of keys) delete (o as Json)[k];
  return o;
}

/**
 * Signs up an owner (an API key, an access token) and makes what the parameters can name through
 * the API: stored responses, a stream, a batch, spare API keys, members, a custom model, a
 * deployment, local top-up sessions (their confirm links' session and signature).
 *
 * What the document cannot know is given as hints (per operation) and repairs:
 * - models: the server's chat and embedding models, and the custom model; generations kept short
 *   (`max_tokens` 1–4) so accepted requests stay cheap; `n` 1 (the embedded engine samples one);
 * - conversations whose tool calls are answered (tool history is checked across messages), text
 *   content only (the test model reads no images), function tools, response formats the grammar
 *   decodes, embedding inputs within the model's vocabulary and `dimensions` within its size;
 * - a future `expires_at` (create and update); a GraphQL document for `/graphql`; zero data retention left off (it
 *   would close batches and stored responses to the team for the rest of the run);
 * - repairs: `logprobs` with `top_logprobs`; a background response stored and not streamed; no
 *   `tool_choice` naming a tool that is not offered, no stop strings with a forced tool call or a
 *   JSON format; an API key update's budget pair sent together (alone, each pairs with the key's
 *   own other half); `min_replicas` ≤ `max_replicas`; an invoice period that ended 25 h ago, at most
 *   366 days long, or none.
 * Values only the server issues are `opaque`: a reset token, an OAuth provider's name (none is
 * configured here).
 */
export async function buildWorld(
  url: string,
  models: WorldModels,
): Promise<FuzzWorld & { secrets: { key: string; token: string } }> {
  const tag = Math.random().toString(36).slice(2, 10);
  const email = `fuzz-owner-${tag}@example.com`;
  const password = "correct horse battery";
  const owner = await call(url, "POST", "/control/v1/auth/signup", undefined, { email, password }, 201);
  const token = owner.access_token as string;
  const key = (await call(url, "POST", "/control/v1/auth/api-keys", token, { name: "fuzz" }, 201)).plaintext as string;
  const chat = { model: models.chat, input: "Once", max_output_tokens: 2 };
  const responses = [
    (await call(url, "POST", "/v1/responses", key, chat, 200)).id,
    (await call(url, "POST", "/v1/responses", key, chat, 200)).id,
  ];
  const stream = (await call(url, "POST", "/v1/streams", key, { name: "fuzz" }, 201)).id;
  const batchItem = { model: models.chat, messages: [{ role: "user", content: "Hi" }], max_tokens: 2 };
  const batch = (await call(url, "POST", "/v1/batches", key, { requests: [{ body: batchItem }] }, 201)).id;
  const spareKeys: string[] = [];
  for (let i = 0; i < 3; i++) {
    spareKeys.push((await call(url, "POST", "/control/v1/auth/api-keys", token, { name: `spare ${i}` }, 201)).id);
  }
  const members: string[] = [];
  for (let i = 0; i < 3; i++) {
    const invitee = `fuzz-member-${i}-${tag}@example.com`;
    const invited = await call(url, "POST", "/control/v1/teams/me/members", token, { email: invitee }, 201);
    const joined = await call(
      url,
      "POST",
      "/control/v1/auth/signup",
      undefined,
      { email: invitee, password, invite_token: invited.invite_token },
      201,
    );
    members.push(joined.user.id);
  }
  const custom = `fuzz-custom-${tag}`;
  await call(url, "POST", "/control/v1/models/custom", token, { model_id: custom, architecture: "llama" }, 201);
  const deploymentBody = { name: "fuzz", model_source: "platform", model_id: models.chat };
  const deployment = (await call(url, "POST", "/control/v1/deployments", token, deploymentBody, 201)).id;
  const confirms: Array<Record<string, string>> = [];
  for (let i = 0; i < 3; i++) {
    const nonce = `fuzz-${tag}-${i}`;
    const session = await call(
      url,
      "POST",
      `/control/v1/billing/topups?nonce=${nonce}`,
      token,
      { amount_usd: "1.00" },
      201,
    );
    const link = new URL(session.checkout_url as string);
    confirms.push({ session: link.searchParams.get("session")!, signature: link.searchParams.get("signature")! });
  }

  const small = fc.integer({ min: 1, max: 4 });
  const absent = fc.constant(undefined);
  const dataPlane: Hints = {
    model: fc.constant(models.chat),
    max_tokens: small,
    max_output_tokens: small,
    max_completion_tokens: small,
    n: fc.constantFrom(undefined, 1),
    logit_bias: absent,
    function_call: absent,
    functions: absent,
    thinking: absent,
    tools: fc.constantFrom(undefined, [{ type: "function", function: WEATHER }]),
    response_format: fc.constantFrom(
      undefined,
      { type: "text" },
      { type: "json_object" },
      { type: "json_schema", json_schema: { name: "answer", schema: SMALL_SCHEMA } },
    ),
    previous_response_id: fc.constantFrom(undefined, ...responses),
  };
  const hints: Record<string, Hints> = {
    postV1ChatCompletions: { ...dataPlane, messages: fc.constantFrom(...CHAT_MESSAGES) },
    postV1Responses: {
      ...dataPlane,
      input: fc.constantFrom(...RESPONSE_INPUTS),
      tools: fc.constantFrom(undefined, [{ type: "function", ...WEATHER }]),
      text: fc.constantFrom(
        undefined,
        { format: { type: "text" } },
        { format: { type: "json_schema", name: "answer", schema: SMALL_SCHEMA } },
      ),
    },
    postV1Messages: {
      ...dataPlane,
      messages: fc.constantFrom(...ANTHROPIC_MESSAGES),
      tools: fc.constantFrom(undefined, [{ name: "get_weather", input_schema: { type: "object", properties: {} } }]),
    },
    postV1Embeddings: {
      model: fc.constant(models.embed),
      input: fc.constantFrom("Hi", ["Once", "upon"], [1, 2, 3], [[1, 2], [3]]),
      dimensions: fc.constantFrom(undefined, 8, 64),
    },
    postV1Decisions: { model: fc.constant(models.chat) },
    postV1Batches: {
      requests: fc.constantFrom(
        [{ body: batchItem }],
        [
          { custom_id: "a", method: "POST", url: "/v1/chat/completions", body: batchItem },
          { custom_id: "b", body: { ...batchItem, messages: CHAT_MESSAGES[1] } },
        ],
      ),
    },
    postControlV1AuthApiKeys: { expires_at: fc.constantFrom(undefined, null, "2090-01-01T00:00:00Z") },
    patchControlV1AuthApiKeysKeyId: { expires_at: fc.constantFrom(undefined, null, "2090-01-01T00:00:00Z") },
    // Zero data retention closes batches and stored responses to the team for the rest of the run.
    patchControlV1TeamsMe: { zero_data_retention_enabled: fc.constantFrom(undefined, false) },
    postControlV1Deployments: { model_id: fc.constantFrom(models.chat, custom) },
    postControlV1ModelsRequestDeployment: { model_id: fc.constantFrom(models.chat, custom) },
    postGraphql: { query: fc.constantFrom(...GRAPHQL_QUERIES), operationName: absent },
  };
  /** A tool choice that forces a call: `required`, or one naming a tool or asking for any. */
  const forced = (choice: unknown) =>
    choice === "required" ||
    (typeof choice === "object" &&
      choice !== null &&
      ["any", "tool", "function"].includes(String((choice as Json).type)));
  const repairs: Record<string, Repair> = {
    postV1ChatCompletions: (b) => {
      const body = b as Json;
      if (body.top_logprobs != null) body.logprobs = true;
      if (!body.tools) without(body, "tool_choice", "parallel_tool_calls");
      else if (forced(body.tool_choice) && body.tool_choice !== "required") {
        body.tool_choice = { type: "function", function: { name: WEATHER.name } };
      }
      if (forced(body.tool_choice) || (body.response_format && body.response_format.type !== "text"))
        without(body, "stop");
      return body;
    },
    postV1Responses: (b) => {
      const body = b as Json;
      if (body.top_logprobs != null) without(body, "top_logprobs");
      // A background response is stored, not streamed, and does not wait in the queue.
      if (body.background === true) without(body, "stream", "store", "max_queue_wait_s");
      if (!body.tools) without(body, "tool_choice", "parallel_tool_calls");
      else if (forced(body.tool_choice) && body.tool_choice !== "required") {
        body.tool_choice = { type: "function", name: WEATHER.name };
      }
      return body;
    },
    postV1Messages: (b) => {
      const body = b as Json;
      if (!body.tools) without(body, "tool_choice");
      else if (forced(body.tool_choice) && body.tool_choice.type === "tool") body.tool_choice.name = WEATHER.name;
      if (forced(body.tool_choice)) without(body, "stop_sequences");
      return body;
    },
    postControlV1Deployments: (b) => {
      const body = b as Json;
      if (body.min_replicas != null && body.max_replicas != null && body.min_replicas > body.max_replicas) {
        [body.min_replicas, body.max_replicas] = [body.max_replicas, body.min_replicas];
      } else if (body.min_replicas != null && body.max_replicas == null && body.min_replicas > 1) {
        body.max_replicas = body.min_replicas;
      }
      return body;
    },
    // A budget field sent alone pairs with the key's own other half, which the document cannot
    // know (it says so): send the pair, as the body alone then decides.
    patchControlV1AuthApiKeysKeyId: (b) => {
      const body = b as Json;
      if ("budget_micros" in body && !("budget_period" in body))
        body.budget_period = body.budget_micros === null ? null : "month";
      else if ("budget_period" in body && !("budget_micros" in body))
        body.budget_micros = body.budget_period === null ? null : 1_000_000;
      return body;
    },
    postControlV1BillingInvoices: (b) => {
      const body = b as Json;
      if (body.period_start == null || body.period_end == null) return without(body, "period_start", "period_end");
      const end = Math.min(Date.parse(body.period_end), Date.now() - 26 * 3_600_000);
      const start = Math.max(Math.min(Date.parse(body.period_start), end - 3_600_000), end - 300 * 86_400_000);
      return { ...body, period_start: new Date(start).toISOString(), period_end: new Date(end).toISOString() };
    },
  };
  const queryRepairs: Record<string, (q: Record<string, string>) => Record<string, string>> = {
    // One cursor at most; a time range that ends after it starts.
    getV1ResponsesEvents: (q) => {
      if (q.starting_after && q.ending_before) delete q.ending_before;
      return q;
    },
    getControlV1Activity: (q) => {
      if (q.created_after && q.created_before && Date.parse(q.created_before) <= Date.parse(q.created_after)) {
        [q.created_after, q.created_before] = [q.created_before, q.created_after];
        if (q.created_after === q.created_before) delete q.created_before;
      }
      return q;
    },
  };
  return {
    url,
    secrets: { key, token },
    credentials: (o) => (o.path.startsWith("/v1/") ? key : token),
    params: {
      response_id: responses,
      request_id: responses,
      stream_id: [stream],
      batch_id: [batch],
      key_id: spareKeys,
      user_id: members,
      deployment_id: [deployment],
      model_id: [models.chat, models.embed, custom],
    },
    fixedParams: { wait_ms: ["0", "10"] },
    repairQuery: (o) => queryRepairs[o.id],
    paramSets: { getControlV1BillingTopupsLocalConfirm: confirms },
    hints: (o) => hints[o.id] ?? {},
    repair: (o) => repairs[o.id],
    opaque: {
      // Cursors are ids of the team's own rows; a confirm link's signature is the server's.
      getV1ResponsesEvents: ["starting_after", "ending_before"],
      getControlV1BillingTransactions: ["starting_after"],
      getControlV1WebhooksDeliveries: ["starting_after"],
      getControlV1BillingTopupsLocalConfirm: ["signature"],
      postControlV1AuthResetPassword: ["token"],
      postControlV1AuthOauthComplete: ["provider"],
      postControlV1AuthLinkOauth: ["provider"],
    },
    skip: {
      postControlV1BillingStripeWebhook: "its body is Stripe's signed bytes, not JSON the document describes",
    },
  };
}
