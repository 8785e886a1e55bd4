/**
 * The data-plane REST table: every `/v1` path this build serves and its handler. The
 * OpenAI/Anthropic bodies are REST-native; handlers call the same services GraphQL uses.
 */
import { DECISION_BODY_LIMIT_BYTES, decisionRequest } from "../services/decisions/decisions.protocol.js";
import type { ModelDto } from "../services/models/model-catalog.service.js";
import type { DataPlaneHandler } from "./handlers/deps.js";
import { createChatCompletion } from "./handlers/chat-completions.handler.js";
import { createDecision } from "./handlers/decisions.handler.js";
import { createEmbeddings } from "./handlers/embeddings.handler.js";
import { listCompletionEvents } from "./handlers/events.handler.js";
import { createMessage } from "./handlers/messages.handler.js";
import {
  cancelResponse,
  createResponse,
  deleteResponse,
  getResponse,
  listResponses,
} from "./handlers/responses.handler.js";
import { createStream, getStream, listStreams, updateStream } from "./handlers/streams.handler.js";
import {
  cancelBatch,
  createBatch,
  getBatch,
  getBatchResults,
  getBatchResultsJsonl,
  listBatches,
} from "./handlers/batches.handler.js";
import { batchCreateBody, listQuery as listBatchesQuery } from "../services/batches/batches.service.js";
import { eventsQuery } from "../services/events/completion-events.service.js";
import { messagesQuery, messagesRequest } from "../services/inference/protocols/anthropic-messages.protocol.js";
import { chatCompletionRequest } from "../services/inference/protocols/openai-chat.protocol.js";
import { embeddingRequest } from "../services/inference/protocols/openai-embeddings.protocol.js";
import { responseRequest } from "../services/inference/protocols/openai-responses.protocol.js";
import { listResponsesQuery } from "../services/inference/responses/responses.service.js";
import { createStreamInput, updateStreamInput } from "../services/inference/responses/streams.service.js";
import { AppError } from "../shared/errors.js";
import { sendError } from "./error-envelope.js";
import type { RouteDoc } from "./route-doc.js";
import * as shape from "./openapi-shapes.js";

/** A model as Anthropic's API lists it: the spec's fields plus `type` and an RFC 3339 `created_at`. */
function anthropicModel(m: ModelDto) {
  return { ...m, type: "model", created_at: new Date(m.created * 1000).toISOString() };
}

export interface DataPlaneRoute {
  method: "get" | "post" | "patch" | "delete";
  path: string;
  /** `none`: health probes. */
  auth: "required" | "none";
  handler: DataPlaneHandler;
  /** `raw`: the handler reads the body itself (batches: 200 MB, not through the JSON parser). */
  body?: "json" | "raw";
  /** Largest JSON body of this route, bytes (413 above); default: config `bodyLimitBytes`. */
  bodyLimitBytes?: number;
  /** What the OpenAPI document says of this route (`openapi.ts`); without it, a generic object. */
  doc?: RouteDoc;
}

export const dataPlaneRoutes: DataPlaneRoute[] = [
  {
    method: "get",
    path: "/v1/health",
    auth: "none",
    handler: (d, _q, res) => void res.json(d.health.live()),
    doc: { summary: "Liveness", response: shape.healthShape },
  },
  {
    method: "get",
    path: "/v1/health/ready",
    auth: "none",
    handler: async (d, _q, res) => {
      // Not ready is an answer, not a failure: the 503 goes out without the error middleware's
      // 5xx line and stack; the health service logs each change of state once (issue 27, item 4).
      const ready = await d.health.ready().catch((err: unknown) => {
        if (!(err instanceof AppError)) throw err;
        sendError(res, err);
      });
      if (ready) res.json(ready);
    },
    doc: { summary: "Readiness: the database and the default model are up", response: shape.healthShape },
  },
  {
    method: "get",
    path: "/v1/auth/me",
    auth: "required",
    handler: (d, _q, res, ctx) => void res.json(d.resolvers.auth.currentUser(ctx)),
    doc: { summary: "The caller (data plane)", response: shape.currentUserShape },
  },
  {
    method: "get",
    path: "/v1/models",
    auth: "required",
    handler: (d, req, res, ctx) => {
      const data = d.resolvers.models.models(ctx);
      // With an `anthropic-version` header the list takes Anthropic's shape (DESIGN §3 Models).
      if (req.get("anthropic-version")) {
        const items = data.map(anthropicModel);
        res.json({ data: items, first_id: items[0]?.id ?? null, last_id: items.at(-1)?.id ?? null, has_more: false });
      } else {
        res.json({ object: "list", data });
      }
    },
    doc: {
      summary: "Models the caller can use (Anthropic's list shape with an `anthropic-version` header)",
      response: shape.modelListShape,
    },
  },
  {
    method: "get",
    path: "/v1/models/:model_id",
    auth: "required",
    handler: (d, req, res, ctx) => {
      const model = d.resolvers.models.model(String(req.params.model_id), ctx);
      res.json(req.get("anthropic-version") ? anthropicModel(model) : model);
    },
    doc: { summary: "One model", response: shape.modelShape },
  },
  {
    method: "post",
    path: "/v1/responses",
    auth: "required",
    handler: createResponse,
    doc: {
      summary: "Create a response (OpenAI Responses; `background: true` answers at once, `in_progress`)",
      body: responseRequest,
      response: shape.responseShape,
      sse: true,
    },
  },
  {
    method: "get",
    path: "/v1/responses",
    auth: "required",
    handler: listResponses,
    doc: {
      summary: "List stored responses, newest first",
      query: listResponsesQuery,
      response: shape.responseListShape,
    },
  },
  // The feed's path wins over a response id (issue 6, item 2): it is listed first.
  {
    method: "get",
    path: "/v1/responses/events",
    auth: "required",
    handler: listCompletionEvents,
    doc: {
      response: shape.responseShapes.CompletionEventList,
      summary: "Completion events feed (cursor pages, optional long-poll with `wait_ms`)",
      query: eventsQuery,
    },
  },
  {
    method: "get",
    path: "/v1/responses/:response_id",
    auth: "required",
    handler: getResponse,
    doc: { summary: "A stored response", response: shape.responseShape },
  },
  {
    method: "delete",
    path: "/v1/responses/:response_id",
    auth: "required",
    handler: deleteResponse,
    doc: {
      summary: "Delete a stored response (one still in progress is cancelled first); answers it",
      response: shape.responseShape,
    },
  },
  {
    method: "post",
    path: "/v1/responses/:response_id/cancel",
    auth: "required",
    handler: cancelResponse,
    doc: { summary: "Cancel a background response", response: shape.responseShape },
  },
  {
    method: "post",
    path: "/v1/chat/completions",
    auth: "required",
    handler: createChatCompletion,
    doc: {
      summary: "Create a chat completion (OpenAI Chat Completions)",
      body: chatCompletionRequest,
      response: shape.chatCompletionShape,
      sse: true,
    },
  },
  {
    method: "post",
    path: "/v1/embeddings",
    auth: "required",
    handler: createEmbeddings,
    doc: {
      summary: "Create embeddings (OpenAI Embeddings)",
      body: embeddingRequest,
      response: shape.embeddingListShape,
    },
  },
  {
    method: "post",
    path: "/v1/messages",
    auth: "required",
    handler: createMessage,
    doc: {
      summary: "Create a message (Anthropic Messages)",
      query: messagesQuery,
      body: messagesRequest,
      response: shape.anthropicMessageShape,
      sse: true,
    },
  },
  {
    method: "post",
    path: "/v1/decisions",
    auth: "required",
    handler: createDecision,
    bodyLimitBytes: DECISION_BODY_LIMIT_BYTES,
    doc: {
      response: shape.responseShapes.Decision,
      body: decisionRequest,
      summary: "Calibrated probabilities for up to 64 choice, score or yes/no questions about one input",
    },
  },
  {
    method: "post",
    path: "/v1/streams",
    auth: "required",
    handler: createStream,
    doc: {
      response: shape.responseShapes.Stream,
      summary: "Create a stream (a named group of completions)",
      body: createStreamInput,
      status: 201,
    },
  },
  {
    method: "get",
    path: "/v1/streams",
    auth: "required",
    handler: listStreams,
    doc: { response: shape.responseShapes.StreamList, summary: "List streams, newest first" },
  },
  {
    method: "get",
    path: "/v1/streams/:stream_id",
    auth: "required",
    handler: getStream,
    doc: { response: shape.responseShapes.StreamDetail, summary: "A stream with its counters" },
  },
  {
    method: "patch",
    path: "/v1/streams/:stream_id",
    auth: "required",
    handler: updateStream,
    doc: {
      response: shape.responseShapes.StreamDetail,
      summary: "Rename, archive or cancel a stream",
      body: updateStreamInput,
    },
  },
  {
    method: "post",
    path: "/v1/batches",
    auth: "required",
    handler: createBatch,
    body: "raw",
    doc: {
      response: shape.responseShapes.Batch,
      summary: "Create a batch: `{requests: [{custom_id?, body}], window?, metadata?}`",
      body: batchCreateBody,
      status: 201,
    },
  },
  {
    method: "get",
    path: "/v1/batches",
    auth: "required",
    handler: listBatches,
    doc: { response: shape.responseShapes.BatchList, summary: "List batches, newest first", query: listBatchesQuery },
  },
  {
    method: "get",
    path: "/v1/batches/:batch_id",
    auth: "required",
    handler: getBatch,
    doc: { response: shape.responseShapes.Batch, summary: "A batch with progress and totals" },
  },
  {
    method: "post",
    path: "/v1/batches/:batch_id/cancel",
    auth: "required",
    handler: cancelBatch,
    doc: { response: shape.responseShapes.Batch, summary: "Cancel a batch" },
  },
  {
    method: "get",
    path: "/v1/batches/:batch_id/results",
    auth: "required",
    handler: getBatchResults,
    doc: { response: shape.responseShapes.BatchResults, summary: "A batch's results (`results` null until it ends)" },
  },
  {
    method: "get",
    path: "/v1/batches/:batch_id/results.jsonl",
    auth: "required",
    handler: getBatchResultsJsonl,
    doc: { summary: "A batch's results as JSON lines, in input order", responseMediaType: "application/x-ndjson" },
  },
];
