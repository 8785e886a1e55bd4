/**
 * Where a gateway request's CPU goes (issue 30, item 1): Switchyard in front of the bench upstream
 * (`gateway-processes.ts`) under `--cpu-prof`, 2,000 warm-up requests, then `N` closed-loop
 * requests at 50 connections (the bench's chat body). Only the profile's samples between the first
 * and the last of those `N` are counted (its `timeDeltas` against this process's monotonic clock,
 * the same clock), each given to the nearest frame that is a package or one of our files (Node's
 * own code is charged to whoever called it; socket writes, GC and `(program)` stand alone), then
 * grouped into the parts of a request. µs per request = share × the process's own CPU per request
 * over the same requests (`/proc`), so the parts add up to what the process spent.
 *
 *   node dist-bench/bench/gateway-profile.js                 # 10,000 requests, metering on
 *   PROFILE_REQUESTS=20000 PROFILE_METERING=off node dist-bench/bench/gateway-profile.js
 *   PROFILE_DIST=dist-base node dist-bench/bench/gateway-profile.js   # another build's Switchyard
 *
 * On a busy machine the shares carry over between runs; the µs do not (CPU per request grows with
 * the machine's load). Run the builds to compare one right after the other.
 */
import { chmodSync, mkdtempSync, readFileSync, readdirSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import autocannon from "autocannon";
import { closeRequests, signup } from "./child-server.js";
import { CHAT_BODY, startGatewaySwitchyard, startUpstream } from "./gateway-processes.js";
import { cpuSeconds } from "./proc-stats.js";

const here = path.dirname(fileURLToPath(import.meta.url));
const root = path.resolve(here, "../..");
const REQUESTS = Number(process.env.PROFILE_REQUESTS ?? 10_000);
const METERING = process.env.PROFILE_METERING !== "off";

interface CpuProfile {
  nodes: Array<{ id: number; callFrame: { functionName: string; url: string }; children?: number[] }>;
  samples: number[];
  timeDeltas: number[];
  startTime: number;
}

/** Native frames that are the socket write itself. */
const WRITES = new Set(["writev", "writeBuffer", "writeUtf8String", "writeLatin1String"]);

/** Packages of the HTTP layer (Express and what it reads bodies and answers with). */
const HTTP_PACKAGES =
  /^(express|router|body-parser|raw-body|iconv-lite|parseurl|on-finished|path-to-regexp|type-is|content-type|mime-types|mime-db|media-typer|http-errors|finalhandler|proxy-addr|forwarded|ipaddr\.js|send|fresh|vary|statuses|bytes|depd|debug)$/;

/** The package (`node_modules/<name>`) or our file (relative to the build) a frame is in; null for Node's own. */
function placeOf(url: string): string | null {
  const file = url.replace(/^file:\/\//, "");
  const pkg = /node_modules\/((?:@[^/]+\/)?[^/]+)/.exec(file)?.[1];
  if (pkg) return pkg;
  const ours = /\/(src|bench)\/.*$/.exec(file)?.[0];
  return ours ? ours.slice(1) : null;
}

/** The part of a request a place belongs to (`writer`: the place whose call reached a socket write). */
function partOf(place: string | null, leaf: string): string {
  if (leaf === "(garbage collector)") return "garbage collection";
  if (leaf === "(program)") return "V8 and libuv outside JS (program)";
  const database = (p: string | null) =>
    p !== null &&
    (/^(pg|pg-protocol|pg-pool|pg-boss|typeorm)$/.test(p) || /^src\/(db|services\/(metering|ledger))\//.test(p));
  const upstream = (p: string | null) =>
    p === "undici" || (p !== null && p.startsWith("src/inference/engines/openai-compatible/"));
  if (WRITES.has(leaf)) {
    if (database(place)) return "socket writes: PostgreSQL";
    if (upstream(place)) return "socket writes: upstream requests";
    return "socket writes: answers";
  }
  if (place === null) return "Node internals reached from Node (HTTP parser, streams, timers)";
  if (HTTP_PACKAGES.test(place) || place.startsWith("src/rest/"))
    return "HTTP layer (Express, bodies, middleware, answers)";
  if (upstream(place)) return "upstream call (undici, the SSE parse)";
  if (database(place)) return "metering and the database client";
  if (
    place === "prom-client" ||
    place.startsWith("src/shared/lean-metrics") ||
    place.startsWith("src/inference/measured-engine")
  )
    return "metrics";
  if (place.startsWith("src/") || place === "zod" || place === "uuid")
    return "use case (validation, protocols, auth, credit)";
  return `other: ${place}`;
}

/** Busy samples of `profile` between `from` and `to` (µs, monotonic), counted by part. */
function parts(profile: CpuProfile, from: number, to: number): { busy: number; byPart: Map<string, number> } {
  const byId = new Map(profile.nodes.map((n) => [n.id, n]));
  const parent = new Map<number, number>();
  for (const n of profile.nodes) for (const c of n.children ?? []) parent.set(c, n.id);
  const byPart = new Map<string, number>();
  let busy = 0;
  let t = profile.startTime;
  profile.samples.forEach((id, i) => {
    t += profile.timeDeltas[i];
    if (t < from || t > to) return;
    const leaf = byId.get(id)!.callFrame.functionName;
    if (leaf === "(idle)") return;
    busy++;
    let place: string | null = null;
    for (let at: number | undefined = id; at !== undefined && place === null; at = parent.get(at)) {
      place = placeOf(byId.get(at)!.callFrame.url);
    }
    const part = partOf(place, leaf);
    byPart.set(part, (byPart.get(part) ?? 0) + 1);
  });
  return { busy, byPart };
}

async function main(): Promise<void> {
  const dist = process.env.PROFILE_DIST ?? path.relative(root, path.resolve(here, ".."));
  const dir = mkdtempSync(path.join(os.tmpdir(), "switchyard-profile-"));
  chmodSync(dir, 0o755);
  const upstream = await startUpstream();
  const switchyard = await startGatewaySwitchyard({
    upstreamPort: upstream.port,
    dir,
    entry: path.join(root, dist, "bench/gateway-switchyard.js"),
    nodeArgs: ["--cpu-prof", `--cpu-prof-dir=${path.join(dir, "profile")}`],
  });
  try {
    const apiKey = await signup(switchyard.url, "profile");
    if (!METERING) switchyard.child.kill("SIGUSR2");
    const run = (amount: number) =>
      autocannon({
        url: `${switchyard.url}/v1/chat/completions`,
        method: "POST",
        headers: { "content-type": "application/json", authorization: `Bearer ${apiKey}` },
        body: CHAT_BODY,
        connections: 50,
        amount,
      });
    await run(2_000);
    const cpu0 = cpuSeconds(switchyard.child.pid!);
    const from = Number(process.hrtime.bigint() / 1000n);
    const result = await run(REQUESTS);
    const to = Number(process.hrtime.bigint() / 1000n);
    const cpuMs = (1000 * (cpuSeconds(switchyard.child.pid!) - cpu0)) / result.requests.total;
    switchyard.child.kill("SIGTERM");
    await new Promise((resolve) => switchyard.child.once("exit", resolve));
    const file = readdirSync(path.join(dir, "profile")).find((f) => f.endsWith(".cpuprofile"))!;
    const profile = JSON.parse(readFileSync(path.join(dir, "profile", file), "utf8")) as CpuProfile;
    const { busy, byPart } = parts(profile, from, to);
    console.log(
      `${dist}: ${result.requests.total} requests (${result.non2xx} not 2xx) in ${((to - from) / 1e6).toFixed(1)} s, ` +
        `metering ${METERING ? "on" : "off"}; Switchyard ${cpuMs.toFixed(3)} CPU ms per request; profile ${path.join(dir, "profile", file)}\n`,
    );
    console.log("| part of the request | share of busy samples | µs per request |");
    console.log("|---|---|---|");
    for (const [part, n] of [...byPart].sort((a, b) => b[1] - a[1])) {
      console.log(`| ${part} | ${((100 * n) / busy).toFixed(1)} % | ${((1000 * cpuMs * n) / busy).toFixed(0)} |`);
    }
  } finally {
    closeRequests();
    if (switchyard.child.exitCode === null) switchyard.child.kill("SIGTERM");
    upstream.child.kill("SIGTERM");
  }
}

main().catch((err: unknown) => {
  console.error(err);
  process.exit(1);
});
