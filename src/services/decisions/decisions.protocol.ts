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
 *
 * Beyond DESIGN §3 (issue 11 review, findings 4 and 6): at most `MAX_TOTAL_ANSWERS` answers per
 * request; question names match `QUESTION_NAME`; `__proto__` is refused as a name or label, as are
 * two labels with the same UTF-8, and labels holding NUL characters or lone surrogates (review 11b,
 * finding H1); a question where one answer is a prefix of another is scored
 * with an end marker after each answer (`hasPrefixAnswers`).
 */
import { z } from "zod";
import type { ChatMessage } from "../../inference/engine.js";
import type { CandidateScore, ScoreQuestion } from "../../inference/engine.js";
import { maxQueueWaitS, requestMetadata } from "../inference/inference-calls.js";

/** Most questions in one request (spec: Limits, "questions per call: up to 64"). */
export const MAX_QUESTIONS = 64;
/** Labels of a choice / levels of a score question. */
export const MIN_ANSWERS = 2;
export const MAX_ANSWERS = 256;
/**
 * Most answers in one request, all questions together (labels + levels + 2 per yes/no question).
 * DESIGN departure (issue 11 review, finding 4): DESIGN §3 allows 64 questions of 256 answers
 * (16,384 answers), each a separate evaluation on the embedded engine and a whole prompt upstream;
 * 1,024 keeps a request's work bounded (e.g. 64 questions of 16 labels, or 4 of 256).
 */
export const MAX_TOTAL_ANSWERS = 1024;
/** Largest request body, bytes (DESIGN §3 Decisions: over 1 MiB → 413). */
export const DECISION_BODY_LIMIT_BYTES = 1024 * 1024;
/** Longest label, characters. */
export const MAX_LABEL_CHARS = 256;
/**
 * A question name: 1–64 of `A–Z a–z 0–9 _ . -` (it is written into the prompt when the question
 * has no instructions, and names the question in errors); `__proto__` is refused (a JSON object
 * key that JavaScript objects cannot hold as data).
 */
export const QUESTION_NAME = /^[A-Za-z0-9_.-]{1,64}$/;
const RESERVED_KEYS = new Set(["__proto__"]);

/** Issues for the keys of a record `z.record` would mishandle (`__proto__` is dropped silently). */
function reservedKeys(value: unknown, ctx: z.RefinementCtx, what: string): void {
  if (typeof value !== "object" || value === null || Array.isArray(value)) return;
  for (const key of Object.keys(value)) {
    if (RESERVED_KEYS.has(key)) ctx.addIssue({ code: "custom", path: [key], message: `'${key}' cannot be ${what}` });
  }
}

/** A NUL character or a lone surrogate (with `u`, a surrogate pair is one code point, not `\p{Cs}`). */
// eslint-disable-next-line no-control-regex -- NUL is what it looks for
const UNSTORABLE = /[\u0000\p{Cs}]/u;

const text = z.string();
const instructions = z.string().nullish();

const choiceQuestion = z.object({
  type: z.literal("choice"),
  instructions,
  criteria: z
    .unknown()
    .superRefine((c, ctx) => reservedKeys(c, ctx, "a label"))
    .pipe(
      // Labels are checked in the refinement, not as the record's key schema: a key that fails its
      // schema gives only zod's "Invalid key in record", not the rule it broke.
      z.record(z.string(), text).superRefine((c, ctx) => {
        const labels = Object.keys(c);
        const n = labels.length;
        if (n < MIN_ANSWERS || n > MAX_ANSWERS) {
          ctx.addIssue({ code: "custom", message: `must have ${MIN_ANSWERS}–${MAX_ANSWERS} labels (${n} given)` });
        }
        // Labels that are the same text once encoded (lone surrogates become U+FFFD) are the same answer.
        const seen = new Map<string, string>();
        for (const l of labels) {
          if (l.length > MAX_LABEL_CHARS) {
            ctx.addIssue({ code: "custom", path: [l], message: `a label is at most ${MAX_LABEL_CHARS} characters` });
          }
          if (l.trim().length === 0) ctx.addIssue({ code: "custom", path: [l], message: "a label must not be blank" });
          // Review 11b, finding H1: a label is what the client looks up in `probabilities`, so it must
          // survive every store unchanged (jsonb and PostgreSQL text turn these into U+FFFD or refuse them).
          if (UNSTORABLE.test(l)) {
            ctx.addIssue({
              code: "custom",
              message: `label ${JSON.stringify(l)} must not contain NUL characters or lone surrogates`,
            });
          }
          const bytes = Buffer.from(l, "utf8").toString("hex");
          const twin = seen.get(bytes);
          if (twin !== undefined) {
            ctx.addIssue({
              code: "custom",
              message: `labels ${JSON.stringify(twin)} and ${JSON.stringify(l)} are the same text`,
            });
          }
          seen.set(bytes, l);
        }
      }),
    )
    // What the checks above say, for the OpenAPI document (issue 28, item 5).
    .meta({
      minProperties: MIN_ANSWERS,
      maxProperties: MAX_ANSWERS,
      propertyNames: { minLength: 1, maxLength: MAX_LABEL_CHARS, pattern: "\\S", not: { const: "__proto__" } },
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

/** Answers a question is scored over (see `answerTexts`). */
function answerCount(q: Question): number {
  return q.type === "choice" ? Object.keys(q.criteria).length : q.type === "score" ? q.criteria.length : 2;
}

export const decisionRequest = z.object({
  model: z.string().min(1),
  state: z.unknown().refine((v) => v !== undefined, "is required (any JSON, null included)"),
  questions: z
    .unknown()
    .superRefine((q, ctx) => reservedKeys(q, ctx, "a question name"))
    .pipe(
      z.record(z.string(), question).superRefine((q, ctx) => {
        const names = Object.keys(q);
        const n = names.length;
        if (n < 1 || n > MAX_QUESTIONS) {
          ctx.addIssue({ code: "custom", message: `must have 1–${MAX_QUESTIONS} questions (${n} given)` });
        }
        for (const name of names) {
          if (!QUESTION_NAME.test(name)) {
            ctx.addIssue({
              code: "custom",
              path: [name],
              message: "a question name is 1–64 characters of A–Z, a–z, 0–9, '_', '.' and '-'",
            });
          }
        }
        const total = Object.values(q).reduce((s, x) => s + answerCount(x), 0);
        if (total > MAX_TOTAL_ANSWERS) {
          ctx.addIssue({
            code: "custom",
            message: `at most ${MAX_TOTAL_ANSWERS} answers in all (labels + levels + 2 per yes/no question); ${total} given`,
          });
        }
      }),
    )
    // What the checks above say, for the OpenAPI document (issue 28, item 5).
    .meta({
      minProperties: 1,
      maxProperties: MAX_QUESTIONS,
      propertyNames: { pattern: QUESTION_NAME.source, not: { const: "__proto__" } },
      description: `Questions by name; at most ${MAX_TOTAL_ANSWERS} answers in all (labels + levels + 2 per yes/no question).`,
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

/**
 * Whether one answer is a prefix of another ("1" and "10"): then every answer of the question is
 * scored followed by an end marker (`ScoreQuestion.endMarker`), else the shorter one would win by
 * construction (its probability is never below its extensions'). Sorted, a prefix sorts just
 * before some answer it begins. O(n log n).
 */
export function hasPrefixAnswers(answers: string[]): boolean {
  const sorted = [...answers].sort();
  return sorted.some((a, i) => i + 1 < sorted.length && sorted[i + 1].startsWith(a));
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
 * One question as the engine scores it (serving and `npm run calibrate` alike): its prompt, its
 * answers, the field a 400 names, and an end marker when one answer is a prefix of another.
 * @param state the input as the prompt shows it (`stateText`).
 */
export function scoredQuestion(state: string, name: string, q: Question): ScoreQuestion {
  const candidates = answerTexts(q);
  return {
    messages: questionMessages(state, name, q),
    candidates,
    field: `questions.${name}`,
    endMarker: hasPrefixAnswers(candidates),
  };
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
