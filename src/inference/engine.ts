/**
 * The engine interface every inference backend implements (DESIGN §1 "Engines behind one
 * interface"): generation with token streaming and stop reasons, embeddings, token counting, and
 * log-probability scoring of answers (decisions, issue 11).
 * Implementations live in `engines/*`; `EngineRouter` picks one per catalog model.
 */
import type { CatalogModel } from "../config/catalog.js";
import { AppError } from "../shared/errors.js";
import type { GenerationTools, HistoryToolCall, ToolCall } from "./tools.js";

/**
 * A chat turn with its text content already flattened. Tool calls stay structured (issue 26,
 * item 5): each engine writes them its own way (`tools.ts`).
 */
export interface ChatMessage {
  role: "system" | "developer" | "user" | "assistant" | "tool";
  content: string;
  /** An assistant turn's calls, after its text. */
  toolCalls?: HistoryToolCall[];
  /** A `tool` turn: the id of the call it answers (absent for legacy `function` results). */
  toolCallId?: string;
}

/**
 * Why generation ended: `stop` (end of turn), `stop_sequence` (a caller's stop string),
 * `length` (max tokens or context end), `cancelled` (the caller went away).
 */
export type FinishReason = "stop" | "stop_sequence" | "length" | "cancelled";

/** Token counts reported by the engine (real tokenizer counts). */
export interface EngineUsage {
  promptTokens: number;
  completionTokens: number;
  /** Prompt tokens served from a reused prefix (KV cache); ⊆ promptTokens. */
  cachedPromptTokens: number;
}

/**
 * Structured output (issue 26, item 1): the answer is one JSON object, or one JSON value valid
 * against `schema`. An engine that constrains decoding refuses a schema keyword it cannot enforce
 * when `strict` (400 naming `field` + the keyword's place in the schema).
 */
export type ResponseFormat =
  | { type: "json_object" }
  | {
      type: "json_schema";
      schema: Record<string, unknown>;
      strict: boolean;
      field: string;
      /** The caller's `json_schema.name`, passed to an upstream as given. */
      name?: string;
    };

/** Sampling and length parameters, after translation from the OpenAI/Anthropic bodies. */
export interface SamplingParams {
  /** Upper bound on completion tokens; undefined = until end of turn or context end. */
  maxTokens?: number;
  /** 0–2; 0 is greedy. */
  temperature?: number;
  /** 0–1. */
  topP?: number;
  topK?: number;
  seed?: number;
  /** Stop strings: the answer ends before the first one generated. */
  stop?: string[];
  /** −2–2 (OpenAI semantics). */
  frequencyPenalty?: number;
  presencePenalty?: number;
  /** Structured output; absent: free text. */
  responseFormat?: ResponseFormat;
  /**
   * Log-probabilities of the completion's tokens (issue 26, item 3), with the `top` (0–20) most
   * likely alternatives at each position; absent: none.
   */
  logprobs?: { top: number };
}

/** One alternative at a completion position: its text, natural-log probability and UTF-8 bytes. */
export interface TokenAlternative {
  token: string;
  logprob: number;
  bytes: number[];
}

/**
 * A completion token's log-probability (OpenAI's `logprobs.content[i]`): natural log of the
 * token's probability under the model's own distribution at that position (temperature 1, no
 * sampling truncation: the numbers decisions use), and the `top` most likely tokens there, most
 * likely first.
 */
export interface TokenLogprob extends TokenAlternative {
  top: TokenAlternative[];
}

/** What is known when generation starts. */
export interface GenerationStart {
  promptTokens: number;
  cachedPromptTokens: number;
  /** Time spent waiting for a slot, in ms. */
  queueMs: number;
}

export interface GenerateRequest extends SamplingParams {
  model: CatalogModel;
  messages: ChatMessage[];
  /** Aborts generation: the result comes back with `finishReason: "cancelled"` and partial text. */
  signal?: AbortSignal;
  /** Called once generation starts (slot acquired, prompt counted), before any `onText`. */
  onStart?: (start: GenerationStart) => void;
  /**
   * Receives text as it is generated (streaming). The deltas joined are, once `generate`
   * resolves, exactly the text the protocols answer: `callPreamble` (or nothing) when the answer
   * makes calls, else `text` — and nothing for a forced call (`tools.mode` forced), whose text is
   * the call itself (issue 26, item 2). With tools offered under `auto`, text is sent as soon as it
   * cannot be (the start of) a call in the model's format: the embedded engine holds back only a
   * possible prefix of its call syntax and releases it the moment it diverges; text before a call
   * is sent before `generate` resolves with the call. What was held and turns out to be text is
   * sent before `generate` resolves.
   */
  onText?: (delta: string) => void;
  /**
   * Called once the prompt is counted and fits the context, before a slot is taken, with the
   * prompt's tokens and the most completion tokens the request may produce (`maxTokens`, else the
   * rest of the context). It may refuse by throwing (402 when credit does not cover the worst case).
   */
  admit?: (promptTokens: number, maxCompletionTokens: number) => Promise<void>;
  /** Longest wait for a free slot, in ms, before `AppError(RateLimited)`. */
  maxQueueWaitMs: number;
  /** `batch`: waits behind interactive requests for a slot (issue 7, item 2). */
  priority?: RequestPriority;
  /**
   * Functions the model may call (issue 26, item 2); absent: none. A forced call ends as a call
   * (`GenerateResult.toolCalls`) unless cut short; it replaces `responseFormat` on the embedded engine.
   */
  tools?: GenerationTools;
}

/** Interactive requests take engine slots before batch items (DESIGN §3 Batches; issue 7, item 2). */
export type RequestPriority = "interactive" | "batch";

export interface GenerateResult {
  text: string;
  finishReason: FinishReason;
  /** The stop string that ended generation, for `stop_sequence`. */
  stopSequence: string | null;
  usage: EngineUsage;
  /** Time spent generating (after the slot was acquired), in ms. */
  engineMs: number;
  /** Time spent waiting for a slot, in ms. */
  queueMs: number;
  /**
   * With `logprobs` asked for: one entry per completion token whose text is in `text`, in order
   * (their texts joined are `text`, for a text the tokens end exactly at).
   */
  logprobs?: TokenLogprob[];
  /**
   * The calls the answer makes (`GenerateRequest.tools`), each valid (`validToolCall`), in the
   * order the model made them: one at most unless `tools.parallel`; absent when it makes none, or
   * when it was cut short (`length`, `cancelled`: under `auto` it stays text; a forced call cut
   * short is no text either, review finding F6: the protocols answer neither text nor a call).
   * The protocols answer every one, each with an id of their own.
   */
  toolCalls?: ToolCall[];
  /**
   * With `toolCalls`: text the answer gives before its calls, answered before them (chat
   * `content` beside `tool_calls`, an Anthropic text block before the `tool_use` blocks, a
   * Responses message item before the `function_call` items); absent when there is none. An
   * upstream may send both (OpenAI allows it); on the embedded engine it is the text the model
   * wrote before its first call under `auto` (streamed before the calls, `onText`), never text
   * after or between calls (its `text` is then the whole answer, never rendered).
   */
  callPreamble?: string;
}

export interface EmbedRequest {
  model: CatalogModel;
  /** Text inputs, or pre-tokenised inputs (token id arrays). */
  inputs: Array<string | number[]>;
  signal?: AbortSignal;
  /** Called once every input is counted and fits, before a slot is taken (see `GenerateRequest.admit`). */
  admit?: (promptTokens: number) => Promise<void>;
  maxQueueWaitMs: number;
  priority?: RequestPriority;
}

export interface EmbedResult {
  /** One vector per input, in input order, at the model's native width. */
  vectors: number[][];
  promptTokens: number;
  engineMs: number;
  queueMs: number;
}

/**
 * One question of a scoring request (DESIGN §3 Decisions): the prompt up to where the answer
 * begins, and the answers to score as the model would write them right after it.
 */
export interface ScoreQuestion {
  /** The prompt; questions whose prompts begin alike (instructions and input) share that prefix's evaluation. */
  messages: ChatMessage[];
  /** Answer texts (each non-empty), scored by the log-probabilities of all their tokens. */
  candidates: string[];
  /** How a 400 names the question (e.g. `questions.is_spam`). */
  field: string;
  /**
   * Score each answer followed by an end of answer (the embedded engine: newline, EOS or end of
   * turn; upstream: a newline), so that an answer that is a prefix of another ("1" and "10") is not
   * favoured by construction (issue 11 review, finding 6). Set when one answer is a prefix of another.
   */
  endMarker?: boolean;
}

export interface ScoreRequest {
  model: CatalogModel;
  questions: ScoreQuestion[];
  signal?: AbortSignal;
  /**
   * Called once every question is counted and fits the context, before a slot is taken and
   * before any per-answer prompt is built, with the most prompt tokens the request can be charged
   * for (`ScoreResult.promptTokens` never exceeds it). It may refuse by throwing (402).
   */
  admit?: (promptTokens: number) => Promise<void>;
  /**
   * Called once when scoring starts: a scoring context is taken (embedded) or the first chunk has
   * its upstream slot; until then the request waits (activity `pending`, then `running`).
   */
  onStart?: () => void;
  maxQueueWaitMs: number;
  priority?: RequestPriority;
}

/** One answer's score: the sum of its tokens' natural-log probabilities after the prompt. */
export interface CandidateScore {
  logprob: number;
  tokens: number;
}

/**
 * Scoring stopped part way (issue 11 review, findings 3–4): the client went away (ClientClosed)
 * or the scoring time limit passed (EngineTimeout); upstream, also any error after part of the
 * work was answered (review 11b, finding M2), with that error's code and words. Carries what the
 * engine had evaluated (upstream: been sent) by then, in the units `ScoreResult.promptTokens`
 * counts, so the request is recorded (cancelled, else failed) and charged for it.
 */
export class ScoringStopped extends AppError {
  constructor(
    reason: AppError,
    /** Prompt tokens evaluated before it stopped (≤ the tokens reserved at admission). */
    readonly promptTokens: number,
    readonly engineMs: number,
  ) {
    super(reason.code, reason.detail, reason.extra, reason.retryAfterS);
  }
}

export interface ScoreResult {
  /** Per question, per candidate, in request order. */
  scores: CandidateScore[][];
  /**
   * Prompt tokens the request counts: what the engine evaluated. Embedded: the prefix the
   * questions share, once, plus each question's own prompt tokens and its answers' tokens (issue
   * 11, item 5). Upstream: every prompt sent, whole, as the upstream reports it (see
   * `OpenAiCompatibleEngine.scoreContinuations`).
   */
  promptTokens: number;
  engineMs: number;
  queueMs: number;
}

/** An inference backend. Errors: `AppError` with RateLimited (no slot in time), InvalidRequest
 * (input does not fit the model), EngineUnavailable/EngineFailure (backend trouble). */
export interface InferenceEngine {
  /** Loads what `model` needs (files, contexts); idempotent. */
  load(model: CatalogModel): Promise<void>;
  /** True once `load(model)` has finished. */
  isLoaded(model: CatalogModel): boolean;
  /**
   * Releases what `load(model)` took for a dedicated runtime (`model.runtime`: a deleted custom
   * model or deployment, issue 9): later requests for it are refused (EngineUnavailable), waiting
   * ones too; it resolves once the requests in flight have finished and the resources are freed.
   * Optional: an engine that holds nothing per model (an upstream one) need not implement it.
   */
  unload?(model: CatalogModel): Promise<void>;
  generate(request: GenerateRequest): Promise<GenerateResult>;
  embed(request: EmbedRequest): Promise<EmbedResult>;
  /**
   * Scores answer continuations by their token log-probabilities (issue 11). Optional: an engine
   * without it cannot serve decisions (the caller answers 400).
   * @throws AppError InvalidRequest when a question does not fit the context, or when the routed
   *   backend cannot give log-probabilities; RateLimited; EngineFailure/EngineUnavailable.
   */
  scoreContinuations?(request: ScoreRequest): Promise<ScoreResult>;
  /** Number of tokens `text` takes for `model` (no BOS). */
  countTokens(model: CatalogModel, text: string): Promise<number>;
  /** Releases every model and context. */
  close(): Promise<void>;
}
