/**
 * The internal engine protocol (issue 31, item 2: one engine process per machine) as both ends
 * read it: `engine-server.ts` hosts an embedded engine, `remote.engine.ts` is the
 * `InferenceEngine` API processes and workers call it through. Loopback HTTP/1.1 with keep-alive:
 *
 * - `POST /engine/{op}` (op: `generate`, `embed`, `score`, `count-tokens`, `load`, `unload`,
 *   `info`), header `x-switchyard-engine-token`, JSON body `{id, request, admit?, stream?,
 *   cancelled?}`, answered `200` with an NDJSON stream of `EngineEvent`s that ends with one
 *   `result` or `error`; `401` for a wrong token, `404` for an unknown op.
 * - `admit`: the engine counted the input and asks the caller's `admit` (credit, issue 10)
 *   before it takes a slot; it waits until `POST /engine/admit/{id}` answers `{ok: true}` or
 *   `{ok: false, error}` (the refusal is thrown where the local engine would throw it).
 * - `start`, `text`: the `onStart` and `onText` callbacks (per-token streaming).
 * - `POST /engine/cancel/{id}` `{reason}`: the caller's signal aborted; the engine aborts the
 *   request with that reason, and the stream still ends with its result (`cancelled`, partial
 *   text) or error, as the local engine returns them. A stream whose connection closes early is
 *   cancelled too (the calling process went away).
 * - `ping` every `PING_MS` while a stream is open, so a caller notices an engine that stopped
 *   answering (its read times out) instead of waiting forever.
 *
 * Why not the OpenAI-compatible upstream engine: the interface has callbacks that wire cannot
 * carry (admission before a slot is taken, `onStart` with the cached prefix, scoring with its
 * partial `ScoringStopped`), and the result must be exactly the embedded engine's (tools,
 * grammars and log-probabilities done by it, not re-parsed from text).
 */
import type { CatalogModel } from "../../../config/catalog.js";
import { ConfigError } from "../../../config/config.js";
import { AppError, type ErrorCode } from "../../../shared/errors.js";
import { ScoringStopped } from "../../engine.js";

/** The header carrying the shared secret (`SWITCHYARD_ENGINE_TOKEN`). */
export const TOKEN_HEADER = "x-switchyard-engine-token";

/** The operations of `POST /engine/{op}`. */
export const ENGINE_OPS = ["generate", "embed", "score", "count-tokens", "load", "unload", "info"] as const;
export type EngineOp = (typeof ENGINE_OPS)[number];

/** How often an open stream says it is alive, ms. */
export const PING_MS = 5_000;

/** An error as it crosses the wire: an `AppError` (with a `ScoringStopped`'s counts), or another error's name and message. */
export type WireError =
  | {
      kind: "app";
      code: ErrorCode;
      detail: string;
      extra?: unknown;
      retryAfterS?: number;
      reason?: string;
      /** Set for a `ScoringStopped`. */
      stopped?: { promptTokens: number; engineMs: number };
    }
  | { kind: "other"; name: string; message: string };

/** One line of a response stream. */
export type EngineEvent =
  | { event: "admit"; promptTokens: number; maxCompletionTokens?: number }
  | { event: "start"; start?: unknown }
  | { event: "text"; delta: string }
  | { event: "ping" }
  | { event: "result"; result: unknown }
  | { event: "error"; error: WireError };

/** A request body of `POST /engine/{op}`. */
export interface EngineCall {
  /** The caller's id of this call (admission and cancel name it). */
  id: string;
  /** The operation's request, callbacks and signal left out (models as `toWireModel`). */
  request: unknown;
  /** The caller has an `admit` callback: ask it before taking a slot. */
  admit?: boolean;
  /** The caller has an `onText` callback: send `text` events. */
  stream?: boolean;
  /** The caller's signal had aborted before the call was sent: its reason. */
  cancelled?: WireError;
}

/** A catalog model on the wire: its prices (bigints, which the engine never reads) left out. */
export type WireModel = Omit<CatalogModel, "prices">;

/** `model` as sent to the engine process. */
export function toWireModel(model: CatalogModel): WireModel {
  const { prices: _prices, ...rest } = model;
  return rest;
}

/** A model as the engine process uses it (zero prices: no engine reads them). */
export function fromWireModel(model: WireModel): CatalogModel {
  return {
    ...model,
    prices: { inputPerMillionMicros: 0n, outputPerMillionMicros: 0n, cachedInputPerMillionMicros: 0n },
  };
}

/** `err` as it crosses the wire (see `WireError`). */
export function toWireError(err: unknown): WireError {
  if (err instanceof AppError) {
    return {
      kind: "app",
      code: err.code,
      detail: err.detail,
      ...(err.extra !== undefined ? { extra: err.extra } : {}),
      ...(err.retryAfterS !== undefined ? { retryAfterS: err.retryAfterS } : {}),
      ...(err.reason !== undefined ? { reason: err.reason } : {}),
      ...(err instanceof ScoringStopped ? { stopped: { promptTokens: err.promptTokens, engineMs: err.engineMs } } : {}),
    };
  }
  const e = err instanceof Error ? err : new Error(String(err));
  return { kind: "other", name: e.name, message: e.message };
}

/**
 * The error `wire` describes, of the class the engine threw: `AppError` (`ScoringStopped` with
 * its counts), `ConfigError` (a missing or damaged model file), else a plain `Error` with the
 * engine's message.
 */
export function fromWireError(wire: WireError): Error {
  if (wire.kind === "other") {
    const err = wire.name === "ConfigError" ? new ConfigError(wire.message) : new Error(wire.message);
    if (wire.name !== "ConfigError") err.name = wire.name;
    return err;
  }
  const app = new AppError(wire.code, wire.detail, wire.extra, wire.retryAfterS);
  if (wire.reason !== undefined) app.because(wire.reason);
  return wire.stopped ? new ScoringStopped(app, wire.stopped.promptTokens, wire.stopped.engineMs) : app;
}
