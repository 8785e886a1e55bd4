/**
 * The chat template is the model's own (issue 17, item 4): a copy of the test model with a
 * `tokenizer.chat_template` added to its GGUF metadata (written by `support/gguf.ts` in this
 * test's temporary folder), served with `chat_template: auto`, formats chat completions, messages
 * and responses through that template (node-llama-cpp's Jinja chat wrapper), and the usage counts
 * the template's tokens; the same file without a template (or `chat_template: none`) is plain text.
 */
import { mkdtempSync, symlinkSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { JinjaTemplateChatWrapper, LlamaLogLevel, getLlama } from "node-llama-cpp";
import {
  CHAT_MODEL,
  MODELS_DIR,
  type TestServer,
  createTestCaller,
  http,
  openaiClient,
  startTestServer,
} from "./support/harness.js";
import { writeGgufWithString } from "./support/gguf.js";
import { writeEditedCatalog } from "./support/test-catalog.js";

const TEMPLATE =
  "{% for message in messages %}<{{ message['role'] }}>{{ message['content'] }}</{{ message['role'] }}>\n" +
  "{% endfor %}{% if add_generation_prompt %}<assistant>{% endif %}";
const TEMPLATED = "tiny-templated";
const PROMPT = "Tom had a red ball";

const modelsDir = mkdtempSync(path.join(os.tmpdir(), "switchyard-template-models-"));
symlinkSync(path.join(MODELS_DIR, "stories260K.gguf"), path.join(modelsDir, "stories260K.gguf"));
writeGgufWithString(
  path.join(MODELS_DIR, "stories260K.gguf"),
  path.join(modelsDir, "stories260K-templated.gguf"),
  "tokenizer.chat_template",
  TEMPLATE,
);
/** A template whose assistant turns end with a full stop (which TinyStories writes within a sentence). */
const EOT_TEMPLATE =
  "{% for message in messages %}{% if message['role'] == 'user' %}{{ message['content'] }}\n" +
  "{% else %}{{ message['content'] }}.{% endif %}{% endfor %}";
writeGgufWithString(
  path.join(MODELS_DIR, "stories260K.gguf"),
  path.join(modelsDir, "stories260K-eot.gguf"),
  "tokenizer.chat_template",
  EOT_TEMPLATE,
);
const catalogPath = writeEditedCatalog((c) => {
  const base = c.models.find((m) => m.id === CHAT_MODEL)!;
  // Without the catalog's extra end-of-turn token: only the template says where a turn ends.
  for (const [id, chatTemplate] of [
    ["tiny-eot", "auto"],
    ["tiny-eot-plain", "none"],
  ]) {
    c.models.push({
      ...base,
      id,
      display_name: id,
      engine: { type: "llama_cpp", file: "stories260K-eot.gguf", context_size: 512, chat_template: chatTemplate },
    });
  }
  c.models.push({
    ...base,
    id: TEMPLATED,
    display_name: "TinyStories with a chat template",
    engine: {
      type: "llama_cpp",
      file: "stories260K-templated.gguf",
      context_size: 512,
      chat_template: "auto",
      eog_token_ids: [1],
    },
  });
});

let server: TestServer;
let caller: Awaited<ReturnType<typeof createTestCaller>>;
/** Prompt tokens of `[user: PROMPT]` through the template, as node-llama-cpp's Jinja wrapper renders it, plus BOS. */
let expectedPromptTokens: number;

beforeAll(async () => {
  server = await startTestServer({ catalogPath, modelsDir });
  caller = await createTestCaller(server.url);
  const llama = await getLlama({ gpu: false, build: "never", logLevel: LlamaLogLevel.error });
  try {
    const model = await llama.loadModel({ modelPath: path.join(modelsDir, "stories260K-templated.gguf") });
    expect((model.fileInfo.metadata as { tokenizer: { chat_template?: string } }).tokenizer.chat_template).toBe(
      TEMPLATE,
    );
    const state = new JinjaTemplateChatWrapper({ template: TEMPLATE }).generateContextState({
      chatHistory: [
        { type: "user", text: PROMPT },
        { type: "model", response: [] },
      ],
    });
    expect(state.contextText.toString()).toBe(`<user>${PROMPT}</user>\n<assistant>`);
    expectedPromptTokens = state.contextText.tokenize(model.tokenizer).length + 1;
    await model.dispose();
  } finally {
    await llama.dispose();
  }
}, 60_000);
afterAll(() => server.close());

const chat = (model: string) =>
  http(server.url, "POST", "/v1/chat/completions", {
    token: caller.key,
    body: { model, messages: [{ role: "user", content: PROMPT }], max_tokens: 6, temperature: 0 },
  });

test("when the GGUF has a chat template, then chat completions go through it and count its tokens", async () => {
  const templated = await chat(TEMPLATED);
  expect(templated.status).toBe(200);
  expect(templated.body.usage.prompt_tokens).toBe(expectedPromptTokens);
  expect(templated.body.usage.completion_tokens).toBeGreaterThan(0);
  expect(templated.body.usage.total_tokens).toBe(expectedPromptTokens + templated.body.usage.completion_tokens);

  // The same weights without the template (chat_template: none in the shipped catalog): plain text.
  const plain = await chat(CHAT_MODEL);
  expect(plain.status).toBe(200);
  const plainCount = await server.app.engines
    .engineFor(server.app.catalog.all().find((m) => m.id === CHAT_MODEL)!)
    .countTokens(
      server.app.catalog.all().find((m) => m.id === CHAT_MODEL)!,
      PROMPT,
    );
  expect(plain.body.usage.prompt_tokens).toBe(plainCount + 1);
  expect(plain.body.usage.prompt_tokens).toBeLessThan(expectedPromptTokens);
});

test("when messages and responses name the model, then they use the template too", async () => {
  const messages = await http(server.url, "POST", "/v1/messages", {
    token: caller.key,
    headers: { "anthropic-version": "2023-06-01" },
    body: { model: TEMPLATED, max_tokens: 6, messages: [{ role: "user", content: PROMPT }] },
  });
  expect(messages.status).toBe(200);
  // Anthropic's usage: the prefix the chat completion above left in the KV cache is read, not input.
  const usage = messages.body.usage;
  expect(usage.input_tokens + (usage.cache_read_input_tokens ?? 0)).toBe(expectedPromptTokens);

  const client = openaiClient(server.url, caller.key);
  const response = await client.responses.create({ model: TEMPLATED, input: PROMPT, max_output_tokens: 6 });
  expect(response.usage?.input_tokens).toBe(expectedPromptTokens);
});

test("when the catalog says chat_template none, then the GGUF's template is not used", async () => {
  const plainCatalog = writeEditedCatalog((c) => {
    const base = c.models.find((m) => m.id === CHAT_MODEL)!;
    c.models.push({
      ...base,
      id: TEMPLATED,
      engine: { type: "llama_cpp", file: "stories260K-templated.gguf", context_size: 512, chat_template: "none" },
    });
  });
  const other = await startTestServer({ catalogPath: plainCatalog, modelsDir });
  try {
    const user = await createTestCaller(other.url);
    const res = await http(other.url, "POST", "/v1/chat/completions", {
      token: user.key,
      body: { model: TEMPLATED, messages: [{ role: "user", content: PROMPT }], max_tokens: 4 },
    });
    expect(res.status).toBe(200);
    expect(res.body.usage.prompt_tokens).toBeLessThan(expectedPromptTokens);
  } finally {
    await other.close();
  }
});

test("when the template ends a turn with a marker, then generation stops there; without the template it runs on", async () => {
  const ask = (model: string) =>
    http(server.url, "POST", "/v1/chat/completions", {
      token: caller.key,
      body: { model, messages: [{ role: "user", content: "Once upon a time" }], max_tokens: 60, temperature: 0 },
    });
  const templated = await ask("tiny-eot");
  expect(templated.status).toBe(200);
  expect(templated.body.choices[0].finish_reason).toBe("stop");
  const text: string = templated.body.choices[0].message.content;
  expect(text.length).toBeGreaterThan(0);
  expect(text).not.toContain(".");
  const plain = await ask("tiny-eot-plain");
  expect(plain.status).toBe(200);
  expect(plain.body.choices[0].message.content).toContain(".");
  expect(plain.body.usage.completion_tokens).toBeGreaterThan(templated.body.usage.completion_tokens);
});
