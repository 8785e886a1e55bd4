/**
 * `POST /v1/embeddings` (OpenAI Embeddings) through the official `openai` client (which asks for
 * base64 and decodes it) and raw HTTP, on the real tinystories embedding model: input forms,
 * encodings, `dimensions`, the error envelope, credentials and metering.
 */
import path from "node:path";
import type { LlamaModel } from "node-llama-cpp";
import OpenAI from "openai";
import {
  CHAT_MODEL,
  EMBED_MODEL,
  MODELS_DIR,
  type TestServer,
  createTestCaller,
  expectEnvelope,
  expectInvalid,
  http,
  openaiClient,
  startTestServer,
} from "./support/harness.js";

const DIMENSIONS = 64;
const VOCAB = 512;

let server: TestServer;
let caller: Awaited<ReturnType<typeof createTestCaller>>;
let client: OpenAI;
/** The GGUF's own tokenizer, loaded apart from the server, to build token-id inputs. */
let tokenizer: LlamaModel;

beforeAll(async () => {
  server = await startTestServer();
  caller = await createTestCaller(server.url);
  client = openaiClient(server.url, caller.key);
  const { getLlama, LlamaLogLevel } = await import("node-llama-cpp");
  const llama = await getLlama({ gpu: false, build: "never", logLevel: LlamaLogLevel.error, logger: () => undefined });
  tokenizer = await llama.loadModel({ modelPath: path.join(MODELS_DIR, "stories260K.gguf") });
});
afterAll(async () => {
  await tokenizer?.dispose();
  await server.close();
});

const norm = (v: number[]) => Math.sqrt(v.reduce((s, x) => s + x * x, 0));
const dot = (a: number[], b: number[]) => a.reduce((s, x, i) => s + x * b[i], 0);
const tokens = (text: string) => Array.from(tokenizer.tokenize(text), Number);

async function embedOne(input: string): Promise<number[]> {
  const res = await client.embeddings.create({ model: EMBED_MODEL, input });
  expect(res.data).toHaveLength(1);
  return res.data[0].embedding;
}

function post(body: unknown, key = caller.key) {
  return http(server.url, "POST", "/v1/embeddings", { token: key, body });
}

describe("POST /v1/embeddings: vectors", () => {
  test("when one string is embedded with the SDK, then one 64-dim unit vector comes back with usage", async () => {
    const res = await client.embeddings.create({ model: EMBED_MODEL, input: "The cat sat on the mat." });
    expect(res.object).toBe("list");
    expect(res.model).toBe(EMBED_MODEL);
    expect(res.data).toHaveLength(1);
    expect(res.data[0]).toEqual({ object: "embedding", index: 0, embedding: expect.any(Array) });
    const vector = res.data[0].embedding;
    expect(vector).toHaveLength(DIMENSIONS);
    for (const x of vector) expect(Number.isFinite(x)).toBe(true);
    expect(norm(vector)).toBeCloseTo(1, 5);
    expect(res.usage.prompt_tokens).toBe(tokens("The cat sat on the mat.").length);
    expect(res.usage.prompt_tokens).toBeGreaterThan(0);
    expect(res.usage.total_tokens).toBe(res.usage.prompt_tokens);
  });

  test("when an array of strings is embedded, then the vectors come in input order with their index", async () => {
    const inputs = ["A red ball.", "The dog barked loudly at the moon.", "Lily", "A red ball."];
    const res = await client.embeddings.create({ model: EMBED_MODEL, input: inputs });
    expect(res.data.map((d) => d.index)).toEqual([0, 1, 2, 3]);
    expect(res.usage.prompt_tokens).toBe(inputs.reduce((n, s) => n + tokens(s).length, 0));
    for (let i = 0; i < inputs.length; i++) {
      const alone = await embedOne(inputs[i]);
      expect(res.data[i].embedding).toHaveLength(DIMENSIONS);
      expect(norm(res.data[i].embedding)).toBeCloseTo(1, 5);
      expect(res.data[i].embedding).toEqual(alone);
    }
    expect(res.data[3].embedding).toEqual(res.data[0].embedding);
  });

  test("when the same text is embedded twice, then the vectors are equal; different texts differ", async () => {
    const a1 = await embedOne("Tom liked to play in the park.");
    const a2 = await embedOne("Tom liked to play in the park.");
    const b = await embedOne("The old boat sank in the storm.");
    expect(a2).toEqual(a1);
    expect(b).not.toEqual(a1);
    expect(dot(a1, b)).toBeLessThan(0.9999);
    expect(dot(a1, a2)).toBeCloseTo(1, 5);
  });

  test("when encoding_format is float over raw HTTP, then numbers come back equal to the decoded base64 variant", async () => {
    const input = "The sun was warm and bright.";
    const float = await post({ model: EMBED_MODEL, input, encoding_format: "float" });
    expect(float.status).toBe(200);
    const floats: number[] = float.body.data[0].embedding;
    expect(floats).toHaveLength(DIMENSIONS);
    for (const x of floats) expect(typeof x).toBe("number");

    const base64 = await post({ model: EMBED_MODEL, input, encoding_format: "base64" });
    expect(base64.status).toBe(200);
    const encoded: string = base64.body.data[0].embedding;
    expect(typeof encoded).toBe("string");
    const bytes = Buffer.from(encoded, "base64");
    expect(bytes.length).toBe(DIMENSIONS * 4);
    const decoded = Array.from({ length: DIMENSIONS }, (_, i) => bytes.readFloatLE(i * 4));

    // base64 is little-endian float32 of the same vector; the SDK's default decodes to the same.
    expect(decoded).toEqual(floats.map((x) => Math.fround(x)));
    expect(await embedOne(input)).toEqual(decoded);

    // Without encoding_format the answer is float, as OpenAI's is.
    const byDefault = await post({ model: EMBED_MODEL, input });
    expect(byDefault.body.data[0].embedding).toEqual(floats);
  });

  test("when the SDK asks for float explicitly, then it gets the float array unchanged", async () => {
    const res = await client.embeddings.create({ model: EMBED_MODEL, input: "A bird sang.", encoding_format: "float" });
    const raw = await post({ model: EMBED_MODEL, input: "A bird sang.", encoding_format: "float" });
    expect(res.data[0].embedding).toEqual(raw.body.data[0].embedding);
  });

  test("when token ids are given as int[], then they embed like the text they encode", async () => {
    const text = "Once upon a time there was a frog.";
    const ids = tokens(text);
    expect(ids.length).toBeGreaterThan(3);
    const res = await client.embeddings.create({ model: EMBED_MODEL, input: ids });
    expect(res.data).toHaveLength(1);
    expect(res.usage.prompt_tokens).toBe(ids.length);
    expect(res.data[0].embedding).toEqual(await embedOne(text));
  });

  test("when token ids are given as int[][], then one vector per list comes back in order", async () => {
    const texts = ["The fox ran.", "Mom baked a big cake for Ben."];
    const ids = texts.map(tokens);
    const res = await client.embeddings.create({ model: EMBED_MODEL, input: ids });
    expect(res.data.map((d) => d.index)).toEqual([0, 1]);
    expect(res.usage.prompt_tokens).toBe(ids[0].length + ids[1].length);
    expect(res.data[0].embedding).toEqual(await embedOne(texts[0]));
    expect(res.data[1].embedding).toEqual(await embedOne(texts[1]));
    expect(res.data[0].embedding).not.toEqual(res.data[1].embedding);
  });

  test("when dimensions is 16, then 16-dim unit vectors come back: the full vector cut and renormalised", async () => {
    const input = "The little car went fast.";
    const res = await client.embeddings.create({ model: EMBED_MODEL, input, dimensions: 16 });
    const short = res.data[0].embedding;
    expect(short).toHaveLength(16);
    expect(norm(short)).toBeCloseTo(1, 5);
    const full = await embedOne(input);
    const head = full.slice(0, 16);
    const scale = norm(head);
    short.forEach((x, i) => expect(x).toBeCloseTo(head[i] / scale, 5));

    const floats = await post({ model: EMBED_MODEL, input: [input, "x"], dimensions: 16, encoding_format: "float" });
    expect(floats.status).toBe(200);
    for (const d of floats.body.data) expect(d.embedding).toHaveLength(16);
  });

  test("when dimensions is the native 64, then the full vector comes back", async () => {
    const res = await client.embeddings.create({ model: EMBED_MODEL, input: "A happy day.", dimensions: DIMENSIONS });
    const full = await embedOne("A happy day.");
    res.data[0].embedding.forEach((x, i) => expect(x).toBeCloseTo(full[i], 6));
  });

  test("when the answer is sent, then it carries x-switchyard-overhead-ms", async () => {
    const { response } = await client.embeddings.create({ model: EMBED_MODEL, input: "hi" }).withResponse();
    const header = response.headers.get("x-switchyard-overhead-ms");
    expect(header).not.toBeNull();
    expect(Number(header)).toBeGreaterThanOrEqual(0);
  });
});

describe("POST /v1/embeddings: invalid input", () => {
  test("when input is missing, then 400 naming input", async () => {
    expectInvalid(await post({ model: EMBED_MODEL }), "input");
  });

  test("when input is an empty string, then 400 naming input", async () => {
    expectInvalid(await post({ model: EMBED_MODEL, input: "" }), "input");
  });

  test("when input is an empty array, or an array holding an empty string or list, then 400 naming it", async () => {
    expectInvalid(await post({ model: EMBED_MODEL, input: [] }), "input");
    expectInvalid(await post({ model: EMBED_MODEL, input: ["a cat", ""] }), "input[1]");
    expectInvalid(await post({ model: EMBED_MODEL, input: [[1, 2], []] }), "input[1]");
  });

  test("when a token id is at or above the vocabulary size, then 400 naming the input", async () => {
    expectInvalid(await post({ model: EMBED_MODEL, input: [1, VOCAB] }), "input");
    expectInvalid(
      await post({
        model: EMBED_MODEL,
        input: [
          [1, 2],
          [3, VOCAB + 100],
        ],
      }),
      "input[1]",
    );
    // The largest valid id is accepted.
    expect((await post({ model: EMBED_MODEL, input: [VOCAB - 1] })).status).toBe(200);
  });

  test("when a token id is negative or not an integer, or input has the wrong type, then 400 naming input", async () => {
    for (const input of [[1, -1], [1, 2.5], [[1], [2, -3]], ["a", 1], 42, { text: "hi" }, null]) {
      const res = await post({ model: EMBED_MODEL, input });
      expectEnvelope(res, 400);
      const fields = (res.body.extra as Array<{ field: string }>).map((i) => i.field);
      expect(fields.length).toBeGreaterThan(0);
      for (const field of fields) expect(field).toMatch(/^input(\[\d+\])*$/);
    }
  });

  test("when an input is longer than the 512-token context, then 400 naming it", async () => {
    expectInvalid(await post({ model: EMBED_MODEL, input: "word ".repeat(600) }), "input");
    expectInvalid(await post({ model: EMBED_MODEL, input: ["short", "word ".repeat(600)] }), "input[1]");
  });

  test("when encoding_format is hex, then 400 naming encoding_format", async () => {
    expectInvalid(await post({ model: EMBED_MODEL, input: "hi", encoding_format: "hex" }), "encoding_format");
  });

  test("when dimensions is above 64 or below 1, then 400 naming dimensions", async () => {
    expectInvalid(await post({ model: EMBED_MODEL, input: "hi", dimensions: 65 }), "dimensions");
    expectInvalid(await post({ model: EMBED_MODEL, input: "hi", dimensions: 0 }), "dimensions");
    expectInvalid(await post({ model: EMBED_MODEL, input: "hi", dimensions: 8.5 }), "dimensions");
    const err = await client.embeddings
      .create({ model: EMBED_MODEL, input: "hi", dimensions: 65 })
      .catch((e: unknown) => e);
    expect(err).toBeInstanceOf(OpenAI.BadRequestError);
  });

  test("when a generation model is named, then 400 naming model", async () => {
    expectInvalid(await post({ model: CHAT_MODEL, input: "hi" }), "model");
  });

  test("when model is missing, then 400 naming model", async () => {
    expectInvalid(await post({ input: "hi" }), "model");
  });

  test("when the model is unknown, then 404 with the envelope and the SDK raises NotFoundError", async () => {
    const res = await post({ model: "no-such-embedder", input: "hi" });
    expectEnvelope(res, 404);
    expect(res.body.detail).toContain("no-such-embedder");
    const err = await client.embeddings.create({ model: "no-such-embedder", input: "hi" }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(OpenAI.NotFoundError);
  });
});

describe("POST /v1/embeddings: credentials", () => {
  test("when no key is sent, then 401 with the envelope", async () => {
    const res = await http(server.url, "POST", "/v1/embeddings", { body: { model: EMBED_MODEL, input: "hi" } });
    expectEnvelope(res, 401);
  });

  test("when a wrong key is sent, then 401 with the envelope and the SDK raises AuthenticationError", async () => {
    const badKey = `sk_${"y".repeat(48)}`;
    expectEnvelope(await post({ model: EMBED_MODEL, input: "hi" }, badKey), 401);
    const err = await openaiClient(server.url, badKey)
      .embeddings.create({ model: EMBED_MODEL, input: "hi" })
      .catch((e: unknown) => e);
    expect(err).toBeInstanceOf(OpenAI.AuthenticationError);
  });

  test("when the key comes as x-api-key, then it is accepted", async () => {
    const res = await http(server.url, "POST", "/v1/embeddings", {
      headers: { "x-api-key": caller.key },
      body: { model: EMBED_MODEL, input: "hi" },
    });
    expect(res.status).toBe(200);
    expect(res.body.data).toHaveLength(1);
  });
});

describe("POST /v1/embeddings: metering", () => {
  test("when inputs are embedded, then one activity row records the prompt tokens, the key and the charge", async () => {
    const fresh = await createTestCaller(server.url);
    // Enough tokens for a non-zero charge at 0.01 USD per million tokens (≥ 50 tokens).
    const inputs = Array.from({ length: 8 }, (_, i) => `Story ${i}: the little red hen found a seed in the big farm.`);
    const res = await openaiClient(server.url, fresh.key).embeddings.create({ model: EMBED_MODEL, input: inputs });
    expect(res.usage.prompt_tokens).toBeGreaterThanOrEqual(50);

    const rows = await server.db<any>("SELECT * FROM activity WHERE team_id = $1", [fresh.teamId]);
    expect(rows).toHaveLength(1);
    const row = rows[0];
    expect(row).toEqual(
      expect.objectContaining({
        endpoint: "/v1/embeddings",
        status: "completed",
        type: "standalone",
        model: EMBED_MODEL,
        user_id: fresh.userId,
        api_key_id: fresh.keyId,
        api_key_name: "test key",
        api_key_prefix: fresh.keyPrefix,
        prompt_tokens: res.usage.prompt_tokens,
        completion_tokens: 0,
        total_tokens: res.usage.prompt_tokens,
        cached_prompt_tokens: 0,
      }),
    );
    // 0.01 USD per million input tokens, rounded half up once.
    const cost = (BigInt(res.usage.prompt_tokens) * 10_000n + 500_000n) / 1_000_000n;
    expect(BigInt(row.cost_micros)).toBe(cost);

    const ledger = await server.db<any>("SELECT * FROM credit_ledger WHERE team_id = $1 AND type = 'usage'", [
      fresh.teamId,
    ]);
    expect(ledger).toHaveLength(1);
    expect(ledger[0].source_id).toBe(row.id);
    expect(BigInt(ledger[0].amount_micros)).toBe(-cost);
  });

  test("when metadata carries custom_id, then the activity row keeps it", async () => {
    const fresh = await createTestCaller(server.url);
    const res = await post({ model: EMBED_MODEL, input: "hi there", metadata: { custom_id: "emb-1" } }, fresh.key);
    expect(res.status).toBe(200);
    const rows = await server.db<any>("SELECT custom_id, prompt_tokens FROM activity WHERE team_id = $1", [
      fresh.teamId,
    ]);
    expect(rows).toEqual([{ custom_id: "emb-1", prompt_tokens: res.body.usage.prompt_tokens }]);
  });

  test("when a request is refused with 400, then nothing is metered", async () => {
    const fresh = await createTestCaller(server.url);
    expectInvalid(await post({ model: EMBED_MODEL, input: [1, VOCAB] }, fresh.key), "input");
    expectInvalid(await post({ model: EMBED_MODEL, input: "hi", dimensions: 65 }, fresh.key), "dimensions");
    expect(await server.db("SELECT id FROM activity WHERE team_id = $1", [fresh.teamId])).toHaveLength(0);
  });
});
