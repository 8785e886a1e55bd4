/**
 * The background-response job handlers (issue 6, item 2): thin, they call the service.
 * `response-generate` runs the generation; `response-deadline` (scheduled at the deadline) ends
 * the response as failed/timeout if it is still in progress, whether its worker is slow, stuck
 * or dead.
 */
import type { BackgroundResponsesService } from "../services/inference/responses/background-responses.service.js";
import type { JobQueue } from "./job-queue.js";

/**
 * Registers the handlers on `queue`: up to `concurrency` generations at once in this process,
 * and the deadline jobs.
 */
export async function workBackgroundResponses(
  queue: JobQueue,
  service: BackgroundResponsesService,
  concurrency: number,
): Promise<void> {
  await queue.work("response-generate", concurrency, ({ responseId }) => service.run(responseId));
  // Deadlines are also enforced by the reconciler and by reads: this one polls less often.
  await queue.work(
    "response-deadline",
    1,
    async ({ responseId }) => {
      await service.end(responseId, "timeout");
    },
    2,
  );
}
