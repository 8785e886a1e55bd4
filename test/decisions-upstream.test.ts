/**
 * Decisions on the upstream engine (issue 11, item 3): a gateway Switchyard routes decision
 * models to a loopback fake of a vLLM server that answers `POST /v1/completions` with echoed
 * prompt log-probabilities (`logprobs.{tokens, token_logprobs, text_offset}`), and to one that
 * answers without them (a clear 400). The fake tokenises by words (each with its leading space)
 * and gives each word a fixed log-probability (a newline's depends on the word before it), so the
 * expected probabilities are exact. Other fake models answer without usage (`fake-nousage`),
 * report 1000× the prompt tokens (`fake-over`) or answer after 600 ms (`fake-slow`; the gateway's
 * scoring time limit is 1.5 s).
 *
 * The review of issue 11 (findings 1, 2, 3, 5, 6): upstream work bounded before anything is
 * built, metering from what the upstream processed, partial charges when the client leaves or the
 * time limit passes, and an end marker after answers that are prefixes of others.
 */
import http from "node:http";
import type net from "node:net";
import {
  CHAT_MODEL,
  type TestServer,
  createTestCaller,
  eventually,
  expectEnvelope,
  expectInvalid,
  http as request,
  startTestServer,
} from "./support/harness.js";
import { captureLogs } from "./support/log-capture.js";
import { writeEditedCatalog } from "./support/test-catalog.js";

/** Log-probability the fake gives each word (with its leading space); others get −3. */
const WORDS: Record<string, number> = { " yes": -0.1, " no": -2.3, " red": -0.5, " big": -1, " apple": -0.25 };
/** A newline's log-probability: unlikely right after " big" (the answer "goes on"), likely elsewhere. */
const newline = (previous: string) => (previous === " big" ? -5 : -0.1);
/** Delay of `fake-slow`'s answers, ms. */
const SLOW_MS = 600;

const FAKE_MODELS = ["fake-lm", "fake-nolp", "fake-refuses", "fake-nousage", "fake-over", "fake-slow", "fake-ctx"];
/** `fake-ctx` refuses (vLLM's 400) a request holding any prompt over this many bytes. */
const CTX_BYTES = 4000;
let fake: http.Server;
let fakeUrl: string;
/** Bodies the fake received on /v1/completions. */
const received: any[] = [];
let gateway: TestServer;
/** The gateway's catalog file (the upstream decision models). */
let catalog: string;
let key: string;
/** The gateway's error lines. */
const logs = captureLogs("error");

function words(text: string): string[] {
  return text.match(/\s*\S+|\s+/g) ?? [];
}

/** A vLLM-shaped completions answer: echo + logprobs for every prompt, one generated token. */
function completions(body: any, withLogprobs: boolean, usageFactor: number | null = 1): unknown {
  const prompts: string[] = Array.isArray(body.prompt) ? body.prompt : [body.prompt];
  let promptTokens = 0;
  const choices = prompts.map((prompt, index) => {
    const tokens = words(prompt);
    promptTokens += tokens.length;
    const offsets: number[] = [];
    let at = 0;
    for (const t of tokens) {
      offsets.push(at);
      at += [...t].length;
    }
    const logprobs = tokens.map((t, i) => (i === 0 ? null : t === "\n" ? newline(tokens[i - 1]) : (WORDS[t] ?? -3)));
    return {
      index,
      text: `${prompt} the`,
      logprobs: withLogprobs
        ? {
            tokens: [...tokens, " the"],
            token_logprobs: [...logprobs, -0.7],
            text_offset: [...offsets, at],
            top_logprobs: [null, ...tokens.slice(1).map((t) => ({ [t]: WORDS[t] ?? -3 })), { " the": -0.7 }],
          }
        : null,
      finish_reason: "length",
      stop_reason: null,
      prompt_logprobs: null,
    };
  });
  return {
    id: "cmpl-fake",
    object: "text_completion",
    created: 1,
    model: body.model,
    choices,
    ...(usageFactor === null
      ? {}
      : {
          usage: {
            prompt_tokens: promptTokens * usageFactor,
            completion_tokens: prompts.length,
            total_tokens: promptTokens * usageFactor + prompts.length,
          },
        }),
  };
}

beforeAll(async () => {
  fake = http.createServer((req, res) => {
    let data = "";
    req.on("data", (c) => (data += c));
    req.on("end", () => {
      res.setHeader("content-type", "application/json");
      if (req.method === "GET" && req.url === "/v1/models") {
        res.end(JSON.stringify({ object: "list", data: FAKE_MODELS.map((id) => ({ id })) }));
        return;
      }
      if (req.method === "POST" && req.url === "/v1/completions") {
        const body = JSON.parse(data);
        received.push(body);
        if (body.model === "fake-refuses") {
          res.statusCode = 400;
          res.end(
            JSON.stringify({ object: "error", message: "echo is not supported", type: "BadRequestError", code: 400 }),
          );
          return;
        }
        if (body.model === "fake-ctx" && (body.prompt as string[]).some((p) => Buffer.byteLength(p) > CTX_BYTES)) {
          res.statusCode = 400;
          res.end(
            JSON.stringify({
              object: "error",
              message: "This model's maximum context length is 1024 tokens. However, you requested 1200 tokens.",
              type: "BadRequestError",
              code: 400,
            }),
          );
          return;
        }
        const answer = JSON.stringify(
          completions(
            body,
            body.model !== "fake-nolp",
            { "fake-nousage": null, "fake-over": 1000 }[body.model as string],
          ),
        );
        if (body.model === "fake-slow") setTimeout(() => res.end(answer), SLOW_MS);
        else res.end(answer);
        return;
      }
      res.statusCode = 404;
      res.end(JSON.stringify({ error: { message: "not found" } }));
    });
  });
  await new Promise<void>((resolve) => fake.listen(0, "127.0.0.1", resolve));
  fakeUrl = `http://127.0.0.1:${(fake.address() as net.AddressInfo).port}/v1`;
  catalog = writeEditedCatalog((c) => {
    const chat = c.models.find((m) => m.id === CHAT_MODEL)!;
    const upstream = (id: string, upstreamModel: string, decisions = true) => ({
      ...chat,
      id,
      display_name: id,
      pricing: { input_per_million_usd: "2", cached_input_per_million_usd: "1", output_per_million_usd: "5" },
      capabilities: { ...(chat.capabilities as object), decisions },
      engine: { type: "openai_compatible", upstream_model: upstreamModel, endpoints: ["fake"] },
    });
    c.models.push(
      upstream("up-lp", "fake-lm"),
      upstream("up-nolp", "fake-nolp"),
      upstream("up-refuses", "fake-refuses"),
      upstream("up-plain", "fake-lm", false),
      upstream("up-nousage", "fake-nousage"),
      upstream("up-over", "fake-over"),
      upstream("up-slow", "fake-slow"),
      upstream("up-ctx", "fake-ctx"),
    );
  });
  gateway = await startTestServer(
    {
      catalogPath: catalog,
      upstreams: [{ name: "fake", base_url: fakeUrl, models: FAKE_MODELS }],
      decisionsTimeLimitMs: 1500,
    },
    undefined,
    { logger: logs.logger },
  );
  key = (await createTestCaller(gateway.url)).key;
}, 60_000);

afterAll(async () => {
  await gateway?.close();
  await new Promise((resolve) => fake?.close(resolve));
});

const post = (body: unknown) => request(gateway.url, "POST", "/v1/decisions", { token: key, body });

test("when an upstream model is asked, then the answers come from the upstream's echoed prompt log-probabilities", async () => {
  received.length = 0;
  const res = await post({
    model: "up-lp",
    state: "A story about fruit.",
    questions: {
      fruit: { type: "noul", instructions: "Is it about fruit?" },
      kind: { type: "choice", criteria: { "red apple": "", "big apple": "", pear: "" } },
    },
  });
  expect(res.status).toBe(200);
  // noul: softmax(−0.1, −2.3) over yes / no.
  expect(res.body.answers.fruit.noul).toBeCloseTo(1 / (1 + Math.exp(-2.2)), 12);
  // choice: " red apple" = −0.75, " big apple" = −1.25, " pear" = −3.
  const z = [-0.75, -1.25, -3].map(Math.exp);
  const sum = z.reduce((a, b) => a + b, 0);
  expect(res.body.answers.kind.probabilities["red apple"]).toBeCloseTo(z[0] / sum, 12);
  expect(res.body.answers.kind.probabilities["big apple"]).toBeCloseTo(z[1] / sum, 12);
  expect(res.body.answers.kind.choice).toBe("red apple");
  // One upstream request with one prompt per (question, answer), asking for echoed log-probabilities.
  expect(received).toHaveLength(1);
  expect(received[0]).toEqual(
    expect.objectContaining({ model: "fake-lm", echo: true, logprobs: 1, max_tokens: 1, temperature: 0 }),
  );
  expect(received[0].prompt).toHaveLength(5);
  expect(received[0].prompt[0].endsWith("Answer: yes")).toBe(true);
  // Metered as the upstream processed it (review finding 2): every prompt whole, as its usage says.
  const echoed = (received[0].prompt as string[]).map(words);
  const sent = echoed.reduce((n, t) => n + t.length, 0);
  expect(res.body.usage.input_tokens).toBe(sent);
  const [row] = await gateway.db<any>(
    "SELECT prompt_tokens, completion_tokens, cost_micros, endpoint FROM activity ORDER BY created_at DESC LIMIT 1",
  );
  // 2 USD per million input tokens = 2 micro-USD per token.
  expect(row).toEqual(
    expect.objectContaining({ prompt_tokens: sent, completion_tokens: 0, endpoint: "/v1/decisions" }),
  );
  expect(BigInt(row.cost_micros)).toBe(BigInt(2 * sent));
});

test("when the upstream answers without log-probabilities or refuses echo, then 400 says the model cannot give them", async () => {
  const body = (model: string) => ({ model, state: "x", questions: { q: { type: "noul" } } });
  for (const model of ["up-nolp", "up-refuses"]) {
    const res = await post(body(model));
    expectInvalid(res, "model");
    expect(res.body.detail).toMatch(/log-probabilities/);
  }
  // A model whose catalog entry does not list decisions is refused before any upstream call.
  received.length = 0;
  expectInvalid(await post(body("up-plain")), "model");
  expect(received).toHaveLength(0);
  expectEnvelope(await request(gateway.url, "POST", "/v1/decisions", { body: body("up-lp") }), 401);
});

/** Questions × labels, each label two words ("red apple0"…), about one state. */
function wide(model: string, state: string, questions: number, labels: number) {
  const criteria = Object.fromEntries(Array.from({ length: labels }, (_, i) => [`red apple${i}`, ""]));
  return {
    model,
    state,
    questions: Object.fromEntries(Array.from({ length: questions }, (_, i) => [`q${i}`, { type: "choice", criteria }])),
  };
}

/** The team's activity rows for /v1/decisions, oldest first. */
const rowsOf = (teamId: string) =>
  gateway.db<any>(
    "SELECT status, prompt_tokens, cost_micros, error_json FROM activity WHERE team_id = $1 ORDER BY created_at",
    [teamId],
  );

describe("upstream work is bounded before anything is built (review finding 1)", () => {
  test("when answers × state would send more than 16 MiB of prompts, then 400 names questions at once and nothing reaches the upstream", async () => {
    const fresh = await createTestCaller(gateway.url);
    received.length = 0;
    // 64 questions × 16 labels (1,024 answers, within the cap) about a 30,000-character state:
    // 1,024 prompts of ~30 kB each, ~31 MB in all.
    const started = performance.now();
    const res = await request(gateway.url, "POST", "/v1/decisions", {
      token: fresh.key,
      body: wide("up-lp", "word ".repeat(6_000), 64, 16),
    });
    const tookMs = performance.now() - started;
    expectInvalid(res, "questions");
    expect(res.body.detail).toMatch(/1024 prompts of (at least )?\d+ bytes in all, over the limit of 16777216 bytes/);
    expect(tookMs).toBeLessThan(2_000);
    expect(received).toHaveLength(0);
    expect(await rowsOf(fresh.teamId)).toHaveLength(0);
  });

  test("when 64 questions ask about a 1 MB state, then the 400 comes from string lengths, without holding the event loop (review 11b, M3)", async () => {
    const fresh = await createTestCaller(gateway.url);
    received.length = 0;
    // The gateway runs in this process: the largest gap between 5 ms ticks is its event loop's stall.
    let last = performance.now();
    let worst = 0;
    const tick = setInterval(() => {
      const now = performance.now();
      worst = Math.max(worst, now - last - 5);
      last = now;
    }, 5);
    try {
      const questions = Object.fromEntries(Array.from({ length: 64 }, (_, i) => [`q${i}`, { type: "noul" }]));
      const res = await request(gateway.url, "POST", "/v1/decisions", {
        token: fresh.key,
        body: { model: "up-lp", state: "é".repeat(500_000), questions },
      });
      expectInvalid(res, "questions");
      expect(res.body.detail).toMatch(/128 prompts of at least \d+ bytes in all/);
    } finally {
      clearInterval(tick);
    }
    // "at least" above: refused by the arithmetic. Measuring every prompt stalled the loop 0.5–1.6 s
    // here; with the arithmetic about 200 ms are left on a loaded machine (the 1 MB body's parse and
    // validation), so this bound is coarse.
    expect(worst).toBeLessThan(500);
    expect(received).toHaveLength(0);
  });

  test("when a request asks 64 questions of 256 labels, then 400 says at most 1024 answers in all", async () => {
    received.length = 0;
    const res = await post(wide("up-lp", "short", 64, 256));
    expectInvalid(res, "questions");
    expect(res.body.extra.find((i: any) => i.field === "questions").message).toMatch(
      /at most 1024 answers in all.*16384 given/,
    );
    expect(received).toHaveLength(0);
  });

  test("when a request has more than 64 prompts, then they go upstream in chunks of at most 64 and the answers line up", async () => {
    received.length = 0;
    const res = await post(wide("up-lp", "A story about fruit.", 3, 50));
    expect(res.status).toBe(200);
    expect(received.map((b) => b.prompt.length)).toEqual([64, 64, 22]);
    for (const q of ["q0", "q1", "q2"]) {
      // Every label scores −0.75 ("red" + "apple") + −3 (its number word): all equal.
      for (const p of Object.values(res.body.answers[q].probabilities) as number[]) expect(p).toBeCloseTo(1 / 50, 12);
    }
    const sent = received.flatMap((b) => b.prompt as string[]).reduce((n, t) => n + words(t).length, 0);
    expect(res.body.usage.input_tokens).toBe(sent);
  });
});

describe("upstream metering follows what the upstream processed (review findings 2 and 5)", () => {
  const one = (model: string) => ({
    model,
    state: "A story about fruit.",
    questions: { fruit: { type: "noul" }, kind: { type: "choice", criteria: { "red apple": "", pear: "" } } },
  });

  test("when the upstream sends no usage, then every prompt's echoed tokens are charged", async () => {
    received.length = 0;
    const res = await post(one("up-nousage"));
    expect(res.status).toBe(200);
    const sent = (received[0].prompt as string[]).reduce((n, t) => n + words(t).length, 0);
    expect(res.body.usage.input_tokens).toBe(sent);
  });

  test("when the upstream reports more prompt tokens than the prompts' bytes, then the reserved bound is the most charged", async () => {
    received.length = 0;
    const res = await post(one("up-over"));
    expect(res.status).toBe(200);
    const prompts = received[0].prompt as string[];
    const bound = prompts.reduce((n, t) => n + Buffer.byteLength(t) + 2, 0);
    expect(res.body.usage.input_tokens).toBe(bound);
  });

  test("when the team's credit covers the reserved bound, then it is served; a micro-USD less, then 402 before any upstream call", async () => {
    received.length = 0;
    expect((await post(one("up-lp"))).status).toBe(200);
    const bound = (received[0].prompt as string[]).reduce((n, t) => n + Buffer.byteLength(t) + 2, 0);
    const fresh = await createTestCaller(gateway.url);
    const setCredit = (micros: number) =>
      gateway.db("UPDATE teams SET credit_balance_micros = $2 WHERE id = $1", [fresh.teamId, micros]);
    await setCredit(2 * bound - 1);
    received.length = 0;
    const refused = await request(gateway.url, "POST", "/v1/decisions", { token: fresh.key, body: one("up-lp") });
    expectEnvelope(refused, 402);
    expect(received).toHaveLength(0);
    await setCredit(2 * bound);
    const served = await request(gateway.url, "POST", "/v1/decisions", { token: fresh.key, body: one("up-lp") });
    expect(served.status).toBe(200);
    expect(served.body.usage.input_tokens).toBeLessThanOrEqual(bound);
  });
});

/** A chunk's reservation bound: per prompt its UTF-8 bytes + 2. */
const bound = (body: any) => (body.prompt as string[]).reduce((n, t) => n + Buffer.byteLength(t) + 2, 0);

describe("stopped upstream scoring is charged for the chunks answered (review findings 3 and 4)", () => {
  test("when the client leaves while the second chunk is upstream, then the request is recorded cancelled and charged the first chunk and the bound of the second", async () => {
    const fresh = await createTestCaller(gateway.url);
    received.length = 0;
    const aborter = new AbortController();
    const sending = fetch(`${gateway.url}/v1/decisions`, {
      method: "POST",
      headers: { authorization: `Bearer ${fresh.key}`, "content-type": "application/json" },
      body: JSON.stringify(wide("up-slow", "A story about fruit.", 3, 50)),
      signal: aborter.signal,
    }).catch(() => undefined);
    // The first chunk answers at ~600 ms, the second is upstream until ~1200 ms.
    expect(await eventually(async () => received.length === 2, 3_000)).toBe(true);
    aborter.abort();
    await sending;
    let rows: any[] = [];
    expect(await eventually(async () => (rows = await rowsOf(fresh.teamId)).length === 1, 5_000)).toBe(true);
    // The first chunk's usage, and the second's bound: the upstream had it (review 11b, M1).
    const charged = (received[0].prompt as string[]).reduce((n, t) => n + words(t).length, 0) + bound(received[1]);
    expect(rows[0]).toEqual(expect.objectContaining({ status: "cancelled", prompt_tokens: charged }));
    expect(BigInt(rows[0].cost_micros)).toBe(BigInt(2 * charged));
  });

  test("when scoring passes the time limit, then 504 and the request is recorded failed and charged the chunks answered", async () => {
    const fresh = await createTestCaller(gateway.url);
    received.length = 0;
    // Three chunks of 600 ms each; the limit (1.5 s) passes while the third is upstream.
    const res = await request(gateway.url, "POST", "/v1/decisions", {
      token: fresh.key,
      body: wide("up-slow", "A story about fruit.", 3, 50),
    });
    expectEnvelope(res, 504);
    expect(res.body.detail).toMatch(/limit of 1500 ms/);
    // The two chunks answered, and the third's bound: it was upstream when the limit passed (review 11b, M1).
    const answered =
      (received.slice(0, 2).flatMap((b) => b.prompt) as string[]).reduce((n, t) => n + words(t).length, 0) +
      bound(received[2]);
    const [row] = await rowsOf(fresh.teamId);
    expect(row).toEqual(
      expect.objectContaining({
        status: "failed",
        prompt_tokens: answered,
        error_json: expect.objectContaining({ code: "engine_timeout" }),
      }),
    );
    expect(BigInt(row.cost_micros)).toBe(BigInt(2 * answered));
  });
});

test("when an upstream decision is scoring, then its activity row says running, and its end says completed (issue 11 re-review)", async () => {
  // A gateway that writes the rows of requests in flight after 100 ms (a `fake-slow` chunk takes 600 ms).
  const early = await startTestServer({
    catalogPath: catalog,
    upstreams: [{ name: "fake", base_url: fakeUrl, models: FAKE_MODELS }],
    activityInFlightAfterMs: 100,
  });
  try {
    const fresh = await createTestCaller(early.url);
    const statuses = async () =>
      (await early.db<any>("SELECT status FROM activity WHERE team_id = $1", [fresh.teamId])).map((r) => r.status);
    const pending = request(early.url, "POST", "/v1/decisions", {
      token: fresh.key,
      body: { model: "up-slow", state: "A red apple.", questions: { q: { type: "noul" } } },
    });
    // The one chunk is upstream: scoring has started, so the early row is running, not pending.
    expect(await eventually(async () => (await statuses()).includes("running"), 5_000)).toBe(true);
    expect((await pending).status).toBe(200);
    await early.app.metering.drainAll();
    expect(await statuses()).toEqual(["completed"]);
  } finally {
    await early.close();
  }
});

test("when one label is a prefix of another, then each answer is scored with an end marker and the longer one is not beaten by construction (review finding 6)", async () => {
  received.length = 0;
  const res = await post({
    model: "up-lp",
    state: "A story about fruit.",
    questions: { kind: { type: "choice", criteria: { big: "", "big apple": "" } } },
  });
  expect(res.status).toBe(200);
  expect((received[0].prompt as string[]).every((p) => p.endsWith("\n"))).toBe(true);
  // " big" + "\n" = −1 − 5; " big apple" + "\n" = −1.25 − 0.1. Without the marker " big" (−1) would win.
  const p = 1 / (1 + Math.exp(-6 + 1.35));
  expect(res.body.answers.kind.choice).toBe("big apple");
  expect(res.body.answers.kind.probabilities["big apple"]).toBeCloseTo(p, 12);
});

describe("upstream work sent is charged however the request ends (review 11b, M1 and M2)", () => {
  test("when the client leaves while the only chunk is upstream, then the request is recorded cancelled and charged that chunk's bound", async () => {
    const fresh = await createTestCaller(gateway.url);
    received.length = 0;
    const aborter = new AbortController();
    const sending = fetch(`${gateway.url}/v1/decisions`, {
      method: "POST",
      headers: { authorization: `Bearer ${fresh.key}`, "content-type": "application/json" },
      body: JSON.stringify(wide("up-slow", "A story about fruit.", 1, 10)),
      signal: aborter.signal,
    }).catch(() => undefined);
    expect(await eventually(async () => received.length === 1, 3_000)).toBe(true);
    aborter.abort();
    await sending;
    let rows: any[] = [];
    expect(
      await eventually(
        async () => (rows = await rowsOf(fresh.teamId)).length === 1 && rows[0].status !== "running",
        5_000,
      ),
    ).toBe(true);
    expect(rows[0]).toEqual(expect.objectContaining({ status: "cancelled", prompt_tokens: bound(received[0]) }));
    expect(BigInt(rows[0].cost_micros)).toBe(BigInt(2 * bound(received[0])));
  });

  test("when the upstream refuses a later chunk as too long, then 400 names that question and the chunks answered are recorded failed and charged", async () => {
    const fresh = await createTestCaller(gateway.url);
    received.length = 0;
    const body = wide("up-ctx", "A story about fruit.", 2, 50) as any;
    body.questions.last = { type: "noul", instructions: "long ".repeat(1000) };
    const res = await request(gateway.url, "POST", "/v1/decisions", { token: fresh.key, body });
    expectInvalid(res, "questions.last");
    expect(res.body.detail).not.toMatch(/cannot give log-probabilities/);
    expect(res.body.detail).toMatch(/maximum context length/);
    // Chunk 1 (64 prompts of q0) answered; chunk 2 (q1's 36 and last's 2) refused.
    expect(received).toHaveLength(2);
    const answered = (received[0].prompt as string[]).reduce((n, t) => n + words(t).length, 0);
    const rows = await rowsOf(fresh.teamId);
    expect(rows).toHaveLength(1);
    expect(rows[0]).toEqual(
      expect.objectContaining({
        status: "failed",
        prompt_tokens: answered,
        error_json: expect.objectContaining({ code: "invalid_request" }),
      }),
    );
    expect(BigInt(rows[0].cost_micros)).toBe(BigInt(2 * answered));

    // Refused at the first chunk: the same 400, and nothing was processed, so nothing is recorded.
    const other = await createTestCaller(gateway.url);
    const alone = await request(gateway.url, "POST", "/v1/decisions", {
      token: other.key,
      body: { model: "up-ctx", state: "x", questions: { last: body.questions.last } },
    });
    expectInvalid(alone, "questions.last");
    expect(await rowsOf(other.teamId)).toHaveLength(0);
  });
});

test("when the record of a stopped request cannot be written, then the failure is logged with the request (review 11b, L4)", async () => {
  const fresh = await createTestCaller(gateway.url);
  // A real write failure: the database refuses this team's ended rows (the early running row passes).
  await gateway.db(`CREATE FUNCTION refuse_ended() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN IF NEW.status <> 'running' AND NEW.status <> 'pending' THEN RAISE EXCEPTION 'refused by test'; END IF; RETURN NEW; END $$`);
  await gateway.db(
    `CREATE TRIGGER refuse_ended BEFORE INSERT OR UPDATE ON activity FOR EACH ROW
       WHEN (NEW.team_id = '${fresh.teamId}') EXECUTE FUNCTION refuse_ended()`,
  );
  try {
    const from = logs.lines.length;
    received.length = 0;
    const aborter = new AbortController();
    const sending = fetch(`${gateway.url}/v1/decisions`, {
      method: "POST",
      headers: { authorization: `Bearer ${fresh.key}`, "content-type": "application/json" },
      body: JSON.stringify(wide("up-slow", "A story about fruit.", 1, 10)),
      signal: aborter.signal,
    }).catch(() => undefined);
    expect(await eventually(async () => received.length === 1, 3_000)).toBe(true);
    aborter.abort();
    await sending;
    expect(
      await eventually(
        async () => logs.records(from).some((r) => r.msg?.startsWith("recording stopped scoring failed")),
        5_000,
      ),
    ).toBe(true);
    const line = logs.records(from).find((r) => r.msg?.startsWith("recording stopped scoring failed"))!;
    expect(line).toEqual(expect.objectContaining({ teamId: fresh.teamId, promptTokens: bound(received[0]) }));
  } finally {
    await gateway.db("DROP TRIGGER refuse_ended ON activity");
    await gateway.db("DROP FUNCTION refuse_ended()");
  }
});
