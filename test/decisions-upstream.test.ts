/**
 * Decisions on the upstream engine (issue 11, item 3): a gateway Switchyard routes decision
 * models to a loopback fake of a vLLM server that answers `POST /v1/completions` with echoed
 * prompt log-probabilities (`logprobs.{tokens, token_logprobs, text_offset}`), and to one that
 * answers without them (a clear 400). The fake tokenises by words (each with its leading space)
 * and gives each word a fixed log-probability, so the expected probabilities are exact.
 */
import http from "node:http";
import type net from "node:net";
import {
  CHAT_MODEL,
  type TestServer,
  createTestCaller,
  expectEnvelope,
  expectInvalid,
  http as request,
  startTestServer,
} from "./support/harness.js";
import { writeEditedCatalog } from "./support/test-catalog.js";

/** Log-probability the fake gives each word (with its leading space); others get −3. */
const WORDS: Record<string, number> = { " yes": -0.1, " no": -2.3, " red": -0.5, " big": -1, " apple": -0.25 };

let fake: http.Server;
let fakeUrl: string;
/** Bodies the fake received on /v1/completions. */
const received: any[] = [];
let gateway: TestServer;
let key: string;

function words(text: string): string[] {
  return text.match(/\s*\S+|\s+/g) ?? [];
}

/** A vLLM-shaped completions answer: echo + logprobs for every prompt, one generated token. */
function completions(body: any, withLogprobs: boolean): unknown {
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
    const logprobs = tokens.map((t, i) => (i === 0 ? null : (WORDS[t] ?? -3)));
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
    usage: {
      prompt_tokens: promptTokens,
      completion_tokens: prompts.length,
      total_tokens: promptTokens + prompts.length,
    },
  };
}

beforeAll(async () => {
  fake = http.createServer((req, res) => {
    let data = "";
    req.on("data", (c) => (data += c));
    req.on("end", () => {
      res.setHeader("content-type", "application/json");
      if (req.method === "GET" && req.url === "/v1/models") {
        res.end(
          JSON.stringify({ object: "list", data: [{ id: "fake-lm" }, { id: "fake-nolp" }, { id: "fake-refuses" }] }),
        );
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
        res.end(JSON.stringify(completions(body, body.model === "fake-lm")));
        return;
      }
      res.statusCode = 404;
      res.end(JSON.stringify({ error: { message: "not found" } }));
    });
  });
  await new Promise<void>((resolve) => fake.listen(0, "127.0.0.1", resolve));
  fakeUrl = `http://127.0.0.1:${(fake.address() as net.AddressInfo).port}/v1`;
  const catalog = writeEditedCatalog((c) => {
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
    );
  });
  gateway = await startTestServer({
    catalogPath: catalog,
    upstreams: [{ name: "fake", base_url: fakeUrl, models: ["fake-lm", "fake-nolp", "fake-refuses"] }],
  });
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
  // Metered as the embedded engine counts: the shared prefix once, each question's and answer's own tokens.
  // Prompts 0–1 are the first question's (yes, no), 2–4 the second's (three labels).
  const echoed = (received[0].prompt as string[]).map(words);
  const common = (lists: string[][]) => {
    let n = 0;
    while (lists.every((l) => n < l.length && l[n] === lists[0][n])) n++;
    return n;
  };
  const shared = common(echoed);
  const own = [common(echoed.slice(0, 2)), common(echoed.slice(2))];
  const expected =
    shared + (own[0] - shared) + (own[1] - shared) + echoed.reduce((n, t, i) => n + t.length - own[i < 2 ? 0 : 1], 0);
  expect(shared).toBeGreaterThan(3);
  expect(res.body.usage.input_tokens).toBe(expected);
  expect(res.body.usage.input_tokens).toBeLessThan(echoed.reduce((n, t) => n + t.length, 0));
  const [row] = await gateway.db<any>(
    "SELECT prompt_tokens, completion_tokens, endpoint FROM activity ORDER BY created_at DESC LIMIT 1",
  );
  expect(row).toEqual({ prompt_tokens: res.body.usage.input_tokens, completion_tokens: 0, endpoint: "/v1/decisions" });
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
