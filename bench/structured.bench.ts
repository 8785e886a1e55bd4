/**
 * Benchmark (issue 26, Checks): what structured outputs cost on the embedded engine, in one run,
 * same model, same prompt, through the whole server (`POST /v1/chat/completions`, one connection).
 *
 * - **Decode tokens/s with a JSON-schema grammar ÷ without** (target ≥ 0.7): completion tokens
 *   over wall time, over back-to-back requests at temperature 1 (`max_tokens` `BENCH_MAX_TOKENS`),
 *   free text against `response_format: json_schema` with a schema that lets the answer run long
 *   (a list of strings). Rounds alternate the two (`BENCH_ROUNDS` of `BENCH_SECONDS` each) and the
 *   medians are compared.
 * - **Added time to first token for a 20-property schema**: streamed, time to the first content
 *   chunk with the schema minus without, for the first request (the grammar is compiled) and for
 *   later ones (compiled once, cached), medians of `BENCH_TTFT_RUNS`.
 *
 *   npm run bench:structured
 *   BENCH_ROUNDS=5 BENCH_SECONDS=5 npm run bench:structured
 *
 * Uses DATABASE_URL when set, else an embedded PostgreSQL in a temp folder; model files from
 * SWITCHYARD_MODELS_DIR (default ../shared/models). Prints last a `BENCH_JSON` line.
 */
import { rmSync } from "node:fs";
import { Pool } from "undici";
import { startSwitchyard } from "../src/server.js";
import { closeRequests, signup } from "./child-server.js";
import { benchConfig } from "./in-process.js";
import { type BenchFigure, printFigures, printJson } from "./report.js";

const QUICK = process.env.BENCH_QUICK === "1";
const SECONDS = Number(process.env.BENCH_SECONDS ?? (QUICK ? 1 : 4));
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? (QUICK ? 1 : 3));
const MAX_TOKENS = Number(process.env.BENCH_MAX_TOKENS ?? 128);
const TTFT_RUNS = Number(process.env.BENCH_TTFT_RUNS ?? (QUICK ? 3 : 15));
const MODEL = "tinystories-260k";
const PROMPT = "Once upon a time";

/** A schema whose answers may run long: decode speed is measured, not how soon the grammar ends. */
const LONG_SCHEMA = {
  type: "object",
  properties: { lines: { type: "array", items: { type: "string" } } },
  required: ["lines"],
  additionalProperties: false,
};

/** 20 properties of mixed types, as an application's extraction schema might have. */
const WIDE_SCHEMA = {
  type: "object",
  properties: Object.fromEntries(
    Array.from({ length: 20 }, (_, i) => [
      `field_${i}`,
      [
        { type: "string", maxLength: 12 },
        { type: "integer", minimum: 0, maximum: 1000 },
        { type: "boolean" },
        { anyOf: [{ type: "string", enum: ["a", "b", "c"] }, { type: "null" }] },
      ][i % 4],
    ]),
  ),
  required: Array.from({ length: 20 }, (_, i) => `field_${i}`),
  additionalProperties: false,
};

function median(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.floor(s.length / 2)];
}

async function main(): Promise<void> {
  const config = benchConfig("switchyard-bench-structured-");
  const app = await startSwitchyard(config);
  const pool = new Pool(app.url, { connections: 1 });
  try {
    const apiKey = await signup(app.url, "bench-structured");
    const headers = { "content-type": "application/json", authorization: `Bearer ${apiKey}` };
    let seed = 0;
    const chat = async (extra: Record<string, unknown>) => {
      const res = await pool.request({
        method: "POST",
        path: "/v1/chat/completions",
        headers,
        body: JSON.stringify({
          model: MODEL,
          messages: [{ role: "user", content: PROMPT }],
          max_tokens: MAX_TOKENS,
          seed: seed++,
          ...extra,
        }),
      });
      const body = (await res.body.json()) as { usage?: { completion_tokens: number } };
      if (res.statusCode !== 200) throw new Error(`chat answered ${res.statusCode}: ${JSON.stringify(body)}`);
      return body.usage!.completion_tokens;
    };
    /** Completion tokens per second of back-to-back requests for `seconds`. */
    const tokensPerSecond = async (extra: Record<string, unknown>) => {
      const started = performance.now();
      let tokens = 0;
      while (performance.now() - started < SECONDS * 1000) tokens += await chat(extra);
      return tokens / ((performance.now() - started) / 1000);
    };
    const structured = {
      response_format: { type: "json_schema", json_schema: { name: "lines", schema: LONG_SCHEMA, strict: true } },
    };
    await chat({});
    await chat(structured);
    const free: number[] = [];
    const constrained: number[] = [];
    for (let r = 0; r < ROUNDS; r++) {
      free.push(await tokensPerSecond({}));
      constrained.push(await tokensPerSecond(structured));
    }

    /** ms to the first content chunk of a streamed answer. */
    const firstToken = async (extra: Record<string, unknown>) => {
      const started = performance.now();
      const res = await pool.request({
        method: "POST",
        path: "/v1/chat/completions",
        headers,
        body: JSON.stringify({
          model: MODEL,
          messages: [{ role: "user", content: PROMPT }],
          max_tokens: 64,
          stream: true,
          ...extra,
        }),
      });
      let first = NaN;
      for await (const chunk of res.body) {
        if (Number.isNaN(first) && String(chunk).includes('"content":"')) first = performance.now() - started;
      }
      return first;
    };
    const wide = (name: string) => ({
      response_format: { type: "json_schema", json_schema: { name, schema: WIDE_SCHEMA, strict: true } },
    });
    const plainTtft: number[] = [];
    for (let i = 0; i < TTFT_RUNS; i++) plainTtft.push(await firstToken({}));
    // A schema not seen before: its grammar is compiled by this request.
    const coldTtft: number[] = [];
    for (let i = 0; i < TTFT_RUNS; i++) {
      const schema = { ...WIDE_SCHEMA, description: `variant ${i}` };
      coldTtft.push(
        await firstToken({
          response_format: { type: "json_schema", json_schema: { name: `wide${i}`, schema, strict: true } },
        }),
      );
    }
    const warmTtft: number[] = [];
    for (let i = 0; i < TTFT_RUNS; i++) warmTtft.push(await firstToken(wide("wide")));

    const freeTps = median(free);
    const constrainedTps = median(constrained);
    const figures: BenchFigure[] = [
      {
        figure: `decode tokens/s with a JSON-schema grammar (max_tokens ${MAX_TOKENS})`,
        unit: "tokens/s",
        value: constrainedTps,
        baseline: freeTps,
        ratio: constrainedTps / freeTps,
        target: "≥ 0.7 × without",
        met: constrainedTps / freeTps >= 0.7,
      },
      {
        figure: "time to first token, 20-property schema, first use (grammar compiled)",
        unit: "ms",
        value: median(coldTtft),
        baseline: median(plainTtft),
        target: "reported (added = value − baseline)",
        met: null,
      },
      {
        figure: "time to first token, 20-property schema, cached grammar",
        unit: "ms",
        value: median(warmTtft),
        baseline: median(plainTtft),
        target: "reported (added = value − baseline)",
        met: null,
      },
    ];
    printFigures(figures, ["figure", "without", "with", "ratio / added", "target"], (f) => [
      f.figure,
      f.baseline!.toFixed(1),
      f.value.toFixed(1),
      f.unit === "ms" ? `+${(f.value - f.baseline!).toFixed(2)} ms` : f.ratio!.toFixed(2),
      f.target,
    ]);
    printJson("structured", figures);
  } finally {
    await pool.close();
    await closeRequests();
    await app.close();
    rmSync(config.dataDir, { recursive: true, force: true });
  }
}

await main();
