/**
 * CPU priority of a worker process (issue 12, item 3: "interactive requests keep their latency
 * while a batch runs"). A `worker`-role process runs batch items and background responses; when it
 * shares cores with `api` processes, lowering its own priority lets the kernel give interactive
 * requests the CPU first — their engine threads, event loop and all — while the worker still gets
 * every cycle nobody else wants.
 *
 * On Linux a nice value belongs to each thread, and a new thread takes its creator's: so every
 * thread that exists now (`/proc/self/task`) is lowered, and the threads started later (libuv's
 * pool, llama.cpp's compute threads) inherit it. Elsewhere the process's priority is set once.
 *
 * Limit (Linux): nice values weigh threads against others of the same scheduling group. With
 * `kernel.sched_autogroup_enabled` (most desktop and many server kernels) each session is a group,
 * and under systemd or in containers each service or container is a cgroup: a worker started in
 * another terminal, service or container than the API competes as a group, and its nice value
 * changes nothing there. Give such a worker a lower CPU weight instead (systemd `CPUWeight=`,
 * Docker `--cpu-shares`, Kubernetes CPU requests); README "Roles" says so.
 */
import { readdirSync } from "node:fs";
import os from "node:os";

/** What `lowerCpuPriority` did. */
export interface PriorityChange {
  /** The nice value asked for (0 = normal priority … 19 = lowest). */
  nice: number;
  /** Threads (Linux) or processes set to `nice`. */
  changed: number;
  /** Threads already at `nice` or lower priority, left alone. */
  unchanged: number;
  /** Threads that could not be changed (refused: a thread that ended meanwhile is not counted). */
  failed: number;
  /** The first refusal's message, when `failed` > 0. */
  error?: string;
}

/**
 * Lowers this process's CPU priority to `nice` (0–19; a thread already at a lower priority keeps
 * it, and a priority is never raised: that needs privileges a service should not have).
 * @throws RangeError when `nice` is not an integer from 0 to 19.
 */
export function lowerCpuPriority(nice: number): PriorityChange {
  if (!Number.isInteger(nice) || nice < 0 || nice > 19) throw new RangeError(`nice must be 0–19, not ${nice}`);
  const result: PriorityChange = { nice, changed: 0, unchanged: 0, failed: 0 };
  // Linux: every thread by its id; elsewhere pid 0, the calling process as a whole. (On Linux,
  // pid 0 would be the calling thread alone, so an unreadable /proc is a failure, not a fallback.)
  let tids: number[] = [0];
  if (process.platform === "linux") {
    try {
      tids = readdirSync("/proc/self/task").map(Number);
    } catch (err) {
      return { ...result, failed: 1, error: `cannot list this process's threads: ${(err as Error).message}` };
    }
  }
  for (const tid of tids) {
    try {
      if (os.getPriority(tid) >= nice) {
        result.unchanged++;
      } else {
        os.setPriority(tid, nice);
        result.changed++;
      }
    } catch (err) {
      // A thread that ended between the listing and here is no failure.
      if ((err as { info?: { code?: string } }).info?.code === "ESRCH") continue;
      result.failed++;
      result.error ??= (err as Error).message;
    }
  }
  return result;
}
