/**
 * One engine per machine (issue 31, item 2), the protocol: a `RemoteEngine` against a real
 * engine server (`engine-server.ts`, in this process, over loopback HTTP) hosting the embedded
 * engine with the tiny model. Every answer is compared with the same engine called directly:
 * greedy text, streamed deltas, tool calls, grammars, log-probabilities, embeddings, decision
 * scores and token counts are the embedded engine's own. Admission refused by the caller takes no
 * slot, the caller's abort cancels the generation in the engine (it ends `cancelled`), a caller
 * whose connection drops cancels it too, and an engine server that is down or goes away answers
 * EngineUnavailable instead of hanging.
 */
import { mkdtempSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import pino from "pino";
import { request } from "undici";
import { loadCatalog } from "../src/config/catalog.js";
import { packageRoot } from "../src/config/config.js";
import {
  type GenerateRequest,
  type GenerateResult,
  type GenerationStart,
  type InferenceEngine,
  type ScoreRequest,
  ScoringStopped,
} from "../src/inference/engine.js";
import { LlamaCppEngine } from "../src/inference/engines/llama-cpp/llama-cpp.engine.js";
import { type EngineServer, startEngineServer } from "../src/inference/engines/remote/engine-server.js";
import { RemoteEngine } from "../src/inference/engines/remote/remote.engine.js";
import { TOKEN_HEADER } from "../src/inference/engines/remote/wire.js";
import { AppError, ErrorCode } from "../src/shared/errors.js";
import { holdNextGeneration, holdNextScorings, releaseAllHolds } from "./support/engine-faults.js";
import { CHAT_MODEL, EMBED_MODEL, MODELS_DIR, eventually } from "./support/harness.js";

const TOKEN = "remote-engine-test-token-remote-engine-test";
const catalog = loadCatalog(path.join(packageRoot, "src/config/catalog.json"));
const chat = catalog.models.find((m) => m.id === CHAT_MODEL)!;
const embedModel = catalog.models.find((m) => m.id === EMBED_MODEL)!;

let local: LlamaCppEngine;
let server: EngineServer;
let remote: RemoteEngine;
/** The signal of every generation the engine server ran, in order (what the engine saw). */
const engineSignals: AbortSignal[] = [];
/** The same for decisions scoring. */
const scoringSignals: AbortSignal[] = [];

beforeAll(async () => {
  local = new LlamaCppEngine({
    threads: 1,
    sequences: 4,
    embeddingContexts: 2,
    modelsDir: MODELS_DIR,
    dataDir: mkdtempSync(path.join(os.tmpdir(), "sy-remote-engine-")),
    gpu: "off",
    logger: pino({ level: "silent" }),
  });
  await local.load(chat);
  await local.load(embedModel);
  // The hosted engine is the real one; the test only notes the signal each generation got.
  const observed: InferenceEngine = new Proxy(local, {
    get(target, prop) {
      if (prop === "generate") {
        return (req: GenerateRequest) => {
          if (req.signal) engineSignals.push(req.signal);
          return target.generate(req);
        };
      }
      if (prop === "scoreContinuations") {
        return (req: ScoreRequest) => {
          if (req.signal) scoringSignals.push(req.signal);
          return target.scoreContinuations(req);
        };
      }
      const value: unknown = Reflect.get(target, prop, target);
      return typeof value === "function" ? (value as (...a: unknown[]) => unknown).bind(target) : value;
    },
  });
  server = await startEngineServer({ engine: observed, token: TOKEN, logger: pino({ level: "silent" }) });
  remote = new RemoteEngine({ url: server.url, token: TOKEN });
}, 60_000);

afterEach(() => releaseAllHolds());

afterAll(async () => {
  await remote?.close();
  await server?.close(0);
  await local?.close();
});

const ask = (content: string, extra: Partial<GenerateRequest> = {}): GenerateRequest => ({
  model: chat,
  messages: [{ role: "user", content }],
  maxTokens: 24,
  temperature: 0,
  maxQueueWaitMs: 10_000,
  ...extra,
});

/** A result without what depends on timing and on the KV cache a sequence kept. */
function comparable(r: GenerateResult) {
  const { engineMs: _e, queueMs: _q, usage, logprobs: _l, ...rest } = r;
  return { ...rest, promptTokens: usage.promptTokens, completionTokens: usage.completionTokens };
}

/** Streams `req` on `engine`: its deltas, start and result. */
async function streamed(engine: InferenceEngine, req: GenerateRequest) {
  const deltas: string[] = [];
  const starts: GenerationStart[] = [];
  const result = await engine.generate({
    ...req,
    onStart: (s) => starts.push(s),
    onText: (d) => {
      expect(starts).toHaveLength(1);
      deltas.push(d);
    },
  });
  return { deltas, starts, result };
}

/** The chat model's slot pool in the engine (`{size, available, waiting}`). */
async function slots() {
  return (await local.slots(chat))!;
}

describe("answers through the hop are the embedded engine's", () => {
  test("when a greedy generation runs through the engine server, then text, finish and token counts are the local engine's", async () => {
    const there = await remote.generate(ask("Once upon a time"));
    const here = await local.generate(ask("Once upon a time"));
    expect(there.text.length).toBeGreaterThan(0);
    expect(comparable(there)).toEqual(comparable(here));
    expect(remote.isLoaded(chat)).toBe(false); // loaded by the engine, not yet through this client
    await remote.load(chat);
    expect(remote.isLoaded(chat)).toBe(true);
    expect(remote.chosenTuning()).toMatchObject({ threads: 1, sequences: 4, source: "config" });
  });

  test("when a generation is streamed, then onStart comes first and the deltas arrive one by one, as the local engine gives them", async () => {
    const there = await streamed(remote, ask("The little dog", { maxTokens: 32 }));
    const here = await streamed(local, ask("The little dog", { maxTokens: 32 }));
    expect(there.deltas.length).toBeGreaterThan(1);
    expect(there.deltas).toEqual(here.deltas);
    expect(there.deltas.join("")).toBe(there.result.text);
    expect(there.starts[0].promptTokens).toBe(here.starts[0].promptTokens);
  });

  test("when the same prompt comes twice, then the second reuses the prefix the engine kept (cached prompt tokens)", async () => {
    const prompt = "Lily had a red ball and a big blue kite in the garden";
    await remote.generate(ask(prompt, { maxTokens: 4 }));
    const second = await remote.generate(ask(prompt, { maxTokens: 4 }));
    expect(second.usage.cachedPromptTokens).toBeGreaterThan(0);
  });

  test("when a call is forced and a schema constrains the answer, then the tool call and the JSON are the local engine's", async () => {
    const tools = {
      specs: [
        {
          name: "get_weather",
          parameters: { type: "object", properties: { city: { type: "string", maxLength: 8 } }, required: ["city"] },
          strict: false,
        },
      ],
      mode: { kind: "forced" as const, names: ["get_weather"] },
    };
    const thereCall = await remote.generate(ask("Weather?", { tools, maxTokens: 80 }));
    const hereCall = await local.generate(ask("Weather?", { tools, maxTokens: 80 }));
    expect(comparable(thereCall)).toEqual(comparable(hereCall));
    expect(thereCall.toolCalls?.[0].name).toBe("get_weather");

    const responseFormat = {
      type: "json_schema" as const,
      schema: { type: "object", properties: { name: { type: "string", maxLength: 8 } }, required: ["name"] },
      strict: true,
      field: "response_format",
    };
    const thereJson = await remote.generate(ask("A name", { responseFormat, maxTokens: 80 }));
    const hereJson = await local.generate(ask("A name", { responseFormat, maxTokens: 80 }));
    expect(comparable(thereJson)).toEqual(comparable(hereJson));
    expect(JSON.parse(thereJson.text)).toHaveProperty("name");
  });

  test("when log-probabilities are asked for, then each token's entry is the local engine's", async () => {
    const there = await remote.generate(ask("Once upon a time", { logprobs: { top: 3 } }));
    const here = await local.generate(ask("Once upon a time", { logprobs: { top: 3 } }));
    expect(there.logprobs!.length).toBe(there.usage.completionTokens);
    expect(there.logprobs!.map((e) => [e.token, e.bytes, e.top.map((t) => t.token)])).toEqual(
      here.logprobs!.map((e) => [e.token, e.bytes, e.top.map((t) => t.token)]),
    );
    // llama.cpp's floats vary in the last digits with how a prompt was batched (a reused prefix).
    there.logprobs!.forEach((e, i) => expect(e.logprob).toBeCloseTo(here.logprobs![i].logprob, 4));
  });

  test("when texts are embedded, then the vectors and the token count are the local engine's", async () => {
    const req = { model: embedModel, inputs: ["a cat", "the dog ran home"], maxQueueWaitMs: 10_000 };
    const there = await remote.embed(req);
    const here = await local.embed(req);
    expect(there.vectors).toHaveLength(2);
    expect(there.promptTokens).toBe(here.promptTokens);
    there.vectors.forEach((v, i) => v.forEach((x, j) => expect(x).toBeCloseTo(here.vectors[i][j], 6)));
  });

  test("when an answer is one long line (many vectors), then it arrives whole over many reads", async () => {
    const inputs = Array.from({ length: 300 }, (_, i) => `story number ${i} about a cat`);
    const there = await remote.embed({ model: embedModel, inputs, maxQueueWaitMs: 10_000 });
    expect(JSON.stringify(there.vectors).length).toBeGreaterThan(256 * 1024);
    expect(there.vectors).toHaveLength(300);
    const here = await local.embed({ model: embedModel, inputs: [inputs[299]], maxQueueWaitMs: 10_000 });
    here.vectors[0].forEach((x, j) => expect(there.vectors[299][j]).toBeCloseTo(x, 6));
  });

  test("when decisions are scored, then the scores are the local engine's and onStart is called", async () => {
    const questions = [
      { messages: [{ role: "user" as const, content: "Is the sky blue?" }], candidates: ["yes", "no"], field: "q" },
    ];
    let started = 0;
    const there = await remote.scoreContinuations({
      model: chat,
      questions,
      maxQueueWaitMs: 10_000,
      onStart: () => started++,
    });
    const here = await local.scoreContinuations({ model: chat, questions, maxQueueWaitMs: 10_000 });
    expect(started).toBe(1);
    expect(there.promptTokens).toBe(here.promptTokens);
    there.scores[0].forEach((s, i) => {
      expect(s.tokens).toBe(here.scores[0][i].tokens);
      expect(s.logprob).toBeCloseTo(here.scores[0][i].logprob, 4);
    });
  });

  test("when a dedicated runtime (a deployment) is loaded and unloaded through the hop, then the engine builds it and then refuses it", async () => {
    const deployed = { ...chat, runtime: { key: "deployment-remote-test", slots: 1 } };
    await remote.load(deployed);
    expect(remote.isLoaded(deployed)).toBe(true);
    expect(await local.slots(deployed)).toMatchObject({ size: 1, available: 1 });
    expect((await remote.generate({ ...ask("Once"), model: deployed })).finishReason).toBe("length");
    await remote.unload(deployed);
    expect(remote.isLoaded(deployed)).toBe(false);
    expect(local.isLoaded(deployed)).toBe(false);
    await expect(remote.generate({ ...ask("Once"), model: deployed })).rejects.toMatchObject({
      code: ErrorCode.EngineUnavailable,
      detail: expect.stringContaining("no longer deployed"),
    });
    // The shared runtime of the same model is untouched.
    expect((await remote.generate(ask("Once"))).finishReason).toBe("length");
  });

  test("when tokens are counted, then the count is the engine's tokenizer's", async () => {
    expect(await remote.countTokens(chat, "Once upon a time there was")).toBe(
      await local.countTokens(chat, "Once upon a time there was"),
    );
  });

  test("when the engine refuses a request, then the caller gets the same error class and fields", async () => {
    const tooLong = remote.generate(ask("x", { maxTokens: 100_000 }));
    await expect(tooLong).rejects.toBeInstanceOf(AppError);
    await expect(tooLong).rejects.toMatchObject({
      code: ErrorCode.InvalidRequest,
      extra: [{ field: "messages", message: "context_length_exceeded" }],
    });
  });
});

describe("admission, cancel and failures across the hop", () => {
  test("when the caller's admit refuses (402), then that very error is thrown and no slot was taken", async () => {
    const refusal = new AppError(ErrorCode.InsufficientCredit, "Not enough credit");
    let asked: [number, number] | undefined;
    let freeWhileAsked: number | undefined;
    const attempt = remote.generate(
      ask("Once upon a time", {
        admit: async (promptTokens, maxCompletionTokens) => {
          asked = [promptTokens, maxCompletionTokens];
          freeWhileAsked = (await slots()).available;
          throw refusal;
        },
      }),
    );
    await expect(attempt).rejects.toBe(refusal);
    expect(asked![0]).toBeGreaterThan(0);
    expect(asked![1]).toBe(24);
    const pool = await slots();
    expect(freeWhileAsked).toBe(pool.size);
    expect(pool).toMatchObject({ available: pool.size, waiting: 0 });
  });

  test("when the caller's admit accepts, then the generation runs and onStart follows the admission", async () => {
    const order: string[] = [];
    const result = await remote.generate(
      ask("Once upon a time", {
        admit: async () => void order.push("admit"),
        onStart: () => order.push("start"),
      }),
    );
    expect(order).toEqual(["admit", "start"]);
    expect(result.finishReason).toBe("length");
  });

  test("when the caller's signal aborts mid-generation, then the engine cancels it and the answer comes back cancelled with its partial text", async () => {
    const controller = new AbortController();
    const seen = engineSignals.length;
    const gone = new AppError(ErrorCode.ClientClosed, "The client closed the connection");
    const deltas: string[] = [];
    const full = await local.generate(ask("Once upon a time", { maxTokens: 400, temperature: 1, seed: 7 }));
    const result = await remote.generate(
      ask("Once upon a time", {
        maxTokens: 400,
        temperature: 1,
        seed: 7,
        signal: controller.signal,
        onText: (d) => {
          deltas.push(d);
          controller.abort(gone);
        },
      }),
    );
    expect(engineSignals[seen].reason).toMatchObject({ code: ErrorCode.ClientClosed, detail: gone.detail });
    expect(result.finishReason).toBe("cancelled");
    expect(result.text).toBe(deltas.join(""));
    expect(result.usage.completionTokens).toBeLessThan(full.usage.completionTokens);
    expect(await eventually(async () => (await slots()).available === (await slots()).size)).toBe(true);
  });

  test("when the caller's signal aborts before the generation starts, then it ends with the caller's ClientClosed and frees its slot", async () => {
    const hold = await holdNextGeneration();
    const controller = new AbortController();
    const seen = engineSignals.length;
    const gone = new AppError(ErrorCode.ClientClosed, "The client closed the connection");
    const answer = remote.generate(ask("Once upon a time", { maxTokens: 200, signal: controller.signal }));
    await hold.started;
    controller.abort(gone);
    // The engine's own signal aborts with the caller's reason, before the held generation goes on.
    expect(await eventually(async () => engineSignals[seen]?.aborted === true, 10_000)).toBe(true);
    expect(engineSignals[seen].reason).toMatchObject({ code: ErrorCode.ClientClosed, detail: gone.detail });
    hold.release();
    await expect(answer).rejects.toBe(gone);
    expect(await eventually(async () => (await slots()).available === (await slots()).size)).toBe(true);
  });

  test("when a decisions request is aborted while scoring, then ScoringStopped crosses with its counts", async () => {
    const hold = await holdNextScorings(1);
    const seen = scoringSignals.length;
    const controller = new AbortController();
    const gone = new AppError(ErrorCode.ClientClosed, "The client closed the connection");
    const answer = remote.scoreContinuations({
      model: chat,
      questions: [{ messages: [{ role: "user", content: "Pick" }], candidates: ["yes", "no"], field: "q" }],
      maxQueueWaitMs: 10_000,
      signal: controller.signal,
    });
    await hold.started;
    controller.abort(gone);
    expect(await eventually(async () => scoringSignals[seen]?.aborted === true, 10_000)).toBe(true);
    hold.release();
    const err = await answer.catch((e: unknown) => e);
    expect(err).toBeInstanceOf(ScoringStopped);
    expect(err).toMatchObject({ code: ErrorCode.ClientClosed });
    expect(typeof (err as ScoringStopped).promptTokens).toBe("number");
  });

  test("when the calling process's connection drops mid-call, then the engine cancels the generation and frees its slot", async () => {
    const hold = await holdNextGeneration();
    const seen = engineSignals.length;
    const controller = new AbortController();
    const res = await request(`${server.url}/engine/generate`, {
      method: "POST",
      headers: { "content-type": "application/json", [TOKEN_HEADER]: TOKEN },
      body: JSON.stringify({
        id: "dropped-call",
        request: { ...ask("Once upon a time", { maxTokens: 200 }), model: { ...chat, prices: undefined } },
      }),
      signal: controller.signal,
    });
    expect(res.statusCode).toBe(200);
    await hold.started;
    controller.abort();
    expect(await eventually(async () => engineSignals[seen]?.aborted === true, 10_000)).toBe(true);
    expect(engineSignals[seen].reason).toMatchObject({ code: ErrorCode.ClientClosed });
    hold.release();
    expect(await eventually(async () => server.inFlight() === 0, 10_000)).toBe(true);
    expect(await eventually(async () => (await slots()).available === (await slots()).size)).toBe(true);
  });

  test("when the token is wrong, then the call is refused with EngineUnavailable naming the setting", async () => {
    const stranger = new RemoteEngine({ url: server.url, token: "not-the-token" });
    try {
      await expect(stranger.countTokens(chat, "x")).rejects.toMatchObject({
        code: ErrorCode.EngineUnavailable,
        detail: expect.stringContaining("SWITCHYARD_ENGINE_TOKEN"),
      });
    } finally {
      await stranger.close();
    }
  });

  test("when no engine server listens, then a call fails with EngineUnavailable (503, retry after 1 s)", async () => {
    const down = await startEngineServer({ engine: local, token: TOKEN, logger: pino({ level: "silent" }) });
    await down.close(0);
    const orphan = new RemoteEngine({ url: down.url, token: TOKEN });
    try {
      const err = (await orphan.generate(ask("Once")).catch((e: unknown) => e)) as AppError;
      expect(err).toBeInstanceOf(AppError);
      expect([err.code, err.status, err.retryAfterS]).toEqual([ErrorCode.EngineUnavailable, 503, 1]);
    } finally {
      await orphan.close();
    }
  });

  test("when the engine server goes away during a call, then the call fails with EngineUnavailable", async () => {
    const short = await startEngineServer({ engine: local, token: TOKEN, logger: pino({ level: "silent" }) });
    const client = new RemoteEngine({ url: short.url, token: TOKEN });
    const hold = await holdNextGeneration();
    try {
      const answer = client.generate(ask("Once upon a time", { maxTokens: 50 })).catch((e: unknown) => e);
      await hold.started;
      await short.close(0);
      expect(await answer).toMatchObject({ code: ErrorCode.EngineUnavailable });
    } finally {
      hold.release();
      await client.close();
    }
  });
});
