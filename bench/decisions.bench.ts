/**
 * Benchmark (issue 11, Checks): 64 yes/no questions about one input in one `POST /v1/decisions`
 * call against the same 64 questions as 64 separate calls on the same input (sent one after the
 * other, and at BENCH_CONCURRENCY at once). The one call evaluates the input once and branches
 * per question; the separate calls each evaluate it again. Each variant runs BENCH_ROUNDS times
 * (default 5) after a warm-up; prints a table of wall times (median) and the ratio separate/one.
 *
 *   npm run bench:decisions
 *   BENCH_ROUNDS=10 BENCH_STATE_WORDS=200 npm run bench:decisions
 *
 * Uses DATABASE_URL when set, else an embedded PostgreSQL in a temp folder; model files from
 * SWITCHYARD_MODELS_DIR (default ../shared/models); the model is tinystories-260k (BENCH_MODEL).
 */
import { startSwitchyard } from "../src/server.js";
import { benchConfig } from "./in-process.js";
import { printJson } from "./report.js";

const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 5);
const CONCURRENCY = Number(process.env.BENCH_CONCURRENCY ?? 8);
const MODEL = process.env.BENCH_MODEL ?? "tinystories-260k";
/** Words of the input (the shared prefix); the tiny model's context is 512 tokens. */
const STATE_WORDS = Number(process.env.BENCH_STATE_WORDS ?? 60);
const QUESTIONS = 64;

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];

async function pool(n: number, concurrency: number, task: (i: number) => Promise<void>): Promise<void> {
  let next = 0;
  await Promise.all(
    Array.from({ length: Math.min(concurrency, n) }, async () => {
      while (next < n) await task(next++);
    }),
  );
}

async function main(): Promise<void> {
  const config = benchConfig("switchyard-bench-");
  const app = await startSwitchyard(config);
  try {
    const signup = await fetch(`${app.url}/control/v1/auth/signup`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ email: `bench-${Date.now()}@example.com`, password: "bench-password" }),
    }).then((r) => r.json() as Promise<{ access_token: string }>);
    const key = await fetch(`${app.url}/control/v1/auth/api-keys`, {
      method: "POST",
      headers: { "content-type": "application/json", authorization: `Bearer ${signup.access_token}` },
      body: JSON.stringify({ name: "bench" }),
    }).then((r) => (r.json() as Promise<{ plaintext: string }>).then((k) => k.plaintext));
    const headers = { "content-type": "application/json", authorization: `Bearer ${key}` };
    const words =
      "Once upon a time there was a little girl named Lily who liked to play in the park with her dog".split(" ");
    const state = Array.from({ length: STATE_WORDS }, (_, i) => words[i % words.length]).join(" ");
    const questions = Object.fromEntries(
      Array.from({ length: QUESTIONS }, (_, i) => [`q${i}`, { type: "noul", instructions: `Is fact ${i} true?` }]),
    );
    let inputTokens = { one: 0, separate: 0 };
    const decide = async (qs: Record<string, unknown>) => {
      const res = await fetch(`${app.url}/v1/decisions`, {
        method: "POST",
        headers,
        body: JSON.stringify({ model: MODEL, state, questions: qs }),
      });
      const out = (await res.json()) as { usage: { input_tokens: number } };
      if (res.status !== 200) throw new Error(`decisions answered ${res.status}: ${JSON.stringify(out)}`);
      return out.usage.input_tokens;
    };
    const one = async () => {
      inputTokens.one = await decide(questions);
    };
    const separate = async (concurrency: number) => {
      let total = 0;
      await pool(QUESTIONS, concurrency, async (i) => {
        const tokens = await decide({ [`q${i}`]: questions[`q${i}`] });
        total += tokens;
      });
      inputTokens.separate = total;
    };
    const time = async (run: () => Promise<void>) => {
      const started = performance.now();
      await run();
      return performance.now() - started;
    };

    // Warm-up: loads the scoring contexts and the JIT paths.
    await one();
    await separate(CONCURRENCY);
    inputTokens = { one: 0, separate: 0 };

    const results = { one: [] as number[], sequential: [] as number[], concurrent: [] as number[] };
    for (let r = 0; r < ROUNDS; r++) {
      results.one.push(await time(one));
      results.sequential.push(await time(() => separate(1)));
      results.concurrent.push(await time(() => separate(CONCURRENCY)));
    }
    const base = median(results.one);
    console.log(
      `${MODEL}: ${QUESTIONS} yes/no questions on one input of ${STATE_WORDS} words; ${ROUNDS} rounds, median wall time`,
    );
    console.table([
      {
        variant: "1 call, 64 questions",
        "wall ms": base.toFixed(1),
        "ratio vs 1 call": "1.00",
        "input tokens": inputTokens.one,
      },
      {
        variant: "64 calls, one after another",
        "wall ms": median(results.sequential).toFixed(1),
        "ratio vs 1 call": (median(results.sequential) / base).toFixed(2),
        "input tokens": inputTokens.separate,
      },
      {
        variant: `64 calls, ${CONCURRENCY} at once`,
        "wall ms": median(results.concurrent).toFixed(1),
        "ratio vs 1 call": (median(results.concurrent) / base).toFixed(2),
        "input tokens": inputTokens.separate,
      },
    ]);
    printJson("decisions", [
      {
        figure: `${QUESTIONS} questions: 64 sequential calls vs 1 call, wall time`,
        unit: "ms",
        baseline: median(results.sequential),
        value: base,
        ratio: median(results.sequential) / base,
        target: "— (ratio: how many times faster one call is)",
        met: null,
      },
    ]);
  } finally {
    await app.close();
  }
}

main().catch((err: unknown) => {
  console.error(err);
  process.exit(1);
});
