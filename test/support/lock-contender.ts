/**
 * A process that tries to take one pull lock (test of the review of issue 17, finding 1: a stale
 * lock taken over by several processes at once has exactly one winner). Usage:
 * `node --import swc-loader.mjs lock-contender.ts <lock file>`; prints `ready` once loaded, tries
 * when it reads `go` on stdin, prints `won` or `busy`; a winner holds the lock until it reads
 * `release`, then releases it and exits.
 */
import { createInterface } from "node:readline";
import { DownloadError } from "../../src/inference/artifacts/download-error.js";
import { acquirePullLock } from "../../src/inference/artifacts/pull-lock.js";

const [file] = process.argv.slice(2);
const lines = createInterface({ input: process.stdin })[Symbol.asyncIterator]();
const next = async () => String((await lines.next()).value ?? "");

process.stdout.write("ready\n");
while ((await next()) !== "go");
try {
  const held = await acquirePullLock(file);
  process.stdout.write("won\n");
  while ((await next()) !== "release");
  await held.release();
} catch (err) {
  if (!(err instanceof DownloadError) || err.kind !== "busy") throw err;
  process.stdout.write("busy\n");
}
process.exit(0);
