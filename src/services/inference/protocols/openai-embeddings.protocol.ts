/**
 * OpenAI Embeddings (DESIGN §3): `input` as string, string[], int[] or int[][];
 * `encoding_format` float | base64 (little-endian float32, what the `openai` client asks for by
 * default); `dimensions` shortens vectors (truncate, then L2-normalise, as OpenAI does).
 */
import { z } from "zod";
import { maxQueueWaitS, requestMetadata } from "../inference-calls.js";

const MAX_INPUTS = 2048;

export const embeddingRequest = z.object({
  model: z.string().min(1),
  input: z.union([
    z.string().min(1, "must not be empty"),
    z.array(z.string().min(1, "must not be empty")).min(1).max(MAX_INPUTS),
    z.array(z.number().int().min(0)).min(1),
    z
      .array(z.array(z.number().int().min(0)).min(1))
      .min(1)
      .max(MAX_INPUTS),
  ]),
  encoding_format: z.enum(["float", "base64"]).nullish(),
  dimensions: z.number().int().min(1).nullish(),
  user: z.string().nullish(),
  metadata: requestMetadata,
  max_queue_wait_s: maxQueueWaitS,
});
export type EmbeddingRequest = z.infer<typeof embeddingRequest>;

/** The inputs as a list: a string or a token array is one input. */
export function embeddingInputs(req: EmbeddingRequest): Array<string | number[]> {
  const input = req.input;
  if (typeof input === "string") return [input];
  if (input.length > 0 && typeof input[0] === "number") return [input as number[]];
  return input as Array<string | number[]>;
}

/** Truncates to `dimensions` and re-normalises to unit length. */
export function shorten(vector: number[], dimensions: number): number[] {
  const cut = vector.slice(0, dimensions);
  const norm = Math.hypot(...cut);
  return norm > 0 ? cut.map((v) => v / norm) : cut;
}

function toBase64(vector: number[]): string {
  return Buffer.from(new Float32Array(vector).buffer).toString("base64");
}

/** The `list` of `embedding` objects with usage. */
export function embeddingList(model: string, vectors: number[][], format: "float" | "base64", promptTokens: number) {
  return {
    object: "list" as const,
    data: vectors.map((v, index) => ({
      object: "embedding" as const,
      index,
      embedding: format === "base64" ? toBase64(v) : v,
    })),
    model,
    usage: { prompt_tokens: promptTokens, total_tokens: promptTokens },
  };
}
