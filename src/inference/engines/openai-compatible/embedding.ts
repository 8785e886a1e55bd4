/**
 * Embeddings upstream (see `openai-compatible.engine.ts`): one `POST <base>/embeddings` through a
 * replica, admitted on a bound that cannot under-count, metered by the upstream's usage.
 */
import { AppError } from "../../../shared/errors.js";
import type { EmbedRequest, EmbedResult } from "../../engine.js";
import { MAX_ANSWER_BYTES, type UpstreamClient, readJson } from "./dispatch.js";

/**
 * Embeds the inputs upstream (`POST <base>/embeddings`, `encoding_format: "float"`), in input
 * order; the upstream's `usage.prompt_tokens` is what is metered. Admission reserves each text
 * input's UTF-8 bytes (+2; not capped at the catalog's context, which an upstream may exceed)
 * and each token array's length.
 * @throws as `generate` (`generation.ts`).
 */
export async function embed(client: UpstreamClient, req: EmbedRequest): Promise<EmbedResult> {
  const route = client.routes.route(req.model);
  if (req.model.modality !== "text_embedding") {
    throw AppError.invalid(`Model ${req.model.id} does not produce embeddings`);
  }
  let bound = 0;
  for (const input of req.inputs) {
    bound += typeof input === "string" ? Buffer.byteLength(input, "utf8") + 2 : input.length;
  }
  await req.admit?.(bound);
  const body = JSON.stringify({ model: route.upstreamModel, input: req.inputs, encoding_format: "float" });
  return client.dispatch(route, req, async (endpoint, queueMs) => {
    const started = performance.now();
    const res = await endpoint.pool.request({
      method: "POST",
      path: endpoint.path("embeddings"),
      headers: endpoint.headers,
      body,
      signal: req.signal,
    });
    if (res.statusCode !== 200) throw await client.refusal(endpoint, res);
    const json = await readJson(res.body, MAX_ANSWER_BYTES);
    const data = (json as { data?: unknown } | null)?.data;
    if (!Array.isArray(data) || data.length !== req.inputs.length) {
      throw client.broken(endpoint, "an embeddings answer without one vector per input");
    }
    const vectors: number[][] = new Array<number[]>(data.length);
    for (const [i, item] of (data as Array<{ index?: unknown; embedding?: unknown }>).entries()) {
      const at = typeof item.index === "number" ? item.index : i;
      if (!Array.isArray(item.embedding) || at < 0 || at >= vectors.length) {
        throw client.broken(endpoint, "an embeddings answer with a malformed vector");
      }
      vectors[at] = item.embedding as number[];
    }
    const usage = (json as { usage?: { prompt_tokens?: unknown } }).usage;
    const promptTokens =
      typeof usage?.prompt_tokens === "number" ? usage.prompt_tokens : client.noUsage(endpoint, bound);
    return { vectors, promptTokens, engineMs: performance.now() - started, queueMs };
  });
}
