/**
 * The shapes of the inference domain's engine calls (what the protocols build and
 * `InferenceService` runs): request info every create operation records, the generation,
 * embedding and scoring calls with their outcomes, and the request fields every protocol shares
 * (`metadata`, `max_queue_wait_s`, the generation limits).
 */
import { z } from "zod";
import type { CatalogModel } from "../../config/catalog.js";
import type { ActivityStatus } from "../../entities/activity.entity.js";
import type {
  ChatMessage,
  EmbedResult,
  GenerateResult,
  GenerationStart,
  SamplingParams,
  ScoreQuestion,
  ScoreResult,
} from "../../inference/engine.js";
import type { GenerationTools } from "../../inference/tools.js";
import type { StoredResponse } from "../metering/metering.service.js";

/** Known keys of a create request's `metadata` (DESIGN §3 Responses; others are kept as given). */
export const requestMetadata = z
  .record(z.string(), z.unknown())
  .superRefine((m, ctx) => {
    if (m.stream_id !== undefined && m.stream_id !== null && !z.uuid().safeParse(m.stream_id).success) {
      ctx.addIssue({ code: "custom", path: ["stream_id"], message: "must be a UUID" });
    }
    if (m.custom_id !== undefined && m.custom_id !== null && typeof m.custom_id !== "string") {
      ctx.addIssue({ code: "custom", path: ["custom_id"], message: "must be a string" });
    }
  })
  .nullish();

/**
 * Bounds on what one generation may ask for (issue 5, item 1): each message costs work before
 * any token is counted, and each stop string is matched against every generated chunk.
 */
export const GENERATION_LIMITS = { messages: 10_000, stopSequences: 16, stopSequenceChars: 1_000 } as const;

/** `max_queue_wait_s` (DESIGN §3 Responses: 5–300 s). */
export const maxQueueWaitS = z.number().int().min(5).max(300).nullish();

/** Generation parameters after protocol translation. */
export type GenerationParams = SamplingParams;

/** What a protocol renders from a finished generation. */
export interface Rendered<T> {
  /** The API object returned to the caller (and kept as the activity's `result_json`). */
  body: T;
  /** Set when the object must be stored as a Response (`store: true`). */
  response?: StoredResponse;
  /** The activity's status, when not the default (`cancelled` for aborted, else `completed`). */
  status?: ActivityStatus;
}

/** How a failed request is recorded when its caller decides (background responses, issue 6 item 2; batch items, issue 7). */
export interface FailureRecord {
  status: ActivityStatus;
  errorJson: unknown;
  response?: StoredResponse;
}

/** What every create operation records about its request. */
export interface RequestInfo {
  /** The request id (UUIDv7): activity id, ledger source, and the base of the object's id. */
  requestId: string;
  createdAt: Date;
  /** The data-plane path, e.g. `/v1/chat/completions`. */
  endpoint: string;
  model: CatalogModel;
  metadata: Record<string, unknown> | null | undefined;
  /** The request body as received (activity `body_json`); null when it must not be kept. */
  body: unknown;
  /**
   * A batch item (issue 7): activity `type: batch` with the batch's id and the item's `custom_id`;
   * it waits behind interactive requests for an engine slot, and every failure before or in the
   * engine goes to `onFailure` (refusals included). `onEngineDone` is called once the engine's
   * part succeeded, before the record commits: the batch runner frees the item's slot there, so
   * the next item uses the engine while this one's record and row are written (issue 30, Targets:
   * batch items/s).
   */
  batch?: { batchId: string; customId: string | null; onEngineDone?: () => void };
  /** The service tier answered (usage `by_model`; issue 10, item 2); `default` when absent. */
  serviceTier?: "default" | "flex";
  /**
   * Background responses and batch items: every failure, refusals included, is recorded as this
   * says (a stored Response or batch item must reach a terminal status); null: not recorded (the
   * caller retries). Without it refusals are not recorded.
   */
  onFailure?: (err: unknown) => FailureRecord | null;
  /**
   * True when the request was accepted earlier (a background response its worker runs): a stream
   * closed since then does not refuse it. Otherwise a closed stream is a 400 (DESIGN §3 Streams).
   */
  admitted?: boolean;
}

export interface GenerationCall<T> extends RequestInfo {
  messages: ChatMessage[];
  params: GenerationParams;
  /** The functions the model may call (issue 26, item 2); the engine answers a call in `toolCalls`. */
  tools?: GenerationTools;
  /** The request's name for the stop strings in 400s (`stop`, Anthropic's `stop_sequences`). */
  stopField?: string;
  maxQueueWaitS?: number | null;
  signal?: AbortSignal;
  onStart?: (start: GenerationStart) => void;
  onText?: (delta: string) => void;
  render: (result: GenerateResult) => Rendered<T>;
}

export interface GenerationOutcome<T> {
  result: GenerateResult;
  body: T;
  costMicros: bigint;
}

export interface EmbeddingCall<T = unknown> extends RequestInfo {
  inputs: Array<string | number[]>;
  maxQueueWaitS?: number | null;
  signal?: AbortSignal;
  /** The API object answered (also what the completion webhook delivers). */
  render?: (result: EmbedResult) => T;
}

export interface EmbeddingOutcome<T = unknown> {
  result: EmbedResult;
  costMicros: bigint;
  /** What `render` made, if given. */
  body?: T;
}

export interface ScoringCall<T> extends RequestInfo {
  questions: ScoreQuestion[];
  maxQueueWaitS?: number | null;
  signal?: AbortSignal;
  /** The API object answered (activity `result_json`, completion event, batch result). */
  render: (result: ScoreResult) => T;
}

export interface ScoringOutcome<T> {
  result: ScoreResult;
  body: T;
  costMicros: bigint;
}
