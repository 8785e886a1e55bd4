/**
 * Engine scheduling as the rest of the service sees it (issue 12, item 3): the threads and
 * sequences an engine chose for a model file, and the default sequences when none was chosen.
 * Engine-neutral, so services and the start banner read it without reaching into an engine; the
 * embedded engine measures it (`engines/llama-cpp/engine-tuning.ts`).
 */

/** A configured count, or `auto` (measured). */
export type TuningSetting = number | "auto";

/** What was chosen for one model file, and from what. */
export interface EngineTuning {
  threads: number;
  sequences: number;
  /** `measured` now, `cached` from an earlier start, `config` when both came from the configuration. */
  source: "measured" | "cached" | "config";
  /** Decode tokens/s per thread count (one sequence), when threads were measured. */
  threadsTokensPerS?: Record<string, number>;
  /** Aggregate decode tokens/s per sequence count, when sequences were measured. */
  sequencesTokensPerS?: Record<string, number>;
  /** How long the probe took, ms (0 when cached or configured). */
  probeMs: number;
}

/** Sequences when none was measured (no generation model loaded, or the probe failed). */
export const DEFAULT_ENGINE_SEQUENCES = 8;
