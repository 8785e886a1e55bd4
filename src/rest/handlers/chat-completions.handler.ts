/** `POST /v1/chat/completions` (OpenAI Chat Completions, plain and streamed). */
import { parseInput } from "../../shared/errors.js";
import { chatCompletionRequest } from "../../services/inference/protocols/openai-chat.protocol.js";
import * as chat from "../../services/inference/use-cases/chat-completion.js";
import type { DataPlaneHandler } from "./deps.js";
import { answerCreated, createOptions } from "./generation.js";

/**
 * `POST /v1/chat/completions`: body → `createChatCompletion` → `chat.completion`, or
 * `chat.completion.chunk` SSE ending with `[DONE]` when `stream: true`. Errors: 400 (body,
 * non-text parts, context), 401, 402, 404 unknown model, 429, 502/503.
 */
export const createChatCompletion: DataPlaneHandler = async (deps, req, res, ctx) => {
  const body = parseInput(chatCompletionRequest, req.body);
  answerCreated(res, await chat.createChatCompletion(deps, ctx, body, createOptions(req, res)));
};
