/**
 * The core of the four create operations (spec: What the service does, 1): credit check, engine
 * call, token usage and cost, and one metered record per request through the group commit. The
 * protocol modules (`protocols/*`) translate OpenAI/Anthropic bodies to and from these calls.
 */
import type { Logger } from "pino";
import type { CatalogModel } from "../../config/catalog.js";
import type { EngineRouter } from "../../inference/engine-router.js";
import type { EngineUsage } from "../../inference/engine.js";
import { ScoringStopped } from "../../inference/engine.js";
import { type Principal, type RequestContext, requirePrincipal } from "../platform/context.js";
import { type CreditReservation, type CreditService, jointReservation } from "../ledger/credit.service.js";
import type { KeyBudgetService } from "../ledger/key-budget.service.js";
import type { KeyLimitsService } from "../metering/key-limits.service.js";
import type { EnforcedKeyPolicy } from "../accounts/key-policy-cache.js";
import { AppError, ErrorCode } from "../../shared/errors.js";
import type { MeteringService, StoredResponse, UsageRecord } from "../metering/metering.service.js";
import type { ActivityStatus, ActivityType } from "../../entities/activity.entity.js";
import { costMicros, type TokenPrices } from "../../shared/money.js";
import { traceTeam } from "../../shared/tracing.js";
import { failureBody, withStatus } from "../events/webhooks/webhook-body.js";
import { webhookTarget, type WebhookRequest } from "../events/webhooks/webhook-target.js";
import type {
  EmbeddingCall,
  EmbeddingOutcome,
  GenerationCall,
  GenerationOutcome,
  RequestInfo,
  ScoringCall,
  ScoringOutcome,
} from "./inference-calls.js";
import { GENERATION_LIMITS } from "./inference-calls.js";
import type { StreamDirectory } from "./responses/stream-directory.js";
import type { RateLimitService } from "../metering/rate-limit.service.js";
import type { PriceLookup } from "../metering/price-book.service.js";
import type { InFlightActivity, InFlightMark, InFlightStatus } from "../metering/in-flight-activity.js";

/** What the engine call of a metered request gets from the skeleton (`InferenceService.metered`). */
interface MeteredEngineCall {
  /** Reserves the worst-case cost once the prompt is counted. @throws AppError 402 when not covered. */
  admit(promptTokens: number, maxCompletionTokens: number): Promise<void>;
  /** The engine started on the request: its early row says `running`. */
  started(): void;
  maxQueueWaitMs: number;
  priority: "batch" | "interactive";
}

/** What a finished engine call records and answers. */
interface MeteredFinish<T> {
  usage: EngineUsage;
  engineMs: number;
  status: ActivityStatus;
  /** The API object answered. */
  body: T;
  /** The activity's `result_json`. */
  resultJson: unknown;
  response?: StoredResponse;
  /** The completion webhook's body, built only when there is a webhook. */
  webhookBody: () => unknown;
}

/** What differs between `generate`, `embed` and `score` around the one metered-call skeleton. */
interface MeteredSteps<R, T> {
  /** Refusals before admission (generation limits). */
  precheck?: () => void;
  /** The early row's status until the engine starts. */
  waiting: InFlightStatus;
  run(engine: MeteredEngineCall): Promise<R>;
  /** Records a failure; default: the reservation is let go and `recordFailure` decides. @returns whether a record was written. */
  failed?: (
    err: unknown,
    type: ActivityType,
    reservation: CreditReservation | undefined,
    keyPolicy: EnforcedKeyPolicy | null,
  ) => Promise<boolean>;
  finish(result: R): MeteredFinish<T>;
}

/** Usage of a call that only reads tokens (embeddings, scoring). */
function promptOnly(promptTokens: number): EngineUsage {
  return { promptTokens, completionTokens: 0, cachedPromptTokens: 0 };
}

/** Runs generations and embeddings for the create operations and meters each request once. */
export class InferenceService {
  constructor(
    private readonly engines: EngineRouter,
    private readonly metering: MeteringService,
    private readonly credit: CreditService,
    /** Default `max_queue_wait_s`, seconds. */
    private readonly defaultQueueWaitS: number,
    /** Owners of `metadata.stream_id` (issue 6, item 4); without it every request is `standalone`. */
    private readonly streams?: StreamDirectory,
    /** Per-team model limits (issue 9, item 5); without it nothing is limited. */
    private readonly rateLimits?: RateLimitService,
    /** Pricing history (issue 10, item 3); without it every request pays the catalog price. */
    private readonly prices?: PriceLookup,
    /** Early `pending`/`running` activity rows of long requests; without it rows appear when requests end. */
    private readonly inFlight?: InFlightActivity,
    /** Where failures to record a request are logged (review 11b, L4); without it they are not. */
    private readonly logger?: Logger,
    /** API key limits at admission (issue 29, item 1); without it keys carry no policy. */
    private readonly keyLimits?: KeyLimitsService,
    /** API key budgets (issue 29, item 1); without it no key budget is reserved. */
    private readonly keyBudgets?: KeyBudgetService,
  ) {}

  /**
   * The prices a request pays: those in force when it was received (`createdAt`), even if a new
   * version took effect while it ran (DESIGN §3 Money; issue 10, item 3). In memory, no DB read.
   */
  private pricesOf(call: RequestInfo): TokenPrices {
    return this.prices?.pricesAt(call.model, call.createdAt) ?? call.model.prices;
  }

  /**
   * Counts one request of `teamId` for `model` against the model's per-team limits (see
   * `RateLimitService` for what is limited); background responses call it at submission.
   * @throws AppError 429 with `Retry-After` when a limit is reached.
   */
  admitRate(teamId: string, model: CatalogModel): Promise<void> {
    return this.rateLimits?.admit(teamId, model) ?? Promise.resolve();
  }

  /**
   * Admits a request under its API key's policy (issue 29, item 1; `KeyLimitsService`): expiry,
   * allowed models and the key's per-minute limits. Background responses call it at submission.
   * @returns the key's policy (null without a key).
   * @throws AppError 401 (expired key), 403 (model not allowed), 429 (the key's rpm or tpm).
   */
  admitKey(principal: Principal, model: CatalogModel): Promise<EnforcedKeyPolicy | null> {
    return this.keyLimits?.admit(principal, model) ?? Promise.resolve(null);
  }

  /**
   * What every create operation checks before engine work, in order: its activity type (the
   * stream named in `metadata`; `batch` for batch items), credit above zero, its API key's model
   * and expiry, the team's rate limits when they apply, and the key's per-minute limits (counted
   * for every request but a background run admitted at submission).
   * @returns the activity type and the key's policy.
   * @throws AppError 404/400 for `metadata.stream_id` (see `activityType`); 402 without credit;
   *   401/403/429 as `admitKey`; 429 for the team's model limits.
   */
  private async admitCall(
    principal: Principal,
    call: RequestInfo,
  ): Promise<{ type: ActivityType; keyPolicy: EnforcedKeyPolicy | null }> {
    const teamId = principal.teamId;
    const type = call.batch ? "batch" : await this.activityType(teamId, call.metadata, !call.admitted);
    await this.metering.assertCredit(teamId);
    const keyPolicy = (await this.keyLimits?.check(principal, call.model)) ?? null;
    if (this.rateLimited(call)) await this.admitRate(teamId, call.model);
    if (!call.admitted) await this.keyLimits?.countRequest(principal, keyPolicy);
    return { type, keyPolicy };
  }

  /**
   * Reserves a request's worst case from its API key's budget (when the key has one) and from
   * the team's credit, both before any engine work; one reservation settles or releases both.
   * @throws AppError 402 from whichever does not cover it (the key's first).
   */
  private async reserve(
    principal: Principal,
    keyPolicy: EnforcedKeyPolicy | null,
    worstMicros: bigint,
  ): Promise<CreditReservation> {
    const keyId = principal.apiKey?.id;
    if (!keyId || !keyPolicy?.budgeted || !this.keyBudgets) return this.credit.reserve(principal.teamId, worstMicros);
    const key = await this.keyBudgets.reserve(keyId, worstMicros);
    const team = await this.credit.reserve(principal.teamId, worstMicros).catch((err: unknown) => {
      key.release();
      throw err;
    });
    return jointReservation(key, team);
  }

  /** Counts a finished request's tokens against the team's model limits (not batch items) and its key's. */
  private countTokens(principal: Principal, call: RequestInfo, keyPolicy: EnforcedKeyPolicy | null, tokens: number) {
    if (!call.batch) this.rateLimits?.recordTokens(principal.teamId, call.model, tokens);
    this.keyLimits?.recordTokens(principal, keyPolicy, tokens);
  }

  /** Whether `call` counts against the rate limits now: not batch items, not a background run admitted earlier. */
  private rateLimited(call: RequestInfo): boolean {
    return !call.batch && !call.admitted;
  }

  /**
   * The activity type of a request (`stream` in one of the team's streams).
   * @param creating true for a request being accepted now (see `StreamDirectory.activityType`).
   * @throws AppError 404 when `metadata.stream_id` names another team's stream; 400 naming
   *   `metadata.stream_id` when `creating` and the team's stream is cancelled or archived.
   */
  activityType(
    teamId: string,
    metadata: Record<string, unknown> | null | undefined,
    creating = false,
  ): Promise<ActivityType> {
    return this.streams?.activityType(teamId, metadata, creating) ?? Promise.resolve("standalone");
  }

  /**
   * Runs one generation and meters it. Resolves after the activity row and the charge are
   * committed, so a delivered answer is always recorded and charged exactly once.
   * Credit (DESIGN §3 Money): 402 at once when the team has none; once the prompt is counted,
   * the worst-case cost (prompt at the input price + `max_tokens`, or the rest of the context, at
   * the output price) is reserved through `CreditService` before a slot is taken, and settled at
   * the real cost when the record commits.
   * @throws AppError 401; 404 when `metadata.stream_id` names another team's stream, 400 when it
   *   names the team's cancelled or archived one (unless `admitted`); 402 without credit or when the worst case is not covered (before any
   *   engine work); 400 when the prompt does not fit or breaks `GENERATION_LIMITS`; 429 when no
   *   engine slot frees up within `max_queue_wait_s` (no charge); 502/503 on engine failure
   *   (recorded as a failed request, no charge).
   */
  generate<T>(ctx: RequestContext, call: GenerationCall<T>): Promise<GenerationOutcome<T>> {
    return this.metered(ctx, call, {
      precheck: () => assertGenerationLimits(call),
      waiting: "pending",
      run: (engine) =>
        this.engines.engineFor(call.model).generate({
          model: call.model,
          messages: call.messages,
          ...call.params,
          tools: call.tools,
          signal: call.signal,
          onStart: (start) => {
            engine.started();
            call.onStart?.(start);
          },
          onText: call.onText,
          admit: (promptTokens, maxCompletionTokens) => engine.admit(promptTokens, maxCompletionTokens),
          maxQueueWaitMs: engine.maxQueueWaitMs,
          priority: engine.priority,
        }),
      finish: (result) => {
        const rendered = call.render(result);
        const status = rendered.status ?? (result.finishReason === "cancelled" ? "cancelled" : "completed");
        return {
          usage: result.usage,
          engineMs: result.engineMs,
          status,
          body: rendered.body,
          resultJson: call.body === null ? null : rendered.body,
          response: rendered.response,
          webhookBody: () => withStatus(rendered.body, status),
        };
      },
    });
  }

  /**
   * Embeds the inputs and meters the request (prompt tokens only).
   * @throws as `generate`.
   */
  async embed<T>(ctx: RequestContext, call: EmbeddingCall<T>): Promise<EmbeddingOutcome<T>> {
    // `running` at once: an embedding call has no queue phase worth showing apart.
    return this.metered(ctx, call, {
      waiting: "running",
      run: (engine) =>
        this.engines.engineFor(call.model).embed({
          model: call.model,
          inputs: call.inputs,
          signal: call.signal,
          admit: (promptTokens) => engine.admit(promptTokens, 0),
          maxQueueWaitMs: engine.maxQueueWaitMs,
          priority: engine.priority,
        }),
      finish: (result) => {
        const body = call.render?.(result);
        return {
          usage: promptOnly(result.promptTokens),
          engineMs: result.engineMs,
          status: "completed",
          body: body as T,
          // A batch item's result is its row in the batch results (issue 7); synchronous answers
          // are not kept (vectors are large and the caller has them).
          resultJson: call.batch ? (body ?? null) : null,
          webhookBody: () => withStatus(body ?? null, "completed"),
        };
      },
    });
  }

  /**
   * Scores answers by their log-probabilities (decisions, issue 11) and meters the request: prompt
   * tokens only (`ScoreResult.promptTokens`: what the engine evaluated; see there) at the model's
   * input price; credit, rate limits, activity record and completion event as `generate`. When the
   * engine stops part way (`ScoringStopped`: client gone, time limit), the tokens it evaluated are
   * recorded and charged (`recordStoppedScoring`) and the error is thrown.
   * @throws as `generate`; AppError 400 when the model's engine cannot give log-probabilities.
   */
  async score<T>(ctx: RequestContext, call: ScoringCall<T>): Promise<ScoringOutcome<T>> {
    const principal = requirePrincipal(ctx);
    const engine = this.engines.engineFor(call.model);
    const scoreContinuations = engine.scoreContinuations?.bind(engine);
    if (!scoreContinuations) {
      throw AppError.invalid(`Model '${call.model.id}' is served by an engine that cannot give log-probabilities`, [
        { field: "model", message: "log-probabilities unavailable" },
      ]);
    }
    return this.metered(ctx, call, {
      // `pending` while it waits for a scoring context, `running` once it scores (as generation).
      waiting: "pending",
      run: (metered) =>
        scoreContinuations({
          model: call.model,
          questions: call.questions,
          signal: call.signal,
          onStart: () => metered.started(),
          admit: (promptTokens) => metered.admit(promptTokens, 0),
          maxQueueWaitMs: metered.maxQueueWaitMs,
          priority: metered.priority,
        }),
      // A stopped run is charged for what the engine evaluated, from its reservation.
      failed: (err, type, reservation, keyPolicy) =>
        err instanceof ScoringStopped
          ? this.recordStoppedScoring(principal, call, type, err, reservation, keyPolicy)
          : this.recordFailure(principal, call, type, err),
      finish: (result) => {
        const body = call.render(result);
        return {
          usage: promptOnly(result.promptTokens),
          engineMs: result.engineMs,
          status: "completed",
          body,
          resultJson: call.body === null ? null : body,
          webhookBody: () => withStatus(body, "completed"),
        };
      },
    });
  }

  /**
   * The metered-call skeleton under `generate`, `embed` and `score` (issue 25, item 2), in order:
   * refusals before any engine work (`precheck`, then `admitCall`: stream, credit, rate limits; a
   * batch item's are recorded as its failure, inside the try); the early activity row; the engine
   * call, whose `admit` reserves the worst-case cost once the prompt is counted; on failure the
   * reservation is let go and the failure recorded (`failed`, default `recordFailure`); on success
   * the record is committed through the group commit, the reservation settled at the real cost,
   * and the tokens counted against the rate limits (not for batch items).
   * @throws what the admission or the engine throws (after recording it as said).
   */
  private async metered<R extends { engineMs: number }, T>(
    ctx: RequestContext,
    call: RequestInfo & { maxQueueWaitS?: number | null },
    steps: MeteredSteps<R, T>,
  ): Promise<{ result: R; body: T; costMicros: bigint }> {
    const principal = requirePrincipal(ctx);
    traceTeam(principal.teamId);
    const admitCall = () => {
      steps.precheck?.();
      return this.admitCall(principal, call);
    };
    let type: ActivityType = "batch";
    let keyPolicy: EnforcedKeyPolicy | null = null;
    if (!call.batch) ({ type, keyPolicy } = await admitCall());
    let reservation: CreditReservation | undefined;
    let mark: InFlightMark | undefined;
    let recorded = false;
    let result: R;
    try {
      if (call.batch) ({ type, keyPolicy } = await admitCall());
      mark = this.track(principal, call, type, steps.waiting);
      result = await steps.run({
        admit: async (promptTokens, maxCompletionTokens) => {
          const worst = costMicros(
            { promptTokens, completionTokens: maxCompletionTokens, cachedPromptTokens: 0 },
            this.pricesOf(call),
          );
          reservation = await this.reserve(principal, keyPolicy, worst);
        },
        started: () => mark?.running(),
        maxQueueWaitMs: (call.maxQueueWaitS ?? this.defaultQueueWaitS) * 1000,
        priority: call.batch ? "batch" : "interactive",
      });
      call.batch?.onEngineDone?.();
    } catch (err) {
      try {
        if (steps.failed) {
          recorded = await steps.failed(err, type, reservation, keyPolicy);
        } else {
          reservation?.release();
          recorded = await this.recordFailure(principal, call, type, err);
        }
      } finally {
        reservation?.release(); // no-op once settled or released
        // A refusal is answered only once the early row it wrote, if any, is gone.
        await mark?.end(recorded);
      }
      throw err;
    }
    try {
      const done = steps.finish(result);
      const cost = costMicros(done.usage, this.pricesOf(call));
      const charge = await this.metering.record({
        ...usageRecord(principal, call, type),
        status: done.status,
        usage: done.usage,
        costMicros: cost,
        resultJson: done.resultJson,
        engineMs: done.engineMs,
        response: done.response,
        webhook: webhookRequest(call.metadata, done.webhookBody),
      });
      recorded = true;
      reservation?.settle(charge.chargedMicros);
      this.countTokens(principal, call, keyPolicy, done.usage.promptTokens + done.usage.completionTokens);
      return { result, body: done.body, costMicros: cost };
    } finally {
      reservation?.release(); // no-op once settled
      await mark?.end(recorded);
    }
  }

  /**
   * A scoring run the engine stopped part way (issue 11 review, findings 3–4): recorded as
   * `cancelled` (the client went away) or `failed` (the time limit), with the prompt tokens the
   * engine had evaluated as its usage, and charged for them at the input price (as a cancelled
   * generation is charged for the tokens it produced), and counted against the token rate limits.
   * A call with `onFailure` records as it says, with the same usage and charge.
   * @returns whether a record was written.
   */
  private async recordStoppedScoring(
    principal: Principal,
    call: RequestInfo,
    type: ActivityType,
    err: ScoringStopped,
    reservation: CreditReservation | undefined,
    keyPolicy: EnforcedKeyPolicy | null,
  ): Promise<boolean> {
    const usage = { promptTokens: err.promptTokens, completionTokens: 0, cachedPromptTokens: 0 };
    const metered = { usage, costMicros: costMicros(usage, this.pricesOf(call)), engineMs: err.engineMs };
    let record: UsageRecord;
    if (call.onFailure) {
      const failure = call.onFailure(err);
      if (!failure) return false;
      record = { ...usageRecord(principal, call, type), ...failure, ...metered };
    } else {
      const status = err.code === ErrorCode.ClientClosed ? "cancelled" : "failed";
      const error = { code: err.code, message: err.detail };
      record = {
        ...usageRecord(principal, call, type),
        status,
        errorJson: error,
        ...metered,
        webhook: failureWebhook(call, status, error),
      };
    }
    // The engine's error is what the caller gets; a failed write is logged, or the work would go unpaid unseen.
    const charge = await this.metering.record(record).catch((writeErr: unknown) => {
      this.logger?.error(
        { err: writeErr, requestId: call.requestId, teamId: principal.teamId, promptTokens: err.promptTokens },
        "recording stopped scoring failed: its evaluated tokens are not charged",
      );
      return undefined;
    });
    if (charge) reservation?.settle(charge.chargedMicros);
    this.countTokens(principal, call, keyPolicy, err.promptTokens);
    return charge !== undefined;
  }

  /**
   * Engine failures are recorded as failed requests, and clients that left before the engine
   * started as cancelled ones (no charge either way); refusals (400/429) are not recorded. A
   * call with `onFailure` (background responses) records every failure as it says.
   */
  private async recordFailure(
    principal: Principal,
    call: RequestInfo,
    type: ActivityType,
    err: unknown,
  ): Promise<boolean> {
    if (call.onFailure) {
      const failure = call.onFailure(err);
      if (!failure) return false;
      await this.metering.record({ ...usageRecord(principal, call, type), ...failure });
      return true;
    }
    const code = err instanceof AppError ? err.code : ErrorCode.Internal;
    if (code === ErrorCode.InvalidRequest || code === ErrorCode.RateLimited || code === ErrorCode.InsufficientCredit) {
      return false;
    }
    const status = code === ErrorCode.ClientClosed ? "cancelled" : "failed";
    const error = { code, message: err instanceof AppError ? err.detail : "Internal error" };
    return this.metering
      .record({
        ...usageRecord(principal, call, type),
        status,
        errorJson: error,
        webhook: failureWebhook(call, status, error),
      })
      .then(
        () => true,
        () => false,
      );
  }

  /** Starts the early activity row of a request admitted now (see `InFlightActivity`). */
  private track(
    principal: Principal,
    call: RequestInfo,
    type: ActivityType,
    status: InFlightStatus,
  ): InFlightMark | undefined {
    // Built only if the row is written (after `afterMs`): most requests end before.
    return this.inFlight?.track(() => ({ ...usageRecord(principal, call, type), status, completedAt: null }), status);
  }
}

/** @throws AppError 400 naming `messages` or the stop field when a call breaks `GENERATION_LIMITS`. */
function assertGenerationLimits(call: GenerationCall<unknown>): void {
  const issues: Array<{ field: string; message: string }> = [];
  if (call.messages.length > GENERATION_LIMITS.messages) {
    issues.push({ field: "messages", message: `at most ${GENERATION_LIMITS.messages} messages` });
  }
  const stop = call.params.stop ?? [];
  const stopField = call.stopField ?? "stop";
  if (stop.length > GENERATION_LIMITS.stopSequences) {
    issues.push({ field: stopField, message: `at most ${GENERATION_LIMITS.stopSequences} stop sequences` });
  }
  stop.forEach((s, i) => {
    if (s.length > GENERATION_LIMITS.stopSequenceChars) {
      issues.push({
        field: `${stopField}[${i}]`,
        message: `at most ${GENERATION_LIMITS.stopSequenceChars} characters`,
      });
    }
  });
  if (issues.length > 0) throw AppError.invalid("The request is over a limit", issues);
}

/** The parts of a usage record every outcome shares; outcomes override status, usage and results. */
function usageRecord(principal: Principal, call: RequestInfo, type: ActivityType): UsageRecord {
  return {
    id: call.requestId,
    principal,
    type,
    status: "completed",
    endpoint: call.endpoint,
    model: call.model.id,
    ...labels(call.metadata),
    ...(call.batch ? { batchId: call.batch.batchId, customId: call.batch.customId } : {}),
    serviceTier: call.serviceTier,
    usage: { promptTokens: 0, completionTokens: 0, cachedPromptTokens: 0 },
    costMicros: 0n,
    bodyJson: call.body,
    resultJson: null,
    errorJson: null,
    engineMs: null,
    createdAt: call.createdAt,
    completedAt: new Date(),
  };
}

/**
 * The completion webhook of a finished request (issue 6, item 3), or null when its metadata names
 * no usable one; `body` is built only when there is a webhook.
 */
function webhookRequest(
  metadata: Record<string, unknown> | null | undefined,
  body: () => unknown,
): WebhookRequest | null {
  const target = webhookTarget(metadata);
  return target ? { ...target, body: body() } : null;
}

/** The completion webhook of a failed or cancelled request (its failure body), or null. */
function failureWebhook(
  call: RequestInfo,
  status: "cancelled" | "failed",
  error: { code: string; message: string },
): WebhookRequest | null {
  return webhookRequest(call.metadata, () =>
    failureBody({
      requestId: call.requestId,
      createdAt: call.createdAt,
      endpoint: call.endpoint,
      model: call.model.id,
      status,
      error,
    }),
  );
}

function labels(metadata: Record<string, unknown> | null | undefined): {
  customId: string | null;
  streamId: string | null;
} {
  return {
    customId: typeof metadata?.custom_id === "string" ? metadata.custom_id : null,
    streamId: typeof metadata?.stream_id === "string" ? metadata.stream_id : null,
  };
}
