/**
 * Test-side control over the embedded engine, at the node-llama-cpp boundary only (no hook in
 * Switchyard's code): the test process shares the `node-llama-cpp` module instance the engine
 * loads, so patching `LlamaCompletion.prototype.generateCompletionWithMeta` (the one library call
 * behind every generation) reaches the running server. Also reads the engine's slot pool.
 */
import type { SlotPoolStats } from "../../src/inference/slot-pool.js";
import { LlamaCppEngine } from "../../src/inference/engines/llama-cpp/llama-cpp.engine.js";
import { CHAT_MODEL, type TestServer } from "./harness.js";

type Generate = (...args: unknown[]) => Promise<unknown>;

async function completionPrototype(): Promise<{ generateCompletionWithMeta: Generate }> {
  const lib = await import("node-llama-cpp");
  return lib.LlamaCompletion.prototype as unknown as { generateCompletionWithMeta: Generate };
}

/**
 * Makes the next generation fail inside llama.cpp's completion call, as a native failure would
 * (after the engine took a sequence and started the request). Later generations run normally.
 */
export async function failNextGeneration(): Promise<void> {
  const proto = await completionPrototype();
  const original = proto.generateCompletionWithMeta;
  proto.generateCompletionWithMeta = async function failOnce() {
    proto.generateCompletionWithMeta = original;
    throw new Error("simulated llama.cpp failure");
  };
}

/**
 * Holds the next generation (its sequence already taken) until `release()` is called, then runs
 * it for real: a request that keeps the engine busy for exactly as long as a test needs.
 */
export async function holdNextGeneration(): Promise<{ started: Promise<void>; release: () => void }> {
  const proto = await completionPrototype();
  const original = proto.generateCompletionWithMeta;
  let release!: () => void;
  const gate = new Promise<void>((r) => (release = r));
  let markStarted!: () => void;
  const started = new Promise<void>((r) => (markStarted = r));
  const held = async function heldOnce(this: unknown, ...args: unknown[]) {
    proto.generateCompletionWithMeta = original;
    markStarted();
    await gate;
    return original.apply(this, args);
  };
  proto.generateCompletionWithMeta = held;
  outstanding.push(() => {
    if (proto.generateCompletionWithMeta === held) proto.generateCompletionWithMeta = original;
    release();
  });
  return { started, release };
}

const outstanding: Array<() => void> = [];

/**
 * Holds the next `n` decision scorings once each has taken its scoring context (the embedded
 * engine's scoring starts with `LlamaContextSequence.clearHistory`), until `release()`; then they
 * run for real. `started` resolves when all `n` are held.
 */
export async function holdNextScorings(n: number): Promise<{ started: Promise<void>; release: () => void }> {
  const proto = (await import("node-llama-cpp")).LlamaContextSequence.prototype as unknown as {
    clearHistory: Generate;
  };
  const original = proto.clearHistory;
  let release!: () => void;
  const gate = new Promise<void>((r) => (release = r));
  let markStarted!: () => void;
  const started = new Promise<void>((r) => (markStarted = r));
  let caught = 0;
  const held = async function heldScoring(this: unknown, ...args: unknown[]) {
    if (++caught >= n) proto.clearHistory = original;
    if (caught === n) markStarted();
    await gate;
    return original.apply(this, args);
  };
  proto.clearHistory = held;
  outstanding.push(() => {
    if (proto.clearHistory === held) proto.clearHistory = original;
    release();
  });
  return { started, release };
}

/**
 * Releases every hold a test left (a failed assertion before its `release()`), and removes holds
 * that never caught a generation: one failing test then fails alone instead of stalling the
 * engine, and every later test of its file, until their timeouts. Call it in `afterEach`.
 */
export function releaseAllHolds(): void {
  for (const undo of outstanding.splice(0)) undo();
}

/** The chat model's slot pool (`{size, available, waiting}`) in `server`'s embedded engine. */
export async function chatSlots(server: TestServer): Promise<SlotPoolStats> {
  const model = server.app.catalog.all().find((m) => m.id === CHAT_MODEL)!;
  const engine = server.app.engines.engineFor(model);
  if (!(engine instanceof LlamaCppEngine)) throw new Error(`${CHAT_MODEL} is not served by the embedded engine`);
  const stats = await engine.slots(model);
  if (!stats) throw new Error(`${CHAT_MODEL} is not loaded`);
  return stats;
}
