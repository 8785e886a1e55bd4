/**
 * llama.cpp's own log lines (and node-llama-cpp's) in Switchyard's log: an `error` or `fatal`
 * line is logged at error and a `warn` line at warn, so the cause of a failure shows in a default
 * server log (a real CUDA "the provided PTX was compiled with an unsupported toolchain" error was
 * logged at debug and never seen: GPU device check, session 13); `info`, `log` and `debug` lines
 * stay at debug. Each line carries `engine: "llama_cpp"` and llama.cpp's own level, and its
 * message starts with `llama.cpp: `.
 */
import type { LlamaLogLevel } from "node-llama-cpp";
import type { Logger } from "pino";

/** Distinct warnings remembered so a repeat goes to debug; past this many every warning is logged. */
const MAX_REMEMBERED_WARNINGS = 500;

/**
 * A `getLlama({ logger })` function writing to `logger` (see the module header). A warning already
 * logged once by this function (llama.cpp repeats some per context, e.g. a context smaller than
 * the model's training context) is logged again at debug only; errors are always logged at error.
 */
export function llamaCppLogger(logger: Logger): (level: LlamaLogLevel, message: string) => void {
  const warned = new Set<string>();
  return (level, message) => {
    const text = message.trim();
    if (text === "") return;
    const severity: `${LlamaLogLevel}` = level;
    const fields = { engine: "llama_cpp", llamaLevel: severity };
    const line = `llama.cpp: ${text}`;
    if (severity === "error" || severity === "fatal") logger.error(fields, line);
    else if (severity === "warn" && !warned.has(text)) {
      if (warned.size < MAX_REMEMBERED_WARNINGS) warned.add(text);
      logger.warn(fields, line);
    } else logger.debug(fields, line);
  };
}
