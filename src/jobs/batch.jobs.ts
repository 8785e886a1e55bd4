/**
 * The batch job handlers (issue 7): thin, they call the services. `batch-run` runs a batch's items
 * (`BatchRunner.run`); `batch-expire`, scheduled at the end of the window, ends it if it is still
 * open (`BatchesService.expire`).
 */
import type { BatchRunner } from "../services/batches/batch-runner.js";
import type { BatchesService } from "../services/batches/batches.service.js";
import type { JobQueue } from "./job-queue.js";

/** Batches one worker process runs at once (their items share the runner's item concurrency). */
export const BATCHES_PER_PROCESS = 4;

/** Registers the batch handlers on `queue`. */
export async function workBatches(queue: JobQueue, runner: BatchRunner, batches: BatchesService): Promise<void> {
  await queue.work("batch-run", BATCHES_PER_PROCESS, ({ batchId }) => runner.run(batchId));
  await queue.work(
    "batch-expire",
    1,
    async ({ batchId }) => {
      await batches.expire(batchId);
    },
    2,
  );
}
