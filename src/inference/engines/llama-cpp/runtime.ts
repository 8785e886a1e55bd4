/**
 * What the embedded engine keeps per loaded model (see `llama-cpp.engine.ts`): its options, and a
 * runtime — a generation context with its sequences, or embedding contexts — with what requests
 * need to bound their inputs. Built by `loading.ts`; used by generation, embedding and scoring.
 */
import type {
  LlamaContext,
  LlamaContextSequence,
  LlamaEmbeddingContext,
  LlamaModel,
  LlamaText,
  Token,
} from "node-llama-cpp";
import type * as NodeLlamaCppModule from "node-llama-cpp";
import type { Logger } from "pino";
import type { CatalogModel } from "../../../config/catalog.js";
import type { ModelFileSettings } from "../../artifacts/model-files.js";
import type { ChatMessage } from "../../engine.js";
import type { GpuProbeSettings, GpuSetting } from "./gpu-probe.js";
import type { SlotPool } from "../../slot-pool.js";
import type { TuningSetting } from "../../tuning.js";
import type { TemplatePromptTools, TemplateToolFormat } from "./template-tools.js";

/** The node-llama-cpp module (an ES module loaded on first use). */
export type NodeLlamaCpp = typeof NodeLlamaCppModule;

/** What the embedded engine is built with: the configuration's engine settings and a logger. */
export interface LlamaCppEngineOptions extends ModelFileSettings {
  /**
   * CPU threads per context, or `auto`: measured per model file at its first load
   * (`engine-tuning.ts`, issue 12 item 3; cached in `<dataDir>/engine-tuning.json`).
   */
  threads: TuningSetting;
  /** Parallel sequences per generation model (platform runtimes), or `auto` as for `threads`. */
  sequences: TuningSetting;
  /** Embedding contexts per embedding model. */
  embeddingContexts: number;
  /**
   * Batch items a generation runtime decodes at once while interactive traffic is on: an
   * interactive request decoding, or one in the last `INTERACTIVE_QUIET_MS`
   * (`SWITCHYARD_BATCH_WHILE_INTERACTIVE`, issue 12 item 3; default unbounded here, 1 in the
   * config). On 2 cores a batch at full width slowed interactive chat ~3× at p50 through the CPU
   * its items take (bench/NOTES.md). With no interactive traffic, batch work uses every slot the
   * batch runner gives it.
   */
  batchWhileInteractive?: number;
  /**
   * GPU use (issue 17, `SWITCHYARD_GPU`): `auto` takes node-llama-cpp's GPU build when a usable
   * GPU is present and the build passes its probe in a child process (`gpu-probe.ts`; prebuilt
   * binaries only, never a build), else the CPU; `off` (the default here; the config's default is
   * `auto`) the CPU; `cuda`, `vulkan`, `metal` that build, unprobed.
   */
  gpu?: GpuSetting;
  /**
   * The GPU probe (`gpu-probe.ts`): its time limit, ms (`SWITCHYARD_GPU_PROBE_TIMEOUT_S`), and the
   * probe command and GPU detection (defaults: the real ones; tests give others).
   */
  gpuProbe?: Pick<GpuProbeSettings, "timeoutMs" | "command" | "detect">;
  logger: Logger;
  /** Scoring time limit per decisions request, ms (`SWITCHYARD_DECISIONS_TIME_LIMIT_MS`); default 60 s. */
  scoringTimeLimitMs?: number;
}

/** A chat prompt as the model reads it (`prompt-format.ts`). */
export interface Prompt {
  /** Prompt tokens without the BOS token the completion prepends. */
  tokens: Token[];
  /** Stop triggers from the chat template (end of turn). */
  templateStops: LlamaText[];
}

/** A generation model's runtime: one context whose sequences are its slots. */
export interface GenerationRuntime {
  kind: "generation";
  /** The GGUF file name the weights came from (`modelFile`'s key). */
  file: string;
  model: LlamaModel;
  context: LlamaContext;
  pool: SlotPool<LlamaContextSequence>;
  contextSize: number;
  /** Longest text that could fit the context (characters), see `input-bounds.ts`. */
  maxPromptChars: number;
  bosCount: number;
  /** Extra end-of-turn tokens from the catalog, as llama.cpp stop triggers. */
  endTriggers: Token[][];
  /** Chat messages (and tools in the template's format) → prompt tokens (`prompt-format.ts`). */
  formatPrompt: (messages: ChatMessage[], tools?: TemplatePromptTools) => Prompt;
  /** The chat template's own tool format (`template-tools.ts`); null: the documented format. */
  toolFormat: TemplateToolFormat | null;
  /** CPU threads of its contexts (the file's tuning). */
  threads: number;
  /** Contexts of one sequence each for scoring (decisions), made on first use; see `scoringPool`. */
  scoring?: Promise<ScoringContexts>;
}

/** A generation runtime's scoring contexts and the pool of their sequences (`scoringPool`). */
export interface ScoringContexts {
  contexts: LlamaContext[];
  pool: SlotPool<LlamaContextSequence>;
}

/** How long after the last interactive request batch work stays bounded (see `batchWhileInteractive`), ms. */
export const INTERACTIVE_QUIET_MS = 1_000;

/** An embedding model's runtime: its embedding contexts are its slots. */
export interface EmbeddingRuntime {
  kind: "embedding";
  file: string;
  model: LlamaModel;
  pool: SlotPool<LlamaEmbeddingContext>;
  contexts: LlamaEmbeddingContext[];
  contextSize: number;
  /** Longest input text that could fit the context (characters). */
  maxInputChars: number;
  vocabularySize: number;
}

/** What `LlamaCppLoader.runtime` builds per runtime key. */
export type Runtime = GenerationRuntime | EmbeddingRuntime;

/** The key of `model`'s runtime: its dedicated runtime's, else the model id (shared). */
export function runtimeKey(model: CatalogModel): string {
  return model.runtime?.key ?? model.id;
}
