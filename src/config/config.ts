/**
 * Configuration: read once from the environment and an optional JSON config file, validated with
 * zod, with documented defaults (README "Configuration"). Environment variables win over the file.
 */
import { randomBytes } from "node:crypto";
import { existsSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { isIP } from "node:net";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { z } from "zod";
import { otelTracesFallbacks, otelTracesOff } from "./otel-env.js";
import { ENV_NAMES } from "./env-names.js";
import {
  LOG_LEVELS,
  exposure,
  type UpstreamConfig,
  autoOrInt,
  intFromEnv,
  jsonArray,
  oauthProviderSchema,
  secureUrl,
  upstreamList,
} from "./config-fields.js";

/** Absolute path of the package root (the folder holding package.json), from src/ or dist/. */
export const packageRoot: string = (() => {
  let dir = path.dirname(fileURLToPath(import.meta.url));
  while (!existsSync(path.join(dir, "package.json"))) {
    const parent = path.dirname(dir);
    if (parent === dir) throw new Error("package.json not found above " + fileURLToPath(import.meta.url));
    dir = parent;
  }
  return dir;
})();

/** This build's version: package.json `version` (issue 27, item 4: `GET /` and the start banner say it). */
export const packageVersion: string = (
  JSON.parse(readFileSync(path.join(packageRoot, "package.json"), "utf8")) as { version: string }
).version;

/** The validated configuration every component receives. Units are in the names (ms, micros). */
/** Re-exported for the modules that read these parts of the configuration. */
export { exposure, isLoopbackBind, isLoopbackHost } from "./config-fields.js";
export type { OAuthProviderConfig, UpstreamConfig } from "./config-fields.js";

export const configSchema = z.object({
  /** HTTP port; 0 picks a free one (tests). */
  port: intFromEnv(0, 65535).default(8080),
  /**
   * Interface to bind (issue 27, item 2: this machine only unless set; `0.0.0.0` or `::` for every
   * interface, which also changes the `signup` default and needs `localPayments: allow` for the
   * local payment provider).
   */
  host: z.string().min(1).default("127.0.0.1"),
  /**
   * Who may create an account (issue 27, item 2): `open` (anyone, through signup or a first OAuth
   * sign-in), `invite` (only with an invitation's `invite_token`), `closed` (nobody; accounts come
   * from `npm run admin -- create-owner`). Unset: `open` on a loopback `host`, `invite` otherwise.
   */
  signup: z.enum(["open", "invite", "closed"]).optional(),
  /**
   * The local payment provider (credits top-ups without any payment) on a `host` others can reach
   * (issue 27, item 2): `loopback` (default) refuses to start there; `allow` serves it anyway
   * (a shared demo or test machine).
   */
  localPayments: z.enum(["loopback", "allow"]).default("loopback"),
  /** Public base URL used to build absolute links; defaults to http://localhost:PORT. */
  publicUrl: z.string().url().optional(),
  /** PostgreSQL URL; unset starts an embedded PostgreSQL in `<dataDir>/pg`. */
  databaseUrl: z.string().min(1).optional(),
  /**
   * PostgreSQL URL of a session connection (issue 31, item 3), for what needs one: migrations and
   * their session advisory lock, the cache bus's LISTEN and pg-boss. Set, `databaseUrl` may be a
   * transaction-mode pooler (PgBouncer `pool_mode = transaction`): its pool then sends unnamed
   * statements only. Unset, everything uses `databaseUrl`, which must then keep sessions.
   */
  databaseDirectUrl: z.string().min(1).optional(),
  /**
   * Database bounds (issue 28, item 1), ms, 0 leaving PostgreSQL's own setting; every pool's
   * sessions have them (migrations run without the first two, the job queue's statements have
   * `jobsStatementTimeoutMs`). A statement running longer is cancelled (`statement_timeout`).
   */
  dbStatementTimeoutMs: intFromEnv(0, 86_400_000).default(30_000),
  /** A wait for a lock longer than this fails (`lock_timeout`), ms. */
  dbLockTimeoutMs: intFromEnv(0, 86_400_000).default(10_000),
  /** A session idle this long inside a transaction is closed (`idle_in_transaction_session_timeout`), ms. */
  dbIdleInTxTimeoutMs: intFromEnv(0, 86_400_000).default(60_000),
  /**
   * Statement bound of the job queue's own pool, ms: its maintenance archives and deletes finished
   * jobs in statements as long as the queue is large.
   */
  jobsStatementTimeoutMs: intFromEnv(0, 86_400_000).default(600_000),
  /** Most time to get a database connection (a new one, or a free one of a full pool), ms. */
  dbConnectTimeoutMs: intFromEnv(100, 600_000).default(10_000),
  /**
   * The database circuit (issue 28, item 1): most time its probe (`SELECT 1` on a connection of
   * its own) may take before the database counts as unavailable and requests get 503, ms.
   */
  dbProbeTimeoutMs: intFromEnv(100, 60_000).default(1_000),
  /** Folder for the embedded database, the generated JWT secret and the model cache. */
  dataDir: z.string().min(1).default("./.data"),
  /** Folder searched first for model files (e.g. ../shared/models). */
  modelsDir: z.string().min(1).optional(),
  /** HMAC secret for access tokens; generated and persisted in the data dir when unset. */
  jwtSecret: z.string().min(32).optional(),
  /** Access-token lifetime in seconds (DESIGN §3: 24 h). */
  accessTokenTtlS: intFromEnv(60, 30 * 24 * 3600).default(24 * 3600),
  /**
   * CPU threads per embedded-engine context; `auto` measures them per model file and machine at
   * first load (`engine-tuning.ts`, cached in `<dataDir>/engine-tuning.json`).
   */
  engineThreads: autoOrInt(1, 256).default("auto"),
  /** Parallel sequences per generation model (concurrent requests decoded in one batch); `auto` as above. */
  engineSequences: autoOrInt(1, 256).default("auto"),
  /** Embedding contexts per embedding model. */
  engineEmbeddingContexts: intFromEnv(1, 64).default(2),
  /** Default wait for a free engine slot before answering 429, in seconds. */
  maxQueueWaitS: intFromEnv(1, 300).default(30),
  /** Model catalog file (JSON). */
  catalogPath: z.string().min(1).default(path.join(packageRoot, "src/config/catalog.json")),
  /** Free credit granted to every new team, in micro-USD (5.00 USD). */
  signupCreditMicros: z.coerce.bigint().nonnegative().default(5_000_000n),
  /** Largest accepted request body. */
  // 8 MiB: a body is parsed on the main thread (JSON.parse of 15 MiB held every other request for
  // 250–450 ms here), and no accepted request needs more (a 128k-token prompt is under 1 MiB; an
  // embeddings request of 300k token ids about 2 MiB). Batches get their own limit.
  bodyLimitBytes: intFromEnv(1024, 512 * 1024 * 1024).default(8 * 1024 * 1024),
  /**
   * Largest GraphQL request: the HTTP body on `/graphql` and one graphql-ws frame (issue 5,
   * item 1: well under `bodyLimitBytes`; a larger frame closes the socket with 1009).
   */
  graphqlMaxPayloadBytes: intFromEnv(1024, 64 * 1024 * 1024).default(1024 * 1024),
  /**
   * Browser origins allowed by CORS (issue 5, item 6): a comma list of origins such as
   * `https://app.example.com`, or `*` for any; empty (the default) answers no CORS headers.
   */
  corsOrigins: z
    .union([z.array(z.string()), z.string()])
    .transform((v) => (Array.isArray(v) ? v : v.split(",")).map((o) => o.trim()).filter((o) => o !== ""))
    .pipe(z.array(z.string().regex(/^(\*|https?:\/\/[^/\s,]+)$/, "expected * or origins like https://app.example.com")))
    .default([]),
  /**
   * Most time to receive a whole request (headers and body), ms; then 408 and the connection
   * closes. Answers, streamed ones too, are not limited by it (Node's `server.requestTimeout`).
   */
  requestTimeoutMs: intFromEnv(1000, 3_600_000).default(120_000),
  /** Most time to receive a request's headers, ms (Node's `server.headersTimeout`); ≤ requestTimeoutMs. */
  headersTimeoutMs: intFromEnv(1000, 3_600_000).default(30_000),
  /** Most open connections (HTTP and websocket); further ones are closed at once (`server.maxConnections`). */
  maxConnections: intFromEnv(1, 1_000_000).default(10_000),
  /** Group commit: most rows per flush. */
  groupCommitMaxRows: intFromEnv(1, 10_000).default(500),
  /** Cache lifetime of API-key and balance lookups, in ms (also invalidated through NOTIFY). */
  authCacheTtlMs: intFromEnv(0, 3_600_000).default(60_000),
  logLevel: z.enum(LOG_LEVELS).default("info"),
  /** Log lines: `auto` (readable in a terminal, JSON otherwise), `json` or `pretty` (issue 13, item 5). */
  logFormat: z.enum(["auto", "json", "pretty"]).default("auto"),
  /**
   * What this process runs (issue 6, item 1): `api` (HTTP only), `worker` (job handlers only),
   * `all`, or `engine` (issue 31, item 2: the embedded models only, served to the machine's other
   * processes over loopback; no HTTP API, no jobs, no database).
   */
  role: z.enum(["api", "worker", "all", "engine"]).default("all"),
  /** Background responses one worker process generates at once (issue 6, item 2). */
  workerConcurrency: intFromEnv(1, 256).default(4),
  /**
   * Nice value (0 normal … 19 lowest CPU priority) a `worker`-role process started by `npm run
   * worker` / `main.ts` gives itself, so API processes on the same machine get the CPU first
   * (issue 12, item 3); 0 leaves it alone. Processes of other roles are never changed.
   */
  workerNice: intFromEnv(0, 19).default(10),
  /**
   * API processes on this machine (issue 31, item 1): 1 serves from this process; N > 1 (or
   * `auto` = the CPU cores) makes it a supervisor (`app/supervisor.ts`) that forks N API
   * processes sharing the port, plus one worker process when the role is `all`.
   */
  apiProcesses: autoOrInt(1, 64).default(1),
  /**
   * One engine process per machine (issue 31, item 2): `auto` (the supervisor starts one when the
   * catalog has embedded models), `on` (always, even for one API process), `off` (each process
   * loads the embedded models itself).
   */
  engineProcess: z.enum(["auto", "on", "off"]).default("auto"),
  /** The engine process this one calls for embedded models (set by the supervisor); unset: in-process. */
  engineUrl: z.string().url().optional(),
  /** Shared secret between an engine process and its callers (the supervisor generates one). */
  engineToken: z.string().min(32).optional(),
  /**
   * Let the start pull the default model's file from its `hf:` source when it is missing (issue
   * 17: the start downloads nothing else; `npm run models -- pull <id>` does).
   */
  allowModelDownload: z
    .union([z.boolean(), z.enum(["true", "false", "1", "0"])])
    .transform((v) => v === true || v === "true" || v === "1")
    .default(true),
  /** Webhooks (DESIGN §3): let deliveries reach private, loopback and link-local addresses (tests). */
  webhookAllowPrivate: z
    .union([z.boolean(), z.enum(["true", "false", "1", "0"])])
    .transform((v) => v === true || v === "true" || v === "1")
    .default(false),
  /** Webhooks: delays before retries 1, 2, 3, ms (±20 % jitter), as a comma list. */
  webhookRetryDelaysMs: z
    .union([z.array(z.coerce.number()), z.string()])
    .transform((v) => (Array.isArray(v) ? v : v.split(",").map((d) => Number(d.trim()))))
    .pipe(z.array(z.number().int().min(0).max(86_400_000)).min(1).max(20))
    .default([5000, 300000, 1800000]),
  /** Webhooks: ceiling of one delivery attempt (connect, send, answer), ms. */
  webhookTimeoutMs: intFromEnv(1, 300_000).default(30_000),
  /**
   * Webhooks: attempts under way at once in one process (issue 28, item 2); a team may use a
   * quarter of them (`teamBound` in `webhook-dispatcher.ts`).
   */
  webhookConcurrency: intFromEnv(1, 4096).default(256),
  /**
   * Webhooks: attempts under way at once to one destination host (`host[:port]` of the URL) in one
   * process (issue 28, item 2): a receiver that hangs holds these and delays no other host's.
   */
  webhookHostConcurrency: intFromEnv(1, 256).default(4),
  /** Batches (issue 7): the completion window, seconds (24 h; shortened in tests). */
  batchWindowS: intFromEnv(1, 86_400).default(86_400),
  /** Batches: largest `POST /v1/batches` body (200 MiB; 413 above). */
  batchMaxBytes: intFromEnv(1024, 1024 * 1024 * 1024).default(200 * 1024 * 1024),
  /** Batches: most items in one batch. */
  batchMaxItems: intFromEnv(1, 1_000_000).default(50_000),
  /**
   * Batches: items one worker process runs at once, across its batches; unset = engine sequences
   * − 1 (at least 1), so a slot stays free for interactive requests (DESIGN §3 Batches).
   */
  batchConcurrency: intFromEnv(1, 1024).optional(),
  /**
   * Batch items one generation model decodes at once while interactive traffic is on (an
   * interactive request decoding, or one in the last second; issue 12, item 3); more wait until
   * it is quiet. 0 pauses batch work meanwhile; 256 lifts the bound.
   */
  batchWhileInteractive: intFromEnv(0, 256).default(1),
  /** Mail (issue 8): `smtp://user:pass@host:port` or `smtps://…`; unset: mail goes to the `mail_outbox` table only. */
  smtpUrl: z
    .string()
    .regex(/^smtps?:\/\//, "expected smtp://… or smtps://…")
    .optional(),
  /** Mail: the From header. */
  mailFrom: z.string().min(3).default("Switchyard <no-reply@switchyard.local>"),
  /**
   * Password reset (issue 8, item 1): the page the mailed link opens, `?token=…` appended; unset:
   * `<publicUrl>/reset-password`. Never taken from a request's Host header (DESIGN §3).
   */
  passwordResetUrl: z.string().url().optional(),
  /**
   * Throttling (issue 8, item 5): most failed logins per window per client address and per account,
   * and most forgot-password requests per window per address and per email; 429 beyond.
   */
  authThrottleMax: intFromEnv(1, 1_000_000).default(10),
  /** Throttling: the window, seconds. */
  authThrottleWindowS: intFromEnv(1, 86_400).default(60),
  /**
   * Which reverse proxies to believe about the client address (`X-Forwarded-For`), as Express's
   * `trust proxy`: `true` (any), a hop count, or a comma list of addresses, CIDRs and `loopback`,
   * `linklocal`, `uniquelocal`. Unset: the socket peer is the client (behind a proxy, every client
   * would share the proxy's throttling counters).
   */
  trustProxy: z
    .union([z.boolean(), z.number(), z.string()])
    .transform((v): boolean | number | string =>
      typeof v !== "string" ? v : v === "true" || v === "false" ? v === "true" : /^\d+$/.test(v) ? Number(v) : v,
    )
    .refine(
      (v) =>
        typeof v !== "string" ||
        v
          .split(",")
          .every(
            (part) => /^(loopback|linklocal|uniquelocal)$/.test(part.trim()) || isIP(part.trim().split("/")[0]) !== 0,
          ),
      "expected true, false, a hop count, or addresses/CIDRs/loopback/linklocal/uniquelocal separated by commas",
    )
    .optional(),
  /**
   * OpenID Connect providers (issue 8, item 2): a JSON array (in the environment) or an array (in
   * the config file) of `{name, issuer, client_id, client_secret?, redirect_uri, scopes?}`.
   */
  oauthProviders: z
    .union([z.array(z.unknown()), z.string()])
    .transform((v, ctx) => {
      if (Array.isArray(v)) return v;
      try {
        return JSON.parse(v) as unknown;
      } catch {
        ctx.addIssue({ code: "custom", message: "expected a JSON array of providers" });
        return z.NEVER;
      }
    })
    .pipe(
      z
        .array(oauthProviderSchema)
        .max(32)
        .refine((list) => new Set(list.map((p) => p.name)).size === list.length, "provider names must be unique"),
    )
    .default([]),
  /**
   * Upstream OpenAI-compatible endpoints (issue 9, item 3): a JSON array (environment) or an array
   * (config file) of `{name, base_url, api_key?, models, weight?, max_concurrency?}`. Catalog models
   * with `engine.type: "openai_compatible"` are served by them.
   */
  upstreams: jsonArray("endpoints").pipe(upstreamList).default([]),
  /** A JSON file holding more upstream endpoints (same shape), e.g. to keep API keys out of the environment. */
  upstreamsFile: z.string().min(1).optional(),
  /** Upstreams: most time to open a connection, ms (then the next replica is tried). */
  upstreamConnectMs: intFromEnv(100, 600_000).default(5_000),
  /**
   * Upstreams: most time from sending a request to the answer's headers, ms (504 after). A
   * non-streamed completion's headers come when it is done, so this bounds a whole generation.
   */
  upstreamHeadersMs: intFromEnv(100, 3_600_000).default(300_000),
  /** Upstreams: most silence between two parts of an answer's body (e.g. streamed tokens), ms (504 after). */
  upstreamIdleMs: intFromEnv(100, 3_600_000).default(120_000),
  /** Upstreams: how often each endpoint's `GET /v1/models` is probed, ms (a failed one sooner). */
  upstreamProbeMs: intFromEnv(100, 3_600_000).default(10_000),
  /**
   * Payment provider of top-ups and invoices (issue 10, items 5–6): `local` (default; a signed
   * confirm link credits the ledger, no money moves) or `stripe` (needs `stripeSecretKey`).
   */
  paymentProvider: z.enum(["local", "stripe"]).default("local"),
  /** Stripe secret API key (`sk_…`), for `paymentProvider: stripe`. */
  stripeSecretKey: z.string().min(1).optional(),
  /** Stripe webhook signing secret (`whsec_…`) of `POST /control/v1/billing/stripe/webhook`. */
  stripeWebhookSecret: z.string().min(1).optional(),
  /** Base URL of the Stripe API (tests point it at a local server); default https://api.stripe.com. */
  stripeApiBase: z
    .string()
    .url()
    .refine((v) => /^https?:$/.test(new URL(v).protocol), "expected an http or https URL")
    .optional(),
  /**
   * Deployments (issue 9): most parallel sequences (or embedding contexts) one deployment may
   * load in the embedded engine; a deployment whose `min_replicas` asks for more fails with a
   * `status_reason` saying so.
   */
  deploymentMaxSlots: intFromEnv(1, 256).default(16),
  /**
   * Deployments (issue 9 review, finding 2): most parallel sequences (or embedding contexts) the
   * embedded engine loads for dedicated runtimes, every team's deployments and requested custom
   * models together. Every process loads every available runtime, so this bounds each process's
   * memory; a deployment that would go beyond it fails with a `status_reason` saying so.
   */
  dedicatedSlots: intFromEnv(0, 65_536).default(64),
  /**
   * Retention (issue 12, item 4): days activity rows keep their request and result bodies
   * (`body_json`, `result_json`); cleared hourly by worker processes after that. Unset: kept.
   */
  bodyRetentionDays: intFromEnv(1, 36_500).optional(),
  /**
   * Activity states (issue 10): a request still in flight this many ms after admission gets its
   * activity row early, `pending` or `running` (0: every request, at once — one more write each).
   */
  activityInFlightAfterMs: intFromEnv(0, 3_600_000).default(1000),
  /**
   * When a metered request may be answered (issue 12, item 1; README "Durability"):
   * `database` (default) — its record (activity row, ledger charge, event) is committed and
   * flushed to disk first, so it survives a crash of Switchyard, PostgreSQL or the machine;
   * `process` — committed first but written to disk by PostgreSQL within a fraction of a second
   * (`synchronous_commit = off` for the group commit only): it survives a crash of Switchyard,
   * and a crash of PostgreSQL or the machine may lose the last ~0.6 s of records.
   */
  durability: z.enum(["database", "process"]).default("database"),
  /**
   * Payment-provider calls (top-up sessions, invoices) one team may have running at once in a
   * process, and all teams together (issue 10 review, finding 1); one more is refused with 429.
   */
  providerCallsPerTeam: intFromEnv(1, 1_000).default(4),
  providerCallsPerProcess: intFromEnv(1, 100_000).default(64),
  /** Most of `dedicatedSlots` one team's runtimes take; one more fails saying so. */
  teamDedicatedSlots: intFromEnv(0, 65_536).default(16),
  /**
   * Metrics (issue 13, item 4): the bearer token `GET /metrics` asks for; unset, it answers
   * loopback clients only.
   */
  metricsToken: z.string().min(16).optional(),
  /** Most deployments one team may have at once (every status); the next create gets 409. */
  teamMaxDeployments: intFromEnv(0, 100_000).default(8),
  /** Most custom models one team may have at once; the next create gets 409. */
  teamMaxCustomModels: intFromEnv(0, 100_000).default(32),
  /**
   * Deployments: how often each worker process looks for deployments and requested custom models
   * to bring up (also those a dead process left `deploying`), ms. Creates wake it at once through
   * the job queue; this is the fallback.
   */
  reconcileIntervalMs: intFromEnv(100, 3_600_000).default(10_000),
  /**
   * Catalog models the start pulls before serving (issue 17; for containers): a comma list of
   * model ids. A pull that fails stops the start (one line naming the model and why).
   */
  pullOnStart: z
    .union([z.array(z.string()), z.string()])
    .transform((v) => (Array.isArray(v) ? v : v.split(",")).map((id) => id.trim()).filter((id) => id !== ""))
    .default([]),
  /**
   * The embedded engine's GPU use (issue 17): `auto` uses node-llama-cpp's GPU build (CUDA,
   * Vulkan, Metal) when a usable GPU is present and the build passes a probe in a child process
   * (a first decode with the model: a build that crashes its process leaves the server on the
   * CPU; the verdict is cached in `<dataDir>/gpu-probe.json`), else the CPU; `off` always the
   * CPU; `cuda`, `vulkan` or `metal` that build without a probe (the start stops when it does not
   * load).
   */
  gpu: z.enum(["auto", "off", "cuda", "vulkan", "metal"]).default("auto"),
  /** Time limit of the GPU probe (`gpu: auto`), seconds; past it the probe counts as failed. */
  gpuProbeTimeoutS: intFromEnv(1, 3_600).default(300),
  /**
   * Decisions (issue 11 review, finding 4): the longest one request may score, ms, on either
   * engine; past it the request ends with 504 and is charged the tokens evaluated so far.
   */
  decisionsTimeLimitMs: intFromEnv(1, 3_600_000).default(60_000),
  /**
   * Model hub base URL for pulls (the Hugging Face convention `HF_ENDPOINT`: a mirror); default
   * https://huggingface.co. https, or plain http on a loopback host only: `HF_TOKEN` (or
   * `user:pass@` in it) goes to it (review of issue 17, finding 4).
   */
  hfEndpoint: secureUrl.optional(),
  /**
   * How long a start waits for another process's pull of a `SWITCHYARD_PULL_ON_START` model (the
   * API and the worker starting together), seconds; then the start stops (finding 2).
   */
  pullWaitS: intFromEnv(0, 86_400).default(1800),
  /** Model hub token for pulls (`HF_TOKEN`): private or gated repositories. */
  hfToken: z.string().min(1).optional(),
  /**
   * Traces (issue 29, item 2): the OTLP/HTTP URL spans are sent to
   * (`OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`, else `OTEL_EXPORTER_OTLP_ENDPOINT` + `/v1/traces`,
   * `otelTracesFallbacks`); unset, or `OTEL_SDK_DISABLED=true` / `OTEL_TRACES_EXPORTER=none`:
   * tracing is off.
   */
  otlpTracesEndpoint: z.string().url().optional(),
  /** How spans are encoded (`OTEL_EXPORTER_OTLP_TRACES_PROTOCOL`, else `OTEL_EXPORTER_OTLP_PROTOCOL`). */
  otlpProtocol: z
    .enum(["http/protobuf", "http/json"], { message: "use http/protobuf or http/json (grpc is not supported)" })
    .default("http/protobuf"),
  /**
   * Prompts and answers in engine spans (issue 29, item 2): off unless `true`, and never for a
   * team with zero data retention on.
   */
  traceContent: z
    .union([z.boolean(), z.enum(["true", "false", "1", "0"])])
    .transform((v) => v === true || v === "true" || v === "1")
    .default(false),
});

/** Who may create an account (config `signup`). */
export type SignupPolicy = "open" | "invite" | "closed";

export type Config = z.infer<typeof configSchema> & { jwtSecret: string; publicUrl: string; signup: SignupPolicy };
export type ConfigInput = z.input<typeof configSchema>;

const ENV_KEYS: Record<keyof ConfigInput, string> = ENV_NAMES;

/** Thrown for configuration that cannot be used; `main` prints the message without a trace. */
export class ConfigError extends Error {
  override name = "ConfigError";
}

/**
 * Builds the configuration from (lowest to highest precedence) defaults, the JSON file named by
 * `SWITCHYARD_CONFIG` (or `./switchyard.config.json` when present), the environment, and
 * `overrides` (tests). Resolves relative paths against the working directory, and generates and
 * persists the JWT secret in `<dataDir>/jwt-secret` when none is given.
 * @throws ConfigError naming the offending setting.
 */
export function loadConfig(env: NodeJS.ProcessEnv = process.env, overrides: Partial<ConfigInput> = {}): Config {
  const raw: Record<string, unknown> = {};
  const file = env.SWITCHYARD_CONFIG ?? (existsSync("switchyard.config.json") ? "switchyard.config.json" : undefined);
  if (file) {
    try {
      Object.assign(raw, JSON.parse(readFileSync(file, "utf8")));
    } catch (err) {
      throw new ConfigError(`cannot read config file ${file} (SWITCHYARD_CONFIG): ${(err as Error).message}`);
    }
  }
  Object.assign(raw, otelTracesFallbacks(env));
  for (const [key, name] of Object.entries(ENV_KEYS)) {
    const value = env[name];
    if (value !== undefined && value !== "") raw[key] = value;
  }
  Object.assign(raw, overrides);
  if (otelTracesOff(env)) delete raw.otlpTracesEndpoint;
  const parsed = configSchema.safeParse(raw);
  if (!parsed.success) {
    const lines = parsed.error.issues.map((i) => {
      const key = String(i.path[0] ?? "");
      const envName = ENV_KEYS[key as keyof ConfigInput];
      // Settings that hold lists of objects name the element and field too (`…[0].issuer`).
      const inner = i.path
        .slice(1)
        .map((p) => (typeof p === "number" ? `[${p}]` : `.${String(p)}`))
        .join("");
      return `${envName ?? key}${inner}: ${i.message}`;
    });
    throw new ConfigError(`invalid configuration: ${lines.join("; ")}`);
  }
  const cfg = parsed.data;
  if (cfg.headersTimeoutMs > cfg.requestTimeoutMs) {
    throw new ConfigError(
      `invalid configuration: SWITCHYARD_HEADERS_TIMEOUT_MS (${cfg.headersTimeoutMs}) must not exceed SWITCHYARD_REQUEST_TIMEOUT_MS (${cfg.requestTimeoutMs})`,
    );
  }
  if ((cfg.engineUrl || cfg.role === "engine") && !cfg.engineToken) {
    throw new ConfigError(
      `invalid configuration: ${cfg.engineUrl ? "SWITCHYARD_ENGINE_URL" : "SWITCHYARD_ROLE=engine"} needs SWITCHYARD_ENGINE_TOKEN (32+ characters, the same for the engine process and its callers)`,
    );
  }
  if (cfg.paymentProvider === "stripe" && !cfg.stripeSecretKey) {
    throw new ConfigError(
      "invalid configuration: SWITCHYARD_PAYMENT_PROVIDER=stripe needs SWITCHYARD_STRIPE_SECRET_KEY",
    );
  }
  const upstreams = cfg.upstreamsFile ? [...cfg.upstreams, ...readUpstreamsFile(cfg.upstreamsFile)] : cfg.upstreams;
  if (new Set(upstreams.map((u) => u.name)).size !== upstreams.length) {
    throw new ConfigError(
      "invalid configuration: SWITCHYARD_UPSTREAMS and SWITCHYARD_UPSTREAMS_FILE name the same endpoint twice",
    );
  }
  const dataDir = path.resolve(cfg.dataDir);
  const modelsDir = cfg.modelsDir ? path.resolve(cfg.modelsDir) : undefined;
  const jwtSecret = cfg.jwtSecret ?? persistedSecret(dataDir);
  const publicUrl = (cfg.publicUrl ?? `http://localhost:${cfg.port}`).replace(/\/$/, "");
  const signup = cfg.signup ?? (exposure({ ...cfg, publicUrl }) ? "invite" : "open");
  const catalogPath = path.resolve(cfg.catalogPath);
  return { ...cfg, upstreams, dataDir, modelsDir, catalogPath, jwtSecret, publicUrl, signup };
}

/**
 * The endpoints of `SWITCHYARD_UPSTREAMS_FILE` (a JSON array, as `SWITCHYARD_UPSTREAMS`).
 * @throws ConfigError naming the file and the offending entry.
 */
function readUpstreamsFile(file: string): UpstreamConfig[] {
  let json: unknown;
  try {
    json = JSON.parse(readFileSync(file, "utf8"));
  } catch (err) {
    throw new ConfigError(`cannot read upstreams file ${file} (SWITCHYARD_UPSTREAMS_FILE): ${(err as Error).message}`);
  }
  const parsed = upstreamList.safeParse(json);
  if (!parsed.success) {
    const detail = parsed.error.issues.map((i) => `${i.path.map((p) => `[${String(p)}]`).join("")}: ${i.message}`);
    throw new ConfigError(`invalid upstreams file ${file} (SWITCHYARD_UPSTREAMS_FILE): ${detail.join("; ")}`);
  }
  return parsed.data;
}

/** Reads `<dataDir>/jwt-secret`, creating it (256 random bits, mode 0600) on first use. */
function persistedSecret(dataDir: string): string {
  const file = path.join(dataDir, "jwt-secret");
  if (existsSync(file)) return readFileSync(file, "utf8").trim();
  mkdirSync(dataDir, { recursive: true });
  const secret = randomBytes(32).toString("base64url");
  writeFileSync(file, secret + "\n", { mode: 0o600, flag: "wx" });
  return secret;
}
