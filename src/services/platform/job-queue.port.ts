/**
 * The job-queue port: what services need of the durable job queue (job names, payloads, the
 * send call). Implemented by `src/jobs/job-queue.ts` on pg-boss; services depend on this port and
 * never import `src/jobs` (DESIGN §1: imports flow one way).
 */

/** The job queue's names (`src/jobs`). */
export type JobName = "response-generate" | "response-deadline" | "batch-run" | "batch-expire" | "deployment-reconcile";

/** Each job's payload. */
export interface JobData {
  "response-generate": { responseId: string };
  "response-deadline": { responseId: string };
  /** Runs a batch's items (issue 7); a duplicate finds the batch claimed and returns. */
  "batch-run": { batchId: string };
  /** Ends a batch whose window passed (issue 7, item 5). */
  "batch-expire": { batchId: string };
  /** Brings up due deployments and requested custom models (issue 9); names the one that woke it. */
  "deployment-reconcile": { kind: "deployment" | "custom_model"; id: string };
}

/** Runs one SQL statement (inside the caller's transaction) and returns its rows. */
export type SqlExecutor = (text: string, values: unknown[]) => Promise<Array<Record<string, unknown>>>;

export interface SendOptions {
  /** Not before this time (deadline jobs). */
  startAfter?: Date;
  retryLimit?: number;
  /** A handler running longer than this is failed (and retried) by the queue, seconds. */
  expireInSeconds?: number;
  /** Fetched before jobs of a lower priority (default 0), oldest first within one. */
  priority?: number;
  /** Write the job through this executor, i.e. in that transaction. */
  db?: SqlExecutor;
}

/** What services need of the job queue (implemented by `jobs/job-queue.ts`; services never import jobs). */
export interface JobSender {
  send<N extends JobName>(name: N, data: JobData[N], options?: SendOptions): Promise<string>;
  /**
   * An SQL condition (for a statement on the service's own database, where the queue lives) that
   * holds while a job of `name` whose payload's `field` equals the SQL text expression `value` waits
   * to run: created and not yet fetched, or failed and waiting for its retry. A reconciler tells
   * with it a job that merely waits for a free worker from one fetched by a process that died
   * before acting on it (issue 28, item 3).
   */
  waitingSql<N extends JobName>(name: N, field: keyof JobData[N] & string, value: string): string;
}
