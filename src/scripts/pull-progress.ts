/**
 * Download progress of `npm run models -- pull` (issue 17, item 2), for people: on a terminal a
 * bar redrawn in place with the percentage, MB/s and the time left; otherwise (a log, a pipe, CI)
 * one line each time another 10 % has arrived.
 */
import type { DownloadProgress } from "../inference/artifacts/hub-transfer.js";

/** Where progress is written: a stream, a terminal when `isTTY` is true. */
export interface ProgressOutput {
  isTTY?: boolean;
  write(text: string): unknown;
}

/**
 * Reports one file's download (`update` per `DownloadProgress`, `finish` once it ended, well or
 * not). On a terminal: `\r<id> [####....]  42 %  283.8 MB / 675.7 MB  12.3 MB/s  ETA 0:32`, redrawn
 * at most 10 times a second (and always at 100 %), ended by a newline at `finish`. Otherwise:
 * `<id>:  40 %  …  ETA 0:32` once per 10 % step reached (at most 11 lines: 0 % to 100 %). Speed
 * counts only the bytes of this transfer (not those resumed from an earlier pull), since this
 * reporter was made; sizes are decimal (1 MB = 10^6 bytes).
 */
export class ProgressReporter {
  private readonly started = performance.now();
  private lastDraw = -Infinity;
  private lastTenth = -1;
  private drawn = false;

  constructor(
    private readonly id: string,
    private readonly out: ProgressOutput,
  ) {}

  update(p: DownloadProgress): void {
    const elapsedS = (performance.now() - this.started) / 1000;
    const speed = elapsedS > 0 ? (p.received - p.resumedFrom) / elapsedS : 0;
    const fraction = p.total > 0 ? Math.min(1, p.received / p.total) : 0;
    const eta = speed > 0 && p.total > 0 ? (p.total - p.received) / speed : undefined;
    const stats =
      `${(fraction * 100).toFixed(0).padStart(3)} %  ${formatBytes(p.received)} / ${p.total > 0 ? formatBytes(p.total) : "?"}` +
      `  ${(speed / 1e6).toFixed(1)} MB/s  ETA ${eta === undefined ? "?" : formatDuration(eta)}` +
      (p.resumedFrom > 0 ? `  (resumed at ${formatBytes(p.resumedFrom)})` : "");
    if (this.out.isTTY) {
      const now = performance.now();
      if (now - this.lastDraw < 100 && fraction < 1) return;
      this.lastDraw = now;
      const width = 30;
      const filled = Math.round(fraction * width);
      this.out.write(`\r${this.id} [${"#".repeat(filled)}${".".repeat(width - filled)}] ${stats}\x1b[K`);
      this.drawn = true;
      return;
    }
    const tenth = Math.floor(fraction * 10);
    if (tenth === this.lastTenth) return;
    this.lastTenth = tenth;
    this.out.write(`${this.id}: ${stats}\n`);
  }

  /** Ends a bar drawn on a terminal with a newline (nothing otherwise). */
  finish(): void {
    if (this.drawn) this.out.write("\n");
    this.drawn = false;
  }
}

/** `n` bytes for people, decimal units: `812 B`, `1.2 MB`, `675.7 MB`, `1.35 GB`. */
export function formatBytes(n: number): string {
  if (n >= 1e9) return `${(n / 1e9).toFixed(2)} GB`;
  if (n >= 1e6) return `${(n / 1e6).toFixed(1)} MB`;
  if (n >= 1e3) return `${(n / 1e3).toFixed(1)} kB`;
  return `${n} B`;
}

/** `s` seconds, rounded up: `12 s`, `1:05` (minutes:seconds). */
export function formatDuration(s: number): string {
  const total = Math.ceil(s);
  const m = Math.floor(total / 60);
  return m > 0 ? `${m}:${String(total % 60).padStart(2, "0")}` : `${total} s`;
}
