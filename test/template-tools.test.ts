/**
 * Tool calling in the model's own chat-template format (issue 26, item 2): a copy of the tiny model
 * whose GGUF carries a Qwen 2.5 chat template (tools listed in `<tools>`, calls as
 * `<tool_call>{"name": …, "arguments": …}</tool_call>`, results in `<tool_response>`) is served
 * with `chat_template: auto`; node-llama-cpp's Jinja wrapper extracts that call syntax, so `auto`
 * writes the tools and the history the template's way and reads calls back with its syntax, and a
 * forced call decodes under a grammar of that syntax (several calls, one `<tool_call>` block each,
 * where parallel calls are allowed). The parser is also checked against the call syntax of
 * node-llama-cpp's specialized wrappers (Llama 3.1, Qwen, Mistral).
 */
import { mkdtempSync, symlinkSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { Ajv } from "ajv";
import {
  type LlamaModel,
  Llama3_1ChatWrapper,
  LlamaLogLevel,
  MistralChatWrapper,
  QwenChatWrapper,
  getLlama,
} from "node-llama-cpp";
import * as nodeLlamaCpp from "node-llama-cpp";
import type { LlamaCppEngineSpec } from "../src/config/catalog.js";
import type { ChatMessage } from "../src/inference/engine.js";
import { type PromptFormat, promptFormatter } from "../src/inference/engines/llama-cpp/prompt-format.js";
import {
  type CallSyntax,
  parseTemplateCall,
  templateCallSyntax,
  withTemplateToolCalls,
} from "../src/inference/engines/llama-cpp/template-tools.js";
import type { GenerationTools, ToolDefinition } from "../src/inference/tools.js";
import { writeGgufWithString } from "./support/gguf.js";
import {
  CHAT_MODEL,
  MODELS_DIR,
  type TestServer,
  anthropicClient,
  createTestCaller,
  http,
  openaiClient,
  startTestServer,
} from "./support/harness.js";
import { writeEditedCatalog } from "./support/test-catalog.js";

/** Qwen 2.5 Instruct's chat template (tools part as published). */
const QWEN_TEMPLATE = `{%- if tools %}
    {{- '<|im_start|>system\\n' }}
    {%- if messages[0]['role'] == 'system' %}
        {{- messages[0]['content'] }}
    {%- else %}
        {{- 'You are Qwen, created by Alibaba Cloud. You are a helpful assistant.' }}
    {%- endif %}
    {{- "\\n\\n# Tools\\n\\nYou may call one or more functions to assist with the user query.\\n\\nYou are provided with function signatures within <tools></tools> XML tags:\\n<tools>" }}
    {%- for tool in tools %}
        {{- "\\n" }}
        {{- tool | tojson }}
    {%- endfor %}
    {{- "\\n</tools>\\n\\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\\n<tool_call>\\n{\\"name\\": <function-name>, \\"arguments\\": <args-json-object>}\\n</tool_call><|im_end|>\\n" }}
{%- else %}
    {%- if messages[0]['role'] == 'system' %}
        {{- '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}
    {%- else %}
        {{- '<|im_start|>system\\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\\n' }}
    {%- endif %}
{%- endif %}
{%- for message in messages %}
    {%- if (message.role == "user") or (message.role == "system" and not loop.first) or (message.role == "assistant" and not message.tool_calls) %}
        {{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>' + '\\n' }}
    {%- elif message.role == "assistant" %}
        {{- '<|im_start|>' + message.role }}
        {%- if message.content %}
            {{- '\\n' + message.content }}
        {%- endif %}
        {%- for tool_call in message.tool_calls %}
            {%- if tool_call.function is defined %}
                {%- set tool_call = tool_call.function %}
            {%- endif %}
            {{- '\\n<tool_call>\\n{"name": "' }}
            {{- tool_call.name }}
            {{- '", "arguments": ' }}
            {{- tool_call.arguments | tojson }}
            {{- '}\\n</tool_call>' }}
        {%- endfor %}
        {{- '<|im_end|>\\n' }}
    {%- elif message.role == "tool" %}
        {%- if (loop.index0 == 0) or (messages[loop.index0 - 1].role != "tool") %}
            {{- '<|im_start|>user' }}
        {%- endif %}
        {{- '\\n<tool_response>\\n' }}
        {{- message.content }}
        {{- '\\n</tool_response>' }}
        {%- if loop.last or (messages[loop.index0 + 1].role != "tool") %}
            {{- '<|im_end|>\\n' }}
        {%- endif %}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\\n' }}
{%- endif %}`;
/** A template with no tool syntax (as in chat-template.test.ts). */
const PLAIN_TEMPLATE =
  "{% for message in messages %}<{{ message['role'] }}>{{ message['content'] }}</{{ message['role'] }}>\n" +
  "{% endfor %}{% if add_generation_prompt %}<assistant>{% endif %}";
const TOOLED = "tiny-qwen-tools";
const SPEC = { chat_template: "auto" } as LlamaCppEngineSpec;

const modelsDir = mkdtempSync(path.join(os.tmpdir(), "switchyard-template-tools-"));
symlinkSync(path.join(MODELS_DIR, "stories260K.gguf"), path.join(modelsDir, "stories260K.gguf"));
const source = path.join(MODELS_DIR, "stories260K.gguf");
writeGgufWithString(source, path.join(modelsDir, "qwen-tools.gguf"), "tokenizer.chat_template", QWEN_TEMPLATE);
writeGgufWithString(source, path.join(modelsDir, "plain-template.gguf"), "tokenizer.chat_template", PLAIN_TEMPLATE);
const catalogPath = writeEditedCatalog((c) => {
  const base = c.models.find((m) => m.id === CHAT_MODEL)!;
  // Tool definitions take hundreds of this tiny tokenizer's tokens.
  const engine = { type: "llama_cpp", file: "qwen-tools.gguf", context_size: 2048, chat_template: "auto" };
  c.models.push({ ...base, id: TOOLED, display_name: TOOLED, engine: { ...engine, eog_token_ids: [1] } });
});

const weatherParams = {
  type: "object",
  properties: {
    city: { type: "string", maxLength: 20 },
    unit: { type: "string", enum: ["celsius", "fahrenheit"] },
    days: { anyOf: [{ type: "integer", minimum: 1, maximum: 7 }, { type: "null" }] },
  },
  required: ["city", "unit", "days"],
  additionalProperties: false,
};
const timeParams = {
  type: "object",
  properties: { zone: { type: "string", maxLength: 10 } },
  required: ["zone"],
  additionalProperties: false,
};
const specs: ToolDefinition[] = [
  { name: "get_weather", description: "Weather in a city", parameters: weatherParams, strict: false },
  { name: "get_time", parameters: timeParams, strict: false },
];
const tools = [
  {
    type: "function" as const,
    function: { name: "get_weather", description: "Weather in a city", parameters: weatherParams },
  },
  { type: "function" as const, function: { name: "get_time", parameters: timeParams } },
];
const paramsOf: Record<string, object> = { get_weather: weatherParams, get_time: timeParams };
const ajv = new Ajv({ strict: false });
const auto: GenerationTools = { specs, mode: { kind: "auto" } };

/** The history of one call and its result, as the engine receives it. */
const callHistory: ChatMessage[] = [
  { role: "system", content: "Be brief." },
  { role: "user", content: "Weather in Paris?" },
  {
    role: "assistant",
    content: "",
    toolCalls: [{ id: "call_1", name: "get_weather", arguments: '{"city":"Paris","unit":"celsius","days":1}' }],
  },
  { role: "tool", toolCallId: "call_1", content: '{"temp": 20}' },
];

let server: TestServer;
let caller: Awaited<ReturnType<typeof createTestCaller>>;
let llama: Awaited<ReturnType<typeof getLlama>>;
let model: LlamaModel;
let plainModel: LlamaModel;
let qwen: PromptFormat;
let jinjaSyntax: CallSyntax;

beforeAll(async () => {
  server = await startTestServer({ catalogPath, modelsDir });
  caller = await createTestCaller(server.url);
  llama = await getLlama({ gpu: false, build: "never", logLevel: LlamaLogLevel.error });
  model = await llama.loadModel({ modelPath: path.join(modelsDir, "qwen-tools.gguf") });
  plainModel = await llama.loadModel({ modelPath: path.join(modelsDir, "plain-template.gguf") });
  qwen = promptFormatter(nodeLlamaCpp, model, SPEC);
  jinjaSyntax = qwen.tools!.syntax;
}, 60_000);
afterAll(async () => {
  await server.close();
  await llama.dispose();
});

/** The prompt the engine tokenizes for `messages` with the tools offered. */
const promptText = (messages: ChatMessage[], forced = false) => qwen.text(messages, { functions: specs, forced });

describe("the prompt in the template's tool format", () => {
  test("when the template has a tool syntax, then the runtime uses it; a template without one keeps the documented format", () => {
    expect(jinjaSyntax.prefixes[0]).toBe('<tool_call>\n{"name": "');
    expect(jinjaSyntax.paramsPrefix).toBe('", "arguments": ');
    expect(promptFormatter(nodeLlamaCpp, plainModel, SPEC).tools).toBeNull();
    expect(promptFormatter(nodeLlamaCpp, model, { chat_template: "none" } as LlamaCppEngineSpec).tools).toBeNull();
  });

  test("when tools are offered under auto, then the prompt lists them the template's way, with the history's call and result", () => {
    const text = promptText(callHistory);
    expect(text).toContain("You are provided with function signatures within <tools></tools> XML tags:\n<tools>\n");
    expect(text).toContain(
      '{"type": "function", "function": {"name": "get_weather", "description": "Weather in a city"',
    );
    expect(text).toContain('"name": "get_time"');
    expect(text).toContain(
      '<|im_start|>assistant\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius", "days": 1}}\n</tool_call><|im_end|>',
    );
    expect(text).toContain('<|im_start|>user\n<tool_response>\n{"temp": 20}\n</tool_response><|im_end|>');
    expect(text.endsWith("<|im_start|>assistant\n")).toBe(true);
    // Not the documented format.
    expect(text).not.toContain("You have these tools");
    // The tokens say the same (this tiny tokenizer writes some spaces back differently).
    const tokens = model.detokenize(qwen.format(callHistory, { functions: specs, forced: false }).tokens, true);
    expect(tokens).toContain('<tools>\n{"type": "function", "function": {"name": "get_weather"');
    expect(tokens).not.toContain("You have these tools");
  });

  test("when the call is forced, then the prompt ends with the template's call prefix", () => {
    const text = promptText(callHistory.slice(0, 2), true);
    expect(text.endsWith('<|im_start|>assistant\n<tool_call>\n{"name": "')).toBe(true);
  });
});

describe("reading a call with the template's syntax", () => {
  const syntaxes = (): [string, CallSyntax][] => [
    ["Qwen 2.5 Jinja template", jinjaSyntax],
    ["Llama 3.1", templateCallSyntax(new Llama3_1ChatWrapper())!],
    ["Qwen", templateCallSyntax(new QwenChatWrapper())!],
    ["Mistral", templateCallSyntax(new MistralChatWrapper())!],
  ];
  const written: Record<string, (name: string, args: string) => string> = {
    "Qwen 2.5 Jinja template": (n, a) => `<tool_call>\n{"name": "${n}", "arguments": ${a}}\n</tool_call>`,
    "Llama 3.1": (n, a) => `<function=${n}>${a}</function>`,
    Qwen: (n, a) => `<tool_call>\n{"name": "${n}", "arguments": ${a}}\n</tool_call>`,
    Mistral: (n, a) => `[TOOL_CALLS][{"name": "${n}", "arguments": ${a}}]`,
  };

  const broken: Record<string, string> = {
    "Qwen 2.5 Jinja template": '<tool_call>\n{"name": "get_time", "arguments": {"zone": "UTC"}}\n</tool_response>',
    "Llama 3.1": '<function=get_time>{"zone": "UTC"}</func>x',
    Qwen: '<tool_call>\n{"name": "get_time", "arguments": {"zone": "UTC"}}\n</tool_response>',
    Mistral: '[TOOL_CALLS][{"name": "get_time", "arguments": {"zone": "UTC"}]',
  };

  test("when an answer is a well-formed call naming an offered tool, then it is that call", () => {
    for (const [family, syntax] of syntaxes()) {
      const call = written[family]("get_time", '{"zone": "UTC"}');
      expect([family, parseTemplateCall(call, syntax, auto)]).toEqual([
        family,
        { name: "get_time", arguments: '{"zone":"UTC"}' },
      ]);
      // Text before the call, other whitespace, arguments as a JSON string (some templates write them so).
      const spaced = "Let me check.\n" + written[family]("get_time", ' "{\\"zone\\":\\"UTC\\"}" ').replace(/ /g, "  ");
      expect([family, parseTemplateCall(spaced, syntax, auto)?.arguments]).toEqual([family, '{"zone":"UTC"}']);
    }
  });

  test("when an answer's call is malformed or names an unknown tool, then it stays text", () => {
    for (const [family, syntax] of syntaxes()) {
      const bad = [
        written[family]("get_date", '{"zone": "UTC"}'), // unknown tool
        written[family]("get_time", '{"zone": "UTC"'), // arguments cut
        written[family]("get_time", '["UTC"]'), // not an object
        written[family]("get_time", '"not json"'),
        broken[family], // the suffix is not the syntax's
        '{"zone": "UTC"}', // no call prefix
      ];
      for (const text of bad)
        expect([family, text, parseTemplateCall(text, syntax, auto)]).toEqual([family, text, null]);
      expect(
        parseTemplateCall(written[family]("get_time", "{}"), syntax, { specs, mode: { kind: "none" } }),
      ).toBeNull();
      const forcedWeather: GenerationTools = { specs, mode: { kind: "forced", names: ["get_weather"] } };
      expect(parseTemplateCall(written[family]("get_time", "{}"), syntax, forcedWeather)).toBeNull();
    }
  });

  test("when the answer ends inside the call's suffix (an end-of-turn token closed it), then the call stands", () => {
    const llama31 = templateCallSyntax(new Llama3_1ChatWrapper())!;
    // `<|eom_id|>` ends generation and is not part of the answer.
    expect(parseTemplateCall('<function=get_time>{"zone": "UTC"}</function>', llama31, auto)?.name).toBe("get_time");
    expect(parseTemplateCall('<tool_call>\n{"name": "get_time", "arguments": {}}', jinjaSyntax, auto)?.name).toBe(
      "get_time",
    );
    // Ended before any arguments: no call.
    expect(parseTemplateCall('<tool_call>\n{"name": "get_time", "arguments": ', jinjaSyntax, auto)).toBeNull();
    expect(parseTemplateCall("<function=get_time>", llama31, auto)).toBeNull();
    // No arguments, the suffix written: an empty call; but not where the arguments sit in a JSON object.
    expect(parseTemplateCall("<function=get_time></function>", llama31, auto)?.arguments).toBe("{}");
    expect(parseTemplateCall('<tool_call>\n{"name": "get_time", "arguments": }', jinjaSyntax, auto)).toBeNull();
  });

  test("when an auto answer is cut short or read from its raw text, then only a complete call counts", () => {
    const result = {
      text: "",
      rawText: '<tool_call>\n{"name": "get_time", "arguments": {"zone": "UTC"}}\n</tool_call>',
      finishReason: "stop" as const,
      stopSequence: null,
      usage: { promptTokens: 1, completionTokens: 1, cachedPromptTokens: 0 },
      engineMs: 0,
      queueMs: 0,
    };
    const read = withTemplateToolCalls(result, auto, jinjaSyntax);
    expect(read.toolCalls).toEqual([{ name: "get_time", arguments: '{"zone":"UTC"}' }]);
    expect("rawText" in read).toBe(false);
    expect(withTemplateToolCalls({ ...result, finishReason: "length" }, auto, jinjaSyntax).toolCalls).toBeUndefined();
  });

  test("when a forced answer is cut short, then it is no call and no text, nor log-probs of it (review finding F6)", () => {
    const forced = { specs: auto.specs, mode: { kind: "forced" as const, names: ["get_time"] } };
    const cut = withTemplateToolCalls(
      {
        text: '{"zone": "U',
        finishReason: "length",
        stopSequence: null,
        usage: { promptTokens: 1, completionTokens: 4, cachedPromptTokens: 0 },
        engineMs: 0,
        queueMs: 0,
        logprobs: [{ token: '{"', logprob: -1, bytes: [123, 34], top: [] }],
      },
      forced,
      jinjaSyntax,
    );
    expect({ text: cut.text, calls: cut.toolCalls, logprobs: cut.logprobs }).toEqual({
      text: "",
      calls: undefined,
      logprobs: [],
    });
  });
});

describe("through the official openai client", () => {
  const ask = { model: TOOLED, messages: [{ role: "user" as const, content: "What is the weather?" }] };

  test("when tool_choice is required, then the answer is a call in the template's syntax with valid arguments", async () => {
    const client = openaiClient(server.url, caller.key);
    for (let seed = 0; seed < 3; seed++) {
      const completion = await client.chat.completions.create({
        ...ask,
        tools,
        tool_choice: "required",
        parallel_tool_calls: false,
        max_tokens: 200,
        seed,
      });
      const choice = completion.choices[0];
      expect(choice.finish_reason).toBe("tool_calls");
      const call = choice.message.tool_calls![0] as { function: { name: string; arguments: string } };
      expect(Object.keys(paramsOf)).toContain(call.function.name);
      const args = JSON.parse(call.function.arguments);
      expect(ajv.validate(paramsOf[call.function.name], args)).toBe(true);
      // Decoded after the template's call prefix: the prompt is the template's, ending with it.
      const prompt = qwen.format(ask.messages, { functions: specs, forced: true }).tokens.length;
      expect(completion.usage!.prompt_tokens).toBe(prompt + 1);
    }
    const named = await client.chat.completions.create({
      ...ask,
      tools,
      tool_choice: { type: "function", function: { name: "get_time" } },
      max_tokens: 100,
    });
    expect(named.choices[0].message.tool_calls![0]).toMatchObject({ function: { name: "get_time" } });
  });

  test("when tool_choice is required and parallel calls are allowed, then the answer makes several calls in the template's syntax for parallel calls, each valid", async () => {
    // The template writes one `<tool_call>` block per call, a newline between them.
    expect(jinjaSyntax.betweenCalls?.trim()).toBe("");
    const client = openaiClient(server.url, caller.key);
    const timeTool = tools.filter((t) => t.function.name === "get_time");
    const counts: number[] = [];
    for (let seed = 0; seed < 4; seed++) {
      const completion = await client.chat.completions.create({
        ...ask,
        tools: timeTool,
        tool_choice: "required",
        max_tokens: 600,
        seed,
      });
      const calls = completion.choices[0].message.tool_calls as Array<{ id: string; function: { arguments: string } }>;
      expect(calls.length).toBeLessThanOrEqual(8);
      expect(new Set(calls.map((c) => c.id)).size).toBe(calls.length);
      for (const call of calls) expect(ajv.validate(timeParams, JSON.parse(call.function.arguments))).toBe(true);
      counts.push(calls.length);
    }
    // The tiny model ends after one call or takes another (seeded: the same each run).
    expect(Math.max(...counts)).toBeGreaterThan(1);
  });

  test("when tools are offered with auto, then the answer is text or a valid call, never a broken one, and the tools count in the prompt", async () => {
    const client = openaiClient(server.url, caller.key);
    for (let seed = 0; seed < 3; seed++) {
      const completion = await client.chat.completions.create({ ...ask, tools, max_tokens: 40, seed });
      const choice = completion.choices[0];
      if (choice.finish_reason === "tool_calls") {
        const call = choice.message.tool_calls![0] as { function: { name: string; arguments: string } };
        expect(ajv.validate(paramsOf[call.function.name], JSON.parse(call.function.arguments))).toBe(true);
      } else {
        expect(typeof choice.message.content).toBe("string");
        expect(choice.message.tool_calls).toBeUndefined();
      }
      // The prompt is the template's, tools included: its tokens plus BOS.
      const expected = qwen.format([{ role: "user", content: "What is the weather?" }], {
        functions: specs,
        forced: false,
      }).tokens.length;
      expect(completion.usage!.prompt_tokens).toBe(expected + 1);
    }
    const stream = await client.chat.completions.create({ ...ask, tools, max_tokens: 20, stream: true });
    let finish: string | null = null;
    for await (const chunk of stream) finish = chunk.choices[0]?.finish_reason ?? finish;
    expect(["stop", "length", "tool_calls"]).toContain(finish);
  });

  test("when the history holds a call and its result, then the answer follows them and they count in the prompt", async () => {
    const res = await http(server.url, "POST", "/v1/chat/completions", {
      token: caller.key,
      body: {
        model: TOOLED,
        tools,
        max_tokens: 8,
        messages: [
          { role: "system", content: "Be brief." },
          { role: "user", content: "Weather in Paris?" },
          {
            role: "assistant",
            content: null,
            tool_calls: [
              {
                id: "call_1",
                type: "function",
                function: { name: "get_weather", arguments: '{"city":"Paris","unit":"celsius","days":1}' },
              },
            ],
          },
          { role: "tool", tool_call_id: "call_1", content: '{"temp": 20}' },
        ],
      },
    });
    expect(res.status).toBe(200);
    expect(res.body.usage.prompt_tokens).toBe(
      qwen.format(callHistory, { functions: specs, forced: false }).tokens.length + 1,
    );
  });

  test("when an Anthropic client forces a tool and streams, then the SDK assembles a valid tool_use", async () => {
    const client = anthropicClient(server.url, caller.key);
    const stream = client.messages.stream({
      model: TOOLED,
      max_tokens: 200,
      messages: [{ role: "user", content: "Weather?" }],
      tools: tools.map((t) => ({ name: t.function.name, input_schema: t.function.parameters })) as never,
      tool_choice: { type: "any", disable_parallel_tool_use: true },
    });
    const message = await stream.finalMessage();
    expect(message.stop_reason).toBe("tool_use");
    const block = message.content[0] as { type: string; name: string; input: unknown };
    expect(block.type).toBe("tool_use");
    expect(ajv.validate(paramsOf[block.name], block.input)).toBe(true);
  });

  test("when the key is missing, then 401", async () => {
    const res = await http(server.url, "POST", "/v1/chat/completions", { body: { ...ask, tools } });
    expect(res.status).toBe(401);
  });
});
