/**
 * `GET /v1/models` through the official `openai` and `@anthropic-ai/sdk` clients and raw HTTP:
 * every field of the spec's Model, the catalog behind it, the Anthropic list shape (with an
 * `anthropic-version` header), and credentials.
 */
import { mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import Anthropic from "@anthropic-ai/sdk";
import OpenAI from "openai";
import { packageRoot } from "../src/config/config.js";
import {
  CHAT_MODEL,
  EMBED_MODEL,
  type TestServer,
  anthropicClient,
  createTestCaller,
  expectEnvelope,
  http,
  openaiClient,
  startTestServer,
} from "./support/harness.js";

let server: TestServer;
let caller: Awaited<ReturnType<typeof createTestCaller>>;

/** The shipped catalog file: the source of truth the list must reflect. */
const catalog = JSON.parse(readFileSync(path.join(packageRoot, "src/config/catalog.json"), "utf8")) as {
  models: Array<{
    id: string;
    display_name: string;
    provider: string;
    modality: string;
    context_tokens: number;
    released: string;
    platform_status?: string;
    pricing: Record<string, number>;
    capabilities: Record<string, unknown>;
  }>;
};

/** Ids `/v1/models` lists, in catalog order: the shipped catalog but its `coming_soon` models. */
const OFFERED = catalog.models.filter((m) => m.platform_status !== "coming_soon").map((m) => m.id);

beforeAll(async () => {
  server = await startTestServer();
  caller = await createTestCaller(server.url);
});
afterAll(() => server.close());

const MODEL_KEYS = [
  "capabilities",
  "context_tokens",
  "created",
  "deploy_status",
  "display_name",
  "id",
  "modality",
  "object",
  "owned_by",
  "pricing",
  "provider",
  "released",
  "status_reason",
];

/** Asserts one item has every field of the spec's Model with the right type. */
function expectModelShape(m: any): void {
  expect(typeof m.id).toBe("string");
  expect(m.object).toBe("model");
  expect(Number.isInteger(m.created)).toBe(true);
  expect(m.owned_by).toBe("switchyard");
  expect(typeof m.display_name).toBe("string");
  expect(["text_generation", "text_embedding", "decisions"]).toContain(m.modality);
  const c = m.capabilities;
  for (const flag of [
    c.image_input.supported,
    c.pdf_input.supported,
    c.thinking.supported,
    c.thinking.types.enabled.supported,
    c.thinking.types.adaptive.supported,
    c.tools.supported,
    c.decisions.supported,
  ]) {
    expect(typeof flag).toBe("boolean");
  }
  expect(c.dimensions === null || Number.isInteger(c.dimensions)).toBe(true);
  expect(Number.isInteger(m.context_tokens)).toBe(true);
  expect(typeof m.provider).toBe("string");
  expect(Object.keys(m.pricing).sort()).toEqual([
    "cached_input_per_million_usd",
    "input_per_million_usd",
    "output_per_million_usd",
  ]);
  for (const price of Object.values(m.pricing)) expect(typeof price).toBe("number");
  expect(typeof m.released).toBe("string");
}

describe("GET /v1/models: OpenAI shape", () => {
  test("when listed over raw HTTP, then a list object holds every catalog model with the spec's fields", async () => {
    const res = await http(server.url, "GET", "/v1/models", { token: caller.key });
    expect(res.status).toBe(200);
    expect(Object.keys(res.body).sort()).toEqual(["data", "object"]);
    expect(res.body.object).toBe("list");
    const offered = catalog.models.filter((m) => m.platform_status !== "coming_soon");
    expect(res.body.data.map((m: any) => m.id)).toEqual(offered.map((m) => m.id));
    for (const m of res.body.data) {
      expectModelShape(m);
      expect(Object.keys(m).sort()).toEqual(MODEL_KEYS);
    }
    expect(res.headers.get("x-switchyard-overhead-ms")).not.toBeNull();
  });

  test("when listed, then each item matches its catalog entry: names, modality, context, prices, release date", async () => {
    const res = await http(server.url, "GET", "/v1/models", { token: caller.key });
    for (const entry of catalog.models.filter((m) => m.platform_status !== "coming_soon")) {
      const m = res.body.data.find((x: any) => x.id === entry.id);
      expect(m).toBeDefined();
      expect(m.display_name).toBe(entry.display_name);
      expect(m.provider).toBe(entry.provider);
      expect(m.modality).toBe(entry.modality);
      expect(m.context_tokens).toBe(entry.context_tokens);
      expect(m.released).toBe(entry.released);
      // `created` is the release date in Unix seconds.
      expect(m.created).toBe(Date.parse(`${entry.released}T00:00:00Z`) / 1000);
      expect(m.pricing).toEqual({
        input_per_million_usd: entry.pricing.input_per_million_usd,
        output_per_million_usd: entry.pricing.output_per_million_usd,
        cached_input_per_million_usd: entry.pricing.cached_input_per_million_usd ?? entry.pricing.input_per_million_usd,
      });
      expect(m.capabilities.tools.supported).toBe(entry.capabilities.tools);
      expect(m.capabilities.image_input.supported).toBe(entry.capabilities.image_input);
      expect(m.capabilities.pdf_input.supported).toBe(entry.capabilities.pdf_input);
      expect(m.capabilities.thinking.supported).toBe(entry.capabilities.thinking);
      // Decision-capable models say so (DESIGN §3 Decisions).
      expect(m.capabilities.decisions.supported).toBe(
        entry.capabilities.decisions === true || entry.modality === "decisions",
      );
    }
  });

  test("when listed, then the generation model is text_generation without dimensions", async () => {
    const res = await http(server.url, "GET", "/v1/models", { token: caller.key });
    const chat = res.body.data.find((m: any) => m.id === CHAT_MODEL);
    expect(chat).toEqual({
      id: CHAT_MODEL,
      object: "model",
      created: 1690848000,
      owned_by: "switchyard",
      display_name: "TinyStories 260K",
      modality: "text_generation",
      capabilities: {
        image_input: { supported: false },
        pdf_input: { supported: false },
        thinking: { supported: false, types: { enabled: { supported: false }, adaptive: { supported: false } } },
        tools: { supported: true },
        dimensions: null,
        decisions: { supported: true },
        structured_outputs: { supported: true, modes: ["json_object", "json_schema"] },
      },
      context_tokens: 512,
      provider: "switchyard",
      pricing: { input_per_million_usd: 0.02, output_per_million_usd: 0.05, cached_input_per_million_usd: 0.01 },
      released: "2023-08-01",
      deploy_status: "available",
      status_reason: null,
    });
  });

  test("when listed, then the embedding model is text_embedding with 64 dimensions", async () => {
    const res = await http(server.url, "GET", "/v1/models", { token: caller.key });
    const embed = res.body.data.find((m: any) => m.id === EMBED_MODEL);
    expect(embed.modality).toBe("text_embedding");
    expect(embed.capabilities.dimensions).toBe(64);
    expect(embed.pricing).toEqual({
      input_per_million_usd: 0.01,
      output_per_million_usd: 0,
      cached_input_per_million_usd: 0.01,
    });
  });

  test("when listed with the openai client, then models.list() yields the same items", async () => {
    const client = openaiClient(server.url, caller.key);
    const page = await client.models.list();
    const raw = await http(server.url, "GET", "/v1/models", { token: caller.key });
    expect(page.data).toEqual(raw.body.data);
    const ids: string[] = [];
    for await (const model of client.models.list()) {
      expectModelShape(model);
      ids.push(model.id);
    }
    expect(ids).toEqual(OFFERED);
  });

  test("when the caller signs in with an access token instead of a key, then the list is served too", async () => {
    const res = await http(server.url, "GET", "/v1/models", { token: caller.token });
    expect(res.status).toBe(200);
    expect(res.body.data.map((m: any) => m.id)).toEqual(OFFERED);
  });
});

describe("GET /v1/models: Anthropic shape", () => {
  test("when an anthropic-version header is sent, then the list has data, first_id, last_id and has_more", async () => {
    const res = await http(server.url, "GET", "/v1/models", {
      headers: { "x-api-key": caller.key, "anthropic-version": "2023-06-01" },
    });
    expect(res.status).toBe(200);
    expect(Object.keys(res.body).sort()).toEqual(["data", "first_id", "has_more", "last_id"]);
    expect(res.body.has_more).toBe(false);
    const ids = res.body.data.map((m: any) => m.id);
    expect(ids).toEqual(OFFERED);
    expect(res.body.first_id).toBe(ids[0]);
    expect(res.body.last_id).toBe(ids.at(-1));
    for (const m of res.body.data) {
      expect(m.type).toBe("model");
      expect(typeof m.display_name).toBe("string");
      // created_at is an RFC 3339 date-time: the release date.
      expect(m.created_at).toMatch(/^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?Z$/);
      expect(Date.parse(m.created_at) / 1000).toBe(m.created);
      expect(m.created_at.slice(0, 10)).toBe(m.released);
    }
  });

  test("when listed with the anthropic client, then models.list() yields ModelInfo items", async () => {
    const client = anthropicClient(server.url, caller.key);
    const page = await client.models.list();
    expect(page.data.map((m) => m.id)).toEqual(OFFERED);
    expect(page.has_more).toBe(false);
    expect(page.first_id).toBe(OFFERED[0]);
    expect(page.last_id).toBe(OFFERED.at(-1));
    const seen: string[] = [];
    for await (const model of client.models.list()) {
      expect(model.type).toBe("model");
      expect(model.display_name.length).toBeGreaterThan(0);
      expect(Number.isNaN(Date.parse(model.created_at))).toBe(false);
      seen.push(model.id);
    }
    expect(seen).toEqual(OFFERED);
    const chat = page.data.find((m) => m.id === CHAT_MODEL)!;
    expect(chat.display_name).toBe("TinyStories 260K");
    expect(chat.created_at).toBe("2023-08-01T00:00:00.000Z");
  });
});

describe("GET /v1/models: catalog status", () => {
  test("when a catalog model is coming_soon, then it is not listed; a deprecated one still is", async () => {
    const dir = mkdtempSync(path.join(os.tmpdir(), "switchyard-catalog-"));
    const file = path.join(dir, "catalog.json");
    const chat = catalog.models.find((m) => m.id === CHAT_MODEL)!;
    writeFileSync(
      file,
      JSON.stringify({
        default_model: CHAT_MODEL,
        models: [
          ...catalog.models,
          { ...chat, id: "tinystories-next", display_name: "Next", platform_status: "coming_soon" },
          { ...chat, id: "tinystories-old", display_name: "Old", platform_status: "deprecated" },
        ],
      }),
    );
    const other = await startTestServer({ catalogPath: file });
    try {
      const user = await createTestCaller(other.url);
      const res = await http(other.url, "GET", "/v1/models", { token: user.key });
      expect(res.status).toBe(200);
      expect(res.body.data.map((m: any) => m.id)).toEqual([...OFFERED, "tinystories-old"]);
      for (const m of res.body.data) expectModelShape(m);
    } finally {
      await other.close();
    }
  });
});

describe("GET /v1/models/{model_id}", () => {
  test("when a listed model is asked for, then it is the same item as in the list, in either shape", async () => {
    const list = await http(server.url, "GET", "/v1/models", { token: caller.key });
    const one = await http(server.url, "GET", "/v1/models/tinystories-260k", { token: caller.key });
    expect(one.status).toBe(200);
    expect(one.body).toEqual(list.body.data.find((m: { id: string }) => m.id === "tinystories-260k"));
    const client = new OpenAI({ apiKey: caller.key, baseURL: `${server.url}/v1`, maxRetries: 0 });
    expect((await client.models.retrieve("tinystories-260k-embed")).id).toBe("tinystories-260k-embed");
    const anthropic = await http(server.url, "GET", "/v1/models/tinystories-260k", {
      token: caller.key,
      headers: { "anthropic-version": "2023-06-01" },
    });
    expect(anthropic.body).toMatchObject({
      type: "model",
      id: "tinystories-260k",
      created_at: "2023-08-01T00:00:00.000Z",
    });
  });

  test("when the model is unknown, then 404; without credentials, then 401", async () => {
    expectEnvelope(await http(server.url, "GET", "/v1/models/no-such-model", { token: caller.key }), 404);
    expectEnvelope(await http(server.url, "GET", "/v1/models/tinystories-260k"), 401);
  });
});

describe("GET /v1/models: credentials", () => {
  test("when no credentials are sent, then 401 with the envelope", async () => {
    expectEnvelope(await http(server.url, "GET", "/v1/models"), 401);
    expectEnvelope(
      await http(server.url, "GET", "/v1/models", { headers: { "anthropic-version": "2023-06-01" } }),
      401,
    );
  });

  test("when a wrong key is sent, then 401 with the envelope and both SDKs raise AuthenticationError", async () => {
    const badKey = `sk_${"z".repeat(48)}`;
    expectEnvelope(await http(server.url, "GET", "/v1/models", { token: badKey }), 401);
    expectEnvelope(await http(server.url, "GET", "/v1/models", { headers: { "x-api-key": badKey } }), 401);
    const openaiErr = await openaiClient(server.url, badKey)
      .models.list()
      .catch((e: unknown) => e);
    expect(openaiErr).toBeInstanceOf(OpenAI.AuthenticationError);
    const anthropicErr = await anthropicClient(server.url, badKey)
      .models.list()
      .catch((e: unknown) => e);
    expect(anthropicErr).toBeInstanceOf(Anthropic.AuthenticationError);
  });
});
