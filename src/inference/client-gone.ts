/**
 * The error a request whose caller went away ends with (both engines): the abort reason when it
 * is an `AppError` (the HTTP layer's ClientClosed), else a ClientClosed of our own.
 */
import { AppError, ErrorCode } from "../shared/errors.js";

/** The abort reason when it is an `AppError` (the HTTP layer's ClientClosed), else a ClientClosed. */
export function clientGone(signal: AbortSignal): AppError {
  return signal.reason instanceof AppError
    ? signal.reason
    : new AppError(ErrorCode.ClientClosed, "The client closed the connection");
}
