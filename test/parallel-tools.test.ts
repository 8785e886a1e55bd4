/**
 * Several tool calls per answer, and streamed text with tools offered (issue 26, item 2), through
 * the official `openai` and `@anthropic-ai/sdk` clients against the embedded engine with the tiny
 * model:
 * - `required` / Anthropic `any` with parallel calls allowed (the default) decode one or more
 *   calls, each valid against its function's schema; `parallel_tool_calls: false`,
 *   `disable_parallel_tool_use` and a named function answer exactly one;
 * - every call has its own id; streamed, each call comes under its own `index` (0, 1, …) with its
 *   id and name once and its arguments after, one Responses `function_call` item and one
 *   Anthropic `tool_use` block (`input_json_delta`) each, the same calls the plain answer makes;
 * - with tools offered under `auto`, an answer that is text streams as it is decoded, not held
 *   until the end (the tiny model writes no call syntax: its text is never held long).
 */
import { Ajv } from "ajv";
import {
  CHAT_MODEL,
  type TestServer,
  anthropicClient,
  createTestCaller,
  openaiClient,
  startTestServer,
} from "./support/harness.js";
import { writeEditedCatalog } from "./support/test-catalog.js";

const ajv = new Ajv({ strict: false });

let server: TestServer;
let key: string;

beforeAll(async () => {
  // The tools prompt takes hundreds of this tiny tokenizer's tokens: a context of 2,048 holds it.
  const catalog = writeEditedCatalog((c) => {
    const chat = c.models.find((m) => m.id === CHAT_MODEL)!;
    (chat.engine as { context_size?: number }).context_size = 2048;
  });
  server = await startTestServer({ catalogPath: catalog });
  key = (await createTestCaller(server.url)).key;
}, 60_000);
afterAll(() => server.close());

// Small argument schemas: up to eight calls of them fit well within `max_tokens`.
const timeParams = {
  type: "object",
  properties: { zone: { type: "string", maxLength: 6 } },
  required: ["zone"],
  additionalProperties: false,
};
const unitParams = {
  type: "object",
  properties: { unit: { type: "string", enum: ["celsius", "fahrenheit"] } },
  required: ["unit"],
  additionalProperties: false,
};
const paramsOf: Record<string, object> = { get_time: timeParams, set_unit: unitParams };
const tools = [
  { type: "function" as const, function: { name: "get_time", description: "Time", parameters: timeParams } },
  { type: "function" as const, function: { name: "set_unit", parameters: unitParams } },
];
const ask = {
  model: CHAT_MODEL,
  messages: [{ role: "user" as const, content: "What time is it in Oslo and Rome?" }],
  max_tokens: 700,
};

/** Each call valid against its function's schema. */
function expectValid(calls: Array<{ name: string; args: unknown }>) {
  for (const call of calls)
    expect([call.name, ajv.validate(paramsOf[call.name], call.args)]).toEqual([call.name, true]);
}

describe("several calls per answer on Chat Completions", () => {
  test("when tool_choice is required and parallel calls are allowed, then the answer makes one or more valid calls, each with its own id", async () => {
    const client = openaiClient(server.url, key);
    const counts: number[] = [];
    const ids = new Set<string>();
    for (let seed = 0; seed < 2; seed++) {
      const completion = await client.chat.completions.create({ ...ask, tools, tool_choice: "required", seed });
      const choice = completion.choices[0];
      expect(choice.finish_reason).toBe("tool_calls");
      const calls = choice.message.tool_calls as Array<{ id: string; function: { name: string; arguments: string } }>;
      expect(calls.length).toBeGreaterThanOrEqual(1);
      expect(calls.length).toBeLessThanOrEqual(8);
      for (const call of calls) {
        expect(call.id).toMatch(/^call_[A-Za-z0-9]{24}$/);
        ids.add(call.id);
      }
      expectValid(calls.map((c) => ({ name: c.function.name, args: JSON.parse(c.function.arguments) })));
      counts.push(calls.length);
    }
    expect(ids.size).toBe(counts[0] + counts[1]);
    // The tiny model takes the grammar's "another call" (the runs below rely on it).
    expect(Math.max(...counts)).toBeGreaterThan(1);
  });

  test("when the calls are streamed, then each comes under its own index with id and name once and its arguments after, the calls the plain answer makes", async () => {
    const client = openaiClient(server.url, key);
    const plain = await client.chat.completions.create({ ...ask, tools, tool_choice: "required", seed: 3 });
    const expected = plain.choices[0].message.tool_calls!.map((c: any) => [c.function.name, c.function.arguments]);
    expect(expected.length).toBeGreaterThan(1);
    const stream = await client.chat.completions.create({
      ...ask,
      tools,
      tool_choice: "required",
      seed: 3,
      stream: true,
    });
    const fragments: any[] = [];
    let finish: string | null = null;
    for await (const chunk of stream) {
      const choice = chunk.choices[0];
      fragments.push(...(choice?.delta.tool_calls ?? []));
      finish = choice?.finish_reason ?? finish;
    }
    expect(finish).toBe("tool_calls");
    // Indexes 0, 1, … in order; each call's first fragment has id, type and name (empty
    // arguments), the others neither id nor name.
    const calls: Array<{ id: string; name: string; args: string }> = [];
    for (const f of fragments) {
      if (f.index === calls.length) {
        expect(f).toMatchObject({ type: "function", function: { arguments: "" } });
        expect(f.id).toMatch(/^call_[A-Za-z0-9]{24}$/);
        calls.push({ id: f.id, name: f.function.name, args: "" });
      } else {
        expect(f.index).toBe(calls.length - 1);
        expect(f.id).toBeUndefined();
        expect(f.function.name).toBeUndefined();
        calls[f.index].args += f.function.arguments;
      }
    }
    expect(calls.map((c) => [c.name, c.args])).toEqual(expected);
    expect(new Set(calls.map((c) => c.id)).size).toBe(calls.length);
    // The SDK's own assembly of the stream agrees.
    const runner = client.chat.completions.stream({ ...ask, tools, tool_choice: "required", seed: 3 });
    const final = await runner.finalChatCompletion();
    expect(final.choices[0].message.tool_calls!.map((c: any) => [c.function.name, c.function.arguments])).toEqual(
      expected,
    );
  });

  test("when parallel_tool_calls is false or tool_choice names a function, then the answer is exactly one call", async () => {
    const client = openaiClient(server.url, key);
    const single = await client.chat.completions.create({
      ...ask,
      tools,
      tool_choice: "required",
      parallel_tool_calls: false,
      seed: 3,
    });
    expect(single.choices[0].message.tool_calls).toHaveLength(1);
    const named = await client.chat.completions.create({
      ...ask,
      tools,
      tool_choice: { type: "function", function: { name: "get_time" } },
      seed: 3,
    });
    expect(named.choices[0].message.tool_calls).toHaveLength(1);
    expect((named.choices[0].message.tool_calls![0] as any).function.name).toBe("get_time");
  });
});

describe("several calls per answer on Responses and Messages", () => {
  test("when a Responses call is required, then each call is its own function_call item, plain and streamed", async () => {
    const client = openaiClient(server.url, key);
    const body = {
      model: CHAT_MODEL,
      input: "What time is it in Oslo and Rome?",
      max_output_tokens: 700,
      tools: tools.map((t) => ({
        type: "function" as const,
        name: t.function.name,
        parameters: t.function.parameters,
        strict: false,
      })),
      tool_choice: "required" as const,
    };
    const response = await client.responses.create(body);
    const items = response.output as any[];
    expect(items.length).toBeGreaterThan(1);
    expect(items.every((i) => i.type === "function_call")).toBe(true);
    expect(new Set(items.map((i) => i.id)).size).toBe(items.length);
    expect(new Set(items.map((i) => i.call_id)).size).toBe(items.length);
    expectValid(items.map((i) => ({ name: i.name, args: JSON.parse(i.arguments) })));

    const stream = client.responses.stream(body);
    const added: number[] = [];
    const args = new Map<number, string>();
    for await (const event of stream) {
      if (event.type === "response.output_item.added") added.push(event.output_index);
      if (event.type === "response.function_call_arguments.delta")
        args.set(event.output_index, (args.get(event.output_index) ?? "") + event.delta);
    }
    const final = (await stream.finalResponse()).output as any[];
    expect(added).toEqual(final.map((_, i) => i));
    expect(final.map((item, i) => args.get(i))).toEqual(final.map((item) => item.arguments));
    expect(new Set(final.map((i) => i.call_id)).size).toBe(final.length);
  });

  test("when an Anthropic tool_choice is any, then each call is its own tool_use block, plain and streamed with input_json_delta; disable_parallel_tool_use makes it one", async () => {
    const client = anthropicClient(server.url, key);
    const body = {
      model: CHAT_MODEL,
      max_tokens: 700,
      messages: [{ role: "user" as const, content: "Time in Oslo and Rome?" }],
      tools: tools.map((t) => ({ name: t.function.name, input_schema: t.function.parameters })) as any,
      tool_choice: { type: "any" as const },
    };
    const message = await client.messages.create(body);
    expect(message.stop_reason).toBe("tool_use");
    const blocks = message.content as any[];
    expect(blocks.length).toBeGreaterThan(1);
    expect(blocks.every((b) => b.type === "tool_use" && /^toolu_[A-Za-z0-9]{24}$/.test(b.id))).toBe(true);
    expect(new Set(blocks.map((b) => b.id)).size).toBe(blocks.length);
    expectValid(blocks.map((b) => ({ name: b.name, args: b.input })));

    const stream = client.messages.stream(body);
    const events: Array<{ type: string; index?: number }> = [];
    stream.on("streamEvent", (e: any) => events.push({ type: e.type, index: e.index }));
    const final = await stream.finalMessage();
    const streamed = final.content as any[];
    expect(streamed.length).toBeGreaterThan(1);
    expect(streamed.every((b) => b.type === "tool_use")).toBe(true);
    expect(new Set(streamed.map((b) => b.id)).size).toBe(streamed.length);
    expectValid(streamed.map((b) => ({ name: b.name, args: b.input })));
    // Block i: start, its input_json_delta, stop — in index order.
    const blockEvents = events.filter((e) => e.type.startsWith("content_block_"));
    expect(blockEvents).toEqual(
      streamed.flatMap((_, index) => [
        { type: "content_block_start", index },
        { type: "content_block_delta", index },
        { type: "content_block_stop", index },
      ]),
    );

    const one = await client.messages.create({
      ...body,
      tool_choice: { type: "any", disable_parallel_tool_use: true },
    });
    expect(one.content).toHaveLength(1);
  });
});

describe("streamed text with tools offered", () => {
  const auto = { ...ask, tools, max_tokens: 40 };

  test("when an auto answer is text, then its text streams in many deltas before the last chunk, the text the plain answer gives", async () => {
    const client = openaiClient(server.url, key);
    const plain = await client.chat.completions.create({ ...auto, seed: 1 });
    expect(plain.choices[0].finish_reason).not.toBe("tool_calls");
    const stream = await client.chat.completions.create({
      ...auto,
      seed: 1,
      stream: true,
      stream_options: { include_usage: true },
    });
    const kinds: string[] = [];
    let text = "";
    for await (const chunk of stream) {
      const choice = chunk.choices[0];
      if (!choice) kinds.push("usage");
      else if (choice.finish_reason) kinds.push("finish");
      else if (choice.delta.content) {
        kinds.push("content");
        text += choice.delta.content;
      } else kinds.push("other");
    }
    expect(text).toBe(plain.choices[0].message.content);
    // Text held until the end would come as one delta right before the finish chunk.
    const contents = kinds.filter((k) => k === "content").length;
    expect(contents).toBeGreaterThan(5);
    expect(kinds.indexOf("content")).toBeLessThan(kinds.indexOf("finish") - 1);
    expect(kinds.slice(-2)).toEqual(["finish", "usage"]);
  });

  test("when an Anthropic or Responses auto answer is text, then it streams in many deltas too", async () => {
    const anthropic = anthropicClient(server.url, key);
    const stream = anthropic.messages.stream({
      model: CHAT_MODEL,
      max_tokens: 40,
      messages: [{ role: "user", content: "Tell me a story." }],
      tools: tools.map((t) => ({ name: t.function.name, input_schema: t.function.parameters })) as any,
    });
    const types: string[] = [];
    stream.on("streamEvent", (e: any) => types.push(e.type === "content_block_delta" ? e.delta.type : e.type));
    const message = await stream.finalMessage();
    expect(message.content.map((b) => b.type)).toEqual(["text"]);
    expect(types.filter((t) => t === "text_delta").length).toBeGreaterThan(5);
    expect(types.indexOf("content_block_start")).toBeLessThan(types.indexOf("text_delta"));

    const openai = openaiClient(server.url, key);
    const events: string[] = [];
    const responses = openai.responses.stream({
      model: CHAT_MODEL,
      input: "Tell me a story.",
      max_output_tokens: 40,
      tools: tools.map((t) => ({
        type: "function" as const,
        name: t.function.name,
        parameters: t.function.parameters,
        strict: false,
      })),
    });
    for await (const event of responses) events.push(event.type);
    const final = await responses.finalResponse();
    expect(final.output.map((i) => i.type)).toEqual(["message"]);
    expect(events.filter((t) => t === "response.output_text.delta").length).toBeGreaterThan(5);
    expect(events.indexOf("response.output_item.added")).toBeLessThan(events.indexOf("response.output_text.delta"));
  });
});
