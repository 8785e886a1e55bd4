/** The Responses endpoints: create (synchronous, streamed, background), list, read and delete stored ones. */
import { parseInput } from "../../shared/errors.js";
import { responseRequest } from "../../services/inference/protocols/openai-responses.protocol.js";
import * as responses from "../../services/inference/use-cases/response.js";
import type { DataPlaneHandler } from "./deps.js";
import { answerCreated, createOptions } from "./generation.js";

/**
 * `POST /v1/responses` (spec: Response): body → `createResponse`: synchronous or streamed, stored
 * unless `store: false`; `background: true` answers at once, `in_progress` (issue 6, item 2).
 * Errors: 400 (body; `store: false`, `stream` or `max_queue_wait_s` with background), 401, 402,
 * 404 unknown model, 429.
 */
export const createResponse: DataPlaneHandler = async (deps, req, res, ctx) => {
  const body = parseInput(responseRequest, req.body);
  answerCreated(res, await responses.createResponse(deps, ctx, body, createOptions(req, res)));
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
