/**
 * Zod shapes of the main data-plane answers and of the error envelope, for the OpenAPI document
 * (issue 13, item 1). The request schemas are the services' own; the answers are built by plain
 * functions, so their shapes are written here, and each is held to the function that builds the
 * answer at compile time (`Fits` below: a field renamed or retyped there fails `tsc` here).
 * Objects are documented open (extra fields allowed), as clients should read them.
 */
import { z } from "zod";
import type { ModelDto } from "../services/models/model-catalog.service.js";
import type { anthropicMessage } from "../services/inference/protocols/anthropic-messages.protocol.js";
import type { chatCompletion } from "../services/inference/protocols/openai-chat.protocol.js";
import type { embeddingList } from "../services/inference/protocols/openai-embeddings.protocol.js";
import type { ResponseObject } from "../services/inference/protocols/openai-responses.protocol.js";
import type { ResponseList } from "../services/inference/responses/responses.service.js";
import type { ErrorEnvelope } from "./error-envelope.js";

import { type Fits, int } from "./openapi-fits.js";
import {
  activityDetailShape,
  activityListShape,
  activityModelsShape,
  apiKeyCreatedShape,
  apiKeyShape,
  batchResultsShape,
  batchShape,
  billingSummaryShape,
  catalogModelShape,
  completionEventShape,
  decisionShape,
  deploymentShape,
  invoiceShape,
  linkedAccountShape,
  loginShape,
  memberShape,
  messageShape,
  modelSearchItemShape,
  oauthAuthorizeShape,
  signupShape,
  streamDetailShape,
  streamShape,
  teamShape,
  topUpConfirmShape,
  topUpShape,
  transactionsShape,
  usageDailyShape,
  usageSummaryShape,
  userShape,
} from "./openapi-resource-shapes.js";
import { webhookDeliveryListShape, webhookDeliveryShape } from "./openapi-webhook-shapes.js";

/**
 * spec: Errors — `{status_code, detail, extra?}` on every 4xx and 5xx, with the client's dialect
 * beside it (issue 27, item 1): `error` always, `type` on `/v1/messages`.
 */
export const errorEnvelopeShape = z
  .object({
    status_code: int().min(400).max(599),
    detail: z.string(),
    extra: z.union([z.record(z.string(), z.unknown()), z.array(z.unknown()), z.null()]).optional(),
    type: z
      .literal("error")
      .optional()
      .meta({ description: "On `/v1/messages` only (Anthropic's error shape): always `error`." }),
    error: z
      .object({
        message: z.string().meta({ description: "The same sentence as `detail`." }),
        type: z.string().meta({
          description:
            "The client's error type: OpenAI's (`invalid_request_error`, `authentication_error`, `insufficient_quota`, `permission_error`, `rate_limit_error`, `server_error`), or on `/v1/messages` Anthropic's (`invalid_request_error`, `authentication_error`, `billing_error`, `permission_error`, `not_found_error`, `conflict_error`, `request_too_large`, `rate_limit_error`, `api_error`, `overloaded_error`, `timeout_error`).",
        }),
        code: z
          .string()
          .nullable()
          .optional()
          .meta({ description: "OpenAI shape only: a stable machine code (`model_not_found`, `invalid_api_key`, …)." }),
        param: z
          .string()
          .nullable()
          .optional()
          .meta({ description: "OpenAI shape only: the request field at fault (the first in `extra`), or null." }),
      })
      .optional()
      .meta({
        description:
          "The error as the official clients read it: OpenAI's `{message, type, code, param}` on every path but `/v1/messages`, Anthropic's `{type, message}` there.",
      }),
  })
  .meta({
    description:
      "The error envelope: every 4xx and 5xx answer (spec: Errors), with the client's error object beside it.",
  });
export type ErrorEnvelopeFits = Fits<
  ErrorEnvelope & { extra?: Record<string, unknown> },
  z.output<typeof errorEnvelopeShape>
>;

/** `GET /v1/health`, `/v1/health/ready`: an object of string to string. */
export const healthShape = z.record(z.string(), z.string());

/** `GET /v1/auth/me` (spec: Current user). */
export const currentUserShape = z.object({ username: z.string(), role: z.string() });

const supported = z.object({ supported: z.boolean() });

/** spec: Model (data plane list item). */
export const modelShape = z.object({
  id: z.string(),
  object: z.literal("model"),
  created: int().meta({ description: "Unix seconds" }),
  owned_by: z.string(),
  display_name: z.string(),
  modality: z.string(),
  capabilities: z.object({
    image_input: supported,
    pdf_input: supported,
    thinking: z.object({ supported: z.boolean(), types: z.object({ enabled: supported, adaptive: supported }) }),
    tools: supported,
    dimensions: int().nullable(),
    structured_outputs: z.object({
      supported: z.boolean(),
      modes: z.array(z.enum(["json_object", "json_schema"])),
    }),
  }),
  context_tokens: int(),
  provider: z.string(),
  pricing: z.object({
    input_per_million_usd: z.number(),
    output_per_million_usd: z.number(),
    cached_input_per_million_usd: z.number(),
  }),
  released: z.string(),
});
export type ModelFits = Fits<ModelDto, z.output<typeof modelShape>>;

/** `GET /v1/models` (without `anthropic-version`; with it, Anthropic's `{data, first_id, last_id, has_more}`). */
export const modelListShape = z.object({ object: z.literal("list"), data: z.array(modelShape) });

/** OpenAI `chat.completion`. */
/** One content token's log-probability (issue 26, item 3): natural log, UTF-8 bytes, the most likely alternatives. */
const tokenAlternative = z.object({ token: z.string(), logprob: z.number(), bytes: z.array(z.number().int()) });
const tokenLogprob = tokenAlternative.extend({ top_logprobs: z.array(tokenAlternative) });

export const chatCompletionShape = z.object({
  id: z.string(),
  object: z.literal("chat.completion"),
  created: int().meta({ description: "Unix seconds" }),
  model: z.string(),
  choices: z.array(
    z.object({
      index: int(),
      message: z.object({
        role: z.literal("assistant"),
        content: z.string().nullable(),
        refusal: z.string().nullable(),
        annotations: z.array(z.unknown()),
        tool_calls: z
          .array(
            z.object({
              id: z.string().meta({ description: "call_…" }),
              type: z.literal("function"),
              function: z.object({ name: z.string(), arguments: z.string().meta({ description: "JSON text" }) }),
            }),
          )
          .optional()
          .meta({
            description:
              "The calls the answer makes, in order: one or more with parallel_tool_calls (the default), " +
              "one at most without it, exactly one for a named function; streamed, each under its own index",
          }),
      }),
      logprobs: z
        .object({ content: z.array(tokenLogprob).nullable(), refusal: z.null() })
        .nullable()
        .meta({ description: "With logprobs: true; null otherwise and for a tool call" }),
      finish_reason: z.enum(["stop", "length", "tool_calls"]),
    }),
  ),
  usage: z.object({
    prompt_tokens: int(),
    completion_tokens: int(),
    total_tokens: int(),
    prompt_tokens_details: z.object({ cached_tokens: int(), audio_tokens: int() }),
    completion_tokens_details: z.record(z.string(), int()),
  }),
  service_tier: z.string(),
  system_fingerprint: z.string().nullable(),
});
export type ChatCompletionFits = Fits<ReturnType<typeof chatCompletion>, z.output<typeof chatCompletionShape>>;

/** spec: Response (the Responses API object). */
export const responseShape = z.object({
  id: z.string(),
  object: z.literal("response"),
  created_at: int().meta({ description: "Unix seconds" }),
  model: z.string(),
  status: z.enum(["in_progress", "completed", "incomplete", "failed", "cancelled"]),
  incomplete_details: z.object({ reason: z.literal("max_output_tokens") }).nullable(),
  output: z.array(
    z.union([
      z.object({
        type: z.literal("message"),
        id: z.string(),
        role: z.literal("assistant"),
        status: z.enum(["completed", "incomplete"]),
        content: z.array(
          z.object({
            type: z.literal("output_text"),
            text: z.string(),
            annotations: z.array(z.unknown()),
            logprobs: z
              .array(tokenLogprob)
              .optional()
              .meta({ description: 'With include ["message.output_text.logprobs"]: one entry per token' }),
          }),
        ),
      }),
      z.object({
        type: z.literal("function_call"),
        id: z.string().meta({ description: "fc_…" }),
        call_id: z.string().meta({ description: "call_…" }),
        name: z.string(),
        arguments: z.string().meta({ description: "JSON text" }),
        status: z.literal("completed"),
      }),
    ]),
  ),
  error: z.object({ code: z.string(), message: z.string() }).nullable(),
  usage: z
    .object({
      input_tokens: int(),
      output_tokens: int(),
      total_tokens: int(),
      input_tokens_details: z.object({ cached_tokens: int() }),
      output_tokens_details: z.object({ reasoning_tokens: int() }),
    })
    .nullable(),
  service_tier: z.enum(["default", "flex"]),
  previous_response_id: z
    .string()
    .optional()
    .meta({ description: "The response this one continues (present only when the request named one)." }),
});
export type ResponseFits = Fits<ResponseObject, z.output<typeof responseShape>>;

/** `GET /v1/responses`: `{object: list, data: [response list item], has_more}`. */
export const responseListShape = z.object({
  object: z.literal("list"),
  data: z.array(
    z.object({
      id: z.string(),
      object: z.literal("response"),
      created_at: int(),
      model: z.string(),
      status: z.string(),
    }),
  ),
  has_more: z.boolean(),
});
export type ResponseListFits = Fits<ResponseList, z.output<typeof responseListShape>>;

/** OpenAI embeddings `list` (`embedding` is base64 little-endian float32 with `encoding_format: base64`). */
export const embeddingListShape = z.object({
  object: z.literal("list"),
  data: z.array(
    z.object({ object: z.literal("embedding"), index: int(), embedding: z.union([z.array(z.number()), z.string()]) }),
  ),
  model: z.string(),
  usage: z.object({ prompt_tokens: int(), total_tokens: int() }),
});
export type EmbeddingListFits = Fits<ReturnType<typeof embeddingList>, z.output<typeof embeddingListShape>>;

/** Anthropic `message`. */
export const anthropicMessageShape = z.object({
  id: z.string(),
  type: z.literal("message"),
  role: z.literal("assistant"),
  model: z.string(),
  content: z
    .array(
      z.union([
        z.object({ type: z.literal("text"), text: z.string() }),
        z.object({
          type: z.literal("tool_use"),
          id: z.string().meta({ description: "toolu_…" }),
          name: z.string(),
          input: z.record(z.string(), z.unknown()),
        }),
      ]),
    )
    .meta({
      description:
        "A text block, then one tool_use block per call (several unless tool_choice.disable_parallel_tool_use " +
        "or a named tool)",
    }),
  stop_reason: z.enum(["end_turn", "max_tokens", "stop_sequence", "tool_use"]),
  stop_sequence: z.string().nullable(),
  usage: z.object({
    input_tokens: int(),
    output_tokens: int(),
    cache_creation_input_tokens: int(),
    cache_read_input_tokens: int(),
  }),
});
export type AnthropicMessageFits = Fits<ReturnType<typeof anthropicMessage>, z.output<typeof anthropicMessageShape>>;

export * from "./openapi-resource-shapes.js";
export * from "./openapi-webhook-shapes.js";

/** The named shapes, as `components.schemas` lists them. */
export const responseShapes = {
  ErrorEnvelope: errorEnvelopeShape,
  Health: healthShape,
  CurrentUser: currentUserShape,
  Model: modelShape,
  ModelList: modelListShape,
  ChatCompletion: chatCompletionShape,
  Response: responseShape,
  ResponseList: responseListShape,
  EmbeddingList: embeddingListShape,
  AnthropicMessage: anthropicMessageShape,
  User: userShape,
  LoginResponse: loginShape,
  SignupResponse: signupShape,
  ApiKey: apiKeyShape,
  ApiKeyList: z.object({ items: z.array(apiKeyShape) }),
  ApiKeyCreateResponse: apiKeyCreatedShape,
  OAuthAuthorizeResponse: oauthAuthorizeShape,
  LinkOAuthResponse: linkedAccountShape.extend({ message: z.string() }),
  LinkedAccountsResponse: z.object({ items: z.array(linkedAccountShape) }),
  Message: messageShape,
  Team: teamShape,
  Member: memberShape,
  InvitedMember: memberShape.extend({ invite_token: z.string() }),
  InvitationAccepted: loginShape.extend({ message: z.string() }),
  CatalogModel: catalogModelShape,
  CatalogModelList: z.object({ models: z.array(catalogModelShape) }),
  ModelSearchResults: z.object({ items: z.array(modelSearchItemShape) }),
  RequestDeploymentResponse: z.object({ ok: z.boolean() }),
  Deployment: deploymentShape,
  DeploymentList: z.object({ items: z.array(deploymentShape) }),
  ActivityList: activityListShape,
  ActivityDetail: activityDetailShape,
  ActivityModels: activityModelsShape,
  UsageDaily: usageDailyShape,
  UsageSummary: usageSummaryShape,
  BillingSummary: billingSummaryShape,
  TransactionList: transactionsShape,
  TopUpSession: topUpShape,
  TopUpConfirmation: topUpConfirmShape,
  Invoice: invoiceShape,
  StripeWebhookReceived: z.object({ received: z.literal(true) }),
  Stream: streamShape,
  StreamDetail: streamDetailShape,
  StreamList: z.object({ items: z.array(streamShape) }),
  Batch: batchShape,
  BatchList: z.object({ items: z.array(batchShape), has_more: z.boolean() }),
  BatchResults: batchResultsShape,
  CompletionEventList: z.object({
    object: z.literal("list"),
    data: z.array(completionEventShape),
    has_more: z.boolean(),
  }),
  Decision: decisionShape,
  WebhookDelivery: webhookDeliveryShape,
  WebhookDeliveryList: webhookDeliveryListShape,
} as const;
