/**
 * Runs a generation call for a data-plane handler: aborts the engine when the client goes away,
 * answers JSON or streams SSE through the protocol's dialect, and reports engine time for the
 * `x-switchyard-overhead-ms` header.
 */
import type { Response } from "express";
import type { RequestContext } from "../../services/platform/context.js";
import { AppError, ErrorCode } from "../../shared/errors.js";
import type { GenerationCall } from "../../services/inference/inference.service.js";
import { type SseDialect, streamGeneration } from "../sse.js";
import type { DataPlaneDeps } from "./deps.js";

/** An AbortSignal that fires when the client closes the connection before the answer ended. */
export function abortOnClose(res: Response): AbortSignal {
  const controller = new AbortController();
  res.on("close", () => {
    if (!res.writableFinished) {
      controller.abort(new AppError(ErrorCode.ClientClosed, "The client closed the connection"));
    }
  });
  return controller.signal;
}

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
 * Answers a generation call: JSON (with engine time in `res.locals.engineMs`) or, given a dialect,
 * SSE. Throws what the call throws before any byte was sent; the caller's error middleware answers.
 */
export async function respondWithGeneration<T>(
  deps: DataPlaneDeps,
  res: Response,
  ctx: RequestContext,
  call: Omit<GenerationCall<T>, "signal" | "onStart" | "onText">,
  stream: SseDialect<T> | null,
): Promise<void> {
  const signal = abortOnClose(res);
  if (!stream) {
    const out = await deps.inference.generate(ctx, { ...call, signal });
    res.locals.engineMs = out.result.engineMs + out.result.queueMs;
    res.json(out.body);
    return;
  }
  await streamGeneration(res, stream, (hooks) => deps.inference.generate(ctx, { ...call, signal, ...hooks }));
}
