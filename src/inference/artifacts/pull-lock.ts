/**
 * Pull locks (issue 17; finding 1 of its review): one pull of a model file at a time, across
 * processes and hosts sharing the models folder.
 *
 * `<file>.part.lock` names its holder (pid, host name, process start time, a random token) and is
 * created atomically (a hard link of a complete temporary file). The holder touches it every
 * `lockStaleMs / 6` (heartbeat). A lock is stale, and taken over, when it has had no heartbeat for
 * `lockStaleMs` (default 60 s), when its process is gone (same host), or when it names this very
 * process but this process does not hold it (a container's pid 1 restarted after a kill). A
 * takeover happens under a gate file (exclusive create) and renames the new lock over the stale
 * one after checking it is still that one, so two takeovers never both win
 * (`takeOverStaleLock`); a holder whose lock was taken anyway (it stalled past `lockStaleMs`) sees
 * its token gone at the next heartbeat and stops writing.
 */
import { randomUUID } from "node:crypto";
import { link, readFile, rename, rm, stat, utimes, writeFile } from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { DownloadError, type LockHolder } from "./download-error.js";

/** A lock without a heartbeat for this long is stale (ms). */
export const DEFAULT_LOCK_STALE_MS = 60_000;

/**
 * Tokens of the locks this process holds. A lock naming this pid whose token is not here is
 * stale (by token, not path: one file reached by two spellings of its path is still one lock).
 */
const heldTokens = new Set<string>();

/** When this process started, Unix ms (recorded in its locks). */
const PROCESS_STARTED = Math.round(Date.now() - process.uptime() * 1000);

/** What a lock file says, judged (see `inspectPullLock`). */
export type LockState =
  | { state: "absent" }
  | { state: "live"; holder: LockHolder; ageMs: number }
  | { state: "stale"; holder: LockHolder; why: string; raw: string; ino: number };

/**
 * Reads and judges the lock file `file`: `absent`; `live` (held by a pull under way); or
 * `stale` (`why` says why: no heartbeat for `staleMs`, its process gone, or this process's own
 * pid without this process holding it).
 */
export async function inspectPullLock(file: string, staleMs = DEFAULT_LOCK_STALE_MS): Promise<LockState> {
  let raw: string;
  let info: Awaited<ReturnType<typeof stat>>;
  try {
    info = await stat(file);
    raw = await readFile(file, "utf8");
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === "ENOENT") return { state: "absent" };
    throw err;
  }
  const holder = parseHolder(raw);
  const ageMs = Date.now() - info.mtimeMs;
  const stale = (why: string): LockState => ({ state: "stale", holder, why, raw, ino: Number(info.ino) });
  if (heldTokens.has(holder.token)) return { state: "live", holder, ageMs };
  if (ageMs > staleMs) return stale(`no heartbeat for ${Math.round(ageMs / 1000)} s`);
  const sameHost = holder.host === "" || holder.host === os.hostname();
  if (sameHost && holder.pid === process.pid)
    return stale(`it names this process (pid ${holder.pid}), which does not hold it`);
  // No pid: unreadable, or being written on a file system without hard links (then young).
  if (holder.pid <= 0) return ageMs > 5_000 ? stale("it names no process") : { state: "live", holder, ageMs };
  if (sameHost && !alive(holder.pid)) return stale(`process ${holder.pid} is gone`);
  return { state: "live", holder, ageMs };
}

/** A lock this process holds. */
export interface HeldLock {
  path: string;
  /** Aborted when another process took the lock over (this one stalled past the stale time). */
  lost: AbortSignal;
  /** @throws DownloadError (`busy`) when the lock was lost. */
  check(): void;
  /** Stops the heartbeat and deletes the lock file when it is still this one. */
  release(): Promise<void>;
}

/**
 * Takes the pull lock `file` (see the module header), taking over a stale one.
 * @throws DownloadError (`busy`, with `lock`) while a live pull holds it; the message names the
 * lock file and its holder.
 */
export async function acquirePullLock(file: string, opts: { staleMs?: number } = {}): Promise<HeldLock> {
  const staleMs = opts.staleMs ?? DEFAULT_LOCK_STALE_MS;
  const token = randomUUID();
  const mine: LockHolder = { pid: process.pid, host: os.hostname(), started: PROCESS_STARTED, token };
  const tmp = `${file}.${token}.tmp`;
  await writeFile(tmp, JSON.stringify(mine));
  try {
    for (let attempt = 0; ; attempt++) {
      if (await createLink(tmp, file)) break;
      const judged = await inspectPullLock(file, staleMs);
      if (judged.state === "absent") continue;
      if (judged.state === "live") throw busyError(file, judged.holder, staleMs);
      if (await takeOverStaleLock(file, judged, staleMs, tmp)) break;
      if (attempt >= 100) {
        throw new DownloadError(`cannot take the lock ${file}: it keeps changing hands`, "busy", { path: file });
      }
      await sleep(5 + Math.random() * 20); // another process is taking it over: look again
    }
    heldTokens.add(token);
    return heldLock(file, token, staleMs);
  } finally {
    await rm(tmp, { force: true });
  }
}

/**
 * Deletes the lock file `file` when it is stale (`models rm`). @returns whether one was deleted.
 * @throws DownloadError (`busy`) when a live pull holds it.
 */
export async function clearStalePullLock(file: string, staleMs = DEFAULT_LOCK_STALE_MS): Promise<boolean> {
  for (let attempt = 0; attempt < 100; attempt++) {
    const judged = await inspectPullLock(file, staleMs);
    if (judged.state === "absent") return false;
    if (judged.state === "live") throw busyError(file, judged.holder, staleMs);
    if (await takeOverStaleLock(file, judged, staleMs)) return true;
    await sleep(5 + Math.random() * 20);
  }
  throw new DownloadError(`cannot clear the lock ${file}: it keeps changing hands`, "busy", { path: file });
}

function busyError(file: string, holder: LockHolder, staleMs: number): DownloadError {
  const who = `pid ${holder.pid}${holder.host ? ` on ${holder.host}` : ""}`;
  return new DownloadError(
    `another pull of ${path.basename(file, ".part.lock")} is running (${who}; lock ${file}); ` +
      `it is taken over once that process is gone or ${Math.round(staleMs / 1000)} s without a heartbeat`,
    "busy",
    { path: file, holder },
  );
}

/** Hard-links the complete lock `tmp` to `file` (atomic, fails when `file` exists). @returns false on EEXIST. */
async function createLink(tmp: string, file: string): Promise<boolean> {
  try {
    await link(tmp, file);
    return true;
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    if (code === "EEXIST") return false;
    if (code !== "EPERM" && code !== "ENOTSUP" && code !== "EOPNOTSUPP") throw err;
  }
  // A file system without hard links: an exclusive create (a reader may briefly see it empty).
  try {
    await writeFile(file, await readFile(tmp), { flag: "wx" });
    return true;
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === "EEXIST") return false;
    throw err;
  }
}

/** A takeover gate older than this belongs to a process that died inside it (it is held for ms). */
const GATE_STALE_MS = 10_000;

/**
 * Replaces the stale lock `judged` at `file` by the complete lock file `install` (renamed onto
 * it: the lock path is never empty meanwhile), or deletes it when `install` is absent. Only a
 * process holding the takeover gate `<file>.takeover` (an exclusive create) may do that, and it
 * first checks that `file` is still the very lock judged stale (same inode, same content, still
 * stale). No one removes or replaces a lock without the gate, and an exclusive create cannot
 * succeed while a lock exists, so two takeovers never both win.
 * @returns true when this process replaced (or deleted) it; false when the gate was taken or the
 * lock changed meanwhile (look again).
 */
export async function takeOverStaleLock(
  file: string,
  judged: Extract<LockState, { state: "stale" }>,
  staleMs: number,
  install?: string,
): Promise<boolean> {
  const gate = `${file}.takeover`;
  try {
    await writeFile(gate, String(process.pid), { flag: "wx" });
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== "EEXIST") throw err;
    await clearDeadGate(gate);
    return false;
  }
  try {
    const again = await inspectPullLock(file, staleMs);
    if (again.state !== "stale" || again.ino !== judged.ino || again.raw !== judged.raw) return false;
    if (install) await rename(install, file);
    else await rm(file, { force: true });
    return true;
  } finally {
    await rm(gate, { force: true });
  }
}

/**
 * Removes a takeover gate left by a process that died inside it (older than `GATE_STALE_MS`):
 * renamed aside, and put back if what moved was a newer gate (not the dead one).
 */
async function clearDeadGate(gate: string): Promise<void> {
  const info = await stat(gate).catch(() => undefined);
  if (!info || Date.now() - info.mtimeMs < GATE_STALE_MS) return;
  const aside = `${gate}.${randomUUID()}`;
  try {
    await rename(gate, aside);
  } catch {
    return;
  }
  try {
    if ((await stat(aside)).ino !== info.ino) await link(aside, gate).catch(() => undefined);
  } finally {
    await rm(aside, { force: true });
  }
}

function heldLock(file: string, token: string, staleMs: number): HeldLock {
  const controller = new AbortController();
  const beat = async () => {
    try {
      const raw = await readFile(file, "utf8");
      if (parseHolder(raw).token !== token) throw new Error("taken over");
      const now = new Date();
      await utimes(file, now, now);
    } catch {
      clearInterval(timer);
      heldTokens.delete(token);
      controller.abort(new Error(`lost the lock ${file}`));
    }
  };
  const timer = setInterval(() => void beat(), Math.max(50, Math.floor(staleMs / 6)));
  timer.unref();
  const lostError = () =>
    new DownloadError(`another process took over the lock ${file}; this pull stopped`, "busy", { path: file });
  return {
    path: file,
    lost: controller.signal,
    check() {
      if (controller.signal.aborted) throw lostError();
    },
    async release() {
      clearInterval(timer);
      if (!heldTokens.delete(token)) return;
      const raw = await readFile(file, "utf8").catch(() => "");
      if (parseHolder(raw).token === token) await rm(file, { force: true });
    },
  };
}

/** A lock file's content: JSON `LockHolder`, or a bare pid (older versions). */
function parseHolder(raw: string): LockHolder {
  try {
    const v = JSON.parse(raw) as Partial<LockHolder> | number;
    if (typeof v === "number") return { pid: v, host: "", started: 0, token: "" };
    return {
      pid: Number(v.pid) || 0,
      host: typeof v.host === "string" ? v.host : "",
      started: Number(v.started) || 0,
      token: typeof v.token === "string" ? v.token : "",
    };
  } catch {
    return { pid: 0, host: "", started: 0, token: "" };
  }
}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === "EPERM";
  }
}
