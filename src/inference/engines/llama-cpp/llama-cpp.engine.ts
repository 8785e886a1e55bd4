/**
 * The embedded engine: node-llama-cpp on CPU, or a GPU when `SWITCHYARD_GPU=auto` finds one
 * (DESIGN §1, §2; issue 17). One `LlamaModel` per GGUF file; per generation model one context
 * with N parallel sequences (node-llama-cpp decodes concurrent sequences in one batch), handed out
 * through a `SlotPool`, so concurrent requests neither share state nor queue behind a global lock.
 * Embedding models get a small pool of embedding contexts.
 * A freed sequence keeps its tokens; the next request picks the free sequence sharing the longest
 * prefix with its prompt and reuses that KV cache (reported as cached prompt tokens).
 * Log-probability scoring (decisions, issue 11) runs on separate one-sequence contexts made on
 * first use (`scoringPool` in `scoring.ts`).
 *
 * Runtimes (a context and its slots) are keyed by the model's `runtime.key` when it has one (a
 * team's custom model or dedicated deployment, issue 9: its own context with `runtime.slots`
 * sequences, sharing the loaded GGUF weights with every other runtime of the same file), else by
 * the model id (the shared platform runtime). `unload` retires a dedicated runtime: new requests
 * are refused, the ones in flight finish, then its contexts (and the weights, when no other
 * runtime uses the file) are freed.
 *
 * This class is the `InferenceEngine` façade; the work is split by concern: model loading and
 * runtimes (`loading.ts`, `runtime.ts`, `prompt-format.ts`), generation (`generation.ts`),
 * embeddings (`embedding.ts`) and scoring (`scoring.ts`).
 */
import type { CatalogModel } from "../../../config/catalog.js";
import type {
  EmbedRequest,
  EmbedResult,
  GenerateRequest,
  GenerateResult,
  InferenceEngine,
  ScoreRequest,
  ScoreResult,
} from "../../engine.js";
import type { SlotPoolStats } from "../../slot-pool.js";
import type { EngineTuning } from "../../tuning.js";
import { embed } from "./embedding.js";
import { generate } from "./generation.js";
import { LlamaCppLoader } from "./loading.js";
import type { LlamaCppEngineOptions } from "./runtime.js";
import { scoreContinuations } from "./scoring.js";
import { GrammarCache } from "./structured-decoding.js";
import { toolPromptRequest, withToolCalls } from "./tool-calls.js";
import { templateToolRequest, withTemplateToolCalls } from "./template-tools.js";

/** The node-llama-cpp `InferenceEngine` (see the module header for pooling and prefix reuse). */
export class LlamaCppEngine implements InferenceEngine {
  private readonly loader: LlamaCppLoader;
  /** Structured-output grammars, compiled once each (`structured-decoding.ts`). */
  private readonly grammars: GrammarCache;

  constructor(private readonly opts: LlamaCppEngineOptions) {
    this.loader = new LlamaCppLoader(opts);
    this.grammars = new GrammarCache(() => this.loader.llamaInstance());
  }

  /** True once `model`'s runtime is built. */
  isLoaded(model: CatalogModel): boolean {
    return this.loader.isLoaded(model);
  }

  /**
   * Loads `model`'s runtime. A deliberate load brings back a retired dedicated runtime (a team's
   * custom model served again once a deployment of it is deleted, or an older deployment of the
   * model routed to again); requests alone never rebuild a retired one.
   */
  load(model: CatalogModel): Promise<void> {
    return this.loader.load(model);
  }

  /**
   * Retires a dedicated runtime (`model.runtime`; shared platform runtimes stay): waiting and
   * later requests get EngineUnavailable (503), requests holding a slot finish, then its contexts
   * are disposed, and the weights too when no other runtime uses the file.
   */
  unload(model: CatalogModel): Promise<void> {
    return this.loader.unload(model);
  }

  /**
   * Generates a completion for `req.messages` (`generation.ts`).
   * A structured output decodes under its grammar (`structured-decoding.ts`). Tools and the
   * history's calls are written into the prompt, a forced call decodes under the grammar of the
   * allowed calls, and the calls the answer makes are read back from its text: in the model's own
   * chat-template format where its runtime has one (`template-tools.ts`), else in the documented
   * format (`tool-calls.ts`). With tools offered, streamed text is held only where a call may start
   * (`call-gate.ts`), and under a forced call not streamed at all.
   * @throws AppError InvalidRequest when prompt + max tokens exceed the context or a strict schema
   *   uses a keyword it cannot enforce; RateLimited when no sequence frees up within
   *   `maxQueueWaitMs`; EngineFailure when llama.cpp fails.
   */
  async generate(req: GenerateRequest): Promise<GenerateResult> {
    const rt = await this.loader.runtime(req.model);
    const format = rt.kind === "generation" ? rt.toolFormat : null;
    const templated = format ? templateToolRequest(req, format) : null;
    const generated =
      format && templated
        ? await generate(this.loader, this.grammars, this.opts.logger, templated)
        : await generate(this.loader, this.grammars, this.opts.logger, toolPromptRequest(req));
    const result =
      format && templated
        ? withTemplateToolCalls(generated, req.tools, format.syntax)
        : withToolCalls(generated, req.tools);
    // The last of the streamed text, now that the answer is read: what was held and is text, or
    // the text before the calls (`GenerateRequest.onText`).
    generated.gate?.finish(result.toolCalls?.length ? (result.callPreamble ?? "") : result.text);
    return result;
  }

  /**
   * Embeds every input as a unit vector (`embedding.ts`).
   * @throws AppError InvalidRequest for inputs longer than the context; RateLimited; EngineFailure.
   */
  embed(req: EmbedRequest): Promise<EmbedResult> {
    return embed(this.loader, this.opts.logger, req);
  }

  /**
   * Scores each question's answers by their token log-probabilities (`scoring.ts`).
   * @throws AppError InvalidRequest (naming the question) when a prompt and its longest answer do
   *   not fit the context, an answer has no tokens, or two answers are the same tokens;
   *   RateLimited; ScoringStopped (499 / 504); EngineFailure.
   */
  scoreContinuations(req: ScoreRequest): Promise<ScoreResult> {
    return scoreContinuations(this.loader, this.opts, req);
  }

  /**
   * The slot pool of `model` (sequences for generation, contexts for embeddings) as it stands:
   * `{size, available, waiting}`; undefined until the model is loaded. Read-only; lets tests see
   * that every request gives its slot back (issue 14, item 2).
   */
  slots(model: CatalogModel): Promise<SlotPoolStats | undefined> {
    return this.loader.slots(model);
  }

  /** Tokens `text` takes for `model` (its tokenizer, no BOS); loads the model when it is not. */
  async countTokens(model: CatalogModel, text: string): Promise<number> {
    const rt = await this.loader.runtime(model);
    return rt.model.tokenize(text).length;
  }

  /** Refuses waiting requests and frees every context, model file and llama.cpp itself. */
  close(): Promise<void> {
    return this.loader.close();
  }

  /**
   * The threads and sequences chosen for the first generation model loaded (undefined before
   * one loads): what the start banner shows, and the default of the batch runner's concurrency
   * (sequences − 1) and of custom models' slots when the configuration says `auto`.
   */
  chosenTuning(): EngineTuning | undefined {
    return this.loader.chosenTuning();
  }

  /**
   * What the engine computes on (issue 17, start banner): `cpu`, or the GPU backend node-llama-cpp
   * chose (`cuda`, `vulkan`, `metal`). Starts llama.cpp when no model has yet.
   */
  backend(): Promise<string> {
    return this.loader.backend();
  }
}
