/**
 * `POST /v1/decisions` (DESIGN §3 Decisions; issue 11): the request schema, the prompt each
 * question becomes, and the answers made from the engine's answer log-probabilities.
 *
 * Request `{model, state, questions: {name: question}}`, 1–64 questions; `state` is any JSON.
 * Question types: `choice` `{type, instructions?, criteria: {label: description}}` (2–256 labels);
 * `score` `{type, instructions?, criteria: [level descriptions, lowest first]}` (2–256 levels);
 * `noul` (yes/no; `yes_no` accepted as an alias) `{type, instructions?, criteria?: {"true", "false"}}`.
 * Response `{model, answers: {name: answer}, usage: {input_tokens, output_tokens: 0}}`.
 *
 * Each question is asked as one prompt: the input first, then the question, so every question's
 * prompt starts with the same text and the engine evaluates it once. The answers scored are the
 * labels (choice), the level numbers `0`…`n−1` (score) and `yes` / `no` (noul). Their summed token
 * log-probabilities are divided by the model's calibration temperature (catalog
 * `decision_temperature`) and normalised with a softmax.
 */
import { z } from "zod";
import type { ChatMessage } from "../../inference/engine.js";
import type { CandidateScore } from "../../inference/engine.js";
import { maxQueueWaitS, requestMetadata } from "../inference.service.js";

/** Most questions in one request (spec: Limits, "questions per call: up to 64"). */
export const MAX_QUESTIONS = 64;
/** Labels of a choice / levels of a score question. */
export const MIN_ANSWERS = 2;
export const MAX_ANSWERS = 256;
/** Largest request body, bytes (DESIGN §3 Decisions: over 1 MiB → 413). */
export const DECISION_BODY_LIMIT_BYTES = 1024 * 1024;
/** Longest label and question name, characters. */
export const MAX_LABEL_CHARS = 256;

const label = z
  .string()
  .max(MAX_LABEL_CHARS, `at most ${MAX_LABEL_CHARS} characters`)
  .refine((s) => s.trim().length > 0, "must not be blank");
const text = z.string();
const instructions = z.string().nullish();

const choiceQuestion = z.object({
  type: z.literal("choice"),
  instructions,
  criteria: z.record(label, text).superRefine((c, ctx) => {
    const n = Object.keys(c).length;
    if (n < MIN_ANSWERS || n > MAX_ANSWERS) {
      ctx.addIssue({ code: "custom", message: `must have ${MIN_ANSWERS}–${MAX_ANSWERS} labels (${n} given)` });
    }
  }),
});

const scoreQuestion = z.object({
  type: z.literal("score"),
  instructions,
  criteria: z
    .array(text)
    .min(MIN_ANSWERS, `must have ${MIN_ANSWERS}–${MAX_ANSWERS} levels`)
    .max(MAX_ANSWERS, `must have ${MIN_ANSWERS}–${MAX_ANSWERS} levels`),
});

const noulQuestion = z.object({
  type: z.enum(["noul", "yes_no"]),
  instructions,
  criteria: z.object({ true: text.nullish(), false: text.nullish() }).nullish(),
});

const QUESTION_TYPES = ["choice", "score", "noul", "yes_no"] as const;

const question = z.discriminatedUnion("type", [choiceQuestion, scoreQuestion, noulQuestion], {
  error: (issue) => (issue.code === "invalid_union" ? `type must be one of ${QUESTION_TYPES.join(", ")}` : undefined),
});

export const decisionRequest = z.object({
  model: z.string().min(1),
  state: z.unknown().refine((v) => v !== undefined, "is required (any JSON)"),
  questions: z.record(z.string().min(1).max(MAX_LABEL_CHARS), question).superRefine((q, ctx) => {
    const n = Object.keys(q).length;
    if (n < 1 || n > MAX_QUESTIONS) {
      ctx.addIssue({ code: "custom", message: `must have 1–${MAX_QUESTIONS} questions (${n} given)` });
    }
  }),
  metadata: requestMetadata,
  max_queue_wait_s: maxQueueWaitS,
});
export type DecisionRequest = z.infer<typeof decisionRequest>;
export type Question = z.infer<typeof question>;

/** The input as the prompt shows it: a string as it is, anything else as compact JSON. */
export function stateText(state: unknown): string {
  return typeof state === "string" ? state : JSON.stringify(state);
}

/** The answer texts a question's probabilities are over, in answer order. */
export function answerTexts(q: Question): string[] {
  switch (q.type) {
    case "choice":
      return Object.keys(q.criteria);
    case "score":
      return q.criteria.map((_, i) => String(i));
    default:
      return ["yes", "no"];
  }
}

/**
 * The prompt of one question: the input, then the question and its answers, ending where the
 * answer begins. Every question of a request starts with the same `Input:` block (the shared prefix).
 */
export function questionMessages(state: string, name: string, q: Question): ChatMessage[] {
  const lines: string[] = [];
  switch (q.type) {
    case "choice":
      lines.push(`Question: ${q.instructions ?? `Which ${name} fits the input best?`}`);
      for (const [lab, description] of Object.entries(q.criteria)) {
        lines.push(description ? `- ${lab}: ${description}` : `- ${lab}`);
      }
      lines.push("Answer with one label.");
      break;
    case "score":
      lines.push(`Question: ${q.instructions ?? `How much ${name} does the input show?`}`);
      lines.push("Levels, lowest first:");
      q.criteria.forEach((description, i) => lines.push(description ? `${i}: ${description}` : `${i}`));
      lines.push("Answer with the level number.");
      break;
    default:
      lines.push(`Question: ${q.instructions ?? `${name}?`}`);
      if (q.criteria?.true) lines.push(`yes: ${q.criteria.true}`);
      if (q.criteria?.false) lines.push(`no: ${q.criteria.false}`);
      lines.push("Answer yes or no.");
  }
  return [{ role: "user", content: `Input:\n${state}\n\n${lines.join("\n")}\nAnswer:` }];
}

/**
 * Softmax of `logprob / temperature` over a question's answers (float64, max-subtracted). An
 * answer the model cannot produce at all (−∞) gets 0; if none can, the answers are equally likely.
 */
export function answerProbabilities(scores: CandidateScore[], temperature: number): number[] {
  const z = scores.map((s) => s.logprob / temperature);
  const max = Math.max(...z);
  if (!Number.isFinite(max)) return scores.map(() => 1 / scores.length);
  const w = z.map((v) => Math.exp(v - max));
  const sum = w.reduce((a, b) => a + b, 0);
  return w.map((v) => v / sum);
}

export interface ChoiceAnswer {
  type: "choice";
  choice: string;
  confidence: number;
  probabilities: Record<string, number>;
}
export interface ScoreAnswer {
  type: "score";
  /** Expected level index Σ i·p(i). */
  score: number;
  /** Probability of the most probable level. */
  confidence: number;
  legend: Record<string, string>;
  probabilities: Record<string, number>;
}
export interface NoulAnswer {
  type: "noul" | "yes_no";
  /** p(true). */
  noul: number;
}
export type Answer = ChoiceAnswer | ScoreAnswer | NoulAnswer;

/** One question's answer object from its answers' probabilities (in `answerTexts` order). */
export function answerFor(q: Question, p: number[]): Answer {
  let best = 0;
  for (let i = 1; i < p.length; i++) if (p[i] > p[best]) best = i;
  switch (q.type) {
    case "choice": {
      const labels = Object.keys(q.criteria);
      return {
        type: "choice",
        choice: labels[best],
        confidence: p[best],
        probabilities: Object.fromEntries(labels.map((l, i) => [l, p[i]])),
      };
    }
    case "score":
      return {
        type: "score",
        score: p.reduce((s, pi, i) => s + i * pi, 0),
        confidence: p[best],
        legend: Object.fromEntries(q.criteria.map((d, i) => [String(i), d])),
        probabilities: Object.fromEntries(p.map((pi, i) => [String(i), pi])),
      };
    default:
      return { type: q.type, noul: p[0] };
  }
}

/** The response body (DESIGN §3 Decisions). */
export interface DecisionResponse {
  model: string;
  answers: Record<string, Answer>;
  usage: { input_tokens: number; output_tokens: 0 };
}

/** The answers of every question from the engine's scores (question order = `questions` order). */
export function decisionResponse(
  model: string,
  req: DecisionRequest,
  scores: CandidateScore[][],
  temperature: number,
  inputTokens: number,
): DecisionResponse {
  const answers: Record<string, Answer> = {};
  Object.entries(req.questions).forEach(([name, q], i) => {
    answers[name] = answerFor(q, answerProbabilities(scores[i], temperature));
  });
  return { model, answers, usage: { input_tokens: inputTokens, output_tokens: 0 } };
}
