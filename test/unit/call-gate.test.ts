/**
 * Streamed text and parallel calls on the embedded engine (issue 26, item 2), without a model:
 * the gate that streams text as soon as it cannot be the start of a call (held only where a call
 * opener may begin, released the moment it diverges, all of it after a whole opener), and the
 * readers of an answer's calls — several, in the documented format and in the chat templates'
 * own syntax for parallel calls — with the text before the first call as the answer's text, which
 * is exactly what the gate streamed.
 */
import { MistralChatWrapper, QwenChatWrapper } from "node-llama-cpp";
import { CallTextGate } from "../../src/inference/engines/llama-cpp/call-gate.js";
import type { GenerationResult } from "../../src/inference/engines/llama-cpp/prompted.js";
import {
  callOpeners,
  parseTemplateCalls,
  templateCallSyntax,
  withTemplateToolCalls,
} from "../../src/inference/engines/llama-cpp/template-tools.js";
import { parseToolCalls, withToolCalls } from "../../src/inference/engines/llama-cpp/tool-calls.js";
import type { GenerationTools } from "../../src/inference/tools.js";

const specs = [
  { name: "get_time", parameters: { type: "object" }, strict: false },
  { name: "get_weather", parameters: { type: "object" }, strict: false },
];
const auto: GenerationTools = { specs, mode: { kind: "auto" }, parallel: true };

/** A gate with `openers`, fed `pieces` (plain = raw unless given as a pair); what it sent, delta by delta. */
function stream(openers: string[] | null, pieces: Array<string | [string, string]>) {
  const sent: string[] = [];
  const gate = new CallTextGate(openers, (d) => sent.push(d));
  const afterEach: string[] = [];
  let plainLength = 0;
  for (const piece of pieces) {
    const [plain, raw] = typeof piece === "string" ? [piece, piece] : piece;
    plainLength += plain.length;
    gate.push(plain, raw, plainLength);
    afterEach.push(sent.join(""));
  }
  return { gate, sent, afterEach };
}

/** A finished generation of `text` (raw as given), as `generate` returns it, with its gate. */
function generated(gate: CallTextGate, text: string, raw = text): GenerationResult {
  return {
    text,
    rawText: raw,
    gate,
    finishReason: "stop",
    stopSequence: null,
    usage: { promptTokens: 1, completionTokens: 1, cachedPromptTokens: 0 },
    engineMs: 0,
    queueMs: 0,
  };
}

describe("the gate of streamed text", () => {
  test("when text cannot start a call, then each piece is sent as it comes", () => {
    const { sent } = stream(["<tool_call>"], ["Once", " upon", " a", " time", "."]);
    expect(sent).toEqual(["Once", " upon", " a", " time", "."]);
  });

  test("when a piece may start a call, then it is held until it diverges, and then sent", () => {
    const { afterEach } = stream(["<tool_call>"], ["Hi", " <", "tool", "_cat", "s", " <", "b>"]);
    expect(afterEach).toEqual([
      "Hi",
      "Hi",
      "Hi",
      "Hi <tool_cat",
      "Hi <tool_cats",
      "Hi <tool_cats",
      "Hi <tool_cats <b>",
    ]);
  });

  test("when a whole opener comes, then the text before it was sent and nothing after it is", () => {
    const pieces = [
      "Sure",
      ".",
      "\n",
      "<tool",
      "_call>",
      '{"name"',
      ': "get_time", "arguments": {}}',
      "</tool_call>",
      " Ok",
    ];
    const { gate, afterEach } = stream(["<tool_call>"], pieces);
    expect(afterEach).toEqual(["Sure", "Sure.", "Sure.", "Sure.", "Sure.", "Sure.", "Sure.", "Sure.", "Sure."]);
    // The reader finds the same start (the whitespace before the opener belongs to the call).
    const read = withToolCalls(generated(gate, pieces.join("")), auto);
    expect(read).toMatchObject({ toolCalls: [{ name: "get_time", arguments: "{}" }], callPreamble: "Sure." });
  });

  test("when an opener holds whitespace, then other whitespace there still opens a call (as the readers allow)", () => {
    const qwen = templateCallSyntax(new QwenChatWrapper())!;
    const { afterEach } = stream(callOpeners(qwen), ["Ok", " <tool_call>", "  ", '{"name":', ' "get_time"']);
    expect(afterEach.at(-1)).toBe("Ok");
  });

  test("when a special token (left out of the plain text) opens the call, then the text before it is sent and the call is not", () => {
    const mistral = templateCallSyntax(new MistralChatWrapper())!;
    const pieces: Array<string | [string, string]> = [
      "Let me look",
      ["", "[TOOL_CALLS]"],
      ["[", "["],
      ['{"name": "get_time", "arguments": {"zone": "UTC"}}', '{"name": "get_time", "arguments": {"zone": "UTC"}}'],
      [", ", ", "],
      ['{"name": "get_weather", "arguments": {}}]', '{"name": "get_weather", "arguments": {}}]'],
    ];
    const { gate, sent } = stream(callOpeners(mistral), pieces);
    expect(sent.join("")).toBe("Let me look");
    const raw = pieces.map((p) => (typeof p === "string" ? p : p[1])).join("");
    const plain = pieces.map((p) => (typeof p === "string" ? p : p[0])).join("");
    const read = withTemplateToolCalls(generated(gate, plain, raw), auto, mistral);
    expect(read.toolCalls).toEqual([
      { name: "get_time", arguments: '{"zone":"UTC"}' },
      { name: "get_weather", arguments: "{}" },
    ]);
    expect(read.callPreamble).toBe("Let me look");
    expect("gate" in read || "rawText" in read).toBe(false);
  });

  test("when what looked like a call is no call, then the held rest is sent once the answer is read", () => {
    const text = 'Try <tool_call>{"name": "nope", "arguments": {}}</tool_call> later';
    const { gate, sent } = stream(
      ["<tool_call>"],
      ["Try", " <tool_call>", '{"name": "nope", "arguments": {}}', "</tool_call> later"],
    );
    expect(sent.join("")).toBe("Try");
    const read = withToolCalls(generated(gate, text), auto);
    expect(read.toolCalls).toBeUndefined();
    gate.finish(read.text);
    expect(sent.join("")).toBe(text);
  });

  test("when a caller's stop string holds text back, then the gate sends no more than it lets through", () => {
    const sent: string[] = [];
    const gate = new CallTextGate(["<tool_call>"], (d) => sent.push(d));
    gate.push("Hello wor", "Hello wor", 6);
    expect(sent.join("")).toBe("Hello ".slice(0, 6));
    gate.release(9);
    expect(sent.join("")).toBe("Hello wor");
  });

  test("when the call is forced (no openers), then nothing is sent", () => {
    const { sent } = stream(null, ['{"name": "get_time"', ', "arguments": {}}']);
    expect(sent).toEqual([]);
  });
});

describe("reading several calls", () => {
  test("when an auto answer makes several calls in the documented format, then each is read in order, the text before them apart", () => {
    const answer =
      'Checking both. <tool_call>{"name": "get_time", "arguments": {"zone": "UTC"}}</tool_call>\n' +
      '<tool_call>{"name": "get_weather", "arguments": {"city": "Oslo"}}</tool_call>';
    expect(parseToolCalls(answer, auto)).toEqual({
      calls: [
        { name: "get_time", arguments: '{"zone":"UTC"}' },
        { name: "get_weather", arguments: '{"city":"Oslo"}' },
      ],
      start: "Checking both.".length,
    });
    // One call at most without parallel calls; a second call that is malformed leaves the answer text.
    expect(parseToolCalls(answer, { ...auto, parallel: false })?.calls).toHaveLength(1);
    expect(parseToolCalls(answer.replace('"Oslo"}', '"Oslo"'), auto)).toBeNull();
  });

  test("when a forced answer is an array of calls, then each is read; beyond the bound or without parallel calls, none", () => {
    const forced: GenerationTools = { specs, mode: { kind: "forced", names: ["get_time"] }, parallel: true };
    const call = { name: "get_time", arguments: { zone: "UTC" } };
    expect(parseToolCalls(JSON.stringify([call, call]), forced)?.calls).toHaveLength(2);
    expect(parseToolCalls(JSON.stringify(Array(9).fill(call)), forced)).toBeNull();
    expect(parseToolCalls(JSON.stringify([call, call]), { ...forced, parallel: false })).toBeNull();
    expect(parseToolCalls(JSON.stringify(call), { ...forced, parallel: false })?.calls).toHaveLength(1);
  });

  test("when a template answer makes parallel calls in its syntax, then each is read", () => {
    const qwen = templateCallSyntax(new QwenChatWrapper())!;
    const answer =
      'Both:\n<tool_call>\n{"name": "get_time", "arguments": {"zone": "UTC"}}\n</tool_call>\n' +
      '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo"}}\n</tool_call>';
    const read = parseTemplateCalls(answer, qwen, auto);
    expect(read?.calls.map((c) => c.name)).toEqual(["get_time", "get_weather"]);
    expect(answer.slice(0, read!.start)).toBe("Both:");
    expect(parseTemplateCalls(answer, qwen, { ...auto, parallel: false })?.calls).toHaveLength(1);
  });
});
