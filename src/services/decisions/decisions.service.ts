/**
 * Decisions (issue 11; DESIGN §3 Decisions): one service behind `POST /v1/decisions`, the GraphQL
 * `createDecision` mutation and `/v1/decisions` batch items. Validation and answers are in
 * `decisions.protocol.ts`; the engine call, credit, metering, activity record and completion event
 * go through `InferenceService.score`, like every other create operation.
 */
import { v7 as uuidv7 } from "uuid";
import type { CatalogModel } from "../../config/catalog.js";
import { AppError, ErrorCode, parseInput } from "../../shared/errors.js";
import { type RequestContext, requirePrincipal } from "../platform/context.js";
import type { InferenceService } from "../inference/inference.service.js";
import {
  type CreateOptions,
  type InferenceOperations,
  batchFields,
  callMetadata,
} from "../inference/use-cases/create-call.js";
import type { ModelCatalogService } from "../models/model-catalog.service.js";
import {
  DECISION_BODY_LIMIT_BYTES,
  type DecisionRequest,
  type DecisionResponse,
  decisionRequest,
  decisionResponse,
  scoredQuestion,
  stateText,
} from "./decisions.protocol.js";

/** How a decision request is run: a create operation's options (never streamed), and the body's size. */
export interface DecisionOptions extends Omit<CreateOptions, "stream" | "rawBody"> {
  /**
   * The body's size as the client sent it, bytes (REST: what the route's parser read); without it
   * the body is measured as JSON (GraphQL arguments, batch items). See `prepareDecision`.
   */
  bodyBytes?: number;
}

export interface DecisionOutcome {
  body: DecisionResponse;
  /** Engine time (queue + scoring), ms. */
  engineMs: number;
}

/**
 * Validates a decisions body and resolves its model for `teamId`.
 * @param bodyBytes the body's size as sent, bytes, when known (REST); else it is measured as
 *   compact JSON (GraphQL, batch items). Re-serialising is no measure of a body that was sent:
 *   `1e20` comes back as 21 digits, so a body under 1 MiB could measure over it.
 * @throws AppError 413 over 1 MiB; 400 naming the offending field (`questions.<name>…`
 *   for a question); 404 unknown model; 400 when the model does not serve decisions.
 */
export function prepareDecision(
  catalog: ModelCatalogService,
  teamId: string,
  raw: unknown,
  bodyBytes?: number,
): { request: DecisionRequest; model: CatalogModel } {
  if ((bodyBytes ?? Buffer.byteLength(JSON.stringify(raw) ?? "")) > DECISION_BODY_LIMIT_BYTES) {
    throw new AppError(ErrorCode.PayloadTooLarge, `A decisions request is at most ${DECISION_BODY_LIMIT_BYTES} bytes`);
  }
  const request = parseInput(decisionRequest, raw);
  return { request, model: catalog.resolve(teamId, request.model, "decisions") };
}

/**
 * The decisions create operation (the body is parsed here: its size limit is on the body as
 * sent). Runs one decisions request: every question's answers scored in one engine call (the shared
 * prefix evaluated once), probabilities calibrated by the model's `decisionTemperature`, the
 * request metered as prompt tokens at the input price and recorded (activity, completion event).
 * A question where one answer is a prefix of another is scored with an end marker after each
 * answer (`hasPrefixAnswers`). A client that leaves, or scoring past the time limit, ends the
 * request with what was evaluated charged (`InferenceService.score`).
 * @throws as `prepareDecision`, and as `InferenceService.score` (401, 402, 429, 502/503; 400 when
 *   a question does not fit the context, two answers tokenise identically, the upstream prompts
 *   are over their byte limit, or the engine cannot give log-probabilities; 504 past the time limit).
 */
export async function createDecision(
  ops: InferenceOperations,
  ctx: RequestContext,
  raw: unknown,
  options: DecisionOptions = {},
): Promise<DecisionOutcome> {
  const { request, model } = prepareDecision(ops.catalog, requirePrincipal(ctx).teamId, raw, options.bodyBytes);
  const state = stateText(request.state);
  const out = await ops.inference.score(ctx, {
    requestId: options.requestId ?? uuidv7(),
    createdAt: new Date(),
    endpoint: "/v1/decisions",
    model,
    metadata: callMetadata(request.metadata, options.batch),
    body: raw,
    ...batchFields(options.batch),
    maxQueueWaitS: options.maxQueueWaitS ?? request.max_queue_wait_s,
    signal: options.signal,
    questions: Object.entries(request.questions).map(([name, q]) => scoredQuestion(state, name, q)),
    render: (result) =>
      decisionResponse(model.id, request, result.scores, model.decisionTemperature, result.promptTokens),
  });
  return { body: out.body, engineMs: out.result.engineMs + out.result.queueMs };
}

/** The decisions service the REST table and the GraphQL resolver share. */
export class DecisionsService {
  constructor(
    private readonly inference: InferenceService,
    private readonly catalog: ModelCatalogService,
  ) {}

  /**
   * See `createDecision`.
   * @param bodyBytes the body's size as sent, when the caller measured it (REST; `DecisionOptions.bodyBytes`).
   */
  decide(ctx: RequestContext, raw: unknown, signal?: AbortSignal, bodyBytes?: number): Promise<DecisionOutcome> {
    return createDecision({ inference: this.inference, catalog: this.catalog }, ctx, raw, { signal, bodyBytes });
  }
}
