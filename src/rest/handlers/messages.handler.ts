/** `POST /v1/messages` (Anthropic Messages, plain and streamed). */
import { parseInput } from "../../shared/errors.js";
import { messagesQuery, messagesRequest } from "../../services/inference/protocols/anthropic-messages.protocol.js";
import * as messages from "../../services/inference/use-cases/message.js";
import type { DataPlaneHandler } from "./deps.js";
import { answerCreated, createOptions } from "./generation.js";

/**
 * `POST /v1/messages`: body → `createMessage` → `message` object, or the SSE events with
 * `stream: true`. Errors: 400 (body, query `beta`, non-text blocks, context), 401, 402, 404
 * unknown model, 429, 502/503.
 */
export const createMessage: DataPlaneHandler = async (deps, req, res, ctx) => {
  parseInput(messagesQuery, req.query);
  const body = parseInput(messagesRequest, req.body);
  answerCreated(res, await messages.createMessage(deps, ctx, body, createOptions(req, res)));
};
