/**
 * The progress of `npm run models -- pull` (issue 17, item 2): on a terminal a bar redrawn in
 * place with percentage, MB/s and ETA; otherwise one line per 10 %. (The non-terminal lines are
 * also checked end to end in `models-cli.test.ts`.)
 */
import { ProgressReporter, formatBytes, formatDuration } from "../../src/scripts/pull-progress.js";

const ESC = String.fromCharCode(27);

function output(isTTY: boolean) {
  const chunks: string[] = [];
  return { isTTY, chunks, write: (t: string) => chunks.push(t), text: () => chunks.join("") };
}

/** Feeds `steps` progress reports from `from` bytes to `total`. */
function feed(reporter: ProgressReporter, total: number, steps: number, from = 0): void {
  for (let i = 0; i <= steps; i++) {
    reporter.update({ received: from + Math.round(((total - from) * i) / steps), total, resumedFrom: from });
  }
}

test("when the output is a terminal, then one bar is redrawn in place with percentage, MB/s and ETA, ending at 100 %", () => {
  const out = output(true);
  const reporter = new ProgressReporter("qwen", out);
  feed(reporter, 675_710_816, 1000);
  reporter.finish();
  const frames = out.chunks.slice(0, -1);
  expect(out.chunks.at(-1)).toBe("\n");
  expect(frames.length).toBeGreaterThanOrEqual(2);
  for (const frame of frames) {
    // Redrawn in place: carriage return, the rest of the line cleared (ESC [K), no newline.
    expect(frame.endsWith(`${ESC}[K`)).toBe(true);
    expect(frame.slice(0, -3)).toMatch(
      /^\rqwen \[[#.]{30}\] +\d+ % {2}\S+ \S+ \/ 675\.7 MB {2}\d+\.\d MB\/s {2}ETA (\?|\d+ s|\d+:\d\d)$/,
    );
    expect(frame).not.toContain("\n");
  }
  expect(frames[0]).toMatch(/\[\.{30}\] +0 % {2}0 B \/ 675\.7 MB/);
  expect(frames.at(-1)).toMatch(/\[#{30}\] 100 % {2}675\.7 MB \/ 675\.7 MB .* ETA 0 s/);
});

test("when the output is not a terminal, then one line per 10 % step, at most 11, without carriage returns", () => {
  const out = output(false);
  const reporter = new ProgressReporter("nomic", out);
  feed(reporter, 146_146_432, 1000);
  reporter.finish();
  const lines = out.text().split("\n").filter(Boolean);
  expect(lines.map((l) => /^nomic: +(\d+) %/.exec(l)?.[1])).toEqual([
    "0",
    "10",
    "20",
    "30",
    "40",
    "50",
    "60",
    "70",
    "80",
    "90",
    "100",
  ]);
  for (const line of lines) expect(line).toMatch(/ MB\/s {2}ETA (\?|\d+ s|\d+:\d\d)$/);
  expect(out.text()).not.toContain("\r");
});

test("when a pull resumes, then the lines start at the part's step and say where it resumed", () => {
  const out = output(false);
  const reporter = new ProgressReporter("qwen", out);
  feed(reporter, 1_000_000, 110, 450_000); // 5 kB steps
  const lines = out.text().split("\n").filter(Boolean);
  expect(lines[0]).toMatch(/^qwen: +45 % {2}450\.0 kB \/ 1\.0 MB .*\(resumed at 450\.0 kB\)$/);
  expect(lines.map((l) => /^qwen: +(\d+) %/.exec(l)?.[1])).toEqual(["45", "50", "60", "70", "80", "90", "100"]);
});

test("when sizes and times are shown, then they are in decimal units and minutes:seconds", () => {
  expect(formatBytes(812)).toBe("812 B");
  expect(formatBytes(1_185_376)).toBe("1.2 MB");
  expect(formatBytes(1_350_000_000)).toBe("1.35 GB");
  expect(formatDuration(0.2)).toBe("1 s");
  expect(formatDuration(65)).toBe("1:05");
});
