/**
 * The data-plane REST table: every `/v1` path this build serves and its handler. The
 * OpenAI/Anthropic bodies are REST-native; handlers call the same services GraphQL uses.
 */
import { DECISION_BODY_LIMIT_BYTES } from "../services/decisions/decisions.protocol.js";
import type { ModelDto } from "../services/model-catalog.service.js";
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
}

export const dataPlaneRoutes: DataPlaneRoute[] = [
  { method: "get", path: "/v1/health", auth: "none", handler: (d, _q, res) => void res.json(d.health.live()) },
  {
    method: "get",
    path: "/v1/health/ready",
    auth: "none",
    handler: async (d, _q, res) => void res.json(await d.health.ready()),
  },
  {
    method: "get",
    path: "/v1/auth/me",
    auth: "required",
    handler: (d, _q, res, ctx) => void res.json(d.resolvers.auth.currentUser(ctx)),
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
  },
  {
    method: "get",
    path: "/v1/models/:model_id",
    auth: "required",
    handler: (d, req, res, ctx) => {
      const model = d.resolvers.models.model(String(req.params.model_id), ctx);
      res.json(req.get("anthropic-version") ? anthropicModel(model) : model);
    },
  },
  { method: "post", path: "/v1/responses", auth: "required", handler: createResponse },
  { method: "get", path: "/v1/responses", auth: "required", handler: listResponses },
  // The feed's path wins over a response id (issue 6, item 2): it is listed first.
  { method: "get", path: "/v1/responses/events", auth: "required", handler: listCompletionEvents },
  { method: "get", path: "/v1/responses/:response_id", auth: "required", handler: getResponse },
  { method: "delete", path: "/v1/responses/:response_id", auth: "required", handler: deleteResponse },
  { method: "post", path: "/v1/responses/:response_id/cancel", auth: "required", handler: cancelResponse },
  { method: "post", path: "/v1/chat/completions", auth: "required", handler: createChatCompletion },
  { method: "post", path: "/v1/embeddings", auth: "required", handler: createEmbeddings },
  { method: "post", path: "/v1/messages", auth: "required", handler: createMessage },
  {
    method: "post",
    path: "/v1/decisions",
    auth: "required",
    handler: createDecision,
    bodyLimitBytes: DECISION_BODY_LIMIT_BYTES,
  },
  { method: "post", path: "/v1/streams", auth: "required", handler: createStream },
  { method: "get", path: "/v1/streams", auth: "required", handler: listStreams },
  { method: "get", path: "/v1/streams/:stream_id", auth: "required", handler: getStream },
  { method: "patch", path: "/v1/streams/:stream_id", auth: "required", handler: updateStream },
  { method: "post", path: "/v1/batches", auth: "required", handler: createBatch, body: "raw" },
  { method: "get", path: "/v1/batches", auth: "required", handler: listBatches },
  { method: "get", path: "/v1/batches/:batch_id", auth: "required", handler: getBatch },
  { method: "post", path: "/v1/batches/:batch_id/cancel", auth: "required", handler: cancelBatch },
  { method: "get", path: "/v1/batches/:batch_id/results", auth: "required", handler: getBatchResults },
  { method: "get", path: "/v1/batches/:batch_id/results.jsonl", auth: "required", handler: getBatchResultsJsonl },
];
