/**
 * Runs one GPU probe child (`gpu-probe-child.ts`) and says how it ended: its progress lines, its
 * exit code or signal, whether it ran past its time limit (then it is killed with SIGKILL), and the
 * tail of its output with the line most likely to say why it failed. Output means stdout and
 * stderr together: node-llama-cpp's fallback log printer writes llama.cpp's error lines to stdout
 * and its info lines to stderr (on the H200, "CUDA error: the provided PTX was compiled with an
 * unsupported toolchain" came on stdout, ggml's abort line on stderr).
 */
import { spawn } from "node:child_process";
import type { LlamaGpuType } from "node-llama-cpp";
import { PROBE_LINE_PREFIX, type ProbeCommand, type ProbeInput } from "./gpu-probe-child.js";

/** Characters of the child's output kept for the log (its end). */
export const OUTPUT_TAIL_CHARS = 4_000;
/** Characters of the child's output kept in memory while it runs (stdout, and both streams together). */
const KEPT_CHARS = 256_000;

/** How a probe ended. */
export interface ProbeOutcome {
  /** Exit code 0 after its `done` line. */
  ok: boolean;
  /** The backend the child's llama.cpp started on (its `backend` line); undefined if it died first. */
  gpu?: LlamaGpuType;
  /** GPU device names it reported. */
  devices?: string[];
  /** The last progress line's stage (`backend`, `model`, `decoded`, `done`, `error`). */
  stage?: string;
  code: number | null;
  signal: NodeJS.Signals | null;
  timedOut: boolean;
  /** How it failed, short: the signal (`SIGABRT`), `exit code 2`, `no answer within 300 s`, `could not start: …`. */
  failure?: string;
  /** Why, as best told: the child's own error message, else the first error-looking output line. */
  cause?: string;
  /** The end of its output, stdout and stderr as they came, progress lines left out (`OUTPUT_TAIL_CHARS`). */
  outputTail: string;
  /** Wall time, ms. */
  ms: number;
}

/**
 * Starts `command` with `input` (JSON, as its last argument) and waits for it to end, killing it
 * (SIGKILL) after `timeoutMs`; `command.stdin` is written to its standard input. The child inherits this process's environment (`LD_LIBRARY_PATH`,
 * `CUDA_VISIBLE_DEVICES`, …) and is killed if this process exits first. Never rejects: a child
 * that cannot start is a failed outcome.
 */
export function runGpuProbe(command: ProbeCommand, input: ProbeInput, timeoutMs: number): Promise<ProbeOutcome> {
  const started = performance.now();
  return new Promise((resolve) => {
    let stdout = "";
    let output = "";
    let timedOut = false;
    let spawnError: Error | undefined;
    const [program, ...args] = command.argv;
    const child = spawn(program, [...args, JSON.stringify(input)], {
      cwd: command.cwd,
      stdio: [command.stdin === undefined ? "ignore" : "pipe", "pipe", "pipe"],
    });
    // A child that dies before reading its input makes the write fail (EPIPE): its exit says why.
    child.stdin?.on("error", () => undefined);
    child.stdin?.end(command.stdin);
    const killChild = () => child.kill("SIGKILL");
    process.once("exit", killChild);
    const timer = setTimeout(() => {
      timedOut = true;
      killChild();
    }, timeoutMs);
    child.stdout?.on("data", (chunk: Buffer) => {
      stdout = keepEnd(stdout + chunk.toString("utf8"));
      output = keepEnd(output + chunk.toString("utf8"));
    });
    child.stderr?.on("data", (chunk: Buffer) => (output = keepEnd(output + chunk.toString("utf8"))));
    child.on("error", (err) => (spawnError = err));
    child.on("close", (code, signal) => {
      clearTimeout(timer);
      process.off("exit", killChild);
      const reports = progressLines(stdout);
      const backend = reports.find((r) => r.stage === "backend");
      const last = reports.at(-1);
      const ok = !timedOut && !spawnError && code === 0 && last?.stage === "done";
      const ms = Math.round(performance.now() - started);
      const failure = ok
        ? undefined
        : spawnError
          ? `could not start: ${spawnError.message}`
          : timedOut
            ? `no answer within ${Math.round(timeoutMs / 1000)} s`
            : signal
              ? signal
              : code === 0
                ? "exit code 0 without finishing"
                : `exit code ${code}`;
      resolve({
        ok,
        gpu: backend ? (backend.gpu as LlamaGpuType) : undefined,
        devices: Array.isArray(backend?.devices) ? (backend.devices as string[]) : undefined,
        stage: typeof last?.stage === "string" ? last.stage : undefined,
        code,
        signal,
        timedOut,
        failure,
        cause: ok ? undefined : likelyCause(last, logLines(output)),
        outputTail: logLines(output).join("\n").slice(-OUTPUT_TAIL_CHARS),
        ms,
      });
    });
  });
}

function keepEnd(text: string): string {
  return text.length > KEPT_CHARS ? text.slice(-KEPT_CHARS) : text;
}

/** The child's progress lines, parsed (lines that do not parse are skipped). */
function progressLines(stdout: string): Array<Record<string, unknown>> {
  const out: Array<Record<string, unknown>> = [];
  for (const line of stdout.split("\n")) {
    if (!line.startsWith(PROBE_LINE_PREFIX)) continue;
    try {
      const parsed: unknown = JSON.parse(line.slice(PROBE_LINE_PREFIX.length));
      if (parsed && typeof parsed === "object") out.push(parsed as Record<string, unknown>);
    } catch {
      // a line cut short by the child's death
    }
  }
  return out;
}

/** The child's output lines other than its progress lines, trimmed, blank ones left out. */
function logLines(output: string): string[] {
  return output
    .split("\n")
    .map((l) => l.trim())
    .filter((l) => l !== "" && !l.startsWith(PROBE_LINE_PREFIX.trim()));
}

/**
 * The child's own error message (its `error` line), else the first output line naming an error
 * with a message ("CUDA error: …", written before ggml aborts), else the first naming an error,
 * else one naming an abort or a fatal condition, else the last line; at most 300 characters.
 */
function likelyCause(last: Record<string, unknown> | undefined, lines: string[]): string | undefined {
  if (last?.stage === "error" && typeof last.message === "string") return last.message.slice(0, 300);
  const found =
    lines.find((l) => /\berror\s*:/i.test(l)) ??
    lines.find((l) => /\berror\b/i.test(l)) ??
    lines.find((l) => /abort|fatal|segmentation/i.test(l)) ??
    lines.at(-1);
  return found?.slice(0, 300);
}
