/**
 * `createResponse`: the OpenAI Responses create operation: synchronous and streamed (REST),
 * background submission (REST), and the background worker's run of a submitted response.
 */
import { v7 as uuidv7 } from "uuid";
import type { CatalogModel } from "../../../config/catalog.js";
import type { ChatMessage, GenerateResult } from "../../../inference/engine.js";
import type { ActivityStatus } from "../../../entities/activity.entity.js";
import type { ModelCatalogService } from "../../models/model-catalog.service.js";
import { requirePrincipal, type RequestContext } from "../../platform/context.js";
import type { StoredResponse } from "../../metering/metering.service.js";
import type { FailureRecord } from "../inference-calls.js";
import {
  type ResponseFunctionCall,
  type ResponseObject,
  type ResponseRequest,
  ResponseStreamEvents,
  answeredTier,
  continuedMessages,
  responseMessages,
  responseObject,
  responseParams,
  responseTooling,
  responseUnhonoured,
} from "../protocols/openai-responses.protocol.js";
import { toolCallId } from "../protocols/tools.js";
import {
  type CreateOptions,
  type Created,
  type InferenceOperations,
  checkToolGeneration,
  namedEvents,
  runGeneration,
  streamTransport,
} from "./create-call.js";

/** Stores a `background: true` request and enqueues its run (`BackgroundResponsesService.submit`). */
export interface BackgroundSubmitter {
  submit(ctx: RequestContext, req: ResponseRequest, raw: unknown, model: CatalogModel): Promise<ResponseObject>;
}

/** The conversation a create continues (`ResponsesService.conversation`). */
export interface ConversationReader {
  conversation(ctx: RequestContext, id: string): Promise<ChatMessage[]>;
}

/** The services the Responses create operation runs on. */
export interface ResponseOperations extends InferenceOperations {
  background: BackgroundSubmitter;
  responses: ConversationReader;
}

/** What the background worker adds when it runs a submitted response (issue 6, item 2). */
export interface SubmittedRun {
  /** The stored response's id and creation time. */
  requestId: string;
  createdAt: Date;
  /** The request's metadata with its webhook token restored (the stored copy is redacted). */
  metadata: Record<string, unknown> | null;
  /** Until the deadline, seconds: background work waits for a slot instead of a 429. */
  maxQueueWaitS: number;
  /** The response as it ends (a deadline that passed meanwhile makes it `failed`). */
  end(object: ResponseObject): { object: ResponseObject; status?: ActivityStatus };
  /** How a failure is recorded (null: not recorded, another worker resumes it). */
  onFailure(err: unknown): FailureRecord | null;
}

/** The row a Response is stored as (`responses`), from the object it answers. */
export function storedResponse(
  object: ResponseObject,
  background: boolean,
  metadata: Record<string, unknown> | null,
  requestJson: unknown,
): StoredResponse {
  return { status: object.status, background, metadata, requestJson, responseJson: { ...object } };
}

/**
 * The checks of a Responses create that need no engine, for `teamId` (the batch create runs them
 * for each item): the model resolved, every field honoured, text only, the tools servable, and —
 * unless it continues a stored conversation, which `continuedMessages` checks with it once read —
 * the `function_call` / `function_call_output` items paired. `translated` is the input as read.
 * @throws AppError 404 unknown model; 400.
 */
export function checkResponse(catalog: ModelCatalogService, teamId: string, body: ResponseRequest) {
  const translated = responseMessages(body);
  const checked = checkToolGeneration(
    catalog,
    teamId,
    body.model,
    translated,
    responseUnhonoured(body),
    () => responseTooling(body),
    { params: responseParams(body) },
  );
  if (!body.previous_response_id) continuedMessages(body, translated, []);
  return { ...checked, translated };
}

/**
 * Runs a Responses create: resolve the model → translate the input (text only) → with
 * `background: true`, store it `in_progress` and enqueue it (answered at once); else generate,
 * metered once → the Response (stored unless `store: false`), or its stream events. Given `run`,
 * it is the background worker's generation of a submitted response (accepted earlier: a stream
 * closed since does not refuse it). With `previous_response_id`, the stored conversation it names
 * comes before the input (`ResponsesService.conversation`). With `tools`, each call an answer
 * makes is a `function_call` item (several where `parallel_tool_calls` is not false), after a
 * message item with the text it gave before them (streamed as it came). A forced function call cut short
 * answers no output item (`output: []`, `incomplete`), so nothing of it is stored as text.
 * @throws AppError 400 (body, non-text parts, prompt or limits), 401, 402, 404 unknown model or
 *   another team's stream, 429, 502/503 (see `InferenceService.generate`,
 *   `BackgroundResponsesService.submit`).
 */
export async function createResponse(
  ops: ResponseOperations,
  ctx: RequestContext,
  body: ResponseRequest,
  options: CreateOptions & { run?: SubmittedRun },
): Promise<Created<ResponseObject>> {
  const { model, translated, tools, mode } = checkResponse(ops.catalog, requirePrincipal(ctx).teamId, body);
  const run = options.run;
  // The earlier turns go after this request's instructions and before its input (issue 26, item 4);
  // read and checked before a background submission too, so a bad id or tool history is a 400/404
  // at submission rather than a failed run later.
  const history = body.previous_response_id ? await ops.responses.conversation(ctx, body.previous_response_id) : [];
  const messages = body.previous_response_id ? continuedMessages(body, translated, history) : translated.messages;
  if (body.background && !run) return { body: await ops.background.submit(ctx, body, options.rawBody, model) };
  const params = responseParams(body);
  /** The calls an answer makes, in order, each a `function_call` item with ids of ours. */
  const functionCalls = (result: GenerateResult): ResponseFunctionCall[] =>
    (result.toolCalls ?? []).map((call) => ({
      type: "function_call",
      id: toolCallId("fc_"),
      call_id: toolCallId("call_"),
      name: call.name,
      arguments: call.arguments,
      status: "completed",
    }));
  // With tools offered, the message item opens with the first text: an answer may be calls alone.
  const held = mode.kind !== "none";
  const previous = body.previous_response_id ?? null;
  const transport = streamTransport(body.stream, options);
  const requestId = run?.requestId ?? uuidv7();
  const createdAt = run?.createdAt ?? new Date();
  const tier = answeredTier(body);
  const store = body.store !== false;
  const metadata = run ? run.metadata : body.metadata;
  const events = new ResponseStreamEvents(requestId, createdAt, model.id, tier, previous);
  return runGeneration(
    ops.inference,
    ctx,
    {
      requestId,
      createdAt,
      endpoint: "/v1/responses",
      serviceTier: tier,
      model,
      messages,
      params,
      tools,
      metadata,
      body: store ? options.rawBody : null,
      ...(run ? { admitted: true, onFailure: (err: unknown) => run.onFailure(err) } : {}),
      maxQueueWaitS: run?.maxQueueWaitS ?? body.max_queue_wait_s,
      signal: options.signal,
      render: (result) => {
        // A forced call that did not complete is no text (review finding F6: no output item, `incomplete`).
        const noText = mode.kind === "forced" && !result.toolCalls?.length;
        const calls = functionCalls(result);
        const object = responseObject(requestId, createdAt, model.id, tier, result, previous, calls, noText);
        const ended = run?.end(object) ?? { object };
        return {
          body: ended.object,
          status: ended.status,
          response: store ? storedResponse(ended.object, !!run, metadata ?? null, options.rawBody) : undefined,
        };
      },
    },
    transport && {
      transport,
      events: {
        start: () => namedEvents(events.start(held)),
        delta: (text) => namedEvents(events.delta(text)),
        finish: (_result, response) => namedEvents(events.finish(response)),
        error: (failure) => namedEvents(events.error(failure)),
      },
    },
  );
}
