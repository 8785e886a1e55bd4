/**
 * Log-probability scoring on the embedded engine (decisions, issue 11, item 2; see
 * `llama-cpp.engine.ts`). `scoreContinuations` bounds each question and its answers against the
 * context, admits the request, and runs it alone on a scoring context (`scoringPool`), apart from
 * the generation slots.
 *
 * On that one sequence, the questions' prompts are tokenised; the longest token prefix they all
 * share (the instructions and the input) is evaluated once, then for each question only its own
 * tokens are evaluated on top of it, and for each answer only the answer's tokens on top of that;
 * after each answer (and each question) the sequence is cut back to where it branched
 * (`eraseContextTokenRanges`), so the shared state is reused and nothing is evaluated twice. An
 * answer's log-probability is the sum over its tokens of `log p(token | everything before it)`,
 * read from the raw logits (greedy sampler: no temperature, penalties or bias) as
 * `logit − maxLogit − log Σ exp(logit − maxLogit)`. A question with `endMarker` adds, per answer,
 * `log Σ p(end token | the answer)` over the end tokens (newline, EOS, end of turn), so "1" is
 * not favoured over "10" by construction.
 *
 * Each answer is one `controlledEvaluate` call: answers are alternative branches of the same
 * sequence, and node-llama-cpp offers no way to evaluate several branches in one batch (no KV copy
 * between sequences, no attention masks), so they cannot be batched cheaply (issue 11 review,
 * finding 4); the per-request time limit and the cap on answers bound the round trips instead.
 */
import type { LlamaContext, LlamaContextSequence, Token } from "node-llama-cpp";
import type { Logger } from "pino";
import type { CatalogModel } from "../../../config/catalog.js";
import { AppError, ErrorCode, echo } from "../../../shared/errors.js";
import { clientGone } from "../../client-gone.js";
import { type CandidateScore, type ScoreRequest, type ScoreResult, ScoringStopped } from "../../engine.js";
import { yieldToEventLoop } from "../../input-bounds.js";
import { DEFAULT_SCORING_TIME_LIMIT_MS, ScoringWatch } from "../../scoring-watch.js";
import { SlotPool } from "../../slot-pool.js";
import type { LlamaCppLoader } from "./loading.js";
import type { GenerationRuntime, LlamaCppEngineOptions, ScoringContexts } from "./runtime.js";

/** Scoring contexts per generation runtime (each one sequence; see `scoringPool`). */
const SCORING_CONTEXTS = 2;

/**
 * Scores each question's answers by their token log-probabilities (decisions, issue 11): the prompt
 * prefix the questions share is evaluated once on one sequence and reused for every question and
 * answer (`planScoring`, `scoreOnSequence`). Stops between answers when the caller goes away or the
 * scoring time limit (`scoringTimeLimitMs`) passes, with `ScoringStopped` carrying the tokens
 * evaluated so far (issue 11 review, findings 3–4).
 * @throws AppError InvalidRequest (naming the question) when a prompt and its longest answer do
 *   not fit the context, an answer has no tokens, or two answers are the same tokens;
 *   RateLimited; ScoringStopped (499 / 504); EngineFailure.
 */
export async function scoreContinuations(
  loader: LlamaCppLoader,
  opts: Pick<LlamaCppEngineOptions, "logger" | "scoringTimeLimitMs">,
  req: ScoreRequest,
): Promise<ScoreResult> {
  const rt = await loader.runtime(req.model);
  if (rt.kind !== "generation") throw AppError.invalid(`Model ${req.model.id} does not generate text`);
  const tooLong = (field: string, detail: string) =>
    AppError.invalid(`This model's context is ${rt.contextSize} tokens; ${detail}`, [
      { field, message: "context_length_exceeded" },
    ]);
  const prompts: Token[][] = [];
  const candidates: Token[][][] = [];
  const endTokens = [...new Set([rt.model.tokens.nl, rt.model.tokens.eos, rt.model.tokens.eot])].filter(
    (t): t is Token => t !== null,
  );
  for (const q of req.questions) {
    const chars = q.messages.reduce((n, m) => n + m.content.length + 1, 0);
    if (chars > rt.maxPromptChars) throw tooLong(q.field, `the prompt (${chars} characters) is longer`);
    await yieldToEventLoop();
    prompts.push(rt.formatPrompt(q.messages).tokens);
    const seen = new Map<string, string>();
    candidates.push(
      q.candidates.map((c) => {
        const tokens = rt.model.tokenize(c);
        if (tokens.length === 0) throw AppError.invalid("An answer has no tokens", [{ field: q.field, message: c }]);
        const key = tokens.join(",");
        const twin = seen.get(key);
        if (twin !== undefined) {
          throw AppError.invalid(
            `Answers ${echo(JSON.stringify(twin))} and ${echo(JSON.stringify(c))} are the same tokens`,
            [{ field: q.field, message: "two answers tokenise identically" }],
          );
        }
        seen.set(key, c);
        return tokens;
      }),
    );
    const need = rt.bosCount + prompts.at(-1)!.length + Math.max(...candidates.at(-1)!.map((t) => t.length));
    if (prompts.at(-1)!.length === 0 || need > rt.contextSize) {
      throw tooLong(q.field, `the question and its longest answer take ${need}`);
    }
  }
  const bos = rt.bosCount > 0 ? rt.model.tokens.bos : null;
  const ends = req.questions.map((q) => (q.endMarker && endTokens.length > 0 ? endTokens : null));
  const plan = planScoring(prompts, candidates, bos, ends);
  await req.admit?.(plan.promptTokens);
  const queued = performance.now();
  const pool = (await scoringPool(req.model, rt, opts.logger)).pool;
  const seq = await pool.acquire(req.maxQueueWaitMs, undefined, req.signal, req.priority === "batch");
  const started = performance.now();
  const watch = new ScoringWatch(req.signal, opts.scoringTimeLimitMs ?? DEFAULT_SCORING_TIME_LIMIT_MS);
  const progress = { tokens: 0 };
  try {
    req.onStart?.();
    const scores = await scoreOnSequence(seq, plan, watch, progress);
    return {
      scores,
      promptTokens: plan.promptTokens,
      engineMs: performance.now() - started,
      queueMs: started - queued,
    };
  } catch (err) {
    await seq.clearHistory().catch(() => undefined);
    const stop = watch.reason();
    if (stop) throw new ScoringStopped(stop, Math.min(progress.tokens, plan.promptTokens), performance.now() - started);
    if (err instanceof AppError && err.code !== ErrorCode.EngineFailure) throw err;
    if (req.signal?.aborted) throw clientGone(req.signal);
    opts.logger.error({ err, model: req.model.id }, "llama.cpp scoring failed");
    throw new AppError(ErrorCode.EngineFailure, "The engine failed to score the answers");
  } finally {
    watch.dispose();
    pool.release(seq);
  }
}

/**
 * The scoring contexts of a generation runtime, made on first use: `SCORING_CONTEXTS` contexts
 * of one sequence each, apart from the generation context, because llama.cpp's float results
 * depend on how tokens are batched together, and a context batches its sequences together:
 * scoring alone in its context, from an empty state, makes identical requests give identical
 * probabilities whatever else runs. Decisions do not take generation slots.
 */
function scoringPool(model: CatalogModel, rt: GenerationRuntime, logger: Logger): Promise<ScoringContexts> {
  rt.scoring ??= (async () => {
    const contexts: LlamaContext[] = [];
    for (let i = 0; i < SCORING_CONTEXTS; i++) {
      contexts.push(await rt.model.createContext({ contextSize: rt.contextSize, sequences: 1, threads: rt.threads }));
    }
    logger.info({ model: model.id, contexts: contexts.length }, "scoring contexts ready");
    return { contexts, pool: new SlotPool(contexts.map((c) => c.getSequence())) };
  })();
  rt.scoring.catch(() => (rt.scoring = undefined));
  return rt.scoring;
}

/** What stops scoring part way (a `ScoringWatch`): null to go on. */
export interface ScoringStop {
  reason(): AppError | null;
}

/** What one request evaluates: the shared prefix, then per question its suffix and answers. */
export interface ScoringPlan {
  /** `[BOS?] + the tokens every question's prompt starts with` (never a whole prompt). */
  prefix: Token[];
  /** `endTokens`: the end-of-answer tokens scored after each answer, or null (no end marker). */
  questions: Array<{ suffix: Token[]; candidates: Token[][]; endTokens: Token[] | null }>;
  /** Prefix once + every suffix + every answer's tokens (what the request is charged for). */
  promptTokens: number;
}

/**
 * Splits the questions' prompts into the prefix they share and their own suffixes. Every suffix
 * keeps at least one token: the logits of a prompt's last token give the answers' first tokens.
 * @param prompts each question's prompt tokens, without BOS; each non-empty.
 * @param candidates each question's answers as tokens; each non-empty.
 * @param endTokens per question, the end-of-answer tokens to score after each answer, or null.
 */
export function planScoring(
  prompts: Token[][],
  candidates: Token[][][],
  bos: Token | null,
  endTokens: Array<Token[] | null> = prompts.map(() => null),
): ScoringPlan {
  let shared = Math.min(...prompts.map((p) => p.length)) - 1;
  const first = prompts[0];
  for (const p of prompts) {
    let i = 0;
    while (i < shared && p[i] === first[i]) i++;
    shared = i;
  }
  const prefix = [...(bos === null ? [] : [bos]), ...first.slice(0, shared)];
  let promptTokens = prefix.length;
  const questions = prompts.map((p, q) => {
    const suffix = p.slice(shared);
    const answers = candidates[q];
    promptTokens += suffix.length + answers.reduce((n, c) => n + c.length, 0);
    return { suffix, candidates: answers, endTokens: endTokens[q] };
  });
  return { prefix, questions, promptTokens };
}

/** Raw-logit options for the token that predicts `targets` (greedy: the selected token is the argmax). */
function predicting(targets: readonly Token[]) {
  return {
    generateNext: {
      options: { temperature: 0 },
      totalLogitWeight: true,
      logits: { filter: { tokens: targets, includeSelected: true } },
    },
  } as const;
}

/**
 * `{next: {logits, totalLogitWeight}}` → log p(target) for each target (natural log). The logits
 * must include the largest one (greedy `includeSelected`, or `includeMax`): `totalLogitWeight` is
 * the sum of `exp(logit - max)`. Also used for generation log-probabilities (`logprobs.ts`).
 * @throws AppError EngineFailure when the engine returned no logits.
 */
export function logProbs(
  output: { next: { logits?: Map<Token, number>; totalLogitWeight?: number } } | undefined,
  targets: readonly Token[],
): Map<Token, number> {
  const logits = output?.next.logits;
  const total = output?.next.totalLogitWeight;
  if (!logits || total === undefined || !(total > 0)) {
    throw new AppError(ErrorCode.EngineFailure, "The engine gave no log-probabilities");
  }
  let max = -Infinity;
  for (const v of logits.values()) max = Math.max(max, v);
  const logTotal = Math.log(total);
  const out = new Map<Token, number>();
  for (const t of targets) {
    const logit = logits.get(t);
    out.set(t, logit === undefined ? -Infinity : logit - max - logTotal);
  }
  return out;
}

/**
 * Evaluates `plan` on `seq` and returns each answer's summed log-probability and token count.
 * The sequence's cached tokens are reused as far as they match the prefix; it is left holding the
 * prefix (so a next request on the same input starts from it).
 * @param progress `tokens` grows as evaluation proceeds, in `ScoringPlan.promptTokens` units (the
 *   prefix, each question's suffix, each answer's tokens), so a stopped request is charged for
 *   what was evaluated.
 * @throws the stop's reason (ClientClosed, EngineTimeout) when `stop` says so between steps.
 */
export async function scoreOnSequence(
  seq: LlamaContextSequence,
  plan: ScoringPlan,
  stop: ScoringStop,
  progress: { tokens: number },
): Promise<CandidateScore[][]> {
  const check = () => {
    const reason = stop.reason();
    if (reason) throw reason;
  };
  // Evaluated from scratch, never on another request's cached tokens: llama.cpp's float results
  // depend on how tokens are batched, and identical requests must give identical probabilities.
  await seq.clearHistory();
  if (plan.prefix.length > 0) await seq.evaluateWithoutGeneratingNewTokens(plan.prefix);
  progress.tokens += plan.prefix.length;
  const prefixEnd = seq.nextTokenIndex;
  const scores: CandidateScore[][] = [];
  for (const question of plan.questions) {
    check();
    const firsts = [...new Set(question.candidates.map((c) => c[0]))];
    const last = question.suffix.length - 1;
    const out = await seq.controlledEvaluate(question.suffix.map((t, i) => (i === last ? [t, predicting(firsts)] : t)));
    progress.tokens += question.suffix.length;
    const first = logProbs(out[last], firsts);
    const questionEnd = seq.nextTokenIndex;
    const answers: CandidateScore[] = [];
    const ends = question.endTokens;
    for (const tokens of question.candidates) {
      check();
      let logprob = first.get(tokens[0])!;
      // Each step predicts the answer's next token, the last one (with an end marker) its end.
      const steps = ends ? tokens : tokens.slice(0, -1);
      if (steps.length > 0) {
        const res = await seq.controlledEvaluate(
          steps.map((t, i) => [t, predicting(i + 1 < tokens.length ? [tokens[i + 1]] : ends!)]),
        );
        for (let i = 0; i < steps.length; i++) {
          if (i + 1 < tokens.length) logprob += logProbs(res[i], [tokens[i + 1]]).get(tokens[i + 1])!;
          else logprob += logSumExp([...logProbs(res[i], ends!).values()]);
        }
        await seq.eraseContextTokenRanges([{ start: questionEnd, end: seq.nextTokenIndex }]);
      }
      progress.tokens += tokens.length;
      answers.push({ logprob, tokens: tokens.length });
    }
    await seq.eraseContextTokenRanges([{ start: prefixEnd, end: seq.nextTokenIndex }]);
    scores.push(answers);
  }
  return scores;
}

/** log Σ exp(x) (−∞ for none or all −∞). */
function logSumExp(xs: number[]): number {
  const max = Math.max(...xs);
  if (!Number.isFinite(max)) return -Infinity;
  return max + Math.log(xs.reduce((s, x) => s + Math.exp(x - max), 0));
}
