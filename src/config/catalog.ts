/**
 * The model catalog shipped with the service (`src/config/catalog.json`, or `SWITCHYARD_CATALOG`):
 * parsed and validated once at start-up into `CatalogModel`s with exact bigint prices.
 */
import { readFileSync } from "node:fs";
import { z } from "zod";
import { type TokenPrices, usdToMicros } from "../shared/money.js";
import { ConfigError } from "./config.js";

export const MODALITIES = ["text_generation", "text_embedding", "decisions"] as const;
export type Modality = (typeof MODALITIES)[number];

const price = z.union([z.number().nonnegative(), z.string()]);

/** A per-team throughput limit: a positive integer, or `"unlimited"` / null / absent for none. */
const limit = z
  .union([z.number().int().positive(), z.literal("unlimited"), z.null()])
  .optional()
  .transform((v) => (typeof v === "number" ? v : null));

/**
 * A model file name: a bare `.gguf` name, no folder, no `..`, no leading dot (the pattern custom
 * models' files follow too, `model-sources.ts`). Review of issue 17, finding 8: `engine.file` is
 * joined to the install folder, so `../x.gguf` or an absolute path would read or write elsewhere.
 */
export const SAFE_MODEL_FILE = /^[A-Za-z0-9_][A-Za-z0-9._-]{0,250}\.gguf$/i;

const llamaCppEngineSchema = z.object({
  type: z.literal("llama_cpp"),
  /** File name looked up in the models directory and the data-dir cache (`SAFE_MODEL_FILE`). */
  file: z
    .string()
    .min(1)
    .regex(SAFE_MODEL_FILE, "expected a bare .gguf file name (letters, digits, . _ -; no folder, no ..)"),
  /** Download source, e.g. `hf:owner/repo/path.gguf`. */
  source: z.string().min(1).optional(),
  /** Tokens of context per sequence. */
  context_size: z.number().int().min(16).default(2048),
  /** `auto`: use the GGUF chat template when it has one; `none`: plain-text prompts. */
  chat_template: z.enum(["auto", "none"]).default("auto"),
  /** Token ids that also end a turn, beside the model's own end-of-generation tokens (e.g. the
   * TinyStories models start each new story with BOS instead of emitting EOS). */
  eog_token_ids: z.array(z.number().int().min(0)).default([]),
  /** Size of the file in bytes (issue 17): `npm run models -- pull` checks it before installing. */
  size_bytes: z.number().int().positive().optional(),
  /** SHA-256 of the file, hex (issue 17): a pull whose bytes differ installs nothing. */
  sha256: z
    .string()
    .regex(/^[0-9a-fA-F]{64}$/, "expected 64 hex digits")
    .transform((v) => v.toLowerCase())
    .optional(),
});

/**
 * A model served by upstream OpenAI-compatible servers (vLLM, SGLang, llama.cpp server, another
 * Switchyard), configured as endpoints in `SWITCHYARD_UPSTREAMS` (issue 9, item 3).
 */
const openAiCompatibleEngineSchema = z.object({
  type: z.literal("openai_compatible"),
  /** The model id the upstream knows; default: this catalog model's id. */
  upstream_model: z.string().min(1).max(512).optional(),
  /**
   * Names of the endpoints (config `upstreams`) that may serve it; default: every configured
   * endpoint whose `models` lists the upstream model.
   */
  endpoints: z.array(z.string().min(1)).min(1).optional(),
});

const engineSchema = z.discriminatedUnion("type", [llamaCppEngineSchema, openAiCompatibleEngineSchema]);

const catalogModelSchema = z.object({
  id: z.string().min(1).max(512),
  display_name: z.string().min(1),
  provider: z.string().min(1),
  modality: z.enum(MODALITIES),
  context_tokens: z.number().int().positive(),
  released: z.string().default(""),
  architecture: z.string().default("custom"),
  platform_status: z.enum(["available", "coming_soon", "deprecated"]).default("available"),
  deprecated: z.string().default(""),
  pricing: z.object({
    input_per_million_usd: price,
    output_per_million_usd: price,
    cached_input_per_million_usd: price.optional(),
  }),
  capabilities: z
    .object({
      tools: z.boolean().default(false),
      image_input: z.boolean().default(false),
      pdf_input: z.boolean().default(false),
      thinking: z.boolean().default(false),
      dimensions: z.number().int().positive().optional(),
      /** Serves `POST /v1/decisions` (log-probability scoring; DESIGN §3 Decisions). */
      decisions: z.boolean().default(false),
    })
    .default({ tools: false, image_input: false, pdf_input: false, thinking: false, decisions: false }),
  /**
   * The calibration temperature of `POST /v1/decisions` (issue 11, item 4): answer log-probabilities
   * are divided by it before the softmax; fitted with `npm run calibrate`. Default 1.0.
   */
  decision_temperature: z.number().positive().max(100).default(1),
  /** Per-team limits for this model (spec: Catalog model `tpm_limit`, `rpm_limit`, `requests_per_hour`). */
  tpm_limit: limit,
  rpm_limit: limit,
  requests_per_hour: limit,
  engine: engineSchema,
  /** The model's licence (SPDX id or the publisher's name for it), shown by `npm run models -- list`. */
  license: z.string().default(""),
});

const catalogSchema = z.object({
  default_model: z.string().min(1),
  models: z.array(catalogModelSchema).min(1),
});

export type LlamaCppEngineSpec = z.infer<typeof llamaCppEngineSchema>;
export type OpenAiCompatibleEngineSpec = z.infer<typeof openAiCompatibleEngineSchema>;
/** How a catalog model is served: `engine.type` picks the engine (`EngineRouter`). */
export type EngineSpec = LlamaCppEngineSpec | OpenAiCompatibleEngineSpec;

/** One catalog model as the rest of the service sees it. */
export interface CatalogModel {
  id: string;
  displayName: string;
  provider: string;
  modality: Modality;
  contextTokens: number;
  released: string;
  architecture: string;
  platformStatus: "available" | "coming_soon" | "deprecated";
  deprecated: string;
  prices: TokenPrices;
  capabilities: {
    tools: boolean;
    imageInput: boolean;
    pdfInput: boolean;
    thinking: boolean;
    dimensions: number | null;
    /** Answers `POST /v1/decisions` (a `decisions` model, or a generation model that says so). */
    decisions: boolean;
  };
  /** Calibration temperature of decision probabilities (catalog `decision_temperature`, default 1). */
  decisionTemperature: number;
  /**
   * Per-team throughput limits (spec: Limits, "Per-model throughput"); null = unlimited.
   * `tokensPerMinute` counts prompt + completion tokens; the other two count requests.
   */
  limits: ModelLimits;
  /**
   * The model whose rate-limit windows requests for this one count in (issue 9 review, finding
   * 3: a team's custom models count in their reference platform model's); absent: `id`.
   */
  limitKey?: string;
  engine: EngineSpec;
  /** Unix seconds; the catalog release date, used as the OpenAI `created` field. */
  created: number;
  /**
   * Engine resources of their own (issue 9): set for a team's custom model or dedicated
   * deployment, which run apart from the shared runtime of a platform model with the same id.
   * `key` names them in the engine (unique per custom model or deployment); `slots` is how many
   * requests they serve at once (parallel sequences, or embedding contexts). Absent: the model's
   * shared runtime, keyed by `id`.
   */
  runtime?: ModelRuntime;
  /** The catalog entry's licence (issue 17); absent for custom models. */
  license?: string;
}

/** A dedicated runtime of a model (see `CatalogModel.runtime`). */
export interface ModelRuntime {
  key: string;
  slots: number;
}

/** Per-team limits of one model; null = unlimited. */
export interface ModelLimits {
  tokensPerMinute: number | null;
  requestsPerMinute: number | null;
  requestsPerHour: number | null;
}

export interface Catalog {
  defaultModel: string;
  models: CatalogModel[];
}

/**
 * Reads and validates the catalog file.
 * @throws ConfigError naming the file and the first invalid entries.
 */
export function loadCatalog(file: string): Catalog {
  let json: unknown;
  try {
    json = JSON.parse(readFileSync(file, "utf8"));
  } catch (err) {
    throw new ConfigError(`cannot read model catalog ${file} (SWITCHYARD_CATALOG): ${(err as Error).message}`);
  }
  const parsed = catalogSchema.safeParse(json);
  if (!parsed.success) {
    const detail = parsed.error.issues
      .slice(0, 5)
      .map((i) => `${i.path.join(".")}: ${i.message}`)
      .join("; ");
    throw new ConfigError(`invalid model catalog ${file}: ${detail}`);
  }
  const models = parsed.data.models.map((m, i): CatalogModel => {
    const price = (field: keyof typeof m.pricing) => {
      try {
        return usdToMicros(m.pricing[field]!);
      } catch (err) {
        throw new ConfigError(`invalid model catalog ${file}: models.${i}.pricing.${field}: ${(err as Error).message}`);
      }
    };
    const input = price("input_per_million_usd");
    return {
      id: m.id,
      displayName: m.display_name,
      provider: m.provider,
      modality: m.modality,
      contextTokens: m.context_tokens,
      released: m.released,
      architecture: m.architecture,
      platformStatus: m.platform_status,
      deprecated: m.deprecated,
      prices: {
        inputPerMillionMicros: input,
        outputPerMillionMicros: price("output_per_million_usd"),
        cachedInputPerMillionMicros:
          m.pricing.cached_input_per_million_usd === undefined ? input : price("cached_input_per_million_usd"),
      },
      capabilities: {
        tools: m.capabilities.tools,
        imageInput: m.capabilities.image_input,
        pdfInput: m.capabilities.pdf_input,
        thinking: m.capabilities.thinking,
        dimensions: m.capabilities.dimensions ?? null,
        decisions: m.capabilities.decisions || m.modality === "decisions",
      },
      decisionTemperature: m.decision_temperature,
      limits: { tokensPerMinute: m.tpm_limit, requestsPerMinute: m.rpm_limit, requestsPerHour: m.requests_per_hour },
      engine: m.engine,
      created: releasedToUnix(m.released),
      license: m.license,
    };
  });
  const ids = new Set<string>();
  for (const m of models) {
    if (ids.has(m.id)) throw new ConfigError(`invalid model catalog ${file}: duplicate model id ${m.id}`);
    ids.add(m.id);
  }
  if (!ids.has(parsed.data.default_model)) {
    throw new ConfigError(`invalid model catalog ${file}: default_model ${parsed.data.default_model} is not listed`);
  }
  return { defaultModel: parsed.data.default_model, models };
}

function releasedToUnix(released: string): number {
  const ms = Date.parse(released);
  return Number.isNaN(ms) ? 0 : Math.floor(ms / 1000);
}
