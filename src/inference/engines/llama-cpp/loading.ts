/**
 * Model loading for the embedded engine (see `llama-cpp.engine.ts`): node-llama-cpp itself,
 * started on first use (CPU, or a GPU with `gpu: "auto"` once its build passed a probe:
 * `gpu-probe.ts`); one `LlamaModel` per GGUF file, shared by every runtime built on it and freed
 * with the last one; the runtimes, keyed by `runtimeKey`, with the threads and sequences their
 * file was given (`engine-tuning.ts`); retiring a dedicated runtime (`unload`) and closing
 * everything.
 */
import type { Llama, LlamaEmbeddingContext, LlamaGpuType, LlamaModel, Token } from "node-llama-cpp";
import type { CatalogModel, LlamaCppEngineSpec } from "../../../config/catalog.js";
import { ConfigError } from "../../../config/config.js";
import { AppError, ErrorCode } from "../../../shared/errors.js";
import { resolveModelPath } from "../../artifacts/model-files.js";
import { longestTokenChars, maxCharsFor } from "../../input-bounds.js";
import { SlotPool, type SlotPoolStats } from "../../slot-pool.js";
import type { EngineTuning } from "../../tuning.js";
import { chooseTuning } from "./engine-tuning.js";
import { type ProbeModel, chooseGpu } from "./gpu-probe.js";
import { llamaCppLogger } from "./llama-log.js";
import { promptFormatter } from "./prompt-format.js";
import {
  type GenerationRuntime,
  INTERACTIVE_QUIET_MS,
  type LlamaCppEngineOptions,
  type NodeLlamaCpp,
  type Runtime,
  runtimeKey,
} from "./runtime.js";

/**
 * The embedded engine's loaded models and runtimes (see the module header). Requests get their
 * runtime from `runtime(model)`, which builds it on first use.
 */
export class LlamaCppLoader {
  private lib?: NodeLlamaCpp;
  private llama?: Promise<Llama>;
  private readonly files = new Map<string, Promise<LlamaModel>>();
  private readonly runtimes = new Map<string, Promise<Runtime>>();
  private readonly loaded = new Set<string>();
  /** Runtimes (being) built on each loaded file: the weights are freed when it drops to 0. */
  private readonly fileUsers = new Map<string, number>();
  /** Keys of unloaded dedicated runtimes: never built again (their deployment is gone). */
  private readonly retired = new Set<string>();
  /** Threads and sequences per model file (issue 12, item 3), chosen once per file per process. */
  private readonly tunings = new Map<string, Promise<EngineTuning>>();
  /** Where each loaded model file was found (the tuning cache keys on its size and mtime). */
  private readonly paths = new Map<string, string>();
  /** The first generation model's tuning: the default for batches and custom models. */
  private firstGenerationTuning?: EngineTuning;
  /** Why the CPU is used although a GPU was found (`GpuChoice.note`), for `backend()`. */
  private backendNote?: string;

  constructor(private readonly opts: LlamaCppEngineOptions) {}

  /**
   * The node-llama-cpp module. Loaded before the first runtime is built, so code holding a
   * runtime may use it.
   */
  get library(): NodeLlamaCpp {
    return this.lib!;
  }

  /** True once `model`'s runtime is built. */
  isLoaded(model: CatalogModel): boolean {
    return this.loaded.has(runtimeKey(model));
  }

  /** Builds `model`'s runtime, bringing back a retired one (see `LlamaCppEngine.load`). */
  async load(model: CatalogModel): Promise<void> {
    this.retired.delete(runtimeKey(model));
    await this.runtime(model);
  }

  /** Retires `model`'s dedicated runtime (see `LlamaCppEngine.unload`). */
  async unload(model: CatalogModel): Promise<void> {
    if (!model.runtime) return;
    const key = runtimeKey(model);
    this.retired.add(key);
    const pending = this.runtimes.get(key);
    this.runtimes.delete(key);
    this.loaded.delete(key);
    if (!pending) return;
    let rt: Runtime;
    try {
      rt = await pending;
    } catch {
      return; // it never loaded: nothing was kept
    }
    rt.pool.close(new AppError(ErrorCode.EngineUnavailable, `Model '${model.id}' is no longer deployed`));
    await rt.pool.whenIdle();
    if (rt.kind === "generation") await disposeScoring(rt, true);
    if (rt.kind === "generation") await rt.context.dispose();
    else for (const c of rt.contexts) await c.dispose();
    await this.releaseFile(rt.file);
    this.opts.logger.info({ model: model.id, runtime: key }, "dedicated runtime released");
  }

  /** `model`'s slot pool as it stands (see `LlamaCppEngine.slots`); undefined until loaded. */
  async slots(model: CatalogModel): Promise<SlotPoolStats | undefined> {
    const key = runtimeKey(model);
    if (!this.loaded.has(key)) return undefined;
    return (await this.runtimes.get(key))?.pool.stats();
  }

  /** Refuses every waiting request and frees every context, model and llama.cpp itself. */
  async close(): Promise<void> {
    const runtimes = await Promise.allSettled(this.runtimes.values());
    for (const r of runtimes) {
      if (r.status !== "fulfilled") continue;
      r.value.pool.rejectAll(new AppError(ErrorCode.EngineUnavailable, "The engine is shutting down"));
      if (r.value.kind === "generation") await disposeScoring(r.value, false);
      if (r.value.kind === "generation") await r.value.context.dispose();
      else for (const c of r.value.contexts) await c.dispose();
    }
    for (const m of await Promise.allSettled(this.files.values())) {
      if (m.status === "fulfilled") await m.value.dispose();
    }
    this.runtimes.clear();
    this.files.clear();
    this.fileUsers.clear();
    this.loaded.clear();
    if (this.llama) await (await this.llama).dispose();
  }

  /**
   * `model`'s runtime, built on first use.
   * @throws AppError EngineUnavailable for a retired dedicated runtime or a model the embedded
   *   engine does not serve; ConfigError when its file is missing or damaged (`resolveModelPath`).
   */
  runtime(model: CatalogModel): Promise<Runtime> {
    const key = runtimeKey(model);
    let rt = this.runtimes.get(key);
    if (!rt) {
      if (this.retired.has(key)) {
        return Promise.reject(new AppError(ErrorCode.EngineUnavailable, `Model '${model.id}' is no longer deployed`));
      }
      rt = this.createRuntime(model);
      this.runtimes.set(key, rt);
      rt.then(
        () => {
          if (this.runtimes.get(key) === rt) this.loaded.add(key);
        },
        () => {
          if (this.runtimes.get(key) === rt) this.runtimes.delete(key);
        },
      );
    }
    return rt;
  }

  private async createRuntime(model: CatalogModel): Promise<Runtime> {
    const spec = model.engine;
    if (spec.type !== "llama_cpp") {
      throw new AppError(ErrorCode.EngineUnavailable, `Model '${model.id}' is not served by the embedded engine`);
    }
    // Counted before the file loads, so an unload elsewhere never frees weights this runtime is about to use.
    this.fileUsers.set(spec.file, (this.fileUsers.get(spec.file) ?? 0) + 1);
    try {
      return await this.buildRuntime(model, spec);
    } catch (err) {
      await this.releaseFile(spec.file);
      throw err;
    }
  }

  /** One fewer runtime on `file`; the last one frees the weights. */
  private async releaseFile(file: string): Promise<void> {
    const users = (this.fileUsers.get(file) ?? 1) - 1;
    if (users > 0) {
      this.fileUsers.set(file, users);
      return;
    }
    this.fileUsers.delete(file);
    const weights = this.files.get(file);
    this.files.delete(file);
    const loaded = await weights?.catch(() => undefined);
    await loaded?.dispose();
  }

  private async buildRuntime(model: CatalogModel, spec: LlamaCppEngineSpec): Promise<Runtime> {
    const llamaModel = await this.modelFile(model, spec);
    const contextSize = Math.min(spec.context_size, llamaModel.trainContextSize);
    const tuning = await this.tuningFor(model, spec, llamaModel);
    const threads = tuning.threads;
    if (model.modality === "text_embedding") {
      const contexts: LlamaEmbeddingContext[] = [];
      for (let i = 0; i < (model.runtime?.slots ?? this.opts.embeddingContexts); i++) {
        contexts.push(await llamaModel.createEmbeddingContext({ contextSize, threads }));
      }
      const vocabulary = llamaModel.fileInfo.metadata.tokenizer?.ggml?.tokens as string[] | undefined;
      const vocabularySize = vocabulary?.length ?? Number.MAX_SAFE_INTEGER;
      return {
        kind: "embedding",
        file: spec.file,
        model: llamaModel,
        contexts,
        pool: new SlotPool(contexts),
        contextSize,
        maxInputChars: maxCharsFor(contextSize, longestTokenChars(vocabulary)),
        vocabularySize,
      };
    }
    this.firstGenerationTuning ??= tuning;
    const slots = model.runtime?.slots ?? tuning.sequences;
    const context = await llamaModel.createContext({ contextSize, sequences: slots, threads });
    const sequences = Array.from({ length: slots }, () => context.getSequence());
    const bosCount = llamaModel.tokens.shouldPrependBosToken && llamaModel.tokens.bos != null ? 1 : 0;
    this.opts.logger.info(
      {
        model: model.id,
        runtime: model.runtime?.key,
        contextSize: context.contextSize,
        sequences: sequences.length,
        threads,
      },
      "generation model ready",
    );
    const prompts = promptFormatter(this.lib!, llamaModel, spec);
    return {
      kind: "generation",
      file: spec.file,
      model: llamaModel,
      context,
      pool: new SlotPool(sequences, this.opts.batchWhileInteractive, INTERACTIVE_QUIET_MS),
      contextSize: context.contextSize,
      maxPromptChars: maxCharsFor(
        context.contextSize,
        longestTokenChars(llamaModel.fileInfo.metadata.tokenizer?.ggml?.tokens as string[] | undefined),
      ),
      bosCount,
      endTriggers: spec.eog_token_ids.map((id) => [id as Token]),
      formatPrompt: prompts.format,
      toolFormat: prompts.tools,
      threads,
    };
  }

  /**
   * The threads and sequences for `spec.file` (issue 12, item 3): configured numbers, or `auto`
   * ones measured by a short probe at the file's first load (cached on disk by file and machine;
   * see `engine-tuning.ts`). Logged once per file with the measured figures.
   */
  private tuningFor(model: CatalogModel, spec: LlamaCppEngineSpec, llamaModel: LlamaModel): Promise<EngineTuning> {
    let tuning = this.tunings.get(spec.file);
    if (!tuning) {
      tuning = chooseTuning(llamaModel, this.paths.get(spec.file) ?? resolveModelPath(model, spec, this.opts), {
        threads: this.opts.threads,
        sequences: this.opts.sequences,
        dataDir: this.opts.dataDir,
        logger: this.opts.logger,
      }).then((t) => {
        this.opts.logger.info(
          { file: spec.file, ...t },
          `engine tuning for ${spec.file}: ${t.threads} thread(s), ${t.sequences} sequences (${t.source}` +
            (t.source === "measured" ? ` in ${t.probeMs} ms` : "") +
            ")",
        );
        return t;
      });
      this.tunings.set(spec.file, tuning);
    }
    return tuning;
  }

  /** The first generation model's tuning (see `LlamaCppEngine.chosenTuning`). */
  chosenTuning(): EngineTuning | undefined {
    return this.firstGenerationTuning;
  }

  private modelFile(model: CatalogModel, spec: LlamaCppEngineSpec): Promise<LlamaModel> {
    const key = spec.file;
    let file = this.files.get(key);
    if (!file) {
      file = (async () => {
        const modelPath = resolveModelPath(model, spec, this.opts);
        this.paths.set(key, modelPath);
        const llama = await this.llamaInstance({
          path: modelPath,
          kind: model.modality === "text_embedding" ? "embedding" : "generation",
        });
        this.opts.logger.info({ model: model.id, path: modelPath }, "loading model file");
        return llama.loadModel({ modelPath });
      })();
      this.files.set(key, file);
      file.catch(() => this.files.delete(key));
    }
    return file;
  }

  private async loadLibrary(): Promise<NodeLlamaCpp> {
    this.lib ??= await import("node-llama-cpp");
    return this.lib;
  }

  /**
   * What the engine computes on (see `LlamaCppEngine.backend`): `cpu`, `cuda`, …, with why the CPU
   * is used when a GPU was found (`cpu (GPU probe failed: cuda, SIGABRT on the first decode)`).
   * Starts llama.cpp when no model has yet.
   */
  async backend(): Promise<string> {
    const llama = await this.llamaInstance();
    const name = llama.gpu === false ? "cpu" : llama.gpu;
    return this.backendNote ? `${name} (${this.backendNote})` : name;
  }

  /**
   * llama.cpp itself, started on first use (for what is compiled against it: grammars) on the
   * backend `SWITCHYARD_GPU` leads to (`gpu-probe.ts`). With `auto` and a GPU found, the GPU build
   * is first probed in a child process with `probeWith`, the first model loaded (none when the
   * first use is not a model load: llama.cpp is then only started there). Its log goes to ours
   * (`llama-log.ts`: errors at error, warnings at warn).
   * @throws ConfigError when SWITCHYARD_GPU names a build that does not load here.
   */
  llamaInstance(probeWith?: ProbeModel): Promise<Llama> {
    this.llama ??= this.loadLibrary().then((lib) => this.startLlama(lib, probeWith));
    return this.llama;
  }

  private async startLlama(lib: NodeLlamaCpp, probeWith: ProbeModel | undefined): Promise<Llama> {
    const setting = this.opts.gpu ?? "off";
    const choice = await chooseGpu(lib, probeWith, {
      setting,
      dataDir: this.opts.dataDir,
      logger: this.opts.logger,
      threads: this.opts.threads === "auto" ? undefined : this.opts.threads,
      ...this.opts.gpuProbe,
    });
    this.backendNote = choice.note;
    const logger = llamaCppLogger(this.opts.logger);
    const start = (gpu: LlamaGpuType) =>
      lib.getLlama({ gpu, build: "never", logLevel: lib.LlamaLogLevel.warn, logger });
    try {
      return await start(choice.gpu);
    } catch (err) {
      if (choice.gpu === false) throw err;
      const why = (err as Error).message;
      if (choice.source === "setting") {
        throw new ConfigError(
          `SWITCHYARD_GPU=${setting}: node-llama-cpp has no ${setting} build that loads here (${why}); ` +
            "use auto (the GPU when one works, else the CPU) or off",
        );
      }
      // The build passed its probe (now or before) but does not start here: the CPU, as for a failed probe.
      this.opts.logger.error(
        { gpu: choice.gpu, err },
        `the ${choice.gpu} build did not start (${why}); serving on the CPU`,
      );
      this.backendNote = `${choice.gpu} did not start`;
      return start(false);
    }
  }
}

/**
 * Frees a generation runtime's scoring contexts (if any were made): `retire` (unload) lets the
 * scoring in flight finish first; at shutdown the waiting requests are refused at once.
 */
async function disposeScoring(rt: GenerationRuntime, retire: boolean): Promise<void> {
  const scoring = await rt.scoring?.catch(() => undefined);
  if (!scoring) return;
  const gone = new AppError(ErrorCode.EngineUnavailable, "The model is no longer served");
  if (retire) {
    scoring.pool.close(gone);
    await scoring.pool.whenIdle();
  } else scoring.pool.rejectAll(gone);
  for (const c of scoring.contexts) await c.dispose();
}
