/** `POST /v1/embeddings` (OpenAI Embeddings). */
import { parseInput } from "../../shared/errors.js";
import { embeddingRequest } from "../../services/inference/protocols/openai-embeddings.protocol.js";
import { createEmbedding } from "../../services/inference/use-cases/embedding.js";
import type { DataPlaneHandler } from "./deps.js";
import { abortOnClose, answerCreated } from "./generation.js";

/**
 * `POST /v1/embeddings`: body → `createEmbedding` → the list of vectors. Errors: 400 (body,
 * `dimensions` above the model's width, too-long input), 401, 402, 404 unknown model, 429.
 */
export const createEmbeddings: DataPlaneHandler = async (deps, req, res, ctx) => {
  const body = parseInput(embeddingRequest, req.body);
  answerCreated(res, await createEmbedding(deps, ctx, body, { rawBody: req.body, signal: abortOnClose(res) }));
};
