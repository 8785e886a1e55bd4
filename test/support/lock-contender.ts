/**
 * A process that tries to take one pull lock (test of the review of issue 17, finding 1: a stale
 * lock taken over by several processes at once has exactly one winner). Usage:
 * `node --import swc-loader.mjs lock-contender.ts <lock file> <start at, Unix ms> <hold ms>`:
 * waits (busy) until the start time so all contenders go together, tries once, prints `won` or
 * `busy`, and a winner holds the lock `hold ms` before releasing it.
 */
import { DownloadError, acquirePullLock } from "../../src/inference/engines/llama-cpp/hub-download.js";

const [file, startAt, holdMs] = process.argv.slice(2);
while (Date.now() < Number(startAt)) {
  // spin: a timer's jitter would spread the contenders apart
}
try {
  const held = await acquirePullLock(file);
  process.stdout.write("won\n");
  await new Promise((r) => setTimeout(r, Number(holdMs)));
  await held.release();
} catch (err) {
  if (!(err instanceof DownloadError) || err.kind !== "busy") throw err;
  process.stdout.write("busy\n");
}
