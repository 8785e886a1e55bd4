/**
 * Background work (issue 6, helper J): the durable job queue every role sends jobs to, background
 * responses, batches (issue 7), the deployment reconciler (issue 9) and request-body retention
 * (issue 12, item 4). Workers run unless the role is `api`; a `worker` process serves no HTTP.
 */
import type { Logger } from "pino";
import type { DataSource } from "typeorm";
import type { Config } from "../config/config.js";
import { queryRows } from "../db/sql.js";
import { workBackgroundResponses } from "../jobs/background-response.jobs.js";
import { workBatches } from "../jobs/batch.jobs.js";
import { workDeployments } from "../jobs/deployment.jobs.js";
import { JobQueue } from "../jobs/job-queue.js";
import { BatchRunner } from "../services/batches/batch-runner.js";
import { BatchesService } from "../services/batches/batches.service.js";
import { BackgroundResponsesService } from "../services/inference/responses/background-responses.service.js";
import { DeploymentReconciler } from "../services/models/deployment-reconciler.js";
import { RetentionService } from "../services/usage/retention.service.js";
import type { DatabaseParts } from "./database.js";
import type { Lifecycle } from "./lifecycle.js";
import type { ModelParts } from "./models.js";
import type { CoreServices } from "./services.js";

/** What the API side uses of the background work. */
export interface WorkerParts {
  jobs: JobQueue;
  background: BackgroundResponsesService;
  batches: BatchesService;
  /** Request-body retention; it runs on its own in worker processes only. */
  retention: RetentionService;
}

/**
 * Starts the job queue and, unless `config.role` is `api`, the workers: the components
 * "background reconciler", "job queue", "batch runner", "deployment reconciler" and "body
 * retention", in that order ("job queue" alone in an `api` process). A worker process also ends
 * activity rows in flight that a stopped process left behind.
 */
export async function startWorkers(
  config: Config,
  logger: Logger,
  life: Lifecycle,
  { sessionUrl, dataSource: ds, bus, circuit, timeouts }: DatabaseParts,
  { metrics, catalog, engines, platform, teamModels, customSlots, engineSequences, tracing }: ModelParts,
  { inference, metering, responses, inFlight }: CoreServices,
): Promise<WorkerParts> {
  const runsWorkers = config.role !== "api";
  const jobs = new JobQueue({
    databaseUrl: sessionUrl,
    logger,
    supervise: runsWorkers,
    timeouts,
    statementTimeoutMs: config.jobsStatementTimeoutMs,
    connectTimeoutMs: config.dbConnectTimeoutMs,
    circuit,
    tracing,
  });
  await jobs.start();
  metrics.gaugeFrom(
    "switchyard_job_queue_depth",
    "Jobs waiting to run (created or waiting for a retry), by queue",
    ["queue"],
    () => jobQueueReading(ds, "count(*)::float8"),
  );
  metrics.gaugeFrom(
    "switchyard_job_queue_oldest_age_seconds",
    "Age of the oldest job waiting to run, by queue, seconds",
    ["queue"],
    () => jobQueueReading(ds, "extract(epoch FROM now() - min(created_on))::float8"),
  );
  const background = new BackgroundResponsesService(ds, inference, metering, catalog, responses, bus, jobs, logger);
  // The reconciler stops after the job queue, so it is counted as started before it; its worker
  // starts once the queue's workers are registered (below).
  if (runsWorkers) {
    await life.start({ name: "background reconciler", start: () => {}, stop: () => background.stopWorker() });
  }
  // Counted as started only once the queue has started (above): a queue that failed to start has
  // nothing to stop.
  await life.start({ name: "job queue", start: () => {}, stop: () => jobs.stop() });
  if (runsWorkers) {
    await workBackgroundResponses(jobs, background, config.workerConcurrency);
    background.startWorker();
  }
  // Batches (issue 7): the API side here, the runner in worker processes.
  const batches = new BatchesService(
    ds,
    catalog,
    metering,
    jobs,
    bus,
    logger,
    {
      windowS: config.batchWindowS,
      limits: { maxItems: config.batchMaxItems, maxMemberBytes: config.bodyLimitBytes },
      publicUrl: config.publicUrl,
    },
    responses,
  );
  if (runsWorkers) {
    await life.start({
      name: "batch runner",
      start: async () => {
        const runner = new BatchRunner(ds, inference, catalog, batches, jobs, bus, logger, {
          concurrency: config.batchConcurrency ?? Math.max(1, engineSequences - 1),
        });
        await workBatches(jobs, runner, batches);
        runner.start();
        return runner;
      },
      stop: (runner) => runner.stop(),
    });
  }
  // Deployments and custom models (issue 9): the reconciler brings them up in worker processes.
  if (runsWorkers) {
    await life.start({
      name: "deployment reconciler",
      start: async () => {
        const reconciler = new DeploymentReconciler(ds, bus, engines, platform, teamModels, logger, {
          intervalMs: config.reconcileIntervalMs,
          maxSlots: config.deploymentMaxSlots,
          dedicatedSlots: config.dedicatedSlots,
          teamDedicatedSlots: config.teamDedicatedSlots,
          customSlots,
          modelsDir: config.modelsDir,
          dataDir: config.dataDir,
        });
        await workDeployments(jobs, reconciler);
        reconciler.start();
        return reconciler;
      },
      stop: (reconciler) => reconciler.stop(),
    });
  }
  // Request bodies past SWITCHYARD_BODY_RETENTION_DAYS are cleared hourly by worker processes.
  const retention = new RetentionService(ds, logger, { bodyRetentionDays: config.bodyRetentionDays });
  if (runsWorkers) inFlight.start(); // ends rows in flight that a stopped process left behind
  if (runsWorkers) {
    await life.start({ name: "body retention", start: () => retention.start(), stop: () => retention.stop() });
  }
  return { jobs, background, batches, retention };
}

/** One reading per pg-boss queue of the jobs waiting to run (`value`: an SQL aggregate over them). */
async function jobQueueReading(
  ds: DataSource,
  value: string,
): Promise<Array<{ labels: { queue: string }; value: number }>> {
  const rows = await queryRows<{ name: string; value: number }>(
    ds,
    `SELECT name, ${value} AS value FROM pgboss.job WHERE state IN ('created', 'retry') GROUP BY name`,
  );
  return rows.map((r) => ({ labels: { queue: r.name }, value: r.value }));
}
