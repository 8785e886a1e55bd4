/**
 * An example request body for every operation of the OpenAPI document that takes JSON (issue 28,
 * item 5), by `operationId`: shown on the reference page, and sent as they are by
 * test/openapi-conformance.test.ts, which expects each to fit its schema and never to be refused
 * with 400 (a made-up reset token or OAuth provider aside). Models are the default catalog's.
 */

const CHAT = "tinystories-260k";

export const requestExamples: Record<string, unknown> = {
  postV1Responses: { model: CHAT, input: "Once upon a time", max_output_tokens: 16 },
  postV1ChatCompletions: {
    model: CHAT,
    messages: [
      { role: "system", content: "You tell short stories." },
      { role: "user", content: "Once upon a time" },
    ],
    max_tokens: 16,
  },
  postV1Embeddings: { model: "tinystories-260k-embed", input: ["Once upon a time", "The end"] },
  postV1Messages: { model: CHAT, max_tokens: 16, messages: [{ role: "user", content: "Once upon a time" }] },
  postV1Decisions: {
    model: CHAT,
    state: "Tom found a lost puppy and took it home.",
    questions: {
      happy: { type: "yes_no", instructions: "Does the story end happily?" },
      topic: { type: "choice", criteria: { animals: "about animals", space: "about space" } },
    },
  },
  postV1Streams: { name: "support-tickets" },
  patchV1StreamsStreamId: { name: "support-tickets (old)" },
  postV1Batches: {
    requests: [
      {
        custom_id: "story-1",
        body: { model: CHAT, messages: [{ role: "user", content: "Once upon a time" }], max_tokens: 16 },
      },
    ],
  },
  postControlV1AuthSignup: { email: "ada@example.com", password: "correct horse battery", name: "Ada" },
  postControlV1AuthLogin: { username: "ada@example.com", password: "correct horse battery" },
  postControlV1AuthApiKeys: {
    name: "ci",
    budget_micros: 10_000_000,
    budget_period: "month",
    rpm_limit: 60,
    allowed_models: [CHAT],
    expires_at: "2099-01-01T00:00:00Z",
  },
  // Raise the budget, lift the rate limit, keep the rest (owners and admins; members only tighten).
  patchControlV1AuthApiKeysKeyId: { budget_micros: 25_000_000, budget_period: "month", rpm_limit: null },
  postControlV1AuthOauthComplete: { provider: "acme", code: "the-code-from-the-redirect", state: "the-state" },
  postControlV1AuthLinkOauth: { provider: "acme", code: "the-code-from-the-redirect", state: "the-state" },
  patchControlV1TeamsMe: { name: "Analytical Engines" },
  postControlV1TeamsMeMembers: { email: "grace@example.com", role: "member" },
  patchControlV1TeamsMeMembersUserId: { role: "admin" },
  postControlV1AuthForgotPassword: { email: "ada@example.com" },
  postControlV1AuthResetPassword: { token: "the-token-from-the-email", password: "another horse battery" },
  postControlV1ModelsCustom: { model_id: "acme/stories", architecture: "llama", base_model_id: CHAT },
  postControlV1ModelsRequestDeployment: { model_id: "acme/stories" },
  postControlV1Deployments: { name: "stories", model_source: "platform", model_id: CHAT, min_replicas: 1 },
  postControlV1BillingTopups: { amount_usd: "25.00" },
  postControlV1BillingInvoices: { period_start: "2025-01-01T00:00:00Z", period_end: "2025-02-01T00:00:00Z" },
  postGraphql: { query: "query Me { me { id email role } }", operationName: "Me" },
};
