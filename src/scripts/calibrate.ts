/**
 * `npm run calibrate -- --model X --data file.jsonl [--bins 10]` (issue 11, item 4): fits a
 * model's decision temperature on labelled examples and prints the fitted value, the log-loss,
 * expected calibration error (ECE) and Brier score before (at the catalog's current
 * `decision_temperature`) and after, and the catalog line to set. Each line of the data file is
 * `{"state": any JSON, "question": a decisions question, "answer": the right one}` where `answer`
 * is a label (choice), a level index (score) or true/false (noul / yes_no). The examples are
 * scored in this process by the engine the catalog names (config and catalog as `npm start` reads
 * them: SWITCHYARD_CATALOG, SWITCHYARD_MODELS_DIR, SWITCHYARD_UPSTREAMS …), with the same prompts
 * and answers as `POST /v1/decisions`. Nothing is written: the catalog is the operator's file.
 */
import { readFileSync } from "node:fs";
import { parseArgs } from "node:util";
import pino from "pino";
import { loadCatalog } from "../config/catalog.js";
import { loadConfig } from "../config/config.js";
import { EngineRouter } from "../inference/engine-router.js";
import { LlamaCppEngine } from "../inference/engines/llama-cpp/llama-cpp.engine.js";
import { OpenAiCompatibleEngine } from "../inference/engines/openai-compatible/openai-compatible.engine.js";
import {
  type LabelledScores,
  brierScore,
  expectedCalibrationError,
  fitTemperature,
  logLoss,
  TEMPERATURE_RANGE,
} from "../services/decisions/calibration.js";
import {
  type Question,
  answerTexts,
  decisionRequest,
  scoredQuestion,
  stateText,
} from "../services/decisions/decisions.protocol.js";

/** Index of `answer` among the question's answers, or an error message. */
function truthIndex(q: Question, answer: unknown): number | string {
  const answers = answerTexts(q);
  if (q.type === "choice") {
    const i = typeof answer === "string" ? answers.indexOf(answer) : -1;
    return i >= 0 ? i : `answer must be one of the labels (${answers.join(", ")})`;
  }
  if (q.type === "score") {
    return typeof answer === "number" && Number.isInteger(answer) && answer >= 0 && answer < answers.length
      ? answer
      : `answer must be a level index 0–${answers.length - 1}`;
  }
  if (answer === true || answer === "true" || answer === "yes") return 0;
  if (answer === false || answer === "false" || answer === "no") return 1;
  return "answer must be true or false";
}

async function main(): Promise<void> {
  const { values } = parseArgs({
    options: { model: { type: "string" }, data: { type: "string" }, bins: { type: "string", default: "10" } },
  });
  if (!values.model || !values.data) {
    console.error("usage: npm run calibrate -- --model <catalog model id> --data <labelled.jsonl> [--bins 10]");
    process.exit(2);
  }
  const config = loadConfig();
  const model = loadCatalog(config.catalogPath).models.find((m) => m.id === values.model);
  if (!model) throw new Error(`model ${values.model} is not in the catalog ${config.catalogPath}`);
  if (!model.capabilities.decisions) {
    throw new Error(`model ${model.id} is not decision-capable (catalog capabilities.decisions)`);
  }
  const logger = pino({ level: "warn" });
  const engines = new EngineRouter({
    openai_compatible: new OpenAiCompatibleEngine({
      endpoints: config.upstreams,
      connectTimeoutMs: config.upstreamConnectMs,
      headersTimeoutMs: config.upstreamHeadersMs,
      bodyTimeoutMs: config.upstreamIdleMs,
      healthIntervalMs: config.upstreamProbeMs,
      logger,
    }),
    llama_cpp: new LlamaCppEngine({
      threads: config.engineThreads,
      sequences: 1,
      embeddingContexts: 1,
      modelsDir: config.modelsDir,
      dataDir: config.dataDir,
      gpu: config.gpu,
      logger,
    }),
  });
  try {
    const engine = engines.engineFor(model);
    if (!engine.scoreContinuations) throw new Error(`the engine of ${model.id} cannot give log-probabilities`);
    await engine.load(model);
    const lines = readFileSync(values.data, "utf8")
      .split("\n")
      .map((l) => l.trim())
      .filter((l) => l.length > 0);
    const examples: LabelledScores[] = [];
    for (const [n, line] of lines.entries()) {
      const where = `${values.data}:${n + 1}`;
      const raw = JSON.parse(line) as { state?: unknown; question?: unknown; answer?: unknown };
      const parsed = decisionRequest.safeParse({ model: model.id, state: raw.state, questions: { q: raw.question } });
      if (!parsed.success) throw new Error(`${where}: ${parsed.error.issues.map((i) => i.message).join("; ")}`);
      const q = parsed.data.questions.q;
      const truth = truthIndex(q, raw.answer);
      if (typeof truth === "string") throw new Error(`${where}: ${truth}`);
      const scored = await engine.scoreContinuations({
        model,
        // Scored exactly as serving scores it (end marker included).
        questions: [scoredQuestion(stateText(parsed.data.state), "q", q)],
        maxQueueWaitMs: 600_000,
      });
      examples.push({ logprobs: scored.scores[0].map((s) => s.logprob), truth });
    }
    const bins = Number(values.bins);
    const before = model.decisionTemperature;
    const after = fitTemperature(examples);
    const row = (label: string, t: number) => ({
      "": label,
      temperature: Number(t.toFixed(4)),
      "log-loss": Number(logLoss(examples, t).toFixed(4)),
      ECE: Number(expectedCalibrationError(examples, t, bins).toFixed(4)),
      Brier: Number(brierScore(examples, t).toFixed(4)),
    });
    console.log(`${model.id}: ${examples.length} labelled examples from ${values.data}`);
    console.table([row("before (catalog)", before), row("after (fitted)", after)]);
    console.log(`fitted decision_temperature: ${after.toFixed(4)}`);
    if (after >= TEMPERATURE_RANGE.max * 0.99 || after <= TEMPERATURE_RANGE.min * 1.01) {
      console.log(
        "(at the end of the searched range: on these examples the model's answer log-probabilities carry little " +
          "information, or too much confidence in one direction; more or other examples may help)",
      );
    }
    console.log(
      `to use it, set it on the model's entry in ${config.catalogPath} (or SWITCHYARD_CATALOG) and restart:\n` +
        `  { "id": "${model.id}", …, "decision_temperature": ${Number(after.toFixed(4))} }`,
    );
  } finally {
    await engines.close();
  }
}

main().catch((err: unknown) => {
  console.error(err instanceof Error ? err.message : err);
  process.exit(1);
});
