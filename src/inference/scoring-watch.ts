/**
 * What may stop a scoring run part way (decisions; issue 11 review, findings 3–4): the caller going
 * away, and the per-request scoring time limit (`SWITCHYARD_DECISIONS_TIME_LIMIT_MS`). Both engines
 * watch one of these between evaluation steps, then throw `ScoringStopped` with what they had
 * evaluated so far, so the request is recorded and charged for it.
 */
import { AppError, ErrorCode } from "../shared/errors.js";

/** Default scoring time limit per request, ms (config `decisionsTimeLimitMs`). */
export const DEFAULT_SCORING_TIME_LIMIT_MS = 60_000;

export class ScoringWatch {
  private readonly controller = new AbortController();
  private readonly timer: NodeJS.Timeout;
  private readonly onAbort: () => void;

  /**
   * Starts the clock now.
   * @param signal the caller's (its reason, when an `AppError`, is the ClientClosed reported).
   * @param timeLimitMs the scoring time limit, ms; past it `reason()` is an EngineTimeout (504).
   */
  constructor(
    private readonly signal: AbortSignal | undefined,
    readonly timeLimitMs: number,
  ) {
    const timeUp = new AppError(
      ErrorCode.EngineTimeout,
      `Scoring took longer than this server's limit of ${timeLimitMs} ms per request; the tokens evaluated so far are charged. Ask fewer questions or answers at once.`,
    );
    this.timer = setTimeout(() => this.controller.abort(timeUp), timeLimitMs);
    this.timer.unref();
    this.onAbort = () => this.controller.abort(clientGone(signal!));
    if (signal?.aborted) this.onAbort();
    else signal?.addEventListener("abort", this.onAbort, { once: true });
  }

  /** Aborts when the caller goes away or the time limit passes (for HTTP calls and slot waits). */
  get abortSignal(): AbortSignal {
    return this.controller.signal;
  }

  /** Why scoring must stop now (ClientClosed or EngineTimeout), or null to go on. */
  reason(): AppError | null {
    return this.controller.signal.aborted ? (this.controller.signal.reason as AppError) : null;
  }

  /** Stops the clock; call once scoring ends, however it ends. */
  dispose(): void {
    clearTimeout(this.timer);
    this.signal?.removeEventListener("abort", this.onAbort);
  }
}

/** The abort reason when it is an `AppError` (the HTTP layer's ClientClosed), else a ClientClosed. */
function clientGone(signal: AbortSignal): AppError {
  return signal.reason instanceof AppError
    ? signal.reason
    : new AppError(ErrorCode.ClientClosed, "The client closed the connection");
}
