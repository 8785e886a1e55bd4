/**
 * Browser tests build the pages they open (Vite) when a build is missing or older than its
 * sources, so `npm test` needs no `npm run build` first. Test files run in parallel and two of
 * them may need the same build (both browser tests open the dashboard): a lock folder beside the
 * output lets one build while the other waits, then finds it up to date.
 */
import { execFileSync } from "node:child_process";
import { existsSync, mkdirSync, readdirSync, rmSync, statSync } from "node:fs";
import path from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { packageRoot } from "../../src/config/config.js";

/** A lock older than this was left by a killed run and is taken over, ms. */
const STALE_LOCK_MS = 180_000;

/** Newest modification time under `dir`, ms. */
function newest(dir: string): number {
  let latest = 0;
  for (const entry of readdirSync(dir, { withFileTypes: true })) {
    const full = path.join(dir, entry.name);
    latest = Math.max(latest, entry.isDirectory() ? newest(full) : statSync(full).mtimeMs);
  }
  return latest;
}

/**
 * Runs `vite build --config <folder>/vite.config.ts` unless `<outDir>/index.html` is newer than
 * every file of `folder` (relative to the repository root); waits while another test file builds it.
 * @throws the build's error (its output in the message), or when a lock is held past STALE_LOCK_MS twice.
 */
export async function ensureViteBuilt(folder: string, outDir: string): Promise<void> {
  const index = path.join(outDir, "index.html");
  const upToDate = () => existsSync(index) && statSync(index).mtimeMs >= newest(path.join(packageRoot, folder));
  const lock = `${outDir}.build-lock`;
  mkdirSync(path.dirname(outDir), { recursive: true });
  const deadline = Date.now() + 2 * STALE_LOCK_MS;
  for (;;) {
    // While another file builds, its half-written output may look up to date: wait for the lock.
    if (!existsSync(lock) && upToDate()) return;
    try {
      mkdirSync(lock);
      break;
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== "EEXIST") throw err;
      if (Date.now() > deadline) throw new Error(`${lock} is still held: remove it if no test is running`);
      const held = statSync(lock, { throwIfNoEntry: false });
      if (held && Date.now() - held.mtimeMs > STALE_LOCK_MS) {
        rmSync(lock, { recursive: true, force: true });
        continue;
      }
      await sleep(250);
    }
  }
  try {
    if (upToDate()) return;
    execFileSync(
      process.execPath,
      [path.join(packageRoot, "node_modules/vite/bin/vite.js"), "build", "--config", `${folder}/vite.config.ts`],
      { cwd: packageRoot, stdio: "pipe", timeout: 120_000 },
    );
  } finally {
    rmSync(lock, { recursive: true, force: true });
  }
}
