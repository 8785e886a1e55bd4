/**
 * Traces (issue 29, item 2): the seams' side of OpenTelemetry. The SDK (provider, exporter,
 * sampler) is set up in `app/tracing.ts`; this module is what the HTTP middleware, the engine
 * wrapper, the metering flush, the webhook dispatcher and the job queue call.
 *
 * Spans are made by hand at our own seams, not by auto-instrumentation (which patches `http`,
 * `express` and `pg` through a loader that must run before they are imported): a span per HTTP
 * request, per engine call, per group-commit flush, per webhook attempt and per job says where a
 * request's time went without a span per SQL statement or middleware, and costs nothing when
 * tracing is off. Off (`Tracing.off`, no endpoint configured): `enabled` is false, every helper
 * runs its function as is and no span object is ever created; the engine wrapper is not even
 * installed.
 *
 * The active span travels in this module's own `AsyncLocalStorage` (never a global context
 * manager or provider, so two Switchyards in one process, one traced and one not, stay apart).
 * A scope is entered only where a span starts, so while tracing is off nothing ever enters one.
 * Log lines read it (`traceLogFields`: `trace_id`, `span_id`); the upstream engine reads it to
 * send `traceparent` (`withTraceHeaders`).
 *
 * Cost (bench/NOTES.md, "Session 14: tracing overhead"): every span is exported, so what a traced
 * request pays is kept to the SDK's own span and its serialization. A scope is the span and the
 * team, nothing more: the API `Context` a child span needs is made only when a child starts, and
 * `traceparent` is written from the span's ids without a propagator's carrier and setter.
 *
 * Content: the prompt and the answer go into an engine span only when the operator opts in
 * (`SWITCHYARD_TRACE_CONTENT=true`) and the caller's team keeps bodies (zero data retention off,
 * asked at the end of each call); a call whose team is not known records none.
 */
import { AsyncLocalStorage } from "node:async_hooks";
import type { IncomingHttpHeaders } from "node:http";
import {
  type Attributes,
  type Context,
  type Link,
  ROOT_CONTEXT,
  type Span,
  SpanKind,
  type SpanContext,
  SpanStatusCode,
  type TextMapGetter,
  type TextMapPropagator,
  type Tracer,
  trace,
} from "@opentelemetry/api";

export { SpanKind, type Span, type SpanContext };

/** What the scope of a traced piece of work carries. */
export interface TraceScope {
  span: Span;
  /** The team the work is for, once known (`traceTeam`): content capture asks about it. */
  teamId?: string;
  /** The OpenTelemetry context holding `span`, made when the first child span starts (`parentContext`). */
  ctx?: Context;
}

const scopes = new AsyncLocalStorage<TraceScope>();

const headerGetter: TextMapGetter<IncomingHttpHeaders | Record<string, string | undefined>> = {
  get: (carrier, key) => carrier[key],
  keys: (carrier) => Object.keys(carrier),
};

/** Where a new span hangs: the current scope (default), nowhere (`root`), or a caller's `traceparent`. */
export type SpanParent = "current" | "root" | IncomingHttpHeaders | Record<string, string | undefined>;

/** How a span starts. */
export interface SpanOptions {
  kind?: SpanKind;
  attributes?: Attributes;
  parent?: SpanParent;
  /** Spans this one relates to without being their child (a flush's requests). */
  links?: SpanContext[];
}

/** Settings of a `Tracing` (see the module header). */
export interface TracingOptions {
  /** W3C trace context (`@opentelemetry/core`'s, loaded with the SDK only when tracing is on). */
  propagator?: TextMapPropagator;
  /** `SWITCHYARD_TRACE_CONTENT`: prompts and answers may go into engine spans. */
  content: boolean;
  /**
   * Whether a team keeps bodies (zero data retention off); asked before content is recorded.
   * Absent: content is never recorded.
   */
  contentAllowed?: (teamId: string) => Promise<boolean>;
  /** Exports what is left and stops the exporter (the "tracing" component's stop). */
  close?: () => Promise<void>;
}

/**
 * One process's tracer, or `Tracing.off`. Seams take one and call `start` / `inSpan`; with
 * tracing off these run the work as is.
 */
export class Tracing {
  /** Tracing off: no spans, no scopes, no cost. */
  static readonly off = new Tracing(undefined, { content: false });

  /** True when spans are made and exported. */
  readonly enabled: boolean;
  /** True when content may be recorded at all (the operator opted in); per team, see `contentAllowed`. */
  readonly recordsContent: boolean;

  constructor(
    private readonly tracer: Tracer | undefined,
    private readonly opts: TracingOptions,
  ) {
    this.enabled = tracer !== undefined && opts.propagator !== undefined;
    this.recordsContent = this.enabled && opts.content && opts.contentAllowed !== undefined;
  }

  /**
   * Whether the prompt and answer of work for `teamId` may go into a span: the operator opted in
   * and the team keeps bodies. False when the team is unknown or the question fails.
   */
  async contentAllowed(teamId: string | undefined): Promise<boolean> {
    if (!this.recordsContent || teamId === undefined) return false;
    try {
      return await this.opts.contentAllowed!(teamId);
    } catch {
      return false;
    }
  }

  /**
   * Starts a span (see `SpanOptions.parent`) and returns its scope, for `runInScope`; undefined
   * when tracing is off. The caller ends `scope.span`.
   */
  start(name: string, opts: SpanOptions = {}): TraceScope | undefined {
    const propagator = this.opts.propagator;
    if (!this.tracer || !propagator) return undefined;
    const current = scopes.getStore();
    const parent = parentContext(opts.parent ?? "current", current, propagator);
    const links: Link[] | undefined = opts.links?.map((context) => ({ context }));
    const span = this.tracer.startSpan(name, { kind: opts.kind, attributes: opts.attributes, links }, parent);
    return { span, teamId: current?.teamId };
  }

  /**
   * Runs `fn` inside a new span (`start`), ending it when `fn` settles: an error sets the span's
   * status to ERROR and `error.type` (an `AppError`'s code, else the error's class) and is
   * rethrown. With tracing off, `fn(undefined)`.
   */
  async inSpan<T>(name: string, opts: SpanOptions, fn: (span: Span | undefined) => Promise<T>): Promise<T> {
    const scope = this.start(name, opts);
    if (!scope) return fn(undefined);
    try {
      return await scopes.run(scope, fn, scope.span);
    } catch (err) {
      failSpan(scope.span, err);
      throw err;
    } finally {
      scope.span.end();
    }
  }

  /** Exports the spans not yet sent and stops; nothing when off. */
  async close(): Promise<void> {
    await this.opts.close?.();
  }
}

/** The context a new span hangs from: `current`'s span (its context made once, for its first child). */
function parentContext(parent: SpanParent, current: TraceScope | undefined, propagator: TextMapPropagator): Context {
  if (parent === "root") return ROOT_CONTEXT;
  if (parent === "current") return current ? (current.ctx ??= trace.setSpan(ROOT_CONTEXT, current.span)) : ROOT_CONTEXT;
  // No `traceparent` (most requests): nothing to extract.
  if (parent.traceparent === undefined) return ROOT_CONTEXT;
  return propagator.extract(ROOT_CONTEXT, parent, headerGetter);
}

/**
 * The W3C `traceparent` of `span` (version 00: trace id, span id, flags), as the SDK's
 * `W3CTraceContextPropagator` writes it, without its carrier: one string per upstream request.
 */
function traceparentOf(span: Span): string {
  const { traceId, spanId, traceFlags } = span.spanContext();
  return `00-${traceId}-${spanId}-${traceFlags < 16 ? "0" : ""}${traceFlags.toString(16)}`;
}

/** Marks `span` failed by `err`: status ERROR and `error.type`. */
export function failSpan(span: Span, err: unknown): void {
  const code = (err as { code?: unknown } | null)?.code;
  const type =
    typeof code === "string"
      ? code
      : ((err as { constructor?: { name?: string } } | null)?.constructor?.name ?? "Error");
  span.setAttribute("error.type", type);
  span.setStatus({ code: SpanStatusCode.ERROR, message: type });
}

/** Runs `fn` with `scope` current (its span the parent of spans started inside); `fn()` when undefined. */
export function runInScope<T>(scope: TraceScope | undefined, fn: () => T): T {
  return scope ? scopes.run(scope, fn) : fn();
}

/** The span of the current scope; undefined outside one (always, with tracing off). */
export function currentSpan(): Span | undefined {
  return scopes.getStore()?.span;
}

/** The team of the current scope (`traceTeam`). */
export function currentTraceTeam(): string | undefined {
  return scopes.getStore()?.teamId;
}

/**
 * Marks the current scope's work as `teamId`'s: its span gets `switchyard.team_id` and spans
 * started inside it know the team (content capture asks whether it keeps bodies). A scope is one
 * request or one job, which is for one team; nothing outside a scope (tracing off).
 */
export function traceTeam(teamId: string): void {
  const scope = scopes.getStore();
  if (!scope || scope.teamId === teamId) return;
  scope.teamId = teamId;
  scope.span.setAttribute("switchyard.team_id", teamId);
}

/**
 * `headers` plus the current span's W3C `traceparent` (and `tracestate`), for a request this
 * work sends on (the upstream engine); `headers` itself outside a scope.
 */
export function withTraceHeaders(headers: Record<string, string>): Record<string, string> {
  const scope = scopes.getStore();
  if (!scope) return headers;
  const tracestate = scope.span.spanContext().traceState?.serialize();
  const out: Record<string, string> = { ...headers, traceparent: traceparentOf(scope.span) };
  if (tracestate) out.tracestate = tracestate;
  return out;
}

/** The current span's `traceparent` value; undefined outside a scope. */
export function currentTraceparent(): string | undefined {
  const scope = scopes.getStore();
  return scope ? traceparentOf(scope.span) : undefined;
}

/** `trace_id` and `span_id` of the current span for a log line; undefined outside a scope. */
export function traceLogFields(): { trace_id: string; span_id: string } | undefined {
  const span = scopes.getStore()?.span;
  if (!span) return undefined;
  const { traceId, spanId } = span.spanContext();
  return { trace_id: traceId, span_id: spanId };
}
