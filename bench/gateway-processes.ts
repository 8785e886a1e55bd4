/**
 * The processes of the gateway benches (`gateway.bench.ts` and its A/B runner `gateway-ab.ts`):
 * the bench upstream (`gateway-upstream.ts`, an OpenAI-compatible server in plain `node:http`) and
 * Switchyard in front of it (`gateway-switchyard.ts`: `main.ts` plus the bench-only metering
 * switch), with the one-model catalog both use, and the request bodies they send.
 */
import { type ChildProcess, spawn } from "node:child_process";
import { writeFileSync } from "node:fs";
import path from "node:path";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";

const here = path.dirname(fileURLToPath(import.meta.url));

/** The catalog's one model, served by the bench upstream. */
export const GATEWAY_MODEL = "bench-model";

/** The non-streamed chat completion every closed and open loop sends. */
export const CHAT_BODY = JSON.stringify({
  model: GATEWAY_MODEL,
  messages: [{ role: "user", content: "Say hello to the benchmark." }],
  max_tokens: 16,
});

/**
 * A streamed chat completion; the upstream waits `gapMs` after its first chunk (the
 * `[bench:gap=N]` marker), so the first token stands apart from the end of the answer.
 */
export function streamBody(gapMs: number): string {
  return JSON.stringify({
    model: GATEWAY_MODEL,
    messages: [{ role: "user", content: `Say hello to the benchmark. [bench:gap=${gapMs}]` }],
    max_tokens: 16,
    stream: true,
  });
}

/** Resolves with the first stdout line `match` accepts (its parsed JSON); rejects when the child exits first. */
export function waitForLine<T>(
  child: ChildProcess,
  match: (entry: Record<string, unknown>) => T | undefined,
): Promise<T> {
  return new Promise((resolve, reject) => {
    let done = false;
    createInterface({ input: child.stdout! }).on("line", (line) => {
      if (done) return;
      try {
        const found = match(JSON.parse(line) as Record<string, unknown>);
        if (found !== undefined) {
          done = true;
          resolve(found);
        }
      } catch {
        /* not JSON */
      }
    });
    child.once("exit", (code) => !done && reject(new Error(`child exited with ${code} before it was ready`)));
  });
}

/** Starts the bench upstream on a free port. */
export async function startUpstream(): Promise<{ child: ChildProcess; port: number }> {
  const child = spawn(process.execPath, [path.join(here, "gateway-upstream.js")], {
    stdio: ["ignore", "pipe", "inherit"],
  });
  const port = await waitForLine(child, (e) => (typeof e.port === "number" ? e.port : undefined));
  return { child, port };
}

/** How to start one Switchyard in front of the upstream. */
export interface GatewaySwitchyardOptions {
  upstreamPort: number;
  /** Its folder: catalog, data (embedded PostgreSQL), profiles. Must be readable by PostgreSQL's user. */
  dir: string;
  /** The compiled `gateway-switchyard.js` to run (default: this build's). */
  entry?: string;
  /** Node options before the entry (e.g. `--cpu-prof`, V8 heap flags). */
  nodeArgs?: string[];
  /** Environment added (e.g. `SWITCHYARD_DURABILITY`). */
  env?: Record<string, string>;
  /**
   * The log line that says it serves (default "Switchyard listening"; a supervisor of several API
   * processes says "Switchyard supervisor ready"). Its JSON record is returned as `ready`.
   */
  readyMessage?: string;
}

/**
 * Starts Switchyard with a catalog of `GATEWAY_MODEL` at 0.05 USD per million tokens each way (24
 * tokens: 1 µUSD a request, so every request writes a ledger charge) routed to the upstream.
 * Resolves with its base URL once it listens; its stdout is drained from then on.
 */
export async function startGatewaySwitchyard(
  opts: GatewaySwitchyardOptions,
): Promise<{ child: ChildProcess; url: string; ready: Record<string, unknown> }> {
  const catalog = path.join(opts.dir, "catalog.json");
  writeFileSync(
    catalog,
    JSON.stringify({
      default_model: GATEWAY_MODEL,
      models: [
        {
          id: GATEWAY_MODEL,
          display_name: "Bench model (upstream)",
          provider: "bench",
          modality: "text_generation",
          context_tokens: 4096,
          pricing: { input_per_million_usd: 0.05, output_per_million_usd: 0.05 },
          engine: { type: "openai_compatible" },
        },
      ],
    }),
  );
  const entry = opts.entry ?? path.join(here, "gateway-switchyard.js");
  const child = spawn(process.execPath, [...(opts.nodeArgs ?? []), entry], {
    cwd: opts.dir,
    env: {
      ...process.env,
      PORT: "0",
      HOST: "127.0.0.1",
      LOG_LEVEL: "info",
      SWITCHYARD_DATA_DIR: path.join(opts.dir, "data"),
      SWITCHYARD_CATALOG: catalog,
      SWITCHYARD_UPSTREAMS: JSON.stringify([
        {
          name: "bench",
          base_url: `http://127.0.0.1:${opts.upstreamPort}/v1`,
          models: [GATEWAY_MODEL],
          max_concurrency: 256,
        },
      ]),
      ...opts.env,
    },
    stdio: ["ignore", "pipe", "inherit"],
  });
  const readyMessage = opts.readyMessage ?? "Switchyard listening";
  const ready = await waitForLine(child, (e) => (e.msg === readyMessage && typeof e.url === "string" ? e : undefined));
  child.stdout!.resume();
  return { child, url: ready.url as string, ready };
}
