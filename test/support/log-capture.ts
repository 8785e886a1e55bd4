/**
 * Logs of a real server, captured: a pino logger writing its JSON lines into memory, handed to
 * `startTestServer(…, { logger })`, so tests can read what was logged (and what never was).
 */
import { Writable } from "node:stream";
import { type Level, type Logger, pino } from "pino";

export interface CapturedLogs {
  logger: Logger;
  /** Every line written so far, in order (one JSON record each). */
  lines: string[];
  /** The records written since line `from` (default: all), parsed. */
  records(from?: number): Array<Record<string, any>>;
}

/** A pino logger at `level` whose lines are kept in memory. */
export function captureLogs(level: Level): CapturedLogs {
  const lines: string[] = [];
  const sink = new Writable({
    write(chunk: Buffer, _enc, done) {
      lines.push(chunk.toString("utf8"));
      done();
    },
  });
  return {
    logger: pino({ level }, sink),
    lines,
    records: (from = 0) => lines.slice(from).map((l) => JSON.parse(l) as Record<string, any>),
  };
}
