/**
 * The authorization matrix (issue 8, item 5; DESIGN §3 Roles and Errors; `src/services/platform/policy.ts`):
 * every endpoint, called as the owner, an admin and a member of team A, as a member of another
 * team, and without credentials, answers the status the policy says.
 *
 * The matrix is data: one row per endpoint (and per case of it, e.g. whose key is revoked), with
 * the status each caller gets. A new endpoint joins by adding a row. Rules the rows encode:
 * - Everyone with credentials may use inference and read the team; the data plane's resources
 *   (responses, streams, batches) are the team's, shared by its members.
 * - Owners and admins change the team, manage members and every key; members manage their own
 *   keys; only owners touch owners; the last owner cannot be demoted or removed (409).
 * - A resource of another team is 404 (as if it did not exist), never 403. The "other" caller is
 *   the owner of team B, the strongest role, so no role of another team reaches team A. On `/me`
 *   endpoints "other" acts on their own team.
 * - No credentials: 401, except signup, login, forgot/reset password and the health probes.
 * GraphQL rows use the `status_code` of the operation's first error (200 without errors).
 *
 * - Models and deployments (issue 9): everyone reads the catalog, searches it and lists the team's
 *   deployments; owners and admins create and delete custom models and deployments and request
 *   deployments; another team's custom model or deployment is 404.
 * Activity and usage: members read their own records (another member's record by id: 404);
 * naming another user with `user_id` is for owners and admins (member 403 — `usageScope` in the
 * policy). Billing is for owners and admins (members 403); its confirm link and Stripe webhook
 * are open (their own proof).
 * Webhook deliveries (issue 27, item 6): every member reads the team's log; owners and admins
 * redeliver (members 403); another team's delivery is 404.
 */
import { randomUUID } from "node:crypto";
import { readFileSync } from "node:fs";
import { buildSchema } from "graphql";
import { controlRoutes } from "../src/rest/control.routes.js";
import { dataPlaneRoutes } from "../src/rest/data-plane.routes.js";
import {
  CHAT_MODEL,
  EMBED_MODEL,
  type TestServer,
  type TestUser,
  createTestApiKey,
  createTestUser,
  eventually,
  http,
  startTestServer,
  passwordResetToken,
} from "./support/harness.js";
import { freshEmail, invite, joinTeam } from "./support/teams.js";

type Caller = "owner" | "admin" | "member" | "other" | "anonymous";
const CALLERS: Caller[] = ["owner", "admin", "member", "other", "anonymous"];
type Statuses = Record<Caller, number>;

/** Team A's callers and resources, and team B's owner ("other"). */
interface Fixture {
  owner: TestUser;
  admin: TestUser;
  member: TestUser;
  other: TestUser;
  /** A stored, completed response of team A. */
  responseId: string;
  streamId: string;
  batchId: string;
  /** A custom model of team A (kept: rows that delete one make their own). */
  customModelId: string;
  /** A failed webhook delivery of team A (its loopback callback refused by the default guard). */
  deliveryId: string;
}

/** Ids a call consumes (a key to revoke, a member to remove), made fresh before each call. */
type Params = Record<string, string>;

interface Row {
  /** `METHOD /path` with `{param}` placeholders, or `graphql <operation>`. */
  name: string;
  /** GraphQL document; the row is sent as `POST /graphql`. */
  query?: string;
  variables?: (f: Fixture, p: Params) => Record<string, unknown>;
  body?: (f: Fixture, p: Params) => unknown;
  prepare?: (f: Fixture) => Promise<Params>;
  expect: Statuses;
}

/** Every caller with credentials gets `status`; no credentials: 401. */
const anyCaller = (status: number): Statuses => ({
  owner: status,
  admin: status,
  member: status,
  other: status,
  anonymous: 401,
});
/** Team A's callers get `status`; another team's gets 404; no credentials: 401. */
const teamOnly = (status: number): Statuses => ({ ...anyCaller(status), other: 404 });
/** Open endpoints: everyone gets `status`, with or without credentials. */
const open = (status: number): Statuses => ({ ...anyCaller(status), anonymous: status });
/** Owners and admins of team A (and "other" on their own team through `/me`): `status`; members 403. */
const managersOfOwnTeam = (status: number): Statuses => ({ ...anyCaller(status), member: 403 });
/** Owners and admins of team A: `status`; members 403; another team 404. */
const managersOnly = (status: number): Statuses => ({ ...teamOnly(status), member: 403 });

const chat = { model: CHAT_MODEL, messages: [{ role: "user", content: "Hi" }], max_tokens: 2 };

let server: TestServer;
let f: Fixture;

/** Makes team A's owner its only owner again (rows that make owners run before the last-owner rows). */
async function soleOwner(fx: Fixture): Promise<Params> {
  await server.db("UPDATE users SET role = 'member' WHERE team_id = $1 AND role = 'owner' AND id <> $2", [
    fx.owner.teamId,
    fx.owner.userId,
  ]);
  return { owner: fx.owner.userId };
}

/** A password-reset token of a fresh user, as the parameters of the reset operation. */
async function resetToken(): Promise<Params> {
  return { token: await passwordResetToken(server) };
}

/** A fresh custom model of team A (made by its owner); @returns its model_id. */
async function newCustomModel(): Promise<string> {
  const modelId = `matrix-${randomUUID()}`;
  const res = await http(server.url, "POST", "/control/v1/models/custom", {
    token: f.owner.token,
    body: { model_id: modelId, architecture: "llama" },
  });
  if (res.status !== 201) throw new Error(`custom model failed: ${res.status} ${res.text}`);
  return modelId;
}

/** A fresh deployment of team A (made by its owner); @returns its id. */
async function newDeployment(): Promise<string> {
  const res = await http(server.url, "POST", "/control/v1/deployments", {
    token: f.owner.token,
    body: { name: "matrix", model_source: "platform", model_id: "no-such-model" },
  });
  if (res.status !== 201) throw new Error(`deployment failed: ${res.status} ${res.text}`);
  return res.body.id;
}

/** A stored response of team A (made by its owner), returned by id. */
async function newResponse(): Promise<string> {
  const res = await http(server.url, "POST", "/v1/responses", {
    token: f.owner.token,
    body: { model: CHAT_MODEL, input: "Once", max_output_tokens: 2 },
  });
  if (res.status !== 200) throw new Error(`response failed: ${res.status} ${res.text}`);
  return res.body.id;
}

/**
 * A fresh failed webhook delivery of team A: a response of its owner whose callback the default
 * SSRF guard refuses (loopback). @returns the delivery's id, once it has failed.
 */
async function failedDelivery(): Promise<string> {
  const res = await http(server.url, "POST", "/v1/responses", {
    token: f.owner.token,
    body: {
      model: CHAT_MODEL,
      input: "Once",
      max_output_tokens: 2,
      metadata: { completion_webhook: "http://127.0.0.1:9/m" },
    },
  });
  if (res.status !== 200) throw new Error(`response failed: ${res.status} ${res.text}`);
  let id: string | undefined;
  await eventually(async () => {
    const [row] = await server.db<{ id: string }>(
      "SELECT id FROM webhook_deliveries WHERE response_id = $1 AND status = 'failed'",
      [res.body.id],
    );
    id = row?.id;
    return id !== undefined;
  }, 10_000);
  if (!id) throw new Error(`no failed delivery for ${res.body.id}`);
  return id;
}

/** A fresh local top-up of team A's owner: its confirm link's `session` and `signature`. */
async function signedConfirmLink(fx: Fixture): Promise<Params> {
  const res = await http(server.url, "POST", `/control/v1/billing/topups?nonce=${randomUUID()}`, {
    token: fx.owner.token,
    body: { amount_usd: "1.00" },
  });
  if (res.status !== 201) throw new Error(`top-up failed: ${res.status} ${res.text}`);
  const link = new URL(res.body.checkout_url);
  return { session: link.searchParams.get("session")!, signature: link.searchParams.get("signature")! };
}

/** Team A's invoice of the previous month (made by its owner; the same one every time). */
async function ownerInvoice(fx: Fixture): Promise<string> {
  const res = await http(server.url, "POST", "/control/v1/billing/invoices", { token: fx.owner.token, body: {} });
  if (res.status !== 201) throw new Error(`invoice failed: ${res.status} ${res.text}`);
  return res.body.id;
}

const rows: Row[] = [
  // Health
  { name: "GET /v1/health", expect: open(200) },
  { name: "HEAD /v1/health", expect: open(200) },
  { name: "GET /v1/health/ready", expect: open(200) },
  { name: "HEAD /v1/health/ready", expect: open(200) },

  // Data plane
  { name: "GET /v1/auth/me", expect: anyCaller(200) },
  { name: "GET /v1/models", expect: anyCaller(200) },
  { name: `GET /v1/models/${CHAT_MODEL}`, expect: anyCaller(200) },
  {
    name: "POST /v1/responses",
    body: () => ({ model: CHAT_MODEL, input: "Once", max_output_tokens: 2 }),
    expect: anyCaller(200),
  },
  { name: "GET /v1/responses", expect: anyCaller(200) },
  { name: "GET /v1/responses/events", expect: anyCaller(200) },
  { name: "GET /v1/responses/{responseId}", expect: teamOnly(200) },
  { name: "POST /v1/responses/{responseId}/cancel", expect: teamOnly(200) },
  {
    name: "DELETE /v1/responses/{fresh}",
    prepare: async () => ({ fresh: await newResponse() }),
    expect: teamOnly(200),
  },
  { name: "POST /v1/chat/completions", body: () => chat, expect: anyCaller(200) },
  { name: "POST /v1/embeddings", body: () => ({ model: EMBED_MODEL, input: "hello" }), expect: anyCaller(200) },
  {
    name: "POST /v1/messages",
    body: () => ({ model: CHAT_MODEL, max_tokens: 2, messages: [{ role: "user", content: "Hi" }] }),
    expect: anyCaller(200),
  },
  {
    name: "POST /v1/decisions",
    body: () => ({ model: CHAT_MODEL, state: "Once", questions: { q: { type: "noul" } } }),
    expect: anyCaller(200),
  },
  { name: "POST /v1/streams", body: () => ({ name: "matrix" }), expect: anyCaller(201) },
  { name: "GET /v1/streams", expect: anyCaller(200) },
  { name: "GET /v1/streams/{streamId}", expect: teamOnly(200) },
  { name: "PATCH /v1/streams/{streamId}", body: () => ({ name: "renamed" }), expect: teamOnly(200) },
  { name: "POST /v1/batches", body: () => ({ requests: [{ body: chat }] }), expect: anyCaller(201) },
  { name: "GET /v1/batches", expect: anyCaller(200) },
  { name: "GET /v1/batches/{batchId}", expect: teamOnly(200) },
  { name: "POST /v1/batches/{batchId}/cancel", expect: teamOnly(200) },
  { name: "GET /v1/batches/{batchId}/results", expect: teamOnly(200) },
  { name: "GET /v1/batches/{batchId}/results.jsonl", expect: teamOnly(200) },

  // Control plane: auth
  {
    name: "POST /control/v1/auth/signup",
    body: () => ({ email: freshEmail("signup"), password: "correct horse battery" }),
    expect: open(201),
  },
  {
    name: "POST /control/v1/auth/login",
    body: (fx) => ({ username: fx.owner.email, password: fx.owner.password }),
    expect: open(200),
  },
  { name: "GET /control/v1/auth/me", expect: anyCaller(200) },
  {
    name: "POST /control/v1/auth/forgot-password",
    body: () => ({ email: freshEmail("forgot") }),
    expect: open(200),
  },
  // OAuth (no provider is configured on this server: the authorize helper answers 404 for an
  // unknown provider, complete and link refuse the body naming `provider` with 400; linking needs a
  // caller first).
  {
    name: "GET /control/v1/auth/oauth/{provider}/authorize",
    prepare: async () => ({ provider: "nope" }),
    expect: open(404),
  },
  {
    name: "POST /control/v1/auth/oauth/complete",
    body: () => ({ provider: "nope", code: "c", state: "s" }),
    expect: open(400),
  },
  {
    name: "POST /control/v1/auth/link-oauth",
    body: () => ({ provider: "nope", code: "c", state: "s" }),
    expect: anyCaller(400),
  },
  { name: "GET /control/v1/auth/linked-accounts", expect: anyCaller(200) },
  {
    name: "POST /control/v1/auth/reset-password",
    prepare: resetToken,
    body: (_fx, p) => ({ token: p.token, password: "another horse battery" }),
    expect: open(200),
  },
  { name: "GET /control/v1/auth/api-keys", expect: anyCaller(200) },
  { name: "POST /control/v1/auth/api-keys", body: () => ({ name: "matrix" }), expect: anyCaller(201) },
  {
    name: "PATCH /control/v1/auth/api-keys/{key} (a member's key)",
    prepare: async (fx) => ({ key: (await createTestApiKey(server.url, fx.member.token)).id }),
    body: () => ({ rpm_limit: 60 }),
    expect: teamOnly(200),
  },
  {
    name: "PATCH /control/v1/auth/api-keys/{key} (the owner's key)",
    prepare: async (fx) => ({ key: (await createTestApiKey(server.url, fx.owner.token)).id }),
    body: () => ({ rpm_limit: 60 }),
    expect: { ...teamOnly(200), member: 404 },
  },
  {
    // A member may tighten their own key's limits but not lift one (issue 29, item 1).
    name: "PATCH /control/v1/auth/api-keys/{key} (lifting a member key's budget)",
    prepare: async (fx) => {
      const key = await createTestApiKey(server.url, fx.member.token);
      await server.db("UPDATE api_keys SET budget_micros = 100, budget_period = 'day' WHERE id = $1", [key.id]);
      return { key: key.id };
    },
    body: () => ({ budget_micros: null }),
    expect: { ...teamOnly(200), member: 403 },
  },
  {
    name: "DELETE /control/v1/auth/api-keys/{key} (a member's key)",
    prepare: async (fx) => ({ key: (await createTestApiKey(server.url, fx.member.token)).id }),
    expect: teamOnly(204),
  },
  {
    name: "DELETE /control/v1/auth/api-keys/{key} (the owner's key)",
    prepare: async (fx) => ({ key: (await createTestApiKey(server.url, fx.owner.token)).id }),
    expect: { ...teamOnly(204), member: 404 },
  },

  // Control plane: teams
  { name: "GET /control/v1/teams/me", expect: anyCaller(200) },
  { name: "PATCH /control/v1/teams/me", body: () => ({ name: "Renamed" }), expect: managersOfOwnTeam(200) },
  {
    name: "POST /control/v1/teams/me/members",
    body: () => ({ email: freshEmail() }),
    expect: managersOfOwnTeam(201),
  },
  {
    name: "POST /control/v1/teams/me/members (as owner)",
    body: () => ({ email: freshEmail(), role: "owner" }),
    expect: { ...managersOfOwnTeam(201), admin: 403 },
  },
  {
    name: "PATCH /control/v1/teams/me/members/{member} (to member)",
    prepare: async (fx) => ({ member: fx.member.userId }),
    body: () => ({ role: "member" }),
    expect: managersOnly(200),
  },
  {
    name: "PATCH /control/v1/teams/me/members/{admin} (to admin)",
    prepare: async (fx) => ({ admin: fx.admin.userId }),
    body: () => ({ role: "admin" }),
    expect: managersOnly(200),
  },
  {
    name: "PATCH /control/v1/teams/me/members/{member} (to owner)",
    prepare: async (fx) => ({ member: (await joinTeam(server.url, fx.owner)).userId }),
    body: () => ({ role: "owner" }),
    expect: { ...managersOnly(200), admin: 403 },
  },
  {
    name: "PATCH /control/v1/teams/me/members/{owner} (to owner)",
    prepare: async (fx) => ({ owner: fx.owner.userId }),
    body: () => ({ role: "owner" }),
    expect: { ...managersOnly(200), admin: 403 },
  },
  {
    name: "PATCH /control/v1/teams/me/members/{owner} (the last owner, to admin)",
    prepare: soleOwner,
    body: () => ({ role: "admin" }),
    expect: { ...managersOnly(409), admin: 403 },
  },
  {
    name: "DELETE /control/v1/teams/me/members/{member} (a fresh member)",
    prepare: async (fx) => ({ member: (await joinTeam(server.url, fx.owner)).userId }),
    expect: managersOnly(204),
  },
  {
    name: "DELETE /control/v1/teams/me/members/{member} (a pending invitation)",
    prepare: async (fx) => ({ member: (await invite(server.url, fx.owner.token, freshEmail())).body.user_id }),
    expect: managersOnly(204),
  },
  {
    name: "DELETE /control/v1/teams/me/members/{owner} (the last owner)",
    prepare: soleOwner,
    expect: { ...managersOnly(409), admin: 403 },
  },
  {
    name: "POST /control/v1/teams/invitations/{token}/accept (an invitation for someone else)",
    prepare: async (fx) => ({ token: (await invite(server.url, fx.owner.token, freshEmail())).body.invite_token }),
    expect: { ...anyCaller(403) },
  },

  // Control plane: models and deployments (issue 9)
  { name: "GET /control/v1/models/catalog", expect: anyCaller(200) },
  { name: "GET /control/v1/models/search", expect: anyCaller(200) },
  {
    name: "POST /control/v1/models/custom",
    body: () => ({ model_id: `matrix-${randomUUID()}`, architecture: "llama" }),
    expect: managersOfOwnTeam(201),
  },
  {
    name: "DELETE /control/v1/models/custom?model_id={model}",
    prepare: async () => ({ model: await newCustomModel() }),
    expect: managersOnly(204),
  },
  {
    name: "POST /control/v1/models/request-deployment",
    body: (fx) => ({ model_id: fx.customModelId }),
    expect: managersOnly(200),
  },
  { name: "GET /control/v1/deployments", expect: anyCaller(200) },
  {
    name: "POST /control/v1/deployments",
    body: () => ({ name: "matrix", model_source: "platform", model_id: "no-such-model" }),
    expect: managersOfOwnTeam(201),
  },
  {
    name: "DELETE /control/v1/deployments/{deployment}",
    prepare: async () => ({ deployment: await newDeployment() }),
    expect: managersOnly(204),
  },
  // Activity and usage (issue 10): members read their own; naming another user is for owners and
  // admins; "other" filtering by a user of team A reads their own team, where that user has nothing.
  { name: "GET /control/v1/activity", expect: anyCaller(200) },
  {
    name: "GET /control/v1/activity?user_id={ownerId}",
    prepare: async (fx) => ({ ownerId: fx.owner.userId }),
    expect: { ...anyCaller(200), member: 403 },
  },
  { name: "GET /control/v1/activity/models", expect: anyCaller(200) },
  // The fixture response is the owner's: the member sees only their own records.
  { name: "GET /control/v1/activity/{responseId}", expect: { ...teamOnly(200), member: 404 } },
  { name: "GET /control/v1/usage/daily", expect: anyCaller(200) },
  {
    name: "GET /control/v1/usage/daily?user_id={ownerId}",
    prepare: async (fx) => ({ ownerId: fx.owner.userId }),
    expect: { ...anyCaller(200), member: 403 },
  },
  { name: "GET /control/v1/usage/summary", expect: anyCaller(200) },
  {
    name: "graphql activityRecords (userId)",
    query: `query($u: ID) { activityRecords(userId: $u) { total } }`,
    variables: (fx) => ({ u: fx.owner.userId }),
    expect: { ...anyCaller(200), member: 403, anonymous: 401 },
  },
  {
    name: "graphql activityModels",
    query: `{ activityModels }`,
    expect: anyCaller(200),
  },
  {
    name: "graphql usageDaily",
    query: `query($u: ID) { usageDaily(userId: $u) { date } }`,
    variables: (fx) => ({ u: fx.owner.userId }),
    expect: { ...anyCaller(200), member: 403 },
  },
  {
    name: "graphql usageSummary",
    query: `{ usageSummary(days: 7) { summary { totalRequests } } }`,
    expect: anyCaller(200),
  },
  // Billing (issue 10, item 3): owners and admins; "other" reads its own team's summary.
  { name: "GET /control/v1/billing/summary", expect: managersOfOwnTeam(200) },
  {
    name: "graphql billingSummary",
    query: `{ billingSummary(days: 7) { summary { totalRequests creditBalanceMicros } } }`,
    expect: managersOfOwnTeam(200),
  },
  {
    name: "graphql activityRecord",
    query: `query($id: ID!) { activityRecord(id: $id) { id costMicros } }`,
    variables: (fx) => ({ id: fx.responseId }),
    expect: { ...teamOnly(200), member: 404 },
  },

  // Billing (issue 10, items 4–6): owners and admins ("other" on their own team); the local confirm
  // link and the Stripe webhook carry their own proof, not credentials (no Stripe here: 404).
  { name: "GET /control/v1/billing/transactions", expect: managersOfOwnTeam(200) },
  {
    name: "POST /control/v1/billing/topups (without a nonce)",
    body: () => ({ amount_usd: "10.00" }),
    expect: managersOfOwnTeam(400),
  },
  {
    name: "POST /control/v1/billing/topups?nonce={nonce}",
    prepare: async () => ({ nonce: randomUUID() }),
    body: () => ({ amount_usd: "10.00" }),
    expect: managersOfOwnTeam(201),
  },
  { name: "GET /control/v1/billing/topups/local/confirm (unsigned)", expect: open(400) },
  {
    name: "GET /control/v1/billing/topups/local/confirm?session={session}&signature={signature}",
    prepare: signedConfirmLink,
    expect: open(200),
  },
  { name: "POST /control/v1/billing/stripe/webhook", body: () => ({}), expect: open(404) },
  { name: "POST /control/v1/billing/invoices", body: () => ({}), expect: managersOfOwnTeam(201) },
  {
    name: "GET /control/v1/billing/invoices/{invoiceId}",
    prepare: async (fx) => ({ invoiceId: await ownerInvoice(fx) }),
    expect: managersOnly(200),
  },
  {
    name: "graphql billingTransactions",
    query: `{ billingTransactions { nextStartingAfter } }`,
    expect: managersOfOwnTeam(200),
  },
  {
    name: "graphql createTopUp",
    query: `mutation($n: String!) { createTopUp(nonce: $n, amountUsd: "10.00") { paymentSessionId } }`,
    variables: () => ({ n: randomUUID() }),
    expect: managersOfOwnTeam(200),
  },
  { name: "graphql createInvoice", query: `mutation { createInvoice { id } }`, expect: managersOfOwnTeam(200) },
  {
    name: "graphql invoice",
    query: `query($id: ID!) { invoice(id: $id) { id } }`,
    prepare: async (fx) => ({ invoiceId: await ownerInvoice(fx) }),
    variables: (_fx, p) => ({ id: p.invoiceId }),
    expect: managersOnly(200),
  },

  // Webhook deliveries (issue 27, item 6)
  { name: "GET /control/v1/webhooks/deliveries", expect: anyCaller(200) },
  { name: "GET /control/v1/webhooks/deliveries/{deliveryId}", expect: teamOnly(200) },
  {
    name: "POST /control/v1/webhooks/deliveries/{delivery}/redeliver",
    prepare: async () => ({ delivery: await failedDelivery() }),
    expect: managersOnly(200),
  },
  {
    name: "graphql webhookDeliveries",
    query: `{ webhookDeliveries { items { id attempts { error } } } }`,
    expect: anyCaller(200),
  },
  {
    name: "graphql webhookDelivery",
    query: `query($id: ID!) { webhookDelivery(id: $id) { id status } }`,
    variables: (fx) => ({ id: fx.deliveryId }),
    expect: teamOnly(200),
  },
  {
    name: "graphql redeliverWebhook",
    query: `mutation($id: ID!) { redeliverWebhook(id: $id) { id status } }`,
    prepare: async () => ({ delivery: await failedDelivery() }),
    variables: (_fx, p) => ({ id: p.delivery }),
    expect: managersOnly(200),
  },

  // GraphQL
  {
    name: "graphql signup",
    query: `mutation($e: String!) { signup(input: { email: $e, password: "correct horse battery" }) { accessToken } }`,
    variables: () => ({ e: freshEmail("signup") }),
    expect: open(200),
  },
  {
    name: "graphql login",
    query: `mutation($e: String!) { login(input: { username: $e, password: "correct horse battery" }) { accessToken } }`,
    variables: (fx) => ({ e: fx.owner.email }),
    expect: open(200),
  },
  {
    name: "graphql forgotPassword",
    query: `mutation($e: String!) { forgotPassword(email: $e) { message } }`,
    variables: () => ({ e: freshEmail("forgot") }),
    expect: open(200),
  },
  {
    name: "graphql resetPassword",
    query: `mutation($t: String!) { resetPassword(token: $t, password: "another horse battery") { message } }`,
    prepare: resetToken,
    variables: (_fx, p) => ({ t: p.token }),
    expect: open(200),
  },
  { name: "graphql me", query: `{ me { id role } }`, expect: anyCaller(200) },
  { name: "graphql apiKeys", query: `{ apiKeys { items { id user { id } } } }`, expect: anyCaller(200) },
  {
    name: "graphql createApiKey",
    query: `mutation { createApiKey(input: { name: "g" }) { id } }`,
    expect: anyCaller(200),
  },
  {
    name: "graphql updateApiKey (a member's key)",
    query: `mutation($id: String!) { updateApiKey(id: $id, input: { tpmLimit: 1000 }) { id tpmLimit } }`,
    prepare: async (fx) => ({ key: (await createTestApiKey(server.url, fx.member.token)).id }),
    variables: (_fx, p) => ({ id: p.key }),
    expect: teamOnly(200),
  },
  {
    name: "graphql revokeApiKey (a member's key)",
    query: `mutation($id: String!) { revokeApiKey(id: $id) }`,
    prepare: async (fx) => ({ key: (await createTestApiKey(server.url, fx.member.token)).id }),
    variables: (_fx, p) => ({ id: p.key }),
    expect: teamOnly(200),
  },
  {
    name: "graphql team",
    query: `{ team { id role members { userId user { id } } } }`,
    expect: anyCaller(200),
  },
  {
    name: "graphql updateTeam",
    query: `mutation { updateTeam(input: { name: "Renamed" }) { id } }`,
    expect: managersOfOwnTeam(200),
  },
  {
    name: "graphql inviteMember",
    query: `mutation($e: String!) { inviteMember(input: { email: $e }) { inviteToken } }`,
    variables: () => ({ e: freshEmail() }),
    expect: managersOfOwnTeam(200),
  },
  {
    name: "graphql updateMember (a member, to member)",
    query: `mutation($id: ID!) { updateMember(userId: $id, input: { role: "member" }) { userId } }`,
    variables: (fx) => ({ id: fx.member.userId }),
    expect: managersOnly(200),
  },
  {
    name: "graphql removeMember (a fresh member)",
    query: `mutation($id: ID!) { removeMember(userId: $id) }`,
    prepare: async (fx) => ({ member: (await joinTeam(server.url, fx.owner)).userId }),
    variables: (_fx, p) => ({ id: p.member }),
    expect: managersOnly(200),
  },
  {
    name: "graphql acceptInvitation (an invitation for someone else)",
    query: `mutation($t: String!) { acceptInvitation(token: $t) { accessToken } }`,
    prepare: async (fx) => ({ token: (await invite(server.url, fx.owner.token, freshEmail())).body.invite_token }),
    variables: (_fx, p) => ({ t: p.token }),
    expect: anyCaller(403),
  },
  {
    name: "graphql inviteMember (as owner)",
    query: `mutation($e: String!) { inviteMember(input: { email: $e, role: "owner" }) { inviteToken } }`,
    variables: () => ({ e: freshEmail() }),
    expect: { ...managersOfOwnTeam(200), admin: 403 },
  },
  {
    name: "graphql updateMember (a member, to owner)",
    query: `mutation($id: ID!) { updateMember(userId: $id, input: { role: "owner" }) { userId } }`,
    prepare: async (fx) => ({ member: (await joinTeam(server.url, fx.owner)).userId }),
    variables: (_fx, p) => ({ id: p.member }),
    expect: { ...managersOnly(200), admin: 403 },
  },
  {
    name: "graphql updateMember (the last owner, to admin)",
    query: `mutation($id: ID!) { updateMember(userId: $id, input: { role: "admin" }) { userId } }`,
    prepare: soleOwner,
    variables: (_fx, p) => ({ id: p.owner }),
    expect: { ...managersOnly(409), admin: 403 },
  },
  {
    name: "graphql removeMember (the last owner)",
    query: `mutation($id: ID!) { removeMember(userId: $id) }`,
    prepare: soleOwner,
    variables: (_fx, p) => ({ id: p.owner }),
    expect: { ...managersOnly(409), admin: 403 },
  },
  // OAuth over GraphQL, as over REST (no provider is configured here).
  {
    name: "graphql oauthAuthorize",
    query: `mutation { oauthAuthorize(provider: "nope") { state } }`,
    expect: open(404),
  },
  {
    name: "graphql oauthComplete",
    query: `mutation { oauthComplete(input: { provider: "nope", code: "c", state: "s" }) { accessToken } }`,
    expect: open(400),
  },
  {
    name: "graphql linkOAuth",
    query: `mutation { linkOAuth(input: { provider: "nope", code: "c", state: "s" }) { subject } }`,
    expect: anyCaller(400),
  },
  { name: "graphql linkedAccounts", query: `{ linkedAccounts { items { provider } } }`, expect: anyCaller(200) },
  // The data plane over GraphQL: every caller's, reaching only their team's resources.
  { name: "graphql models", query: `{ models { id } }`, expect: anyCaller(200) },
  {
    name: "graphql model",
    query: `query($id: String!) { model(id: $id) { id } }`,
    variables: () => ({ id: CHAT_MODEL }),
    expect: anyCaller(200),
  },
  { name: "graphql responses", query: `{ responses { hasMore } }`, expect: anyCaller(200) },
  {
    name: "graphql cancelResponse",
    query: `mutation($id: ID!) { cancelResponse(id: $id) { id } }`,
    variables: (fx) => ({ id: fx.responseId }),
    expect: teamOnly(200),
  },
  { name: "graphql streams", query: `{ streams { id } }`, expect: anyCaller(200) },
  { name: "graphql createStream", query: `mutation { createStream(name: "matrix") { id } }`, expect: anyCaller(200) },
  {
    name: "graphql updateStream",
    query: `mutation($id: ID!) { updateStream(id: $id, name: "renamed") { id } }`,
    variables: (fx) => ({ id: fx.streamId }),
    expect: teamOnly(200),
  },
  { name: "graphql batches", query: `{ batches { id } }`, expect: anyCaller(200) },
  {
    name: "graphql cancelBatch",
    query: `mutation($id: ID!) { cancelBatch(id: $id) { id } }`,
    variables: (fx) => ({ id: fx.batchId }),
    expect: teamOnly(200),
  },
  { name: "graphql completionEvents", query: `{ completionEvents { hasMore } }`, expect: anyCaller(200) },
  {
    name: "graphql createDecision",
    query: `mutation { createDecision(model: "${CHAT_MODEL}", state: "Once", questions: { q: { type: "noul" } }) { model } }`,
    expect: anyCaller(200),
  },
  {
    name: "graphql response",
    query: `query($id: ID!) { response(id: $id) { id } }`,
    variables: (fx) => ({ id: fx.responseId }),
    expect: teamOnly(200),
  },
  {
    name: "graphql stream",
    query: `query($id: ID!) { stream(id: $id) { id } }`,
    variables: (fx) => ({ id: fx.streamId }),
    expect: teamOnly(200),
  },
  {
    name: "graphql batch",
    query: `query($id: ID!) { batch(id: $id) { id } }`,
    variables: (fx) => ({ id: fx.batchId }),
    expect: teamOnly(200),
  },
  { name: "graphql modelCatalog", query: `{ modelCatalog { models { id ownership } } }`, expect: anyCaller(200) },
  { name: "graphql searchModels", query: `{ searchModels(q: "tiny") { items { id } } }`, expect: anyCaller(200) },
  {
    name: "graphql createCustomModel",
    query: `mutation($m: String!) { createCustomModel(input: { modelId: $m, architecture: "llama" }) { id } }`,
    variables: () => ({ m: `matrix-${randomUUID()}` }),
    expect: managersOfOwnTeam(200),
  },
  {
    name: "graphql deleteCustomModel",
    query: `mutation($m: String!) { deleteCustomModel(modelId: $m) }`,
    prepare: async () => ({ model: await newCustomModel() }),
    variables: (_fx, p) => ({ m: p.model }),
    expect: managersOnly(200),
  },
  {
    name: "graphql requestDeployment",
    query: `mutation($m: String!) { requestDeployment(input: { modelId: $m }) { ok } }`,
    variables: (fx) => ({ m: fx.customModelId }),
    expect: managersOnly(200),
  },
  { name: "graphql deployments", query: `{ deployments { items { id status } } }`, expect: anyCaller(200) },
  {
    name: "graphql createDeployment",
    query: `mutation { createDeployment(input: { name: "g", modelSource: "platform", modelId: "no-such-model" }) { id } }`,
    expect: managersOfOwnTeam(200),
  },
  {
    name: "graphql deleteDeployment",
    query: `mutation($id: ID!) { deleteDeployment(id: $id) }`,
    prepare: async () => ({ deployment: await newDeployment() }),
    variables: (_fx, p) => ({ id: p.deployment }),
    expect: managersOnly(200),
  },
];

/** The status `caller` gets from `row` (GraphQL: the first error's `status_code`, else 200). */
async function call(row: Row, caller: Caller): Promise<number> {
  const token = caller === "anonymous" ? undefined : f[caller].token;
  const params = row.prepare ? await row.prepare(f) : {};
  if (row.query !== undefined) {
    const res = await http(server.url, "POST", "/graphql", {
      token,
      body: { query: row.query, variables: row.variables?.(f, params) },
    });
    if (res.status !== 200) return res.status;
    return res.body.errors?.[0]?.extensions?.status_code ?? 200;
  }
  const [method, template] = row.name.split(" ");
  const fixtureIds: Params = {
    responseId: f.responseId,
    streamId: f.streamId,
    batchId: f.batchId,
    deliveryId: f.deliveryId,
  };
  const path = template.replace(/\{(\w+)\}/g, (_m, key: string) => {
    const value = params[key] ?? fixtureIds[key];
    if (value === undefined) throw new Error(`${row.name}: no value for {${key}}`);
    return value;
  });
  const res = await http(server.url, method, path, { token, body: row.body?.(f, params) });
  return res.status;
}

beforeAll(async () => {
  // Throttling of login and forgot-password is tested on its own (password-reset.test.ts); here
  // one address makes every call, so the limit is lifted.
  // Each row creates what it acts on, under one owner: more deployments and custom models than a team may hold by default.
  server = await startTestServer({ authThrottleMax: 100_000, teamMaxDeployments: 1000, teamMaxCustomModels: 1000 });
  const owner = await createTestUser(server.url);
  const admin = await joinTeam(server.url, owner, "admin");
  const member = await joinTeam(server.url, owner, "member");
  const other = await createTestUser(server.url);
  f = { owner, admin, member, other, responseId: "", streamId: "", batchId: "", customModelId: "", deliveryId: "" };
  f.responseId = await newResponse();
  const stream = await http(server.url, "POST", "/v1/streams", { token: owner.token, body: { name: "A's" } });
  f.streamId = stream.body.id;
  const batch = await http(server.url, "POST", "/v1/batches", {
    token: owner.token,
    body: { requests: [{ body: chat }] },
  });
  f.batchId = batch.body.id;
  f.customModelId = await newCustomModel();
  f.deliveryId = await failedDelivery();
}, 60_000);
afterAll(() => server.close());

test("when a route is in a REST table, then the matrix has a row for it", () => {
  const covered = new Set<string>();
  for (const r of rows.filter((row) => row.query === undefined)) {
    const [method, template] = r.name.split(" ");
    const path = template.split("?")[0]; // query parameters are no part of a route
    covered.add(`${method} ${path.replace(/\{\w+\}/g, "{}").replace(`/${CHAT_MODEL}`, "/{}")}`);
  }
  const declared = [...dataPlaneRoutes, ...controlRoutes].map(
    (r) => `${r.method.toUpperCase()} ${r.path.replace(/:\w+/g, "{}")}`,
  );
  expect(declared.filter((d) => !covered.has(d))).toEqual([]);
});

test("when an operation is in the GraphQL schema, then the matrix has a row for it", () => {
  const schema = buildSchema(readFileSync(new URL("../schema.graphql", import.meta.url), "utf8"));
  const covered = new Set(rows.filter((row) => row.query !== undefined).map((row) => row.name.split(" ")[1]));
  // Subscriptions run over graphql-ws (events-subscription.test.ts checks their team scoping).
  const declared = [schema.getQueryType(), schema.getMutationType()].flatMap((type) =>
    Object.keys(type?.getFields() ?? {}),
  );
  expect(declared.filter((name) => !covered.has(name))).toEqual([]);
});

test.each(rows.map((r) => [r.name, r] as const))("%s", async (_name, row) => {
  const actual = {} as Statuses;
  for (const caller of CALLERS) actual[caller] = await call(row, caller);
  expect(actual).toEqual(row.expect);
});
