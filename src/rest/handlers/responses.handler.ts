/** The Responses endpoints: create (synchronous and streamed), list, read and delete stored ones. */
import { v7 as uuidv7 } from "uuid";
import { parseInput } from "../../shared/errors.js";
import {
  ResponseStreamEvents,
  answeredTier,
  responseMessages,
  responseObject,
  responseParams,
  responseRequest,
} from "../../services/inference/protocols/openai-responses.protocol.js";
import { eventFrames } from "../sse.js";
import { requirePrincipal } from "../../services/platform/context.js";
import type { DataPlaneHandler } from "./deps.js";
import { assertTextOnly, respondWithGeneration } from "./generation.js";

/**
 * `POST /v1/responses` (spec: Response): synchronous or streamed; stored unless `store: false`.
 * `background: true` answers at once, `in_progress` (issue 6, item 2; `BackgroundResponsesService`).
 * Errors: 400 (body; `store: false`, `stream` or `max_queue_wait_s` with background), 401, 402,
 * 404 unknown model, 429.
 */
export const createResponse: DataPlaneHandler = async (deps, req, res, ctx) => {
  const body = parseInput(responseRequest, req.body);
  const model = deps.catalog.resolve(requirePrincipal(ctx).teamId, body.model, "text_generation");
  const { messages, unsupported } = responseMessages(body);
  assertTextOnly(unsupported);
  if (body.background) {
    res.json(await deps.background.submit(ctx, body, req.body, model));
    return;
  }
  const requestId = uuidv7();
  const createdAt = new Date();
  const tier = answeredTier(body);
  const store = body.store !== false;
  const events = new ResponseStreamEvents(requestId, createdAt, model.id, tier);
  await respondWithGeneration(
    deps,
    res,
    ctx,
    {
      requestId,
      createdAt,
      endpoint: "/v1/responses",
      serviceTier: tier,
      model,
      messages,
      params: responseParams(body),
      metadata: body.metadata,
      body: store ? req.body : null,
      maxQueueWaitS: body.max_queue_wait_s,
      render: (result) => {
        const response = responseObject(requestId, createdAt, model.id, tier, result);
        return {
          body: response,
          response: store
            ? {
                status: response.status,
                background: false,
                metadata: body.metadata ?? null,
                requestJson: req.body,
                responseJson: { ...response },
              }
            : undefined,
        };
      },
    },
    body.stream
      ? {
          start: () => eventFrames(events.start()),
          delta: (text) => eventFrames(events.delta(text)),
          finish: (_result, response) => eventFrames(events.finish(response)),
          error: (status, detail) => eventFrames(events.error(detail, String(status))),
        }
      : null,
  );
};

/** `GET /v1/responses`: `{object: "list", data, has_more}`, newest first. Errors: 400 (`limit`, `stream_id`), 401. */
export const listResponses: DataPlaneHandler = async (deps, req, res, ctx) => {
  res.json(await deps.background.list(ctx, req.query));
};

/**
 * `DELETE /v1/responses/{response_id}`: an in-progress response is cancelled and kept (answer
 * `cancelled`); an ended one is deleted and returned as it stood. Errors: 400 non-uuid, 401, 404.
 */
export const deleteResponse: DataPlaneHandler = async (deps, req, res, ctx) => {
  res.json(await deps.background.deleteOrCancel(ctx, req.params.response_id));
};

/** `GET /v1/responses/{response_id}`: the stored Response. Errors: 400 non-uuid, 401, 404 (unknown or other team). */
export const getResponse: DataPlaneHandler = async (deps, req, res, ctx) => {
  res.json(await deps.background.get(ctx, req.params.response_id));
};

/** `POST /v1/responses/{response_id}/cancel`: `cancelled` (never deletes). Errors: 400 non-uuid, 401, 404. */
export const cancelResponse: DataPlaneHandler = async (deps, req, res, ctx) => {
  res.json(await deps.background.cancel(ctx, req.params.response_id));
};
