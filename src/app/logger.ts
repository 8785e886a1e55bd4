/** The service's logger (issue 13, item 5): JSON lines, or readable lines for a person at a terminal. */
import { pino, type Logger, type TransportSingleOptions } from "pino";
import type { Config } from "../config/config.js";

/**
 * Logs for people (issue 13, item 5): readable lines (pino-pretty) when `format` is `pretty`, or
 * `auto` with stdout a terminal; JSON lines otherwise (the default when stdout is a pipe or file).
 * @param isTTY whether stdout is a terminal (default: `process.stdout.isTTY`).
 */
export function usesPrettyLogs(
  format: "auto" | "json" | "pretty",
  isTTY: boolean = process.stdout.isTTY === true,
): boolean {
  return format === "pretty" || (format === "auto" && isTTY);
}

/**
 * The service's logger: JSON lines, or pino-pretty's readable lines (in a worker thread) where
 * `usesPrettyLogs` says so. `destination`: a file instead of stdout (tests read it).
 */
export function createLogger(
  level: Config["logLevel"],
  format: "auto" | "json" | "pretty",
  destination?: string,
): Logger {
  if (usesPrettyLogs(format)) {
    const transport: TransportSingleOptions = {
      target: "pino-pretty",
      options: {
        translateTime: "SYS:HH:MM:ss.l",
        ignore: "pid,hostname",
        singleLine: true,
        ...(destination ? { destination, mkdir: true } : {}),
      },
    };
    return pino({ level, transport });
  }
  return destination ? pino({ level }, pino.destination({ dest: destination, sync: true })) : pino({ level });
}
