/**
 * The deployment reconciler's job handler (issue 9): thin, it calls the service. A
 * `deployment-reconcile` job (sent when a deployment is created or a custom model's deployment is
 * requested) runs one sweep over every due row (`DeploymentReconciler.sweep`); the reconciler's own
 * timer sweeps too, for rows whose lease ran out.
 */
import type { DeploymentReconciler } from "../services/models/deployment-reconciler.js";
import type { JobQueue } from "./job-queue.js";

/** Registers the reconciler's handler on `queue` (one sweep at a time per process). */
export async function workDeployments(queue: JobQueue, reconciler: DeploymentReconciler): Promise<void> {
  await queue.work("deployment-reconcile", 1, () => reconciler.sweep());
}
