/**
 * What bench scripts report (issue 12, item 5): each prints its own table, and last one line
 * `BENCH_JSON {"bench": name, "figures": [...]}` that the runner (`bench/run-all.ts`) collects
 * into one summary table: figure, baseline, Switchyard, ratio, target, met.
 */

/** One measured figure. */
export interface BenchFigure {
  figure: string;
  /** Unit of `value` and `baseline` (e.g. `ms`, `req/s`). */
  unit: string;
  /** Switchyard's number (for latencies: the p99 unless the figure says otherwise). */
  value: number;
  /** The same measure without Switchyard (engine in-process, direct upstream, idle), when there is one. */
  baseline?: number;
  /** value / baseline when that is the figure's target (else computed by the runner when both exist). */
  ratio?: number;
  /** p50, for latency figures. */
  p50?: number;
  /** The target in words, e.g. `p99 < 200 ms`, `≥ 0.85 × engine`. */
  target: string;
  met: boolean | null;
}

/** The line prefix the runner looks for. */
export const JSON_PREFIX = "BENCH_JSON ";

export function percentile(sorted: number[], p: number): number {
  if (sorted.length === 0) return NaN;
  return sorted[Math.min(sorted.length - 1, Math.ceil((p / 100) * sorted.length) - 1)];
}

/** Prints `figures` as a Markdown table with the given columns. */
export function printFigures<T>(rows: T[], header: string[], cells: (row: T) => string[]): void {
  const table = [header, ...rows.map(cells)];
  const widths = header.map((_, c) => Math.max(...table.map((r) => r[c].length)));
  for (const [i, row] of table.entries()) {
    console.log(`| ${row.map((cell, c) => cell.padEnd(widths[c])).join(" | ")} |`);
    if (i === 0) console.log(`|${widths.map((w) => "-".repeat(w + 2)).join("|")}|`);
  }
}

/** Prints the machine-readable last line. */
export function printJson(bench: string, figures: BenchFigure[], skipped?: string): void {
  console.log(`${JSON_PREFIX}${JSON.stringify({ bench, figures, ...(skipped ? { skipped } : {}) })}`);
}
