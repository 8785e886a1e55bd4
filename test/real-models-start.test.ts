/**
 * What `npm start` serves (issue 17): the shipped catalog's real models, whose files are not in
 * the test models folder, are listed with `not downloaded: run npm run models -- pull <id>` and
 * refused with it (404, never a stack trace) while the start still comes up offline on the small
 * model; the banner lists the models served and the pull commands; `SWITCHYARD_PULL_ON_START`
 * pulls at start (from a loopback hub); a missing default model is pulled when downloads are
 * allowed, and its absence offline does not stop the start.
 */
import { existsSync, mkdirSync, mkdtempSync, readFileSync, symlinkSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import OpenAI from "openai";
import { ConfigError } from "../src/config/config.js";
import { type FakeHub, startFakeHub } from "./support/fake-hub.js";
import {
  CHAT_MODEL,
  EMBED_MODEL,
  MODELS_DIR,
  type TestServer,
  createTestCaller,
  expectEnvelope,
  http,
  openaiClient,
  startTestServer,
} from "./support/harness.js";
import { captureLogs } from "./support/log-capture.js";
import { writeEditedCatalog } from "./support/test-catalog.js";

const QWEN = "qwen2.5-0.5b-instruct";
const NOMIC = "nomic-embed-text-v1.5";
const GGUF = path.join(MODELS_DIR, "stories260K.gguf");
const BYTES = readFileSync(GGUF);
const pullSentence = (id: string) => `not downloaded: run npm run models -- pull ${id}`;

/** A models folder holding the small model only (linked). */
function modelsFolderWithTinyModel(): string {
  const dir = mkdtempSync(path.join(os.tmpdir(), "switchyard-start-models-"));
  symlinkSync(GGUF, path.join(dir, "stories260K.gguf"));
  return dir;
}

describe("the shipped catalog without the real models' files", () => {
  let server: TestServer;
  let caller: Awaited<ReturnType<typeof createTestCaller>>;
  const logs = captureLogs("info");

  beforeAll(async () => {
    server = await startTestServer({ gpu: "auto" }, undefined, { logger: logs.logger });
    caller = await createTestCaller(server.url);
  });
  afterAll(() => server.close());

  test("when the server starts, then it comes up serving the small models, and the banner names the pull command of the others", () => {
    const banner = logs.records().find((r) => Array.isArray(r.served));
    expect(banner).toBeDefined();
    expect(banner!.served).toEqual([CHAT_MODEL, EMBED_MODEL]);
    expect(banner!.engine).toBe("cpu"); // SWITCHYARD_GPU=auto on a machine without a GPU
    expect(banner!.notDownloaded).toEqual([
      { id: QWEN, pull: `npm run models -- pull ${QWEN}` },
      { id: NOMIC, pull: `npm run models -- pull ${NOMIC}` },
    ]);
    expect(banner!.msg).toBe(
      `serving ${CHAT_MODEL}, ${EMBED_MODEL} (embedded engine on cpu, 1 thread(s), 8 sequences config); not downloaded: ${QWEN}, ${NOMIC}; ` +
        `pull with npm run models -- pull ${QWEN} / npm run models -- pull ${NOMIC}`,
    );
    // Nothing tried to load (or download) them.
    const qwen = server.app.catalog.all().find((m) => m.id === QWEN)!;
    expect(server.app.engines.isLoaded(qwen)).toBe(false);
  });

  test("when models are listed, then the real ones carry deploy_status pending_deploy and the pull sentence", async () => {
    const res = await http(server.url, "GET", "/v1/models", { token: caller.key });
    expect(res.status).toBe(200);
    const byId = new Map((res.body.data as any[]).map((m) => [m.id, m]));
    expect(byId.get(CHAT_MODEL)).toMatchObject({ deploy_status: "available", status_reason: null });
    expect(byId.get(QWEN)).toMatchObject({
      modality: "text_generation",
      context_tokens: 8192,
      provider: "qwen",
      deploy_status: "pending_deploy",
      status_reason: pullSentence(QWEN),
    });
    expect(byId.get(NOMIC)).toMatchObject({
      modality: "text_embedding",
      deploy_status: "pending_deploy",
      status_reason: pullSentence(NOMIC),
    });
    expect(byId.get(NOMIC).capabilities.dimensions).toBe(768);
    const one = await http(server.url, "GET", `/v1/models/${QWEN}`, { token: caller.key });
    expect(one.body).toEqual(byId.get(QWEN));

    const catalog = await http(server.url, "GET", "/control/v1/models/catalog", { token: caller.token });
    const entry = (catalog.body.models as any[]).find((m) => m.id === QWEN);
    expect(entry).toMatchObject({
      ownership: "platform",
      platform_status: "available",
      deploy_status: "pending_deploy",
      deployed_on_platform: false,
      status_reason: pullSentence(QWEN),
    });
  });

  test("when a request names a model that is not downloaded, then 404 with the pull sentence, on every endpoint", async () => {
    const chat = await http(server.url, "POST", "/v1/chat/completions", {
      token: caller.key,
      body: { model: QWEN, messages: [{ role: "user", content: "Hello" }] },
    });
    expectEnvelope(chat, 404);
    expect(chat.body.detail).toBe(`Model '${QWEN}' is ${pullSentence(QWEN)}`);
    expect(chat.text).not.toMatch(/\n\s+at /);

    const embed = await http(server.url, "POST", "/v1/embeddings", {
      token: caller.key,
      body: { model: NOMIC, input: "search_query: hello" },
    });
    expectEnvelope(embed, 404);
    expect(embed.body.detail).toBe(`Model '${NOMIC}' is ${pullSentence(NOMIC)}`);

    const messages = await http(server.url, "POST", "/v1/messages", {
      token: caller.key,
      headers: { "anthropic-version": "2023-06-01" },
      body: { model: QWEN, max_tokens: 8, messages: [{ role: "user", content: "Hello" }] },
    });
    expect(messages.status).toBe(404);
    expect(messages.text).toContain(pullSentence(QWEN));

    // The official client sees a NotFoundError (the sentence is in the envelope's `detail`).
    const client = openaiClient(server.url, caller.key);
    const err = await client.chat.completions
      .create({ model: QWEN, messages: [{ role: "user", content: "Hello" }] })
      .catch((e: unknown) => e);
    expect(err).toBeInstanceOf(OpenAI.NotFoundError);

    // The small model still answers.
    const ok = await http(server.url, "POST", "/v1/chat/completions", {
      token: caller.key,
      body: { model: CHAT_MODEL, messages: [{ role: "user", content: "Once" }], max_tokens: 4 },
    });
    expect(ok.status).toBe(200);
  });
});

describe("pulls at start", () => {
  let hub: FakeHub;
  beforeAll(async () => {
    hub = await startFakeHub();
    hub.serve("/test-org/tiny-GGUF/resolve/main/hub-tiny.gguf", BYTES);
    hub.serve("/ggml-org/models/resolve/main/tinyllamas/stories260K.gguf", BYTES);
  });
  afterAll(() => hub.close());

  const catalogPath = writeEditedCatalog((c) => {
    const base = c.models.find((m) => m.id === CHAT_MODEL)!;
    c.models.push(
      {
        ...base,
        id: "hub-tiny",
        display_name: "Hub tiny",
        engine: { ...(base.engine as object), file: "hub-tiny.gguf", source: "hf:test-org/tiny-GGUF/hub-tiny.gguf" },
      },
      {
        ...base,
        id: "hub-gone",
        display_name: "Hub gone",
        engine: { ...(base.engine as object), file: "hub-gone.gguf", source: "hf:test-org/tiny-GGUF/hub-gone.gguf" },
      },
    );
  });

  test("when SWITCHYARD_PULL_ON_START names a model, then the start pulls it from HF_ENDPOINT and serves it", async () => {
    const modelsDir = modelsFolderWithTinyModel();
    const logs = captureLogs("info");
    const server = await startTestServer(
      { catalogPath, modelsDir, pullOnStart: "hub-tiny", hfEndpoint: hub.url },
      undefined,
      { logger: logs.logger },
    );
    try {
      expect(readFileSync(path.join(modelsDir, "hub-tiny.gguf")).equals(BYTES)).toBe(true);
      const pulled = logs.records().find((r) => r.msg === "model file pulled");
      expect(pulled).toMatchObject({ model: "hub-tiny", verified: true });
      expect(logs.records().some((r) => r.msg === "pulling model file" && r.percent === 100)).toBe(true);
      expect(logs.records().find((r) => Array.isArray(r.served))!.served).toContain("hub-tiny");
      const caller = await createTestCaller(server.url);
      const res = await http(server.url, "POST", "/v1/chat/completions", {
        token: caller.key,
        body: { model: "hub-tiny", messages: [{ role: "user", content: "Once upon a time" }], max_tokens: 4 },
      });
      expect(res.status).toBe(200);
    } finally {
      await server.close();
    }
  });

  test("when a killed pull left its lock naming this very pid (a container's pid 1 restarted), then the start takes it over and pulls", async () => {
    const modelsDir = modelsFolderWithTinyModel();
    const partial = path.join(modelsDir, ".partial");
    mkdirSync(partial);
    // What a pull killed mid-file leaves: part, its record, and its lock, which names our pid.
    writeFileSync(path.join(partial, "hub-tiny.gguf.part"), BYTES.subarray(0, 300_000));
    writeFileSync(
      path.join(partial, "hub-tiny.gguf.part.lock"),
      JSON.stringify({ pid: process.pid, host: os.hostname(), started: 1, token: "killed-run" }),
    );
    const server = await startTestServer({ catalogPath, modelsDir, pullOnStart: "hub-tiny", hfEndpoint: hub.url });
    try {
      expect(readFileSync(path.join(modelsDir, "hub-tiny.gguf")).equals(BYTES)).toBe(true);
      expect(existsSync(path.join(partial, "hub-tiny.gguf.part.lock"))).toBe(false);
    } finally {
      await server.close();
    }
  });

  test("when a model of SWITCHYARD_PULL_ON_START cannot be pulled, then the start stops with one line naming it", async () => {
    const start = startTestServer({
      catalogPath,
      modelsDir: modelsFolderWithTinyModel(),
      pullOnStart: "hub-gone",
      hfEndpoint: hub.url,
    });
    await expect(start).rejects.toThrow(ConfigError);
    await expect(start).rejects.toThrow(/^SWITCHYARD_PULL_ON_START: pulling hub-gone failed: .* answered HTTP 404/);
    await expect(
      startTestServer({ catalogPath, modelsDir: modelsFolderWithTinyModel(), pullOnStart: "no-such-model" }),
    ).rejects.toThrow("SWITCHYARD_PULL_ON_START: no-such-model is not in the model catalog");
  });

  test("when the default model's file is missing and downloads are allowed, then the start pulls it and serves it", async () => {
    const modelsDir = mkdtempSync(path.join(os.tmpdir(), "switchyard-empty-models-"));
    const server = await startTestServer({ modelsDir, allowModelDownload: true, hfEndpoint: hub.url });
    try {
      expect(readFileSync(path.join(modelsDir, "stories260K.gguf")).equals(BYTES)).toBe(true);
      const ready = await http(server.url, "GET", "/v1/health/ready");
      expect(ready.status).toBe(200);
    } finally {
      await server.close();
    }
  });

  test("when the default model's file is missing and the hub cannot be reached, then the start still comes up and says so", async () => {
    const modelsDir = mkdtempSync(path.join(os.tmpdir(), "switchyard-empty-models-"));
    const logs = captureLogs("info");
    const server = await startTestServer(
      { modelsDir, allowModelDownload: true, hfEndpoint: "http://127.0.0.1:9" },
      undefined,
      { logger: logs.logger },
    );
    try {
      const warning = logs.records().find((r) => r.level === 40 && r.model === CHAT_MODEL);
      expect(warning?.msg).toContain(`run npm run models -- pull ${CHAT_MODEL}`);
      // No embedded model loaded: llama.cpp was not started only to name its backend.
      const banner = logs.records().find((r) => Array.isArray(r.served));
      expect(banner).toMatchObject({ served: [], engine: "idle" });
      expect(banner!.msg).toMatch(/^serving no model \(embedded engine not started: no model file here\)/);
      const ready = await http(server.url, "GET", "/v1/health/ready");
      expect(ready.status).toBe(503);
      expect(ready.body.extra).toMatchObject({ engine: "not_downloaded" });
      const caller = await createTestCaller(server.url);
      const res = await http(server.url, "POST", "/v1/chat/completions", {
        token: caller.key,
        body: { model: CHAT_MODEL, messages: [{ role: "user", content: "Once" }] },
      });
      expectEnvelope(res, 404);
      expect(res.body.detail).toBe(`Model '${CHAT_MODEL}' is ${pullSentence(CHAT_MODEL)}`);
    } finally {
      await server.close();
    }
  });
});

describe("real models present, the test model absent, one file damaged (review findings 6 and 7)", () => {
  let server: TestServer;
  let caller: Awaited<ReturnType<typeof createTestCaller>>;
  const logs = captureLogs("info");
  const modelsDir = mkdtempSync(path.join(os.tmpdir(), "switchyard-real-only-"));
  // hub-tiny stands for a pulled real model; the default (tiny) model's file is not here.
  symlinkSync(GGUF, path.join(modelsDir, "hub-tiny.gguf"));
  writeFileSync(path.join(modelsDir, "hub-garbage.gguf"), "this is not a model file\n".repeat(64));
  writeFileSync(path.join(modelsDir, "hub-short.gguf"), BYTES.subarray(0, 4096));
  const catalogPath = writeEditedCatalog((c) => {
    const base = c.models.find((m) => m.id === CHAT_MODEL)!;
    const engine = base.engine as Record<string, unknown>;
    const model = (id: string, extra: Record<string, unknown>) => ({
      ...base,
      id,
      display_name: id,
      engine: { ...engine, file: `${id}.gguf`, source: `hf:test-org/tiny-GGUF/${id}.gguf`, ...extra },
    });
    c.models.push(
      model("hub-tiny", {}),
      // No size in the catalog: only loading it shows it is no model.
      model("hub-garbage", { size_bytes: undefined, sha256: undefined }),
      model("hub-short", {}),
    );
  });

  beforeAll(async () => {
    server = await startTestServer({ catalogPath, modelsDir }, undefined, { logger: logs.logger });
    caller = await createTestCaller(server.url);
  });
  afterAll(() => server.close());

  test("when the default model's file is absent but another model's is here and loaded, then the service is ready", async () => {
    const ready = await http(server.url, "GET", "/v1/health/ready");
    expect(ready.status).toBe(200);
    expect(ready.body).toMatchObject({ status: "ready", engine: "ok" });
    const res = await http(server.url, "POST", "/v1/chat/completions", {
      token: caller.key,
      body: { model: "hub-tiny", messages: [{ role: "user", content: "Once upon a time" }], max_tokens: 4 },
    });
    expect(res.status).toBe(200);
  });

  test("when a model's file fails to load or has the wrong size, then the start goes on and the model says why it is not usable", async () => {
    expect(logs.records().find((r) => Array.isArray(r.served))!.served).toEqual(["hub-tiny"]);
    const failed = logs.records().find((r) => r.msg === "model file could not be loaded; the model is not served");
    expect(failed).toMatchObject({ model: "hub-garbage" });
    const listed = await http(server.url, "GET", "/v1/models", { token: caller.key });
    const byId = new Map((listed.body.data as any[]).map((m) => [m.id, m]));
    const garbage = path.join(modelsDir, "hub-garbage.gguf");
    expect(byId.get("hub-garbage").status_reason).toMatch(
      new RegExp(
        `^not usable: its file ${garbage} could not be loaded \\(.+\\); replace it with npm run models -- pull hub-garbage`,
      ),
    );
    expect(byId.get("hub-short").status_reason).toBe(
      `not usable: ${path.join(modelsDir, "hub-short.gguf")} is 4096 bytes, the catalog says ${BYTES.length} ` +
        `(an incomplete or damaged copy); replace it with npm run models -- pull hub-short ` +
        `(or remove it with npm run models -- rm hub-short)`,
    );
    const refused = await http(server.url, "POST", "/v1/chat/completions", {
      token: caller.key,
      body: { model: "hub-garbage", messages: [{ role: "user", content: "Hello" }] },
    });
    expectEnvelope(refused, 404);
    expect(refused.body.detail).toBe(`Model 'hub-garbage' is ${byId.get("hub-garbage").status_reason}`);
    expect(refused.text).not.toMatch(/\n\s+at /);

    // The banner does not call a damaged file "not downloaded": it lists it apart, with its reason.
    const banner = logs.records().find((r) => Array.isArray(r.served))!;
    expect((banner.notDownloaded as Array<{ id: string }>).map((n) => n.id)).toEqual([
      CHAT_MODEL,
      EMBED_MODEL,
      QWEN,
      NOMIC,
    ]);
    expect(banner.notUsable).toEqual([
      { id: "hub-garbage", reason: byId.get("hub-garbage").status_reason },
      { id: "hub-short", reason: byId.get("hub-short").status_reason },
    ]);
    expect(banner.msg).toContain(
      "; file not usable: hub-garbage, hub-short (their status_reason says why); replace with " +
        "npm run models -- pull hub-garbage / npm run models -- pull hub-short",
    );
  });
});
