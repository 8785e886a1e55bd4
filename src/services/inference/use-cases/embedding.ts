/** `createEmbedding`: the OpenAI Embeddings create operation (REST and batch items). */
import { v7 as uuidv7 } from "uuid";
import { AppError, echo } from "../../../shared/errors.js";
import type { ModelCatalogService } from "../../models/model-catalog.service.js";
import { requirePrincipal, type RequestContext } from "../../platform/context.js";
import {
  type EmbeddingRequest,
  embeddingInputs,
  embeddingList,
  shorten,
} from "../protocols/openai-embeddings.protocol.js";
import { type CreateOptions, type InferenceOperations, callFields } from "./create-call.js";

/** The `list` of embeddings answered. */
export type EmbeddingList = ReturnType<typeof embeddingList>;

/**
 * The checks of an embeddings request that need no engine, for `teamId` (the batch create runs
 * them for each item): the model resolved, `dimensions` within its width. @returns the model.
 * @throws AppError 404 unknown model; 400.
 */
export function checkEmbedding(catalog: ModelCatalogService, teamId: string, body: EmbeddingRequest) {
  const model = catalog.resolve(teamId, body.model, "text_embedding");
  const native = model.capabilities.dimensions;
  if (body.dimensions != null && native !== null && body.dimensions > native) {
    throw AppError.invalid(`dimensions must be at most ${native} for ${echo(model.id)}`, [
      { field: "dimensions", message: `at most ${native}` },
    ]);
  }
  return model;
}

/**
 * Embeds the inputs: unit vectors (64 floats for the TinyStories model), shortened to
 * `dimensions`, packed as float32 base64 with `encoding_format: base64`; metered once (prompt
 * tokens only).
 * @returns the list and the engine time (queue wait included), ms.
 * @throws AppError 400 (`dimensions` above the model's width, too-long input), 401, 402, 404
 *   unknown model, 429 (see `InferenceService.embed`).
 */
export async function createEmbedding(
  ops: InferenceOperations,
  ctx: RequestContext,
  body: EmbeddingRequest,
  options: CreateOptions,
): Promise<{ body: EmbeddingList; engineMs: number }> {
  const model = checkEmbedding(ops.catalog, requirePrincipal(ctx).teamId, body);
  const out = await ops.inference.embed(ctx, {
    requestId: options.requestId ?? uuidv7(),
    createdAt: new Date(),
    endpoint: "/v1/embeddings",
    model,
    inputs: embeddingInputs(body),
    ...callFields(body, options),
    render: (result) => {
      const vectors =
        body.dimensions != null ? result.vectors.map((v) => shorten(v, body.dimensions!)) : result.vectors;
      return embeddingList(model.id, vectors, body.encoding_format ?? "float", result.promptTokens);
    },
  });
  return { body: out.body!, engineMs: out.result.engineMs + out.result.queueMs };
}
