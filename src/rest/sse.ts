/**
 * Server-sent events: opens the stream, writes `event:`/`data:` frames, and runs a generation
 * whose protocol (OpenAI chunks, Anthropic events, Responses events) is described by the create
 * operation's `StreamEvents` (`services/inference/use-cases/create-call.ts`).
 * The stream opens only once the engine has accepted the request, so refusals before that (400,
 * 402, 429) still answer as plain JSON errors with their status.
 */
import type { Response } from "express";
import type { GenerateResult, GenerationStart } from "../inference/engine.js";
import type { ProtocolEvent, StreamEvents, StreamTransport } from "../services/inference/use-cases/create-call.js";
import { toFailure } from "./error-envelope.js";

/** One SSE frame: `data` is JSON-encoded unless it is a string. */
export type SseFrame = ProtocolEvent;

/** How one protocol streams a generation (its events, framed here). */
export type SseDialect<T> = StreamEvents<T>;

/** Writes one SSE response: `begin` sends 200 and the event-stream headers, `write` frames, `end` closes. */
export class SseWriter {
  private open = false;

  constructor(private readonly res: Response) {}

  get started(): boolean {
    return this.open;
  }

  /** Sends the 200 and the event-stream headers. */
  begin(): void {
    if (this.open) return;
    this.open = true;
    this.res.writeHead(200, {
      "content-type": "text/event-stream; charset=utf-8",
      "cache-control": "no-cache",
      connection: "keep-alive",
      "x-accel-buffering": "no",
    });
  }

  write(frames: SseFrame[]): void {
    if (this.res.writableEnded || this.res.destroyed) return;
    let out = "";
    for (const f of frames) {
      if (f.event) out += `event: ${f.event}\n`;
      out += `data: ${typeof f.data === "string" ? f.data : JSON.stringify(f.data)}\n\n`;
    }
    this.res.write(out);
  }

  end(): void {
    if (!this.res.writableEnded) this.res.end();
  }
}

/**
 * Runs `generate` as a stream: `start` frames when the engine accepts, `delta` frames as text
 * arrives, `finish` frames after metering, `error` frames for a failure after the stream opened
 * (the protocol's error event, carrying the same error body a JSON answer would: issue 27, item 1).
 * @throws what `generate` throws before the stream opened (the caller answers with JSON).
 */
export async function streamGeneration<T>(
  res: Response,
  dialect: SseDialect<T>,
  generate: (hooks: {
    onStart: (start: GenerationStart) => void;
    onText: (text: string) => void;
  }) => Promise<{ result: GenerateResult; body: T }>,
): Promise<void> {
  const sse = new SseWriter(res);
  try {
    const { result, body } = await generate({
      onStart: (start) => {
        // The headers leave now: the overhead header counts the wait for a slot as engine time.
        res.locals.engineMs = start.queueMs;
        sse.begin();
        sse.write(dialect.start(start));
      },
      onText: (text) => {
        if (text) sse.write(dialect.delta(text));
      },
    });
    sse.begin();
    sse.write(dialect.finish(result, body));
    sse.end();
  } catch (err) {
    if (!sse.started) throw err;
    sse.write(dialect.error(toFailure(err).failure));
    sse.end();
  }
}

/** The create operations' stream transport over this response (`StreamTransport`). */
export function sseTransport(res: Response): StreamTransport {
  return (events, generate) => streamGeneration(res, events, generate);
}
