/**
 * `POST /v1/decisions` (issue 11; DESIGN §3 Decisions) on the real tinystories model over real
 * HTTP: validation (400 naming the question, 413, 401, 402), probabilities from the model's own
 * token log-probabilities (normalised, deterministic, preferring what the model would write),
 * 64 questions in one call, metering / activity / completion event, GraphQL and batch items on
 * the same service.
 */
import {
  CHAT_MODEL,
  EMBED_MODEL,
  type TestServer,
  createTestCaller,
  eventually,
  expectEnvelope,
  expectInvalid,
  http,
  startTestServer,
} from "./support/harness.js";
import { questionMessages } from "../src/services/decisions/decisions.protocol.js";
import { echo } from "../src/shared/errors.js";
import { SHARED_GGUF, createCustomModel, customModelSettles, requestDeployment } from "./support/models.js";

let server: TestServer;
let caller: Awaited<ReturnType<typeof createTestCaller>>;

beforeAll(async () => {
  server = await startTestServer({ reconcileIntervalMs: 250 });
  caller = await createTestCaller(server.url);
});
afterAll(async () => {
  await server.close();
});

function post(body: unknown, key = caller.key) {
  return http(server.url, "POST", "/v1/decisions", { token: key, body });
}

const STATE = {
  story: "Once upon a time, there was a little girl named Lily. She liked to play in the park with her dog.",
};

const MIXED = {
  model: CHAT_MODEL,
  state: STATE,
  questions: {
    mood: {
      type: "choice",
      instructions: "How does the story feel?",
      criteria: { happy: "a happy story", sad: "a sad story", scary: "a scary story" },
    },
    length: { type: "score", instructions: "How long is the story?", criteria: ["short", "medium", "long"] },
    has_dog: { type: "noul", instructions: "Is there a dog in the story?" },
    has_cat: { type: "yes_no", criteria: { true: "a cat is in it", false: "no cat" } },
  },
};

/** Every question's probabilities are in [0, 1] and sum to 1 (±1e-9); noul is in [0, 1]. */
function expectNormalised(answers: Record<string, any>): void {
  for (const answer of Object.values(answers)) {
    if (answer.type === "noul" || answer.type === "yes_no") {
      expect(answer.noul).toBeGreaterThanOrEqual(0);
      expect(answer.noul).toBeLessThanOrEqual(1);
      continue;
    }
    const p = Object.values(answer.probabilities) as number[];
    for (const x of p) {
      expect(x).toBeGreaterThanOrEqual(0);
      expect(x).toBeLessThanOrEqual(1);
    }
    expect(Math.abs(p.reduce((a, b) => a + b, 0) - 1)).toBeLessThanOrEqual(1e-9);
  }
}

describe("POST /v1/decisions: answers", () => {
  test("when choice, score, noul and yes_no questions are asked, then each answer has its shape and normalised probabilities", async () => {
    const res = await post(MIXED);
    expect(res.status).toBe(200);
    expect(Object.keys(res.body).sort()).toEqual(["answers", "model", "usage"]);
    expect(res.body.model).toBe(CHAT_MODEL);
    const { mood, length, has_dog, has_cat } = res.body.answers;
    expect(Object.keys(res.body.answers).sort()).toEqual(["has_cat", "has_dog", "length", "mood"]);
    expectNormalised(res.body.answers);

    expect(Object.keys(mood).sort()).toEqual(["choice", "confidence", "probabilities", "type"]);
    expect(mood.type).toBe("choice");
    expect(Object.keys(mood.probabilities).sort()).toEqual(["happy", "sad", "scary"]);
    const best = Object.entries(mood.probabilities as Record<string, number>).sort((a, b) => b[1] - a[1])[0];
    expect(mood.choice).toBe(best[0]);
    expect(mood.confidence).toBe(best[1]);

    expect(Object.keys(length).sort()).toEqual(["confidence", "legend", "probabilities", "score", "type"]);
    expect(length.legend).toEqual({ "0": "short", "1": "medium", "2": "long" });
    const lp = length.probabilities as Record<string, number>;
    expect(Object.keys(lp).sort()).toEqual(["0", "1", "2"]);
    expect(length.score).toBeCloseTo(lp["1"] + 2 * lp["2"], 12);
    expect(length.score).toBeGreaterThanOrEqual(0);
    expect(length.score).toBeLessThanOrEqual(2);
    expect(length.confidence).toBe(Math.max(...Object.values(lp)));

    expect(has_dog).toEqual({ type: "noul", noul: expect.any(Number) });
    expect(has_cat).toEqual({ type: "yes_no", noul: expect.any(Number) });
    expect(res.body.usage).toEqual({ input_tokens: expect.any(Number), output_tokens: 0 });
    expect(res.body.usage.input_tokens).toBeGreaterThan(0);
  });

  test("when the same request is sent again, then the probabilities are identical", async () => {
    const first = await post(MIXED);
    const again = await post(MIXED);
    // Other requests on the same input in between (they leave other cached prefixes behind).
    await post({ ...MIXED, questions: { x: { type: "noul" } } });
    await post({ ...MIXED, state: { story: STATE.story.slice(0, 30) } });
    // Concurrently, and beside a generation on the same model.
    const [third, fourth] = await Promise.all([
      post(MIXED),
      post(MIXED),
      http(server.url, "POST", "/v1/chat/completions", {
        token: caller.key,
        body: { model: CHAT_MODEL, messages: [{ role: "user", content: "Once upon" }], max_tokens: 20 },
      }),
    ]);
    expect(first.status).toBe(200);
    expect(again.body).toEqual(first.body);
    expect(third.body).toEqual(first.body);
    expect(fourth.body).toEqual(first.body);
  });

  test("when a label is what the model writes and the other a random string, then the model's own gets the higher probability", async () => {
    const state = "Once upon a time, there was a little girl named Lily.";
    const question = { type: "choice", criteria: { A: "", "zqxj vwkq": "" } } as const;
    // The model's own greedy continuation of this very prompt, through the chat endpoint.
    const prompt = questionMessages(state, "next", { ...question, criteria: { ...question.criteria } });
    const chat = await http(server.url, "POST", "/v1/chat/completions", {
      token: caller.key,
      body: { model: CHAT_MODEL, messages: prompt, temperature: 0, max_tokens: 3 },
    });
    expect(chat.status).toBe(200);
    const own = (chat.body.choices[0].message.content as string).trim().split(/\s+/)[0];
    expect(own.length).toBeGreaterThan(0);
    // Ask again with the model's own word as a label instead of "A" (the prompt changes with the
    // labels, so the check is that the model's word is preferred to the random string).
    const res = await post({
      model: CHAT_MODEL,
      state,
      questions: { next: { type: "choice", criteria: { [own]: "", "zqxj vwkq": "" } } },
    });
    expect(res.status).toBe(200);
    expect(res.body.answers.next.choice).toBe(own);
    expect(res.body.answers.next.probabilities[own]).toBeGreaterThan(0.9);
  });

  test("when the engine scores the model's own greedy continuation against a random string, then its own scores higher", async () => {
    const model = server.app.catalog.all().find((m) => m.id === CHAT_MODEL)!;
    const engine = server.app.engines.engineFor(model);
    const messages = questionMessages("Once upon a time, there was a little girl named Lily.", "next", {
      type: "noul",
      instructions: "Who is in the story?",
    });
    const greedy = await engine.generate({ model, messages, temperature: 0, maxTokens: 4, maxQueueWaitMs: 30_000 });
    expect(greedy.text.length).toBeGreaterThan(0);
    const scored = await engine.scoreContinuations!({
      model,
      questions: [{ messages, candidates: [greedy.text, "zqxj vwkq"], field: "q" }],
      maxQueueWaitMs: 30_000,
    });
    const [own, random] = scored.scores[0];
    expect(own.logprob).toBeGreaterThan(random.logprob);
    expect(own.logprob).toBeLessThanOrEqual(0);
    expect(Number.isFinite(random.logprob)).toBe(true);
  });

  test("when 64 yes/no questions are asked in one call, then all 64 are answered and the input is counted once", async () => {
    const questions = Object.fromEntries(
      Array.from({ length: 64 }, (_, i) => [`q${i}`, { type: "noul", instructions: `Is fact ${i} true?` }]),
    );
    const res = await post({ model: CHAT_MODEL, state: STATE, questions });
    expect(res.status).toBe(200);
    expect(Object.keys(res.body.answers)).toHaveLength(64);
    expectNormalised(res.body.answers);
    const one = await post({ model: CHAT_MODEL, state: STATE, questions: { q0: questions.q0 } });
    expect(one.status).toBe(200);
    // The same question alone: its prompt is evaluated in other batches, so equal to float rounding.
    expect(one.body.answers.q0.noul).toBeCloseTo(res.body.answers.q0.noul, 9);
    // The shared prefix (the input) is counted once, not 64 times.
    expect(res.body.usage.input_tokens).toBeLessThan(64 * one.body.usage.input_tokens);
  });

  test("when the model's calibration temperature is raised, then the probabilities flatten", async () => {
    const { writePatchedCatalog } = await import("./support/test-catalog.js");
    const hot = await startTestServer({
      catalogPath: writePatchedCatalog({ [CHAT_MODEL]: { decision_temperature: 4 } }),
    });
    try {
      const hotCaller = await createTestCaller(hot.url);
      const body = { model: CHAT_MODEL, state: STATE, questions: { mood: MIXED.questions.mood } };
      const cold = (await post(body)).body.answers.mood;
      const warm = (await http(hot.url, "POST", "/v1/decisions", { token: hotCaller.key, body })).body.answers.mood;
      expect(warm.choice).toBe(cold.choice);
      expect(warm.confidence).toBeLessThan(cold.confidence);
      // softmax(l / 4) from softmax(l): p_i^(1/4), renormalised.
      const roots = Object.fromEntries(
        Object.entries(cold.probabilities as Record<string, number>).map(([k, p]) => [k, Math.pow(p, 0.25)]),
      );
      const sum = Object.values(roots).reduce((a, b) => a + b, 0);
      for (const [k, r] of Object.entries(roots)) expect(warm.probabilities[k]).toBeCloseTo(r / sum, 9);
    } finally {
      await hot.close();
    }
  });
});

describe("POST /v1/decisions: bad input", () => {
  const noul = { type: "noul" };

  test("when called without credentials, then 401", async () => {
    const res = await http(server.url, "POST", "/v1/decisions", { body: MIXED });
    expectEnvelope(res, 401);
  });

  test("when the questions break a rule, then 400 names the offending question and nothing is stored", async () => {
    const fresh = await createTestCaller(server.url);
    const [before] = await server.db<any>("SELECT credit_balance_micros FROM teams WHERE id = $1", [fresh.teamId]);
    const bad = (questions: unknown, extra: Record<string, unknown> = {}) =>
      post({ model: CHAT_MODEL, state: STATE, questions, ...extra }, fresh.key);
    const many = (n: number) => Object.fromEntries(Array.from({ length: n }, (_, i) => [`q${i}`, noul]));

    expectInvalid(await bad(many(65)), "questions");
    expectInvalid(await bad({}), "questions");
    expectInvalid(await bad({ one: { type: "choice", criteria: { only: "x" } } }), "questions.one.criteria");
    expectInvalid(
      await bad({
        big: { type: "choice", criteria: Object.fromEntries(Array.from({ length: 257 }, (_, i) => [`l${i}`, ""])) },
      }),
      "questions.big.criteria",
    );
    expectInvalid(await bad({ lvl: { type: "score", criteria: ["only"] } }), "questions.lvl.criteria");
    expectInvalid(
      await bad({ lvl: { type: "score", criteria: Array.from({ length: 257 }, () => "x") } }),
      "questions.lvl.criteria",
    );
    const unknown = await bad({ ok: noul, weird: { type: "ranking" } });
    expectEnvelope(unknown, 400);
    expect(unknown.body.extra.map((i: any) => i.field).join(" ")).toMatch(/questions\.weird/);
    expectInvalid(
      await bad({ blank: { type: "choice", criteria: { "  ": "", b: "" } } }),
      "questions.blank.criteria.  ",
    );
    expectInvalid(await post({ model: CHAT_MODEL, questions: { q: noul } }, fresh.key), "state");
    expectInvalid(await bad({ q: noul }, { model: EMBED_MODEL }), "model");
    expectEnvelope(await bad({ q: noul }, { model: "no-such-model" }), 404);
    // A question whose prompt does not fit the model's context is named.
    const long = await post({ model: CHAT_MODEL, state: "word ".repeat(3000), questions: { q: noul } }, fresh.key);
    expectInvalid(long, "questions.q");

    expect(await server.db("SELECT id FROM activity WHERE team_id = $1", [fresh.teamId])).toHaveLength(0);
    const [after] = await server.db<any>("SELECT credit_balance_micros FROM teams WHERE id = $1", [fresh.teamId]);
    expect(after.credit_balance_micros).toBe(before.credit_balance_micros);
  });

  test("when a question name or label is __proto__, a name is not 1–64 of [A-Za-z0-9_.-], labels encode alike or answers pass 1024, then 400 names it", async () => {
    const fresh = await createTestCaller(server.url);
    const raw = (questions: string) =>
      post(JSON.parse(`{"model": "${CHAT_MODEL}", "state": "x", "questions": ${questions}}`), fresh.key);
    expectInvalid(await raw(`{"ok": {"type": "noul"}, "__proto__": {"type": "noul"}}`), "questions.__proto__");
    expectInvalid(
      await raw(`{"q": {"type": "choice", "criteria": {"a": "", "__proto__": "", "b": ""}}}`),
      "questions.q.criteria.__proto__",
    );
    const name = await raw(`{"bad name": {"type": "noul"}}`);
    expectInvalid(name, "questions.bad name");
    expect(name.body.extra[0].message).toMatch(/1–64 characters of A–Z/);
    expectInvalid(await raw(`{"${"n".repeat(65)}": {"type": "noul"}}`), `questions.${"n".repeat(65)}`);
    expect((await raw(`{"${"n".repeat(64)}": {"type": "noul"}, "a.b-c_D9": {"type": "noul"}}`)).status).toBe(200);
    // Two lone surrogates: different strings, the same UTF-8 (U+FFFD), so they would be the same answer.
    const twins = await post(
      {
        model: CHAT_MODEL,
        state: "x",
        questions: { q: { type: "choice", criteria: { "a\ud800": "", "a\udc00": "" } } },
      },
      fresh.key,
    );
    // (Since review 11b, H1, a lone surrogate is refused in any label, so they never reach the twin check.)
    expectInvalid(twins, "questions.q.criteria");
    expect(twins.body.extra[0].message).toBe('label "a\\ud800" must not contain NUL characters or lone surrogates');
    const labels = Object.fromEntries(Array.from({ length: 256 }, (_, i) => [`l${i}`, ""]));
    const wide = Object.fromEntries(
      Array.from({ length: 5 }, (_, i) => [`q${i}`, { type: "choice", criteria: labels }]),
    );
    const over = await post({ model: CHAT_MODEL, state: "x", questions: wide }, fresh.key);
    expectInvalid(over, "questions");
    expect(over.body.extra[0].message).toMatch(/at most 1024 answers in all.*1280 given/);
    // Only the one valid request left a record.
    expect(await server.db("SELECT id FROM activity WHERE team_id = $1", [fresh.teamId])).toHaveLength(1);
  });

  test("when a label is blank or over 256 characters, then 400 names the label and the rule it breaks", async () => {
    const fresh = await createTestCaller(server.url);
    const ask = (criteria: Record<string, string>) =>
      post({ model: CHAT_MODEL, state: "x", questions: { q: { type: "choice", criteria } } }, fresh.key);
    const blank = await ask({ "  ": "", b: "" });
    expectInvalid(blank, "questions.q.criteria.  ");
    expect(blank.body.extra[0].message).toBe("a label must not be blank");
    const long = "l".repeat(257);
    const over = await ask({ [long]: "", b: "" });
    // A field that repeats a client's value is cut to 200 characters (hostile bytes, issue 28).
    expectInvalid(over, echo(`questions.q.criteria.${long}`));
    expect(over.body.extra[0].message).toBe("a label is at most 256 characters");
    // 256 characters is a label.
    expect((await ask({ ["l".repeat(256)]: "", b: "" })).status).toBe(200);
  });

  test("when two answers tokenise identically, then the engine refuses with 400 naming the question", async () => {
    const model = server.app.catalog.all().find((m) => m.id === CHAT_MODEL)!;
    const engine = server.app.engines.engineFor(model);
    const messages = questionMessages("x", "q", { type: "noul" });
    await expect(
      engine.scoreContinuations!({
        model,
        questions: [{ messages, candidates: ["a\ud800", "a\udc00"], field: "questions.q" }],
        maxQueueWaitMs: 30_000,
      }),
    ).rejects.toMatchObject({ code: "invalid_request", extra: [{ field: "questions.q" }] });
  });

  test("when the body is over 1 MiB, then 413", async () => {
    const res = await post({ model: CHAT_MODEL, state: "x".repeat(1024 * 1024 + 10), questions: { q: noul } });
    expectEnvelope(res, 413);
  });

  test("when a body under 1 MiB would be over it written back as JSON, then it is served, not 413", async () => {
    // 50,000 × "1e20" is 250 kB as sent and 1.1 MB as JSON.stringify writes it (21 digits each).
    const raw = `{"model": "${CHAT_MODEL}", "state": "x", "questions": {"q": {"type": "noul"}}, "note": [${Array(50_000).fill("1e20").join(",")}]}`;
    expect(Buffer.byteLength(raw)).toBeLessThan(1024 * 1024);
    expect(Buffer.byteLength(JSON.stringify(JSON.parse(raw)))).toBeGreaterThan(1024 * 1024);
    const res = await post(raw);
    expect(res.status).toBe(200);
    expect(res.body.answers.q).toEqual({ type: "noul", noul: expect.any(Number) });
  });

  test("when the team has no credit, then 402 before any engine work", async () => {
    const fresh = await createTestCaller(server.url);
    await server.db("UPDATE teams SET credit_balance_micros = 0 WHERE id = $1", [fresh.teamId]);
    expectEnvelope(await post(MIXED, fresh.key), 402);
    expect(await server.db("SELECT id FROM activity WHERE team_id = $1", [fresh.teamId])).toHaveLength(0);
  });
});

describe("POST /v1/decisions: a team's own model", () => {
  test("when a team's custom model is asked, then it answers on its own runtime; another team gets 404 for it", async () => {
    const owner = await createTestCaller(server.url);
    await createCustomModel(server, owner.token, {
      model_id: "acme/decider",
      architecture: "llama",
      base_model_id: CHAT_MODEL,
      hf_repo: `x/${SHARED_GGUF}`,
    });
    await requestDeployment(server, owner.token, "acme/decider");
    expect((await customModelSettles(server, owner.token, "acme/decider")).deploy_status).toBe("available");
    const body = { ...MIXED, model: "acme/decider" };
    const mine = await post(body, owner.key);
    expect(mine.status).toBe(200);
    expect(mine.body.model).toBe("acme/decider");
    // The same weights as the platform model: the same probabilities.
    expect(mine.body.answers).toEqual((await post(MIXED)).body.answers);
    expectEnvelope(await post(body, caller.key), 404);
  }, 60_000);
});

describe("POST /v1/decisions: records", () => {
  test("when a decision is made, then one activity row, one charge at the input price and one completion event record it", async () => {
    const fresh = await createTestCaller(server.url);
    const res = await post({ ...MIXED, metadata: { custom_id: "dec-1" } }, fresh.key);
    expect(res.status).toBe(200);
    const rows = await server.db<any>("SELECT * FROM activity WHERE team_id = $1", [fresh.teamId]);
    expect(rows).toHaveLength(1);
    expect(rows[0]).toEqual(
      expect.objectContaining({
        endpoint: "/v1/decisions",
        status: "completed",
        type: "standalone",
        model: CHAT_MODEL,
        custom_id: "dec-1",
        api_key_id: fresh.keyId,
        prompt_tokens: res.body.usage.input_tokens,
        completion_tokens: 0,
        cached_prompt_tokens: 0,
      }),
    );
    expect(rows[0].result_json).toEqual(res.body);
    // 0.02 USD per million input tokens, rounded half up once.
    const cost = (BigInt(res.body.usage.input_tokens) * 20_000n + 500_000n) / 1_000_000n;
    expect(BigInt(rows[0].cost_micros)).toBe(cost);
    if (cost > 0n) {
      const ledger = await server.db<any>("SELECT * FROM credit_ledger WHERE team_id = $1 AND type = 'usage'", [
        fresh.teamId,
      ]);
      expect(ledger.map((l) => l.source_id)).toEqual([rows[0].id]);
    }
    expect(
      await eventually(
        async () =>
          (await server.db("SELECT 1 FROM completion_events WHERE response_id = $1", [rows[0].id])).length === 1,
        5_000,
      ),
    ).toBe(true);
  });

  test("when the GraphQL mutation asks the same, then it answers what REST answers", async () => {
    const rest = await post(MIXED);
    const res = await http(server.url, "POST", "/graphql", {
      token: caller.key,
      body: {
        query: `mutation($state: JSONObject!, $questions: JSONObject!) {
          createDecision(model: "${CHAT_MODEL}", state: $state, questions: $questions) {
            model answers usage { inputTokens outputTokens }
          }
        }`,
        variables: { state: MIXED.state, questions: MIXED.questions },
      },
    });
    expect(res.status).toBe(200);
    expect(res.body.errors).toBeUndefined();
    const d = res.body.data.createDecision;
    expect(d.model).toBe(CHAT_MODEL);
    expect(d.answers).toEqual(rest.body.answers);
    expect(d.usage).toEqual({ inputTokens: rest.body.usage.input_tokens, outputTokens: 0 });

    const bad = await http(server.url, "POST", "/graphql", {
      token: caller.key,
      body: { query: `mutation { createDecision(model: "${CHAT_MODEL}", state: "x", questions: {}) { model } }` },
    });
    expect(bad.body.errors[0].extensions.code).toBe("INVALID_REQUEST");
    expect(bad.body.errors[0].extensions.extra.map((i: any) => i.field)).toEqual(["questions"]);
  });

  test("when GraphQL sends a null state or questions with a variable nested inside, then it answers as REST does", async () => {
    const has_dog = MIXED.questions.has_dog;
    const rest = await post({ model: CHAT_MODEL, state: null, questions: { has_dog } });
    expect(rest.status).toBe(200);
    const gql = (query: string, variables?: Record<string, unknown>) =>
      http(server.url, "POST", "/graphql", { token: caller.key, body: { query, variables } });
    // `state: null` is any JSON (DESIGN §3), as REST takes it; the question comes in through a
    // variable inside an object literal.
    const res = await gql(
      `mutation($q: JSONObject!) {
        createDecision(model: "${CHAT_MODEL}", state: null, questions: {has_dog: $q}) { answers }
      }`,
      { q: has_dog },
    );
    expect(res.body.errors).toBeUndefined();
    expect(res.body.data.createDecision.answers).toEqual(rest.body.answers);
    // Left out, the state is missing: 400 naming it, as REST.
    const missing = await gql(
      `mutation { createDecision(model: "${CHAT_MODEL}", questions: {q: {type: "noul"}}) { model } }`,
    );
    expect(missing.body.errors[0].extensions.code).toBe("INVALID_REQUEST");
    expect(missing.body.errors[0].extensions.extra.map((i: any) => i.field)).toEqual(["state"]);
    expectInvalid(await post({ model: CHAT_MODEL, questions: { has_dog } }), "state");
  });

  test("when a batch item names /v1/decisions, then it runs on the same path and its result is the REST answer", async () => {
    const body = { model: CHAT_MODEL, state: STATE, questions: { has_dog: MIXED.questions.has_dog } };
    const rest = await post(body);
    const created = await http(server.url, "POST", "/v1/batches", {
      token: caller.key,
      body: { requests: [{ custom_id: "d1", url: "/v1/decisions", body }] },
    });
    expect(created.status).toBe(201);
    let batch: any;
    expect(
      await eventually(async () => {
        batch = (await http(server.url, "GET", `/v1/batches/${created.body.id}`, { token: caller.key })).body;
        return batch.status === "completed" || batch.status === "failed";
      }, 30_000),
    ).toBe(true);
    expect(batch.status).toBe("completed");
    const results = await http(server.url, "GET", `/v1/batches/${created.body.id}/results`, { token: caller.key });
    const row = results.body.results[0];
    expect(row.status).toBe("completed");
    expect(row.result_json).toEqual(rest.body);

    const invalid = await http(server.url, "POST", "/v1/batches", {
      token: caller.key,
      body: { requests: [{ url: "/v1/decisions", body: { ...body, questions: {} } }] },
    });
    expectInvalid(invalid, "requests[0].body.questions");
  });
});

describe("POST /v1/decisions: a batch item runs the request as sent (review 11b, H1)", () => {
  async function batchResult(body: unknown): Promise<any> {
    const created = await http(server.url, "POST", "/v1/batches", {
      token: caller.key,
      body: { requests: [{ custom_id: "h1", url: "/v1/decisions", body }] },
    });
    expect(created.status).toBe(201);
    expect(
      await eventually(async () => {
        const b = (await http(server.url, "GET", `/v1/batches/${created.body.id}`, { token: caller.key })).body;
        return b.status === "completed" || b.status === "failed";
      }, 30_000),
    ).toBe(true);
    const results = await http(server.url, "GET", `/v1/batches/${created.body.id}/results`, { token: caller.key });
    return results.body.results[0];
  }

  test("when a choice, score and yes/no request about a state of several keys (and a NUL) runs in a batch, then it runs the request as sent and its answer is the REST answer", async () => {
    // jsonb would store {"id", "story"} and the labels {"sad", "happy", "scary"} shortest first,
    // and the NUL as U+FFFD: each changes the prompt, and so the probabilities.
    const body = { ...MIXED, state: { story: STATE.story + "\u0000", id: 7 } };
    const rest = await post(body);
    expect(rest.status).toBe(200);
    const row = await batchResult(body);
    expect(row.status).toBe("completed");
    // Equal to the last bit. (The result itself is kept as jsonb, so its keys come back in jsonb's order.)
    expect(row.result_json).toEqual(rest.body);
    const [stored] = await server.db<{ body: string }>(
      "SELECT body_json::text AS body FROM batch_items WHERE custom_id = 'h1'",
    );
    expect(stored.body).toBe(JSON.stringify(body));
  }, 60_000);

  test("when a label holds a NUL character or a lone surrogate, then REST and batch create answer 400 naming the question", async () => {
    for (const bad of ["a\u0000", "a\ud800"]) {
      const body = {
        model: CHAT_MODEL,
        state: "s",
        questions: { q: { type: "choice", criteria: { [bad]: "", b: "" } } },
      };
      const rest = await post(body);
      expect(rest.status).toBe(400);
      expectInvalid(rest, "questions.q.criteria");
      expect(rest.body.extra[0].message).toMatch(/must not contain NUL characters or lone surrogates/);
      const created = await http(server.url, "POST", "/v1/batches", {
        token: caller.key,
        body: { requests: [{ url: "/v1/decisions", body }] },
      });
      expect(created.status).toBe(400);
      expectInvalid(created, "requests[0].body.questions.q.criteria");
    }
    // A surrogate pair is a character like any other.
    const pair = await post({
      model: CHAT_MODEL,
      state: "s",
      questions: { q: { type: "choice", criteria: { "a😀": "", b: "" } } },
    });
    expect(pair.status).toBe(200);
    expect(Object.keys(pair.body.answers.q.probabilities)).toEqual(["a😀", "b"]);
  });
});

describe("POST /v1/decisions: fair answers and bounded work (issue 11 review)", () => {
  test("when one answer is a prefix of another, then each is scored with its end, so the shorter one loses its head start", async () => {
    const model = server.app.catalog.all().find((m) => m.id === CHAT_MODEL)!;
    const engine = server.app.engines.engineFor(model);
    const messages = questionMessages(STATE.story, "count", { type: "score", criteria: ["", "", ""] });
    const score = async (endMarker: boolean) =>
      (
        await engine.scoreContinuations!({
          model,
          questions: [{ messages, candidates: ["1", "10"], field: "q", endMarker }],
          maxQueueWaitMs: 30_000,
        })
      ).scores[0];
    const [bare1, bare10] = await score(false);
    const [end1, end10] = await score(true);
    // Without an end "1" is never below "10" (log p(1) ≥ log p(1) + log p(0 | 1)); with one, each
    // also pays for ending where it ends.
    expect(bare1.logprob).toBeGreaterThanOrEqual(bare10.logprob);
    expect(end1.logprob).toBeLessThan(bare1.logprob);
    expect(end10.logprob).toBeLessThan(bare10.logprob);
    expect(Number.isFinite(end1.logprob) && Number.isFinite(end10.logprob)).toBe(true);
  });

  /** 64 questions of 8 four-word labels: 512 answers, one evaluation each (a few seconds on this model). */
  const HEAVY = {
    model: CHAT_MODEL,
    state: STATE,
    questions: Object.fromEntries(
      Array.from({ length: 64 }, (_, q) => [
        `q${q}`,
        {
          type: "choice",
          instructions: `Which fits part ${q}?`,
          criteria: Object.fromEntries(Array.from({ length: 8 }, (_, l) => [`the little dog ${l}`, ""])),
        },
      ]),
    ),
  };

  /** HEAVY's `usage.input_tokens` once a test answered it whole (the same for every team and server). */
  let heavyInputTokens: number | undefined;

  test("when the client leaves mid-scoring, then the request is recorded cancelled and charged the tokens evaluated", async () => {
    const fresh = await createTestCaller(server.url);
    const started = performance.now();
    const full = await post(HEAVY, fresh.key);
    const fullMs = performance.now() - started;
    expect(full.status).toBe(200);
    heavyInputTokens = full.body.usage.input_tokens;
    const aborter = new AbortController();
    const sending = fetch(`${server.url}/v1/decisions`, {
      method: "POST",
      headers: { authorization: `Bearer ${fresh.key}`, "content-type": "application/json" },
      body: JSON.stringify(HEAVY),
      signal: aborter.signal,
    }).catch(() => undefined);
    await new Promise((r) => setTimeout(r, fullMs / 3));
    aborter.abort();
    await sending;
    let rows: any[] = [];
    expect(
      await eventually(async () => {
        rows = await server.db<any>(
          "SELECT status, prompt_tokens, cost_micros FROM activity WHERE team_id = $1 ORDER BY created_at",
          [fresh.teamId],
        );
        // An early row of the request in flight reads 'running' until the request's own record lands.
        return rows.length === 2 && rows[1].status !== "running";
      }, 10_000),
    ).toBe(true);
    const [, cancelled] = rows;
    expect(cancelled.status).toBe("cancelled");
    expect(cancelled.prompt_tokens).toBeGreaterThan(0);
    expect(cancelled.prompt_tokens).toBeLessThan(full.body.usage.input_tokens);
    expect(BigInt(cancelled.cost_micros)).toBe((BigInt(cancelled.prompt_tokens) * 20_000n + 500_000n) / 1_000_000n);
    expect(BigInt(cancelled.cost_micros)).toBeGreaterThan(0n);
    const ledger = await server.db<any>(
      "SELECT amount_micros FROM credit_ledger WHERE team_id = $1 AND type = 'usage' ORDER BY created_at",
      [fresh.teamId],
    );
    expect(ledger).toHaveLength(2);
  }, 60_000);

  test("when a GraphQL client leaves mid-scoring, then createDecision stops too: recorded cancelled and charged the tokens evaluated (review 11b, L2)", async () => {
    const fresh = await createTestCaller(server.url);
    const query = `mutation($model: String!, $state: JSONObject, $questions: JSONObject!) {
      createDecision(model: $model, state: $state, questions: $questions) { model }
    }`;
    const send = (signal?: AbortSignal) =>
      fetch(`${server.url}/graphql`, {
        method: "POST",
        headers: { authorization: `Bearer ${fresh.key}`, "content-type": "application/json" },
        body: JSON.stringify({
          query,
          variables: { model: HEAVY.model, state: HEAVY.state, questions: HEAVY.questions },
        }),
        signal,
      });
    const started = performance.now();
    const full = await send();
    const fullMs = performance.now() - started;
    expect(full.status).toBe(200);
    expect(((await full.json()) as any).data.createDecision.model).toBe(CHAT_MODEL);
    const aborter = new AbortController();
    const sending = send(aborter.signal).catch(() => undefined);
    await new Promise((r) => setTimeout(r, fullMs / 3));
    aborter.abort();
    await sending;
    let rows: any[] = [];
    expect(
      await eventually(async () => {
        rows = await server.db<any>(
          "SELECT status, prompt_tokens FROM activity WHERE team_id = $1 ORDER BY created_at",
          [fresh.teamId],
        );
        return rows.length === 2 && rows[1].status !== "running";
      }, 10_000),
    ).toBe(true);
    const [completed, cancelled] = rows;
    expect(cancelled.status).toBe("cancelled");
    expect(cancelled.prompt_tokens).toBeGreaterThan(0);
    expect(cancelled.prompt_tokens).toBeLessThan(completed.prompt_tokens);
  }, 60_000);

  test("when scoring passes the time limit, then 504 and the request is recorded failed and charged the tokens evaluated", async () => {
    const quick = await startTestServer({ decisionsTimeLimitMs: 1 });
    try {
      const fresh = await createTestCaller(quick.url);
      const res = await http(quick.url, "POST", "/v1/decisions", { token: fresh.key, body: HEAVY });
      expectEnvelope(res, 504);
      expect(res.body.detail).toMatch(/limit of 1 ms/);
      const [row] = await quick.db<any>("SELECT * FROM activity WHERE team_id = $1", [fresh.teamId]);
      expect(row).toEqual(
        expect.objectContaining({ status: "failed", error_json: expect.objectContaining({ code: "engine_timeout" }) }),
      );
      // At least the shared prefix was evaluated; far from all 512 answers.
      expect(row.prompt_tokens).toBeGreaterThan(20);
      // HEAVY answered whole (each of its 512 answers evaluated), once in this file.
      heavyInputTokens ??= (await post(HEAVY)).body.usage.input_tokens as number;
      expect(row.prompt_tokens).toBeLessThan(heavyInputTokens);
      expect(BigInt(row.cost_micros)).toBe((BigInt(row.prompt_tokens) * 20_000n + 500_000n) / 1_000_000n);
    } finally {
      await quick.close();
    }
  }, 60_000);
});
