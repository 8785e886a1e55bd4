/**
 * Log-probability scoring upstream (decisions, issue 11, item 3; see `openai-compatible.engine.ts`
 * and `scoring-wire.ts` for the prompts sent and how answers are read back): bounded before
 * anything is built, sent in chunks one after the other, metered by the upstream's usage capped at
 * the reserved bound, and charged for what was sent when it stops part way.
 */
import { AppError, ErrorCode } from "../../../shared/errors.js";
import {
  type CandidateScore,
  type ScoreQuestion,
  type ScoreRequest,
  type ScoreResult,
  ScoringStopped,
} from "../../engine.js";
import { DEFAULT_SCORING_TIME_LIMIT_MS, ScoringWatch } from "../../scoring-watch.js";
import { MAX_ANSWER_BYTES, type UpstreamClient, readJson } from "./dispatch.js";
import type { OpenAiCompatibleEngineOptions } from "./loading.js";
import {
  type ScoringPrompt,
  UPSTREAM_SCORING_LIMITS,
  chunkTokenBound,
  planUpstreamScoring,
  promptBytesAtLeast,
  promptChunks,
  scoredAnswers,
  scoringBody,
} from "./scoring-wire.js";

/**
 * Scores answers upstream (decisions, issue 11, item 3): every (question, answer) pair as one
 * prompt with `echo: true, logprobs: 1` (see `scoring-wire.ts`), sent as `POST <base>/completions`
 * requests of at most `UPSTREAM_SCORING_LIMITS.chunkPrompts` prompts each, one after the other;
 * an answer's log-probability is the sum of its echoed tokens'.
 * Bounded before anything is built (issue 11 review, finding 1): first a lower bound from string
 * lengths alone (`promptBytesAtLeast`, review 11b M3), then the prompts' bytes are summed by
 * arithmetic, over `UPSTREAM_SCORING_LIMITS.promptBytes` → 400; then `admit` reserves their bound
 * (UTF-8 bytes + 2 per prompt), then each chunk's prompts are built just before it is sent.
 * Metered (finding 2; DESIGN departure, see `scoring-wire.ts`): the sum of the upstream's
 * `usage.prompt_tokens` over the chunks (without usage: every prompt's echoed tokens), capped at
 * the reserved bound. Stops between chunks and aborts the one in flight when the caller goes away
 * or the scoring time limit passes (`ScoringStopped`, charged the chunks answered so far plus the
 * bound of the one in flight, which the upstream had: review 11b, finding M1). Any other error
 * after a chunk was answered is a `ScoringStopped` too, charged the chunks answered (finding M2).
 * @throws AppError 400 naming `questions` over the prompt-bytes limit; 400 naming `model` when the
 *   upstream cannot give prompt log-probabilities (it refuses `echo` / `logprobs`, has no
 *   completions route, or answers without them); 400 naming the question of the longest prompt
 *   when the upstream refuses a chunk otherwise (`context_length_exceeded` when it says the prompt
 *   is too long); ScoringStopped (499 / 504, or the error, after work was done); otherwise as `generate`.
 */
export async function scoreContinuations(
  client: UpstreamClient,
  opts: Pick<OpenAiCompatibleEngineOptions, "logger" | "scoringTimeLimitMs">,
  req: ScoreRequest,
): Promise<ScoreResult> {
  const route = client.routes.route(req.model);
  if (req.model.modality === "text_embedding") throw AppError.invalid(`Model ${req.model.id} does not generate text`);
  const limit = UPSTREAM_SCORING_LIMITS.promptBytes;
  // By string lengths first (review 11b, M3): 64 questions about a 1 MB state are refused before
  // any prompt text is measured, which alone held the event loop for about a second.
  const atLeast = promptBytesAtLeast(req.questions);
  if (atLeast > limit) {
    const prompts = req.questions.reduce((n, q) => n + q.candidates.length, 0);
    throw AppError.invalid(
      `Model '${req.model.id}' is served upstream, where every answer is sent as a whole prompt (the input, the question, then the answer): this request would send ${prompts} prompts of at least ${atLeast} bytes in all, over the limit of ${limit} bytes. Ask fewer answers at once or send a shorter state.`,
      [{ field: "questions", message: `${prompts} prompts of at least ${atLeast} bytes in all; at most ${limit}` }],
    );
  }
  const plan = planUpstreamScoring(req.questions);
  if (plan.promptBytes > limit) {
    throw AppError.invalid(
      `Model '${req.model.id}' is served upstream, where every answer is sent as a whole prompt (the input, the question, then the answer): this request would send ${plan.prompts} prompts of ${plan.promptBytes} bytes in all, over the limit of ${limit} bytes. Ask fewer answers at once or send a shorter state.`,
      [
        {
          field: "questions",
          message: `${plan.prompts} prompts of ${plan.promptBytes} bytes in all; at most ${limit}`,
        },
      ],
    );
  }
  await req.admit?.(plan.tokenBound);
  const cannot = (why: string) =>
    AppError.invalid(`Model '${req.model.id}' cannot give log-probabilities: ${why}`, [
      { field: "model", message: "log-probabilities unavailable" },
    ]);
  const scores: CandidateScore[][] = req.questions.map((q) => new Array<CandidateScore>(q.candidates.length));
  // The time limit counts from the first chunk's start, not its wait for a slot (as embedded).
  let watch: ScoringWatch | undefined;
  const started = performance.now();
  let queueMs = 0;
  /** Prompt tokens of the chunks answered (the upstream's usage). */
  let processed = 0;
  /** The token bound of the chunk sent and not yet answered (0 when none is upstream). */
  let inFlight = 0;
  try {
    for (const chunk of promptChunks(plan)) {
      const stop = watch?.reason();
      if (stop) throw stop;
      const body = JSON.stringify(scoringBody(route.upstreamModel, chunk));
      const signal = watch?.abortSignal ?? req.signal;
      const scoring = { signal, maxQueueWaitMs: req.maxQueueWaitMs, priority: req.priority };
      processed += await client.dispatch(route, scoring, async (endpoint, waitedMs) => {
        queueMs += waitedMs;
        if (!watch) {
          watch = new ScoringWatch(req.signal, opts.scoringTimeLimitMs ?? DEFAULT_SCORING_TIME_LIMIT_MS);
          req.onStart?.();
        }
        inFlight = chunkTokenBound(chunk);
        const res = await endpoint.pool.request({
          method: "POST",
          path: endpoint.path("completions"),
          headers: endpoint.headers,
          body,
          signal: watch.abortSignal,
        });
        if (res.statusCode !== 200) {
          // A refusal: the upstream did no work on this chunk.
          inFlight = 0;
          const err = await client.refusal(endpoint, res);
          if ([404, 405, 501].includes(res.statusCode)) {
            throw cannot(`its upstream has no completions API (HTTP ${res.statusCode})`);
          }
          if (err.code === ErrorCode.InvalidRequest) {
            if (LOGPROB_REFUSAL.test(err.detail)) {
              throw cannot(`its upstream refused the request (${err.detail})`);
            }
            throw refusedPrompts(req.model.id, req.questions, chunk, err.detail);
          }
          throw err;
        }
        const answer = scoredAnswers(await readJson(res.body, MAX_ANSWER_BYTES), chunk);
        inFlight = 0;
        if (!answer.ok) {
          if (answer.reason === "no_logprobs") throw cannot("its upstream answered without prompt log-probabilities");
          throw client.broken(endpoint, "a completions answer that does not line up with the prompts");
        }
        chunk.forEach((p, i) => {
          scores[p.question][p.answer] = { logprob: answer.logprobs[i], tokens: answer.answerTokens[i] };
        });
        return (
          answer.usagePromptTokens ??
          client.noUsage(
            endpoint,
            answer.promptTokens.reduce((n, t) => n + t, 0),
          )
        );
      });
    }
  } catch (err) {
    // Review 11b, findings M1 and M2: what the upstream was sent is charged however the request
    // ends. The caller leaving or the time limit: the chunks answered plus the bound of the one
    // in flight (the upstream has it; as generation charges the prompt of a client that left).
    // Any other error after a chunk was answered: the chunks answered, recorded failed.
    const stop = watch?.reason();
    if (stop) {
      throw new ScoringStopped(stop, Math.min(processed + inFlight, plan.tokenBound), performance.now() - started);
    }
    if (processed > 0 && err instanceof AppError) {
      throw new ScoringStopped(err, Math.min(processed, plan.tokenBound), performance.now() - started);
    }
    throw err;
  } finally {
    watch?.dispose();
  }
  if (processed > plan.tokenBound) {
    opts.logger.warn(
      { model: req.model.id, reported: processed, bound: plan.tokenBound },
      "upstream reported more prompt tokens than the prompts' bytes: charged the bound",
    );
  }
  const elapsed = performance.now() - started;
  return { scores, promptTokens: Math.min(processed, plan.tokenBound), engineMs: elapsed - queueMs, queueMs };
}

/** An upstream refusal about the scoring parameters themselves (`echo`, `logprobs`, `prompt_logprobs`). */
const LOGPROB_REFUSAL = /echo|logprob/i;

/**
 * The 400 for an upstream refusing a chunk for another reason than log-probabilities (review 11b,
 * finding M2): most often a prompt over its context. It names the question of the chunk's longest
 * prompt (the one a context limit refuses), with the upstream's words.
 */
function refusedPrompts(modelId: string, questions: ScoreQuestion[], chunk: ScoringPrompt[], detail: string): AppError {
  let longest = chunk[0];
  for (const p of chunk) if (p.text.length > longest.text.length) longest = p;
  const field = questions[longest.question].field;
  const tooLong = /context|too long|max_model_len|maximum/i.test(detail);
  return AppError.invalid(
    `The upstream of model '${modelId}' refused the prompts of ${field}${tooLong ? " (too long for its context)" : ""}: ${detail}`,
    [{ field, message: tooLong ? "context_length_exceeded" : "refused by the upstream" }],
  );
}
