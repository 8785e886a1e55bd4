/**
 * The services every role builds (API and worker processes alike): tokens and credentials, mail,
 * metering with its group commit, completion webhooks and the events feed, and inference.
 */
import type { Logger } from "pino";
import type { Config } from "../config/config.js";
import { CredentialService } from "../services/accounts/credential.service.js";
import { KeyPolicyCache } from "../services/accounts/key-policy-cache.js";
import { CompletionEventsService } from "../services/events/completion-events.service.js";
import {
  KEEP_FAILED_MS,
  WEBHOOK_TOKEN_PURPOSE,
  WebhookDispatcher,
} from "../services/events/webhooks/webhook-dispatcher.js";
import { SecretBox } from "../services/models/secret-box.js";
import { InferenceService } from "../services/inference/inference.service.js";
import { ResponsesService } from "../services/inference/responses/responses.service.js";
import { StreamDirectory } from "../services/inference/responses/stream-directory.js";
import { InFlightActivity } from "../services/metering/in-flight-activity.js";
import { MeteringService } from "../services/metering/metering.service.js";
import { RateLimitService } from "../services/metering/rate-limit.service.js";
import { KeyLimitsService } from "../services/metering/key-limits.service.js";
import { OutboxMailer } from "../services/platform/mail/mailer.js";
import { TokenService } from "../services/platform/tokens.js";
import type { DatabaseParts } from "./database.js";
import type { Lifecycle } from "./lifecycle.js";
import type { ModelParts } from "./models.js";

/** One day, ms. */
const DAY_MS = 86_400_000;

/** The services of `startServices`. */
export interface CoreServices {
  tokens: TokenService;
  /** Outgoing mail (issue 8): the outbox, and SMTP when `SMTP_URL` is set. */
  mailer: OutboxMailer;
  credentials: CredentialService;
  metering: MeteringService;
  /** The completion events feed (issue 6, items 6–7); started here, closed with HTTP. */
  events: CompletionEventsService;
  streamDirectory: StreamDirectory;
  /** Early activity rows of requests in flight (issue 10); started by worker processes. */
  inFlight: InFlightActivity;
  inference: InferenceService;
  responses: ResponsesService;
}

/**
 * Builds the services and starts the components "mailer", "metering", "webhook dispatcher" and
 * "in-flight activity", in that order. `onMetering` gets the metering service as soon as it
 * exists (the second drain, after the engines, writes through it).
 */
export async function startServices(
  config: Config,
  logger: Logger,
  life: Lifecycle,
  { dataSource: ds, bus, credit, keyBudgets, circuit }: DatabaseParts,
  { engines, metrics, prices, tracing }: ModelParts,
  onMetering: (metering: MeteringService) => void,
): Promise<CoreServices> {
  const tokens = new TokenService(config.jwtSecret, config.accessTokenTtlS);
  const mailer = await life.start({
    name: "mailer",
    start: () => new OutboxMailer(ds, logger, { smtpUrl: config.smtpUrl, from: config.mailFrom }),
    stop: (mailer) => mailer.close(),
  });
  // API key policies (issue 29, item 1): cached as credentials are, primed by their lookups.
  const keyPolicies = new KeyPolicyCache(ds, bus, config.authCacheTtlMs);
  const credentials = new CredentialService(ds, tokens, bus, config.authCacheTtlMs, keyPolicies);
  const metering = await life.start({
    name: "metering",
    start: () =>
      new MeteringService(
        ds,
        bus,
        logger,
        config.groupCommitMaxRows,
        config.authCacheTtlMs,
        credit.holder,
        config.durability,
      ),
    stop: (metering) => metering.drainAll(),
  });
  metering.tracing = tracing;
  metering.refuseWhileUnavailable(circuit);
  onMetering(metering);

  // Completion webhooks (issue 6, item 3): the dispatcher sends what the group commit put in the
  // outbox. The group commit's metrics are wired here too, before the dispatcher counts as started.
  await life.start({
    name: "webhook dispatcher",
    start: () => {
      const webhooks = new WebhookDispatcher(ds, bus, logger, {
        allowPrivate: config.webhookAllowPrivate,
        retryDelaysMs: config.webhookRetryDelaysMs,
        timeoutMs: config.webhookTimeoutMs,
        concurrency: config.webhookConcurrency,
        hostConcurrency: config.webhookHostConcurrency,
        onAttempt: (outcome) => metrics.webhookAttempts.inc({ outcome }),
        // A failed delivery stays redeliverable for 7 days, never longer than bodies are kept
        // (issue 27, item 6), its token sealed as a custom model's hub token is.
        keepFailedMs: Math.min(KEEP_FAILED_MS, (config.bodyRetentionDays ?? Infinity) * DAY_MS),
        sealer: new SecretBox(config.jwtSecret, WEBHOOK_TOKEN_PURPOSE),
        tracing,
      });
      webhooks.start();
      metering.onFlush = (rows, seconds) => {
        metrics.meteringFlushRows.observe(rows);
        metrics.meteringFlushSeconds.observe(seconds);
      };
      metrics.counterFrom(
        "switchyard_metering_flushes_total",
        "Group commits (flushes) of finished requests",
        () => metering.stats.flushes,
      );
      metrics.counterFrom(
        "switchyard_metering_flush_rows_total",
        "Requests written by group commits (÷ flushes = flush size)",
        () => metering.stats.rows,
      );
      metrics.counterFrom(
        "switchyard_metering_flush_seconds_total",
        "Time group commits took, seconds (÷ flushes = flush latency)",
        () => metering.stats.flushMs / 1000,
      );
      return webhooks;
    },
    stop: (webhooks) => webhooks.stop(),
  });

  // Completion events feed and subscription (issue 6, items 6–7): reads the table the metering
  // flush writes, woken by the cache bus's `event` NOTIFY; hourly retention cleanup.
  const events = new CompletionEventsService(ds, bus, logger);
  events.start();

  // Streams (issue 6, item 4, helper S): the cached stream owner lookup the create operations use.
  const streamDirectory = new StreamDirectory(ds, bus);
  const rateLimits = new RateLimitService(ds, logger);
  // Early `pending`/`running` activity rows of requests in flight past SWITCHYARD_ACTIVITY_IN_FLIGHT_AFTER_MS.
  const inFlight = await life.start({
    name: "in-flight activity",
    start: () => new InFlightActivity(ds, logger, { afterMs: config.activityInFlightAfterMs }),
    stop: (inFlight) => inFlight.close(),
  });
  const inference = new InferenceService(
    engines,
    metering,
    credit,
    config.maxQueueWaitS,
    streamDirectory,
    rateLimits,
    prices,
    inFlight,
    logger,
    new KeyLimitsService(ds, keyPolicies, logger),
    keyBudgets,
  );
  const responses = new ResponsesService(ds);
  return { tokens, mailer, credentials, metering, events, streamDirectory, inFlight, inference, responses };
}
