/**
 * Start and stop order as data (issue 25, item 4; DESIGN §2 "Components and how they start").
 * `COMPONENTS` names every part of a Switchyard that has something to stop, in the order they
 * start; a `Lifecycle` refuses to start one out of that order and stops what started in the
 * reverse order, so the stop order is this list read backwards (test/app-lifecycle.test.ts).
 */
import type { Logger } from "pino";

/**
 * Every component, in start order; they stop bottom to top. Optional ones (tracing, the embedded
 * PostgreSQL, the workers, everything HTTP) are skipped where they do not start. Why each sits
 * where it does, read as the stop order:
 */
export const COMPONENTS = [
  // Last to stop: it exports the spans of everything below, the last metering flush's included.
  "tracing",
  "embedded PostgreSQL", // stops after everything below: they all write to the database
  "database pool",
  "cache listener", // the LISTEN connection of the cache bus
  // Leases are given back only after the last charges are written (both metering drains stop
  // before this), so no in-flight charge lands on credit another process leased meanwhile.
  "credit leases",
  "key budget leases", // the same holder's API key budget leases (issue 29), given back alike
  // Failures recorded while the engines shut down are written by this second drain, after them.
  "metering (after engines)",
  "engines",
  "mailer", // after password-reset mail still being sent (below) is finished
  "metering", // pending metering is written before the engines and the database go
  // Stopped before metering drains: deliveries written by that last drain stay in the outbox
  // for the next process.
  "webhook dispatcher",
  "in-flight activity",
  // Stopped after the job queue: the queue's stop waits for running generations while they are
  // still heartbeated; what still runs after it is left, unrecorded, to another worker, as after
  // a SIGKILL.
  "background reconciler",
  // After HTTP, before metering and the engines: running generations finish and are recorded.
  "job queue",
  // Before the job queue: items in flight finish and are recorded, then its batches are given up.
  "batch runner",
  "deployment reconciler", // before the job queue: what it was loading is left to its lease
  "body retention",
  "password reset mail", // mail still being sent when HTTP stops, before the mailer closes
  "HTTP and GraphQL", // Apollo drains the HTTP server and closes the graphql-ws sockets
  // Long-polls and subscriptions end before the HTTP drain waits on them.
  "completion events",
] as const;

/** The name of one of `COMPONENTS`. */
export type ComponentName = (typeof COMPONENTS)[number];

/**
 * One part with something to stop. `start` runs once; what it returns is handed back by
 * `Lifecycle.start` and, at shutdown, to `stop`. `stop` runs only when `start` returned.
 */
export interface Component<T = void, N extends string = ComponentName> {
  readonly name: N;
  start(): T | Promise<T>;
  stop(started: T): void | Promise<void>;
}

/**
 * Starts components one at a time in the order of `order` (some may be skipped, none may come
 * before one already started) and stops every started one, in reverse, on `stop`.
 */
export class Lifecycle<N extends string = ComponentName> {
  private readonly started: Array<{ name: N; stop: () => void | Promise<void> }> = [];

  /**
   * @param order the start order (`COMPONENTS`); a name not in it cannot start.
   * @param logger where a failed stop step is logged (warn) and each stop's duration (debug,
   *   `{ step, ms }` "stopped").
   */
  constructor(
    private readonly order: readonly N[],
    private readonly logger: Logger,
  ) {}

  /** The names of the components started and not yet stopped, in start order. */
  get names(): N[] {
    return this.started.map((c) => c.name);
  }

  /**
   * Runs `component.start` and, when it returns, keeps its `stop` for `stop()`. A start that
   * throws leaves nothing to stop for that component.
   * @returns what `start` returned.
   * @throws Error, before starting anything, when `component.name` is not in the order or comes
   *   before (or is) a component already started: a programming error in the composition root.
   */
  async start<T>(component: Component<T, N>): Promise<T> {
    const at = this.order.indexOf(component.name);
    if (at < 0) throw new Error(`component "${component.name}" is not in the start order (app/lifecycle.ts)`);
    const last = this.started.at(-1);
    if (last && this.order.indexOf(last.name) >= at) {
      throw new Error(`component "${component.name}" started after "${last.name}", against the start order`);
    }
    const value = await component.start();
    this.started.push({ name: component.name, stop: () => component.stop(value) });
    return value;
  }

  /**
   * Stops every started component, last started first. A step that fails is logged and the next
   * one still runs; this never throws. A second call (or one while the first runs) finds nothing
   * left to stop.
   */
  async stop(): Promise<void> {
    for (const { name, stop } of this.started.splice(0).reverse()) {
      const began = Date.now();
      await Promise.resolve()
        .then(stop)
        .catch((err: unknown) => this.logger.warn({ err, step: name }, "shutdown step failed"));
      this.logger.debug({ step: name, ms: Date.now() - began }, "stopped");
    }
  }
}

/**
 * Runs `build`, which starts components through `life`; when it throws, stops what had started
 * (in reverse) and rethrows the error.
 */
export async function startOrUnwind<T, N extends string>(life: Lifecycle<N>, build: () => Promise<T>): Promise<T> {
  try {
    return await build();
  } catch (err) {
    await life.stop();
    throw err;
  }
}
