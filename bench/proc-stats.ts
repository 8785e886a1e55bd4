/**
 * CPU time of bench processes from `/proc` (Linux): what the gateway bench and its A/B runner
 * report as CPU ms per request, for a target process and its descendants (e.g. an embedded
 * PostgreSQL and its backends).
 */
import { readFileSync, readdirSync } from "node:fs";

/** CPU seconds (user + system) `pid` has used so far; 0 when it is gone. */
export function cpuSeconds(pid: number): number {
  try {
    const fields = readFileSync(`/proc/${pid}/stat`, "utf8").split(") ")[1].split(" ");
    return (Number(fields[11]) + Number(fields[12])) / 100; // utime, stime in clock ticks (USER_HZ = 100)
  } catch {
    return 0;
  }
}

/** Every live descendant of `pid` (e.g. an embedded PostgreSQL and its backends). */
export function descendants(pid: number): number[] {
  const out: number[] = [];
  try {
    for (const task of readdirSync(`/proc/${pid}/task`)) {
      const children = readFileSync(`/proc/${pid}/task/${task}/children`, "utf8").trim();
      for (const child of children ? children.split(" ").map(Number) : []) out.push(child, ...descendants(child));
    }
  } catch {
    /* gone */
  }
  return out;
}

/** CPU seconds the descendants of `pid` have used so far. */
export function descendantsCpuSeconds(pid: number): number {
  return descendants(pid).reduce((n, p) => n + cpuSeconds(p), 0);
}
