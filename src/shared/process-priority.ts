/**
 * CPU priority of a worker process (issue 12, item 3: "interactive requests keep their latency
 * while a batch runs"). A `worker`-role process runs batch items and background responses; when it
 * shares cores with `api` processes, lowering its own priority lets the kernel give interactive
 * requests the CPU first — their engine threads, event loop and all — while the worker still gets
 * every cycle nobody else wants.
 *
 * On Linux a nice value belongs to each thread, and a new thread takes its creator's: so every
 * thread that exists now (`/proc/self/task`) is lowered, and the threads started later (llama.cpp's
 * compute threads, libuv's pool) inherit it. Elsewhere the process's priority is set once.
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
  /** Threads that could not be changed (ended meanwhile, or refused), with the first error. */
  failed: number;
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
  let tids: number[];
  try {
    tids = readdirSync("/proc/self/task").map(Number);
  } catch {
    tids = [0]; // not Linux: the process as a whole
  }
  for (const tid of tids) {
    try {
      if (os.getPriority(tid) >= nice) {
        result.unchanged++;
        continue;
      }
      os.setPriority(tid, nice);
      result.changed++;
    } catch (err) {
      result.failed++;
      result.error ??= (err as Error).message;
    }
  }
  return result;
}
