/**
 * llama.cpp's own log lines (and node-llama-cpp's) in Switchyard's log: an `error` or `fatal`
 * line is logged at error, so the cause of a failure shows in a default server log (a real CUDA
 * "the provided PTX was compiled with an unsupported toolchain" error was logged at debug and
 * never seen: GPU device check, session 13). Its warnings and the rest stay at debug: the ones a
 * start draws are about a model file's metadata (the test model's "load: bad special token" at
 * every load), nothing an operator can act on, and a default `npm start` log stays quiet. Each line
 * carries `engine: "llama_cpp"` and llama.cpp's own level, and its message starts with `llama.cpp: `.
 */
import type { LlamaLogLevel } from "node-llama-cpp";
import type { Logger } from "pino";

/** A `getLlama({ logger })` function writing to `logger` (see the module header). */
export function llamaCppLogger(logger: Logger): (level: LlamaLogLevel, message: string) => void {
  return (level, message) => {
    const text = message.trim();
    if (text === "") return;
    const severity: `${LlamaLogLevel}` = level;
    const fields = { engine: "llama_cpp", llamaLevel: severity };
    const line = `llama.cpp: ${text}`;
    if (severity === "error" || severity === "fatal") logger.error(fields, line);
    else logger.debug(fields, line);
  };
}
