/**
 * What the callers of a create operation add to it (issue 25, item 2): the REST handlers, the
 * batch runner and the background worker call the same use case (`createChatCompletion`,
 * `createMessage`, `createEmbedding`, `createResponse`) with the parsed protocol body and these
 * options; only HTTP (status, body, SSE framing) stays in the transport.
 */
import { v7 as uuidv7 } from "uuid";
import type { ChatMessage, GenerateResult, GenerationStart, SamplingParams } from "../../../inference/engine.js";
import type { CatalogModel } from "../../../config/catalog.js";
import type { Failure } from "../../../shared/error-dialects.js";
import { AppError, echo } from "../../../shared/errors.js";
import type { ModelCatalogService } from "../../models/model-catalog.service.js";
import type { RequestContext } from "../../platform/context.js";
import type { FailureRecord, GenerationCall } from "../inference-calls.js";
import type { UnhonouredField } from "../protocols/structured.js";
import type { GenerationTools } from "../../../inference/tools.js";
import { type ToolMode, type ToolSpec, type Tooling, toolSchemaIssues } from "../protocols/tools.js";
import type { InferenceService } from "../inference.service.js";

/** The services every create operation runs on. */
export interface InferenceOperations {
  inference: InferenceService;
  catalog: ModelCatalogService;
}

/** A batch item's part of a call (issue 7): its batch, its `custom_id`, and how its failures are recorded. */
export interface BatchItemCall {
  batchId: string;
  customId: string | null;
  /** Every failure, refusals included, is recorded as this says; null: not recorded (the runner retries). */
  onFailure: (err: unknown) => FailureRecord | null;
  /** Called once the engine's part succeeded, before the record commits (see `InferenceCall.batch`). */
  onEngineDone?: () => void;
}

/** One event of a streamed answer in the protocol's terms (`event` name, `data` JSON or `[DONE]`). */
export interface ProtocolEvent {
  event?: string;
  data: unknown;
}

/** `[event, data]` pairs (as the protocol modules build them) → named events. */
export function namedEvents(events: [string, unknown][]): ProtocolEvent[] {
  return events.map(([event, data]) => ({ event, data }));
}

/** How one protocol streams a generation; the transport frames and sends what these return. */
export interface StreamEvents<T> {
  /** When the engine accepted the request (the prompt is counted). */
  start(prompt: GenerationStart): ProtocolEvent[];
  /** A piece of generated text. */
  delta(text: string): ProtocolEvent[];
  /** After the request is metered: the closing events. */
  finish(result: GenerateResult, body: T): ProtocolEvent[];
  /**
   * A failure after the stream opened: the protocol's closing error event, carrying the error body
   * of `shared/error-dialects.ts` in the protocol's dialect (issue 27, item 1).
   */
  error(failure: Failure): ProtocolEvent[];
}

/** The engine hooks a streaming transport passes to the generation it runs. */
export interface StreamHooks {
  onStart: (start: GenerationStart) => void;
  onText: (text: string) => void;
}

/**
 * A transport that can stream (REST's SSE): runs `generate` with its hooks and sends the
 * protocol's events as they come. Resolves once the stream ended.
 * @throws what `generate` throws before the stream opened (the transport answers it as JSON).
 */
export type StreamTransport = <T>(
  events: StreamEvents<T>,
  generate: (hooks: StreamHooks) => Promise<{ result: GenerateResult; body: T }>,
) => Promise<void>;

/** What the caller of a create operation adds to the parsed body. */
export interface CreateOptions {
  /** Fires when the caller goes away (the engine stops; the request is recorded `cancelled`). */
  signal?: AbortSignal;
  /** The body as received: the activity's `body_json`. */
  rawBody: unknown;
  /** The request id (activity id, ledger source), when fixed earlier (batch items); else a new UUIDv7. */
  requestId?: string;
  /** Overrides the body's `max_queue_wait_s`, seconds (batch items). */
  maxQueueWaitS?: number;
  /** Set for a batch item. */
  batch?: BatchItemCall;
  /** Given when the caller can stream (REST); used when the body asks for `stream: true`. */
  stream?: StreamTransport;
}

/** What a create operation answers: the API object and the engine time (queue wait included), ms, or nothing when it was streamed. */
export type Created<T> = { body: T; engineMs?: number } | { streamed: true };

/** Refuses content the model cannot read (images, files, tool results …) with a 400 naming each part. */
export function assertTextOnly(unsupported: string[]): void {
  if (unsupported.length > 0) {
    throw AppError.invalid(
      "Only text content is supported by this model",
      unsupported.map((field) => ({ field, message: "unsupported content type" })),
    );
  }
}

/**
 * Refuses a request that sets fields the service does not honour (tools, log-probabilities, …)
 * with a 400 naming each field and the model (issue 26, item 6: never answered as if they were
 * absent).
 */
export function assertHonoured(model: CatalogModel, unhonoured: UnhonouredField[]): void {
  if (unhonoured.length === 0) return;
  throw AppError.invalid(
    `Model '${model.id}' cannot honour ${unhonoured.map((u) => u.field).join(", ")}: ${unhonoured[0].message}`,
    unhonoured.map((u) => ({ field: u.field, message: `${u.message} for model '${model.id}'` })),
  );
}

/**
 * The checks of a text generation that may offer tools, for `teamId`: the model resolved, every
 * field honoured, text only (`checkGeneration`), the tools servable (`assertToolsServed`), stop
 * strings only where they cannot cut a grammar (`assertStopDecodable`; `decoding.stopField` is the
 * body's name for them, `stop` by default). REST, batch items (at create and when run) and
 * background runs all come through here. `tools` is what the engine gets
 * (`GenerationCall.tools`): absent when the model may call none.
 * @throws AppError 404 unknown model; 400.
 */
export function checkToolGeneration(
  catalog: ModelCatalogService,
  teamId: string,
  modelId: string,
  translated: { messages: ChatMessage[]; unsupported: string[] },
  unhonoured: UnhonouredField[],
  tooling: () => Tooling,
  decoding: { params: SamplingParams; stopField?: string },
) {
  const model = catalog.resolve(teamId, modelId, "text_generation");
  checkGeneration(model, translated, unhonoured);
  const { tools, mode, parallel } = tooling();
  assertToolsServed(model, tools, mode);
  assertStopDecodable(model, decoding.params, mode, decoding.stopField ?? "stop");
  const engineTools: GenerationTools | undefined = mode.kind === "none" ? undefined : { specs: tools, mode, parallel };
  return { model, messages: translated.messages, mode, tools: engineTools };
}

/**
 * Where tools are served (issue 26, items 2 and 5): on the embedded engine, which decodes a
 * forced call under its own grammar, so a strict tool whose parameters use a keyword that grammar
 * cannot enforce, or a forced one whose parameters no grammar can decode (a `$ref` cycle that
 * reads no input), is refused naming its place; and on an upstream model whose catalog entry says
 * `capabilities.tools` (the upstream decodes and enforces `strict` itself, and its refusals come
 * back as 400s). Another upstream model offered tools is refused naming `tools` and the model.
 * @throws AppError 400.
 */
export function assertToolsServed(model: CatalogModel, tools: ToolSpec[], mode: ToolMode): void {
  if (mode.kind === "none") return;
  if (model.engine.type !== "llama_cpp") {
    if (model.capabilities.tools) return;
    throw AppError.invalid(`Model '${echo(model.id)}' cannot call tools (its upstream is not declared to serve them)`, [
      { field: "tools", message: `tool calling is not supported for model '${model.id}'` },
    ]);
  }
  const { issues, fatal } = toolSchemaIssues(tools, mode);
  if (issues.length > 0) {
    throw AppError.invalid(
      fatal
        ? `Model '${model.id}' cannot decode the schema at ${issues[0].field}: ${issues[0].message}`
        : `Model '${model.id}' cannot enforce ${issues[0].field} while decoding; strict: true needs every keyword enforced`,
      issues,
    );
  }
}

/**
 * Stop strings where the embedded engine decodes under a grammar (a structured output or a forced
 * tool call) are refused naming the stop field (review finding F8): a stop string matched inside
 * the grammar's JSON would cut it and still end with `stop`, breaking "every answer that ends with
 * `stop` parses". An upstream model is left to its own server.
 * @throws AppError 400 naming `stopField`.
 */
export function assertStopDecodable(
  model: CatalogModel,
  params: SamplingParams,
  mode: ToolMode,
  stopField: string,
): void {
  if (model.engine.type !== "llama_cpp" || (params.stop?.length ?? 0) === 0) return;
  const grammar = mode.kind === "forced" ? "a forced tool call" : params.responseFormat ? "a structured output" : null;
  if (!grammar) return;
  throw AppError.invalid(
    `Model '${model.id}' cannot combine ${stopField} with ${grammar}: a stop string would cut the JSON it decodes`,
    [{ field: stopField, message: `cannot be combined with ${grammar} on model '${model.id}'` }],
  );
}

/**
 * A create request's metadata as its call sees it. A batch item's has no completion webhook and
 * no stream: batch items are followed through the batch (results, the events feed with
 * `batch_id`), not one callback per item (the token is redacted when the item is stored, so it
 * could not be sent anyway), and they belong to their batch (activity `type: batch`).
 */
export function callMetadata(
  metadata: Record<string, unknown> | null | undefined,
  batch: BatchItemCall | undefined,
): Record<string, unknown> | null | undefined {
  if (!batch) return metadata;
  if (!metadata) return null;
  const { completion_webhook: _url, webhook_token: _token, stream_id: _stream, ...rest } = metadata;
  return rest;
}

/** The batch fields of an `InferenceService` call. */
export function batchFields(batch: BatchItemCall | undefined) {
  if (!batch) return {};
  const { batchId, customId, onEngineDone } = batch;
  return { batch: { batchId, customId, onEngineDone }, onFailure: batch.onFailure };
}

/**
 * Runs a generation call: streamed through the caller's transport with the protocol's events when
 * `stream` is given, else answered whole.
 * @throws what `InferenceService.generate` throws (when streamed: only before the stream opened).
 */
export async function runGeneration<T>(
  inference: InferenceService,
  ctx: RequestContext,
  call: GenerationCall<T>,
  stream: { transport: StreamTransport; events: StreamEvents<T> } | null,
): Promise<Created<T>> {
  if (!stream) {
    const out = await inference.generate(ctx, call);
    return { body: out.body, engineMs: out.result.engineMs + out.result.queueMs };
  }
  await stream.transport(stream.events, (hooks) => inference.generate(ctx, { ...call, ...hooks }));
  return { streamed: true };
}

/**
 * The transport to stream through when the body asks for `stream: true`, or null.
 * @throws AppError 400 naming `stream` when the caller cannot stream (a batch item).
 */
export function streamTransport(
  wantsStream: boolean | null | undefined,
  options: CreateOptions,
): StreamTransport | null {
  if (!wantsStream) return null;
  if (!options.stream)
    throw AppError.invalid("stream is not allowed here", [{ field: "stream", message: "is not allowed here" }]);
  return options.stream;
}

/** The request fields every create operation's body has in common. */
interface CommonBody {
  model: string;
  metadata?: Record<string, unknown> | null;
  max_queue_wait_s?: number | null;
}

/**
 * The parts of an engine call that come from the caller's options and the body's common fields:
 * the metadata as the call sees it, the raw body, the queue wait (the caller's, else the body's),
 * the abort signal and a batch item's record.
 */
export function callFields(body: CommonBody, options: CreateOptions) {
  return {
    metadata: callMetadata(body.metadata, options.batch),
    body: options.rawBody,
    maxQueueWaitS: options.maxQueueWaitS ?? body.max_queue_wait_s,
    signal: options.signal,
    ...batchFields(options.batch),
  };
}

/**
 * What a text generation needs once its checks passed (`checkGeneration`): streaming possible where
 * asked for, and its request id.
 * @throws AppError 400 for `stream` where it cannot stream.
 */
export function prepareGeneration(model: CatalogModel, body: { stream?: boolean | null }, options: CreateOptions) {
  return { model, transport: streamTransport(body.stream, options), requestId: options.requestId ?? uuidv7() };
}

/**
 * The checks of a text generation that need no engine (the batch create runs them for each item):
 * every field it sets honoured by `model` (issue 26, item 6) and the translated messages text only.
 * @throws AppError 400.
 */
export function checkGeneration(
  model: CatalogModel,
  translated: { unsupported: string[] },
  unhonoured: UnhonouredField[],
): void {
  assertHonoured(model, unhonoured);
  assertTextOnly(translated.unsupported);
}
