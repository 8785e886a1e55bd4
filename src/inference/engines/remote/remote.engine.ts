/**
 * The embedded engine of another process on this machine (issue 31, item 2: one engine per
 * machine), behind the same `InferenceEngine` interface: API processes and workers started by
 * the supervisor with `SWITCHYARD_ENGINE_URL` call the engine process's `engine-server.ts` over
 * loopback (protocol in `wire.ts`) instead of loading every model themselves. Admission, start,
 * per-token text, cancel and scoring's partial `ScoringStopped` cross the hop as they happen, so
 * a caller sees what the local engine would give it; only the error objects are rebuilt (same
 * class, code, detail and extra), except a refusal of the caller's own `admit`, which is thrown
 * as the very error it threw.
 *
 * An engine process that is not reachable answers at once with EngineUnavailable (503,
 * Retry-After 1 s); one that goes away during a call, or stops answering (no ping for
 * `readTimeoutMs`), fails that call with EngineUnavailable too: nothing waits forever.
 */
import { randomUUID } from "node:crypto";
import { Agent, request } from "undici";
import type { CatalogModel } from "../../../config/catalog.js";
import { AppError, ErrorCode } from "../../../shared/errors.js";
import {
  type EmbedRequest,
  type EmbedResult,
  type GenerateRequest,
  type GenerateResult,
  type GenerationStart,
  type InferenceEngine,
  type ScoreRequest,
  type ScoreResult,
  ScoringStopped,
} from "../../engine.js";
import { clientGone } from "../../client-gone.js";
import type { EngineTuning } from "../../tuning.js";
import {
  type EngineCall,
  type EngineEvent,
  type EngineOp,
  PING_MS,
  TOKEN_HEADER,
  fromWireError,
  toWireError,
  toWireModel,
} from "./wire.js";

export interface RemoteEngineOptions {
  /** The engine server's base URL (`SWITCHYARD_ENGINE_URL`). */
  url: string;
  /** Its shared secret (`SWITCHYARD_ENGINE_TOKEN`). */
  token: string;
  /** Longest wait for a connection, ms (default 2 s). */
  connectTimeoutMs?: number;
  /** Longest silence on an open call (the server pings every 5 s), ms (default 30 s). */
  readTimeoutMs?: number;
}

/** What a call hands to the caller's callbacks. */
interface CallHooks {
  signal?: AbortSignal;
  admit?: (promptTokens: number, maxCompletionTokens?: number) => Promise<void>;
  onStart?: (start: unknown) => void;
  onText?: (delta: string) => void;
}

/** The `InferenceEngine` of an engine process (see the module header). */
export class RemoteEngine implements InferenceEngine {
  private readonly agent: Agent;
  private readonly base: string;
  /** Runtime keys loaded through this client (`isLoaded` is synchronous). */
  private readonly loaded = new Set<string>();
  private tuning?: EngineTuning;

  constructor(private readonly opts: RemoteEngineOptions) {
    this.base = opts.url.replace(/\/$/, "");
    this.agent = new Agent({
      connect: { timeout: opts.connectTimeoutMs ?? 2_000 },
      headersTimeout: opts.readTimeoutMs ?? 6 * PING_MS,
      bodyTimeout: opts.readTimeoutMs ?? 6 * PING_MS,
      keepAliveTimeout: 60_000,
    });
  }

  /** True once `load(model)` succeeded through this client (the engine process keeps it loaded). */
  isLoaded(model: CatalogModel): boolean {
    return this.loaded.has(runtimeKey(model));
  }

  /** Loads `model` in the engine process (idempotent there: the first caller loads, the others wait for it). */
  async load(model: CatalogModel): Promise<void> {
    const { tuning } = (await this.call("load", { model: toWireModel(model) })) as { tuning: EngineTuning | null };
    if (tuning) this.tuning = tuning;
    this.loaded.add(runtimeKey(model));
  }

  /**
   * Retires `model`'s dedicated runtime in the engine process, for every process of the machine
   * (they all act on the same deleted deployment or custom model).
   */
  async unload(model: CatalogModel): Promise<void> {
    this.loaded.delete(runtimeKey(model));
    await this.call("unload", { model: toWireModel(model) });
  }

  /** As `LlamaCppEngine.generate`, in the engine process; `onStart`, `onText` and `admit` are called here as it reaches them. */
  async generate(req: GenerateRequest): Promise<GenerateResult> {
    const { signal, admit, onStart, onText, model, ...rest } = req;
    return (await this.call(
      "generate",
      { ...rest, model: toWireModel(model) },
      {
        signal,
        admit: admit && ((p, m) => admit(p, m!)),
        onStart: onStart && ((s) => onStart(s as GenerationStart)),
        onText,
      },
    )) as GenerateResult;
  }

  /** As `LlamaCppEngine.embed`, in the engine process. */
  async embed(req: EmbedRequest): Promise<EmbedResult> {
    const { signal, admit, model, ...rest } = req;
    return (await this.call(
      "embed",
      { ...rest, model: toWireModel(model) },
      { signal, admit: admit && ((p) => admit(p)) },
    )) as EmbedResult;
  }

  /** As `LlamaCppEngine.scoreContinuations`, in the engine process (a `ScoringStopped` keeps its counts). */
  async scoreContinuations(req: ScoreRequest): Promise<ScoreResult> {
    const { signal, admit, onStart, model, ...rest } = req;
    return (await this.call(
      "score",
      { ...rest, model: toWireModel(model) },
      { signal, admit: admit && ((p) => admit(p)), onStart: onStart && (() => onStart()) },
    )) as ScoreResult;
  }

  /** Tokens `text` takes for `model`, counted by the engine process. */
  async countTokens(model: CatalogModel, text: string): Promise<number> {
    return (await this.call("count-tokens", { model: toWireModel(model), text })) as number;
  }

  /** Closes this client's connections; the engine process and its models stay. */
  async close(): Promise<void> {
    await Promise.race([this.agent.close(), new Promise((r) => setTimeout(r, 5_000).unref())]);
    await this.agent.destroy().catch(() => undefined);
  }

  /** The engine process's first generation model tuning, as its last `load` answered (see `LlamaCppEngine.chosenTuning`). */
  chosenTuning(): EngineTuning | undefined {
    return this.tuning;
  }

  /**
   * What the engine process computes on (`cpu, in the engine process`, …), for the start banner;
   * `an engine process not reachable now` rather than an error, so a start does not depend on it.
   */
  async backend(): Promise<string> {
    try {
      const info = (await this.call("info", {})) as { backend: string; tuning: EngineTuning | null };
      if (info.tuning) this.tuning = info.tuning;
      return `${info.backend}, in the engine process`;
    } catch {
      return "an engine process not reachable now";
    }
  }

  /**
   * One call: `POST /engine/{op}` and its event stream, with the caller's callbacks driven by the
   * events and its signal forwarded as a cancel.
   * @throws the engine's error as `fromWireError` rebuilds it; the caller's own `admit` refusal
   *   or abort reason as it was; EngineUnavailable when the engine process cannot be reached or
   *   goes away.
   */
  private async call(op: EngineOp, req: unknown, hooks: CallHooks = {}): Promise<unknown> {
    const id = randomUUID();
    const { signal } = hooks;
    const body: EngineCall = {
      id,
      request: req,
      ...(hooks.admit ? { admit: true } : {}),
      ...(hooks.onText ? { stream: true } : {}),
      ...(signal?.aborted ? { cancelled: toWireError(clientGone(signal)) } : {}),
    };
    // Listening from before the call is sent: an abort while it is on its way is a cancel the
    // engine server keeps until the call arrives.
    const onAbort = () => void this.answer("cancel", id, { reason: toWireError(clientGone(signal!)) });
    if (!body.cancelled) signal?.addEventListener("abort", onAbort, { once: true });
    let res: Awaited<ReturnType<typeof request>>;
    try {
      res = await request(`${this.base}/engine/${op}`, {
        method: "POST",
        dispatcher: this.agent,
        headers: { "content-type": "application/json", [TOKEN_HEADER]: this.opts.token },
        body: JSON.stringify(body),
      });
    } catch (err) {
      signal?.removeEventListener("abort", onAbort);
      throw unreachable(err);
    }
    if (res.statusCode !== 200) {
      signal?.removeEventListener("abort", onAbort);
      await res.body.dump().catch(() => undefined);
      throw new AppError(
        ErrorCode.EngineUnavailable,
        res.statusCode === 401
          ? "The engine process refused this process's token (SWITCHYARD_ENGINE_TOKEN)"
          : `The engine process answered ${res.statusCode}`,
      );
    }
    /** The caller's own admission refusal, thrown as it was. */
    let refused: unknown;
    const admitting: Array<Promise<void>> = [];
    let outcome: { result: unknown } | { error: Error } | undefined;
    try {
      for await (const event of events(res.body)) {
        switch (event.event) {
          case "admit":
            admitting.push(
              (hooks.admit ? hooks.admit(event.promptTokens, event.maxCompletionTokens) : Promise.resolve()).then(
                () => this.answer("admit", id, { ok: true }),
                (err: unknown) => {
                  refused = err;
                  return this.answer("admit", id, { ok: false, error: toWireError(err) });
                },
              ),
            );
            break;
          case "start":
            hooks.onStart?.(event.start);
            break;
          case "text":
            hooks.onText?.(event.delta);
            break;
          case "result":
            outcome = { result: event.result };
            break;
          case "error":
            outcome = { error: fromWireError(event.error) };
            break;
        }
      }
    } catch (err) {
      // A callback threw: the caller's error, as a local engine would pass it on.
      if (!(err instanceof ReadFailure)) throw err;
      // The engine process went away or stopped answering (no ping in `readTimeoutMs`).
      if (!outcome) throw new AppError(ErrorCode.EngineUnavailable, ENGINE_GONE, undefined, 1);
    } finally {
      signal?.removeEventListener("abort", onAbort);
      // Unread (a callback threw): closing the stream cancels the call in the engine process.
      if (!res.body.destroyed && !outcome) res.body.destroy();
      await Promise.allSettled(admitting);
    }
    if (!outcome) throw new AppError(ErrorCode.EngineUnavailable, ENGINE_GONE, undefined, 1);
    if ("result" in outcome) return outcome.result;
    if (refused !== undefined) throw refused;
    // The caller's own abort reason comes back as the very reason it gave.
    const given: unknown = signal?.aborted ? signal.reason : undefined;
    const err = outcome.error;
    if (given instanceof AppError && err instanceof AppError && !(err instanceof ScoringStopped)) {
      if (given.code === err.code && given.detail === err.detail) throw given;
    }
    throw err;
  }

  /** `POST /engine/{admit|cancel}/{id}`; failures are ignored (the call's stream says what happened). */
  private async answer(kind: "admit" | "cancel", id: string, body: unknown): Promise<void> {
    try {
      const res = await request(`${this.base}/engine/${kind}/${encodeURIComponent(id)}`, {
        method: "POST",
        dispatcher: this.agent,
        headers: { "content-type": "application/json", [TOKEN_HEADER]: this.opts.token },
        body: JSON.stringify(body),
      });
      await res.body.dump();
    } catch {
      /* the call's stream ends with the engine's answer, or fails as unreachable */
    }
  }
}

const ENGINE_GONE = "The engine process went away during the call";

/** A failed read of a call's stream (connection reset, read timeout), told apart from a callback's throw. */
class ReadFailure extends Error {}

/** The key the engine process keeps `model`'s runtime under (`runtimeKey` of the embedded engine). */
function runtimeKey(model: CatalogModel): string {
  return model.runtime?.key ?? model.id;
}

/** EngineUnavailable for a call that could not be sent. */
function unreachable(err: unknown): AppError {
  const why = err instanceof Error ? ((err as { code?: string }).code ?? err.message) : String(err);
  return new AppError(
    ErrorCode.EngineUnavailable,
    `The engine process is not reachable (${why}); retry shortly`,
    undefined,
    1,
  );
}

/**
 * The NDJSON events of a call's stream; a failed read throws `ReadFailure`. A long line (a big
 * embeddings result) is gathered in parts and joined once: each chunk is searched, not the line.
 */
async function* events(body: AsyncIterable<unknown>): AsyncGenerator<EngineEvent> {
  const decoder = new TextDecoder();
  let parts: string[] = [];
  const iterator = body[Symbol.asyncIterator]();
  for (;;) {
    let next: IteratorResult<unknown>;
    try {
      next = await iterator.next();
    } catch (err) {
      throw new ReadFailure((err as Error).message);
    }
    if (next.done) return;
    let text = decoder.decode(next.value as Buffer, { stream: true });
    let nl: number;
    while ((nl = text.indexOf("\n")) >= 0) {
      parts.push(text.slice(0, nl));
      const line = parts.join("");
      parts = [];
      text = text.slice(nl + 1);
      if (line) yield JSON.parse(line) as EngineEvent;
    }
    if (text) parts.push(text);
  }
}
