/**
 * The OpenAPI-driven fuzzer at full size (issue 28, Checks: "a 12,000-request run of an
 * OpenAPI-driven fuzzer over the served document … 0 × 5xx, 100 % envelope, 0 invalid accepted,
 * 0 valid refused, 0 answers off schema"). Starts a server, builds the fuzzer's world through the
 * API (`test/support/openapi-fuzz.ts`, the same fuzzer test/openapi-conformance.test.ts runs
 * with a fixed seed and a smaller count), draws BENCH_REQUESTS (default 12,000) requests over
 * every operation of the document the server serves (about a third invalid in one place), sends
 * them BENCH_CONCURRENCY (default 4) at a time and prints the figures, the answers' statuses, and
 * the first few requests behind each violation.
 *
 *   npm run bench:fuzz-openapi
 *   BENCH_REQUESTS=2000 BENCH_SEED=7 npm run bench:fuzz-openapi
 *
 * Uses DATABASE_URL when set, else an embedded PostgreSQL in a temp folder; model files from
 * SWITCHYARD_MODELS_DIR (default ../shared/models); the models are tinystories-260k and its
 * embedding twin.
 */
import { dereference } from "@readme/openapi-parser";
import fc from "fast-check";
import { startSwitchyard } from "../src/server.js";
import {
  type FuzzCase,
  VIOLATIONS,
  type Violation,
  judge,
  operationsOf,
  requestArbitrary,
  send,
} from "../test/support/openapi-fuzz.js";
import { buildWorld } from "../test/support/openapi-fuzz-world.js";
import { benchConfig } from "./in-process.js";
import { type BenchFigure, printFigures, printJson } from "./report.js";

const REQUESTS = Number(process.env.BENCH_REQUESTS ?? 12_000);
const CONCURRENCY = Number(process.env.BENCH_CONCURRENCY ?? 4);
const SEED = Number(process.env.BENCH_SEED ?? 28);
const CHAT_MODEL = process.env.BENCH_MODEL ?? "tinystories-260k";
const EMBED_MODEL = process.env.BENCH_EMBED_MODEL ?? "tinystories-260k-embed";
/** Requests shown per violation. */
const SHOWN = 5;

/** The served document, dereferenced, as far as this script reads it. */
interface Document {
  paths: Record<string, unknown>;
  components: { schemas: Record<string, Record<string, unknown>> };
}

async function main(): Promise<void> {
  const app = await startSwitchyard(benchConfig("switchyard-fuzz-openapi-"));
  try {
    const world = await buildWorld(app.url, { chat: CHAT_MODEL, embed: EMBED_MODEL });
    const raw = await (await fetch(`${app.url}/schema/openapi.json`)).json();
    const document = (await dereference(raw as never)) as unknown as Document;
    const envelope = document.components.schemas.ErrorEnvelope;
    const operations = operationsOf(document).filter((o) => !world.skip?.[o.id]);
    const cases = fc.sample(fc.oneof(...operations.map((o) => requestArbitrary(o, world))), {
      numRuns: REQUESTS,
      seed: SEED,
    });

    const statuses = new Map<number, number>();
    const found = new Map<Violation, string[]>(VIOLATIONS.map((v) => [v, []]));
    let invalid = 0;
    let restErrors = 0;
    let notEnvelope = 0;
    let madeUp = 0;
    const started = Date.now();
    let next = 0;
    const worker = async () => {
      while (next < cases.length) {
        const c: FuzzCase = cases[next++];
        if (!c.valid) invalid++;
        const answer = await send(world, c);
        statuses.set(answer.status, (statuses.get(answer.status) ?? 0) + 1);
        const verdict = judge(c, answer, envelope, world.opaque?.[c.operation.id]);
        if (verdict.madeUp) madeUp++;
        if (answer.status >= 400 && c.operation.path !== "/graphql") restErrors++;
        for (const v of verdict.violations) {
          if (v.violation === "not the envelope") notEnvelope++;
          found
            .get(v.violation)!
            .push(
              `${c.operation.method.toUpperCase()} ${c.path}?${new URLSearchParams(c.query)} ${JSON.stringify(c.body)?.slice(0, 200)} ${c.why} → ${v.detail}`,
            );
        }
      }
    };
    await Promise.all(Array.from({ length: CONCURRENCY }, worker));
    const seconds = (Date.now() - started) / 1000;

    const envelopePct = restErrors === 0 ? 100 : (100 * (restErrors - notEnvelope)) / restErrors;
    const count = (v: Violation) => found.get(v)!.length;
    const figures: BenchFigure[] = [
      { figure: "requests answered 5xx", unit: "requests", value: count("5xx"), target: "0", met: count("5xx") === 0 },
      {
        figure: "REST 4xx answers in the error envelope",
        unit: "%",
        value: Number(envelopePct.toFixed(2)),
        target: "100 %",
        met: notEnvelope === 0,
      },
      {
        figure: "invalid requests accepted (2xx)",
        unit: "requests",
        value: count("invalid accepted"),
        target: "0",
        met: count("invalid accepted") === 0,
      },
      {
        figure: "valid requests refused (400)",
        unit: "requests",
        value: count("valid refused"),
        target: "0",
        met: count("valid refused") === 0,
      },
      {
        figure: "answers off the documented status or schema",
        unit: "answers",
        value: count("off schema"),
        target: "0",
        met: count("off schema") === 0,
      },
    ];
    console.log(
      `${cases.length} requests over ${operations.length} operations (${invalid} invalid in one place), ` +
        `seed ${SEED}, concurrency ${CONCURRENCY}, ${seconds.toFixed(0)} s (${(cases.length / seconds).toFixed(0)} req/s); ` +
        `${madeUp} valid requests refused only for a made-up server-issued value (a reset token, a cursor, a signature)`,
    );
    console.log(
      `statuses: ${[...statuses.entries()]
        .sort(([a], [b]) => a - b)
        .map(([s, n]) => `${s} × ${n}`)
        .join(", ")}`,
    );
    printFigures(figures, ["figure", "value", "target", "met"], (f) => [
      f.figure,
      `${f.value} ${f.unit}`,
      f.target,
      f.met ? "yes" : "NO",
    ]);
    for (const [violation, list] of found) {
      for (const line of list.slice(0, SHOWN)) console.log(`${violation}: ${line}`);
    }
    printJson("fuzz-openapi", figures);
  } finally {
    await app.close();
  }
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
