/**
 * Zod shapes of Switchyard's own resources (accounts, keys, teams, models, deployments, activity,
 * usage, billing, streams, batches, events, decisions) for the OpenAPI document (issue 13, item 1);
 * the protocol answers and the `components.schemas` list are in `openapi-shapes.ts`.
 */
import { z } from "zod";
import type * as presenters from "./control.presenters.js";
import { type Fits, type Serialized, int } from "./openapi-fits.js";

// The answers below are held to the real ones by test/openapi-operations.test.ts (one valid
// request per operation, its answer validated against the document), not by `Fits`.

const id = () => z.string().meta({ description: "uuid" });
const time = () => z.string().meta({ description: "ISO 8601 date-time" });
const nullableTime = () => time().nullable();
const micros = () => int().meta({ description: "USD micros (1,000,000 = $1)" });
export const messageShape = z.object({ message: z.string() });

/** A user as the control plane answers it (`UserResponse`; DESIGN §3 Accounts). */
export const userShape = z.object({
  id: id(),
  username: z.string(),
  email: z.string(),
  name: z.string(),
  role: z.string(),
  team_id: id(),
  created_at: time(),
});

/** `LoginResponse`: login, OAuth completion, accepting an invitation. */
export const loginShape = z.object({
  access_token: z.string(),
  token_type: z.literal("bearer"),
  expires_in: int().meta({ description: "seconds" }),
  user: userShape,
});

/** `SignupResponse`. */
export const signupShape = loginShape.extend({ message: z.string(), next_step: z.literal("login") });

/** A key's policy and its spend in the budget's current window (issue 29, item 1). */
const apiKeyPolicyShape = {
  budget_micros: micros().nullable().meta({ description: "USD micros per budget_period; null: no budget" }),
  budget_period: z.enum(["day", "week", "month", "total"]).nullable(),
  spent_micros: micros().nullable().meta({ description: "spent in the current period; null without a budget" }),
  remaining_micros: micros().nullable().meta({ description: "left in the current period; null without a budget" }),
  budget_resets_at: nullableTime().meta({ description: "when the period starts over; null for total" }),
  rpm_limit: int().nullable(),
  tpm_limit: int().nullable(),
  allowed_models: z.array(z.string()).meta({ description: '["*"]: every model' }),
};

/** An API key as listed (never its plaintext). */
export const apiKeyShape = z.object({
  id: id(),
  name: z.string(),
  prefix: z.string(),
  created_at: time(),
  last_used_at: nullableTime(),
  expires_at: nullableTime(),
  revoked_at: nullableTime(),
  ...apiKeyPolicyShape,
});

/** `ApiKeyCreateResponse`: the plaintext key, shown this once, and the key's policy. */
export const apiKeyCreatedShape = z.object({
  id: id(),
  name: z.string(),
  plaintext: z.string(),
  prefix: z.string(),
  created_at: time(),
  expires_at: nullableTime(),
  ...apiKeyPolicyShape,
});

/** A linked OpenID Connect identity (`LinkOAuthResponse` adds `message`). */
export const linkedAccountShape = z.object({
  provider: z.string(),
  subject: z.string(),
  email: z.string().nullable(),
  created_at: time(),
});

/** The OpenID Connect authorize helper's answer. */
export const oauthAuthorizeShape = z.object({
  provider: z.string(),
  authorization_url: z.string(),
  state: z.string(),
  expires_at: time(),
});

/** A team member (an invited one is `is_active: false` until they sign up or accept). */
export const memberShape = z.object({
  user_id: id(),
  email: z.string(),
  role: z.enum(["owner", "admin", "member"]),
  is_active: z.boolean(),
  created_at: time(),
});

/** The caller's team. */
export const teamShape = z.object({
  id: id(),
  name: z.string(),
  email_domain: z.string().nullable(),
  role: z.string().meta({ description: "the caller's role" }),
  zero_data_retention_enabled: z.boolean(),
  has_webhook_signing_secret: z.boolean(),
  members: z.array(memberShape),
});

/** A model of the control plane's catalog (platform or the team's custom model). */
export const catalogModelShape = z.object({
  id: z.string(),
  display_name: z.string(),
  provider: z.string(),
  modality: z.string(),
  context_tokens: int(),
  input_per_million_usd: z.number(),
  output_per_million_usd: z.number(),
  platform_status: z.string(),
  deployed_on_platform: z.boolean(),
  ownership: z.enum(["platform", "custom"]),
  deploy_status: z.string(),
  architecture: z.string().nullable(),
});

/** A search hit over the catalog. */
export const modelSearchItemShape = z.object({
  id: z.string(),
  display_name: z.string(),
  provider: z.string(),
  modality: z.string(),
  catalog_status: z.string(),
  deployed_on_platform: z.boolean(),
  source: z.string(),
});

/** A deployment. */
export const deploymentShape = z.object({
  id: id(),
  name: z.string(),
  model_source: z.enum(["platform", "custom"]),
  model_id: z.string(),
  region: z.string().nullable(),
  performance: z.string().nullable(),
  min_replicas: int(),
  max_replicas: int(),
  notes: z.string().nullable(),
  status: z.string(),
  status_reason: z.string().nullable(),
  activated_at: nullableTime(),
  created_at: time(),
  updated_at: time(),
});

const activityBase = {
  id: id(),
  created_at: time(),
  completed_at: nullableTime(),
  status: z.enum(["pending", "running", "completed", "failed", "cancelled"]),
  model: z.string(),
  custom_id: z.string().nullable(),
  type: z.enum(["standalone", "batch", "stream"]),
  batch_id: id().nullable(),
  stream_id: id().nullable(),
  prompt_tokens: int(),
  completion_tokens: int(),
  total_tokens: int(),
  cached_prompt_tokens: int(),
  cost_micros: micros(),
};

/** A page of activity records. */
export const activityListShape = z.object({
  items: z.array(
    z.object({
      ...activityBase,
      error: z.unknown(),
      api_key_id: id().nullable(),
      api_key_name: z.string().nullable(),
      api_key_prefix: z.string().nullable(),
    }),
  ),
  page: int(),
  page_size: int(),
  total: int(),
});

/** One activity record with its request and result (null under zero data retention). */
export const activityDetailShape = z.object({
  ...activityBase,
  body_json: z.unknown(),
  result_json: z.unknown(),
  error_json: z.unknown(),
});

/** `GET /control/v1/activity/models`: the model names the caller's records use. */
export const activityModelsShape = z.array(z.string());

const usageTotals = {
  prompt_tokens: int(),
  completion_tokens: int(),
  total_tokens: int(),
  cached_prompt_tokens: int(),
};

/** Usage by day and model. */
export const usageDailyShape = z.object({
  items: z.array(
    z.object({ date: z.string(), model: z.string(), ...usageTotals, request_count: int(), cost_micros: micros() }),
  ),
});

const summaryTotals = {
  total_prompt_tokens: int(),
  total_completion_tokens: int(),
  total_tokens: int(),
  total_cached_prompt_tokens: int(),
  total_requests: int(),
};

/** Usage totals and by model. */
export const usageSummaryShape = z.object({
  summary: z.object({ ...summaryTotals, total_cost_micros: micros() }),
  by_model: z.array(
    z.object({ model: z.string(), service_tier: z.string(), ...summaryTotals, total_cost_micros: micros() }),
  ),
});

/** Billing totals, the credit balance, and by model with the prices applied. */
export const billingSummaryShape = z.object({
  summary: z.object({
    days: int(),
    ...summaryTotals,
    estimated_cost_micros: micros(),
    credit_balance_micros: micros(),
  }),
  by_model: z.array(
    z.object({
      model: z.string(),
      service_tier: z.string(),
      ...usageTotals,
      total_requests: int(),
      cost_micros: micros(),
      pricing: z.unknown(),
    }),
  ),
});

/** A page of credit ledger transactions, newest first. */
export const transactionsShape = z.object({
  items: z.array(
    z.object({
      id: id(),
      created_at: time(),
      type: z.string(),
      amount_micros: micros(),
      balance_after_micros: micros(),
      description: z.string().nullable(),
      external_provider: z.string().nullable(),
      external_payment_id: z.string().nullable(),
    }),
  ),
  next_starting_after: id().nullable(),
});

/** A top-up's payment session: where to pay. */
export const topUpShape = z.object({ payment_session_id: z.string(), checkout_url: z.string() });

/** The local provider's confirm link, followed. */
export const topUpConfirmShape = z.object({
  payment_session_id: z.string(),
  status: z.string(),
  amount_micros: micros(),
  transaction_id: id().nullable(),
});

/** An invoice. */
export const invoiceShape = z.object({
  id: id(),
  payment_invoice_id: z.string(),
  hosted_invoice_url: z.string().nullable(),
  amount_cents: int(),
  currency: z.string(),
  period_start: time(),
  period_end: time(),
  status: z.string(),
  line_items: z.array(z.unknown()),
});

/** A stream as listed. */
export const streamShape = z.object({
  id: id(),
  name: z.string(),
  window: z.string(),
  status: z.string(),
  created_at: time(),
  updated_at: time(),
});

/** A stream with its counters. */
export const streamDetailShape = streamShape.extend({
  cancelled_at: nullableTime(),
  archived_at: nullableTime(),
  total_items: int(),
  pending_items: int(),
  running_items: int(),
  completed_items: int(),
  failed_items: int(),
  cancelled_items: int(),
  completion_ratio: z.number(),
  total_prompt_tokens: int(),
  total_completion_tokens: int(),
  total_tokens: int(),
  total_cost_micros: micros(),
  last_completion_at: nullableTime(),
  latest_completion_id: id().nullable(),
});

/** A batch with its progress (`request_counts`) and totals. */
export const batchShape = z.object({
  id: id(),
  object: z.literal("batch"),
  status: z.string(),
  window: z.string(),
  request_count: int(),
  request_counts: z.object({
    total: int(),
    pending: int(),
    running: int(),
    completed: int(),
    failed: int(),
    cancelled: int(),
  }),
  metadata: z.record(z.string(), z.unknown()).nullable(),
  output_url: z.string(),
  created_at: time(),
  updated_at: time(),
  completed_at: nullableTime(),
  cancelled_at: nullableTime(),
  expires_at: time(),
  total_prompt_tokens: int(),
  total_completion_tokens: int(),
  total_tokens: int(),
  total_cost_micros: micros(),
});

/** A batch's results, in input order (`results` null until the batch ends). */
export const batchResultsShape = z.object({
  batch_id: id(),
  status: z.string(),
  output_url: z.string(),
  completed_at: nullableTime(),
  results: z
    .array(
      z.object({
        custom_id: z.string().nullable(),
        status: z.string(),
        result_json: z.unknown(),
        error_json: z.unknown(),
      }),
    )
    .nullable(),
});

/** A completion event of the feed (spec: Resources, response event). */
export const completionEventShape = z.object({
  completion_id: id(),
  response_id: id(),
  custom_id: z.string().nullable(),
  stream_id: id().nullable(),
  batch_id: id().nullable(),
  model: z.string(),
  status: z.string(),
  result: z.unknown(),
  error: z.unknown(),
  prompt_tokens: int(),
  completion_tokens: int(),
  total_tokens: int(),
  cost_micros: micros(),
  completed_at: time(),
});

/** `POST /v1/decisions`: a probability per question (the answer's shape varies by question type). */
export const decisionShape = z.object({
  model: z.string(),
  // An answer says its question's type; a `yes_no` question answers `yes_no` (issue 28, item 5: the fuzzer found it missing).
  answers: z.record(z.string(), z.object({ type: z.enum(["choice", "score", "noul", "yes_no"]) }).loose()),
  usage: z.object({ input_tokens: int(), output_tokens: int() }),
});

// The control plane's presenters, held to their shapes at compile time as well.
export type UserFits = Fits<Serialized<ReturnType<typeof presenters.userJson>>, z.output<typeof userShape>>;
export type MemberFits = Fits<Serialized<ReturnType<typeof presenters.memberJson>>, z.output<typeof memberShape>>;
export type TeamFits = Fits<Serialized<Awaited<ReturnType<typeof presenters.teamJson>>>, z.output<typeof teamShape>>;
export type ApiKeyFits = Fits<Serialized<ReturnType<typeof presenters.apiKeyJson>>, z.output<typeof apiKeyShape>>;
export type ApiKeyCreatedFits = Fits<
  Serialized<ReturnType<typeof presenters.createdApiKeyJson>>,
  z.output<typeof apiKeyCreatedShape>
>;
export type ActivityListFits = Fits<
  Serialized<ReturnType<typeof presenters.activityListJson>>,
  z.output<typeof activityListShape>
>;
export type ActivityDetailFits = Fits<
  Serialized<ReturnType<typeof presenters.activityDetailJson>>,
  z.output<typeof activityDetailShape>
>;
export type DeploymentFits = Fits<
  Serialized<ReturnType<typeof presenters.deploymentJson>>,
  z.output<typeof deploymentShape>
>;
