/** `POST /v1/embeddings` (OpenAI Embeddings). */
import { v7 as uuidv7 } from "uuid";
import { AppError, parseInput } from "../../shared/errors.js";
import {
  embeddingInputs,
  embeddingList,
  embeddingRequest,
  shorten,
} from "../../services/inference/protocols/openai-embeddings.protocol.js";
import { requirePrincipal } from "../../services/platform/context.js";
import type { DataPlaneHandler } from "./deps.js";
import { abortOnClose } from "./generation.js";

/**
 * `POST /v1/embeddings`: inputs → unit vectors (64 floats for the TinyStories model), `dimensions`
 * shortens them, `encoding_format: base64` packs float32. Errors: 400 (body, `dimensions` above the
 * model's width, too-long input), 401, 402, 404 unknown model, 429.
 */
export const createEmbeddings: DataPlaneHandler = async (deps, req, res, ctx) => {
  const body = parseInput(embeddingRequest, req.body);
  const model = deps.catalog.resolve(requirePrincipal(ctx).teamId, body.model, "text_embedding");
  const native = model.capabilities.dimensions;
  if (body.dimensions != null && native !== null && body.dimensions > native) {
    throw AppError.invalid(`dimensions must be at most ${native} for ${model.id}`, [
      { field: "dimensions", message: `at most ${native}` },
    ]);
  }
  const out = await deps.inference.embed(ctx, {
    requestId: uuidv7(),
    createdAt: new Date(),
    endpoint: "/v1/embeddings",
    model,
    inputs: embeddingInputs(body),
    metadata: body.metadata,
    body: req.body,
    maxQueueWaitS: body.max_queue_wait_s,
    signal: abortOnClose(res),
    render: (result) => {
      const vectors =
        body.dimensions != null ? result.vectors.map((v) => shorten(v, body.dimensions!)) : result.vectors;
      return embeddingList(model.id, vectors, body.encoding_format ?? "float", result.promptTokens);
    },
  });
  res.locals.engineMs = out.result.engineMs + out.result.queueMs;
  res.json(out.body);
};
