/**
 * Benchmark (issue 12, item 1): Switchyard against raw node-llama-cpp on the same model file, in
 * one run — decode tokens/s of one stream and embeddings/s. The target is ≥ 0.9 of raw for both.
 *
 * - **raw**: the library alone, as its documentation shows it: `getLlama({gpu: false})`, the
 *   model loaded once, one context with the threads Switchyard chose (same file, the catalog's
 *   context size), `LlamaCompletion.generateCompletion` for decode with the generation options
 *   Switchyard's engine passes (no repeat penalty, no context shift, the catalog's end-of-generation
 *   tokens as stop triggers), `LlamaEmbeddingContext.getEmbeddingFor` for embeddings. No HTTP, no
 *   database.
 * - **Switchyard**: `POST /v1/chat/completions` (`max_tokens` `BENCH_DECODE_TOKENS`, temperature 0)
 *   and `POST /v1/embeddings` over HTTP with an API key, through the whole server (auth, credit,
 *   validation, the engine adapter, group-commit metering), one connection.
 *
 * Decode tokens/s = completion tokens / wall time, over back-to-back requests (each starts from the
 * same prompt; raw counts the tokens it generated, Switchyard's side reads each answer's
 * `usage.completion_tokens`; the run fails if the two sides' counts per request differ). Embeddings/s = inputs embedded / wall
 * time, for requests of 1 input and of `BENCH_EMBED_BATCH` inputs; raw embeds the same inputs one
 * call each. Rounds alternate raw and Switchyard (`BENCH_ROUNDS`, `BENCH_SECONDS` each) and the
 * median of each side is reported, so a busy minute lands on both.
 *
 *   npm run bench:engine-raw
 *   BENCH_DECODE_TOKENS=64 BENCH_ROUNDS=5 npm run bench:engine-raw
 *
 * Uses DATABASE_URL when set, else an embedded PostgreSQL in a temp folder; model files from
 * SWITCHYARD_MODELS_DIR (default ../shared/models). Prints last a `BENCH_JSON` line.
 */
import { rmSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { getLlama, LlamaCompletion, LlamaLogLevel, type Token } from "node-llama-cpp";
import { Pool } from "undici";
import type { LlamaCppEngine } from "../src/inference/engines/llama-cpp/llama-cpp.engine.js";
import { startSwitchyard } from "../src/server.js";
import { BENCH_MODELS_DIR, benchConfig } from "./in-process.js";
import { closeRequests, signup } from "./child-server.js";
import { type BenchFigure, printFigures, printJson } from "./report.js";

const QUICK = process.env.BENCH_QUICK === "1";
const SECONDS = Number(process.env.BENCH_SECONDS ?? (QUICK ? 1 : 4));
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? (QUICK ? 1 : 3));
const DECODE_TOKENS = Number(process.env.BENCH_DECODE_TOKENS ?? 256);
const EMBED_BATCH = Number(process.env.BENCH_EMBED_BATCH ?? 32);
const PROMPT = "Once upon a time";
/** A paragraph of TinyStories-like text (~100 tokens for this model's vocabulary). */
const EMBED_TEXT =
  "Lily and her dog Max went to the park on a sunny day. They saw a big red ball near the tree. " +
  "Max ran fast and brought the ball back to Lily. She laughed and threw it again. A little bird " +
  "sang on a branch, and the wind made the leaves dance. When the sun went down, they walked home happy.";

function median(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.floor(s.length / 2)];
}

/** Runs `fn` back to back for `seconds`; returns units per second (fn returns units done). */
async function rate(seconds: number, fn: () => Promise<number>): Promise<number> {
  const deadline = performance.now() + seconds * 1000;
  const started = performance.now();
  let units = 0;
  while (performance.now() < deadline) units += await fn();
  return units / ((performance.now() - started) / 1000);
}

async function main(): Promise<void> {
  const config = benchConfig("switchyard-bench-raw-");
  const app = await startSwitchyard(config);
  /** Closed in reverse order when the bench ends, however it ends. */
  const cleanup: Array<() => Promise<unknown>> = [];
  try {
    const apiKey = await signup(app.url, "bench-raw");
    cleanup.push(async () => closeRequests());
    const headers = { "content-type": "application/json", authorization: `Bearer ${apiKey}` };

    const chatModel = app.catalog.all().find((m) => m.id === "tinystories-260k")!;
    const embedModel = app.catalog.all().find((m) => m.id === "tinystories-260k-embed")!;
    const chatBody = JSON.stringify({
      model: chatModel.id,
      messages: [{ role: "user", content: PROMPT }],
      max_tokens: DECODE_TOKENS,
      temperature: 0,
    });
    const embedBody = (n: number) =>
      JSON.stringify({ model: embedModel.id, input: n === 1 ? EMBED_TEXT : Array(n).fill(EMBED_TEXT) });

    // Loads both models in the server (and runs the engine probe) and tells what one request yields.
    const first = await fetch(`${app.url}/v1/chat/completions`, { method: "POST", headers, body: chatBody });
    if (!first.ok) throw new Error(`chat completion answered ${first.status}: ${await first.text()}`);
    const tokensPerRequest = ((await first.json()) as { usage: { completion_tokens: number } }).usage.completion_tokens;
    const firstEmbed = await fetch(`${app.url}/v1/embeddings`, { method: "POST", headers, body: embedBody(1) });
    if (!firstEmbed.ok) throw new Error(`embeddings answered ${firstEmbed.status}: ${await firstEmbed.text()}`);
    const embedJson = (await firstEmbed.json()) as { usage: { prompt_tokens: number } };

    // Raw node-llama-cpp, with the threads Switchyard chose for this file and the catalog's context size.
    const engine = app.engines.engineFor(chatModel) as Partial<LlamaCppEngine>;
    const threads = engine.chosenTuning?.()?.threads;
    if (threads === undefined) throw new Error("the engine chose no thread count for tinystories-260k");
    if (chatModel.engine.type !== "llama_cpp") throw new Error("tinystories-260k is not served by llama.cpp");
    const { context_size: contextSize, eog_token_ids: eogTokenIds } = chatModel.engine;
    const llama = await getLlama({ gpu: false, build: "never", logLevel: LlamaLogLevel.error });
    const model = await llama.loadModel({ modelPath: path.join(BENCH_MODELS_DIR, chatModel.engine.file) });
    cleanup.push(() => model.dispose());
    const context = await model.createContext({ contextSize, sequences: 1, threads });
    cleanup.push(() => context.dispose());
    const completion = new LlamaCompletion({ contextSequence: context.getSequence() });
    const embedding = await model.createEmbeddingContext({ contextSize, threads });
    cleanup.push(() => embedding.dispose());
    const rawDecode = async () => {
      let tokens = 0;
      await completion.generateCompletion(PROMPT, {
        maxTokens: DECODE_TOKENS,
        temperature: 0,
        // What `LlamaCppEngine.generate` passes, so both sides do the same work per token.
        repeatPenalty: false,
        disableContextShift: true,
        contextShiftSize: 0,
        customStopTriggers: eogTokenIds.length > 0 ? eogTokenIds.map((id) => [id as Token]) : undefined,
        onToken: (t) => {
          tokens += t.length;
        },
      });
      if (tokens !== tokensPerRequest) {
        throw new Error(`raw generated ${tokens} tokens where Switchyard answered ${tokensPerRequest}`);
      }
      return tokens;
    };
    const rawEmbed = (n: number) => async () => {
      for (let i = 0; i < n; i++) await embedding.getEmbeddingFor(EMBED_TEXT);
      return n;
    };

    /**
     * Switchyard: one keep-alive connection, requests back to back, `units` per answer; returns
     * units/s. (Not autocannon: it counts whole requests in a fixed window, and a 32-input request
     * takes ~0.6 s here, so a 4 s window would quantise the rate by ~15 %.)
     */
    const client = new Pool(app.url, { connections: 1 });
    cleanup.push(() => client.close());
    const served = (urlPath: string, body: string, units: number | "completion_tokens") => async () => {
      const res = await client.request({ path: urlPath, method: "POST", headers, body });
      const text = await res.body.text();
      if (res.statusCode !== 200) throw new Error(`${urlPath} answered ${res.statusCode}: ${text.slice(0, 200)}`);
      if (units !== "completion_tokens") return units;
      const tokens = (JSON.parse(text) as { usage: { completion_tokens: number } }).usage.completion_tokens;
      if (tokens !== tokensPerRequest) {
        throw new Error(`Switchyard answered ${tokens} tokens where its first answer had ${tokensPerRequest}`);
      }
      return tokens;
    };

    // Warm-up of the raw side.
    await rate(0.5, rawDecode);
    await rate(0.5, rawEmbed(1));

    const samples = {
      rawDecode: [] as number[],
      servedDecode: [] as number[],
      rawEmbed1: [] as number[],
      servedEmbed1: [] as number[],
      rawEmbedN: [] as number[],
      servedEmbedN: [] as number[],
    };
    for (let round = 0; round < ROUNDS; round++) {
      samples.rawDecode.push(await rate(SECONDS, rawDecode));
      samples.servedDecode.push(await rate(SECONDS, served("/v1/chat/completions", chatBody, "completion_tokens")));
      samples.rawEmbed1.push(await rate(SECONDS, rawEmbed(1)));
      samples.servedEmbed1.push(await rate(SECONDS, served("/v1/embeddings", embedBody(1), 1)));
      samples.rawEmbedN.push(await rate(SECONDS, rawEmbed(EMBED_BATCH)));
      samples.servedEmbedN.push(await rate(SECONDS, served("/v1/embeddings", embedBody(EMBED_BATCH), EMBED_BATCH)));
      console.log(
        `round ${round + 1}/${ROUNDS}: decode raw ${samples.rawDecode[round].toFixed(0)} / served ` +
          `${samples.servedDecode[round].toFixed(0)} tokens/s; embeddings ×1 raw ${samples.rawEmbed1[round].toFixed(0)} ` +
          `/ served ${samples.servedEmbed1[round].toFixed(0)}; ×${EMBED_BATCH} raw ${samples.rawEmbedN[round].toFixed(0)} ` +
          `/ served ${samples.servedEmbedN[round].toFixed(0)} per s`,
      );
    }

    const rows = [
      {
        figure: `decode tokens/s, 1 stream, ${tokensPerRequest} tokens per request`,
        unit: "tokens/s",
        raw: median(samples.rawDecode),
        served: median(samples.servedDecode),
      },
      {
        figure: `embeddings/s, 1 input per request (${embedJson.usage.prompt_tokens} tokens each)`,
        unit: "embeddings/s",
        raw: median(samples.rawEmbed1),
        served: median(samples.servedEmbed1),
      },
      {
        figure: `embeddings/s, ${EMBED_BATCH} inputs per request (${embedJson.usage.prompt_tokens} tokens each)`,
        unit: "embeddings/s",
        raw: median(samples.rawEmbedN),
        served: median(samples.servedEmbedN),
      },
    ];
    console.log(
      `\nRaw node-llama-cpp vs through Switchyard, stories260K.gguf, ${threads} thread(s), context ${contextSize}, ` +
        `one connection, median of ${ROUNDS} alternating rounds of ${SECONDS} s, ${os.cpus().length} cores\n`,
    );
    printFigures(rows, ["figure", "raw node-llama-cpp", "through Switchyard", "ratio", "target", "met"], (r) => [
      r.figure,
      r.raw.toFixed(0),
      r.served.toFixed(0),
      (r.served / r.raw).toFixed(2),
      "≥ 0.9 × raw",
      r.served / r.raw >= 0.9 ? "yes" : "NO",
    ]);
    const figures: BenchFigure[] = rows.map((r) => ({
      figure: r.figure,
      unit: r.unit,
      baseline: r.raw,
      value: r.served,
      ratio: r.served / r.raw,
      target: "≥ 0.9 × raw node-llama-cpp",
      met: r.served / r.raw >= 0.9,
    }));
    printJson("engine-raw", figures);
  } finally {
    for (const step of cleanup.reverse()) await step().catch(() => undefined);
    await app.close();
    rmSync(config.dataDir, { recursive: true, force: true });
  }
}

main().catch((err: unknown) => {
  console.error(err);
  process.exit(1);
});
