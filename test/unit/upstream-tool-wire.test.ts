/**
 * Tools on the upstream engine's wire (issue 26, item 5): the `tools` / `tool_choice` /
 * `parallel_tool_calls` fields a request becomes, its tool turns, and the streamed
 * `delta.tool_calls` fragments (index, id and name once, the arguments in pieces, as vLLM and
 * OpenAI send them) put back together into valid calls.
 */
import {
  ToolCallAssembler,
  toolFields,
  wireToolParts,
} from "../../src/inference/engines/openai-compatible/tool-wire.js";
import type { GenerationTools } from "../../src/inference/tools.js";

const weather = { type: "object", properties: { city: { type: "string" } }, required: ["city"] };
const specs = [
  { name: "get_weather", description: "Weather", parameters: weather, strict: true },
  { name: "get_time", parameters: { type: "object" }, strict: false },
];
const auto: GenerationTools = { specs, mode: { kind: "auto" } };

test("when tools are offered, then the body carries them in OpenAI's format with the tool_choice their mode says", () => {
  expect(toolFields(undefined)).toEqual({});
  expect(toolFields(auto)).toEqual({
    tools: [
      {
        type: "function",
        function: { name: "get_weather", description: "Weather", parameters: weather, strict: true },
      },
      { type: "function", function: { name: "get_time", parameters: { type: "object" } } },
    ],
    tool_choice: "auto",
    parallel_tool_calls: false,
  });
  // What the caller asked: several calls allowed (OpenAI's default), or not.
  expect(toolFields({ ...auto, parallel: true }).parallel_tool_calls).toBe(true);
  expect(toolFields({ ...auto, parallel: false }).parallel_tool_calls).toBe(false);
  const forced = (names: string[]) => toolFields({ specs, mode: { kind: "forced", names } }).tool_choice;
  expect(forced(["get_time"])).toEqual({ type: "function", function: { name: "get_time" } });
  expect(forced(["get_time", "get_weather"])).toBe("required");
  // `required` with one tool and parallel calls allowed: several calls of it, not the named function's one.
  expect(
    toolFields({ specs: [specs[1]], mode: { kind: "forced", names: ["get_time"] }, parallel: true }).tool_choice,
  ).toBe("required");
});

test("when the history holds calls and results, then they go as tool_calls and tool messages", () => {
  const call = { id: "call_1", name: "get_time", arguments: '{"zone":"UTC"}' };
  expect(wireToolParts({ role: "assistant", content: "", toolCalls: [call] })).toEqual({
    content: null,
    tool_calls: [{ id: "call_1", type: "function", function: { name: "get_time", arguments: '{"zone":"UTC"}' } }],
  });
  expect(wireToolParts({ role: "assistant", content: "Checking.", toolCalls: [call] })).not.toHaveProperty("content");
  expect(wireToolParts({ role: "tool", content: "Noon", toolCallId: "call_1" })).toEqual({
    role: "tool",
    tool_call_id: "call_1",
  });
  expect(wireToolParts({ role: "tool", content: "Noon" })).toEqual({});
});

test("when a call streams in fragments, then id and name come from the first and the arguments join in order", () => {
  const calls = new ToolCallAssembler();
  calls.push([{ index: 0, id: "chatcmpl-tool-1", type: "function", function: { name: "get_weather", arguments: "" } }]);
  calls.push([{ index: 0, function: { arguments: '{"ci' } }]);
  calls.push([{ index: 0, function: { name: "get_weather", arguments: 'ty": ' } }]);
  calls.push([{ index: 0, function: { arguments: '"Oslo"}' } }]);
  expect(calls.finished(auto, () => undefined)).toEqual([
    { id: "chatcmpl-tool-1", name: "get_weather", arguments: '{"city":"Oslo"}' },
  ]);
});

test("when two calls interleave by index, then each gets its own fragments", () => {
  const calls = new ToolCallAssembler();
  calls.push([
    { index: 0, id: "a", function: { name: "get_time", arguments: '{"zo' } },
    { index: 1, id: "b", function: { name: "get_weather", arguments: '{"city":' } },
  ]);
  calls.push([{ index: 1, function: { arguments: '"Rome"}' } }]);
  calls.push([{ index: 0, function: { arguments: 'ne":"UTC"}' } }]);
  expect(calls.finished(auto, () => undefined)).toEqual([
    { id: "a", name: "get_time", arguments: '{"zone":"UTC"}' },
    { id: "b", name: "get_weather", arguments: '{"city":"Rome"}' },
  ]);
});

test("when a call is not valid (unknown or disallowed name, arguments not a JSON object), then it is left out and reported", () => {
  const calls = new ToolCallAssembler();
  calls.push([
    { index: 0, function: { name: "nope", arguments: "{}" } },
    { index: 1, function: { name: "get_time", arguments: '{"zone": ' } },
    { index: 2, function: { name: "get_weather", arguments: "[1]" } },
    { index: 3, function: { name: "get_time", arguments: "" } },
  ]);
  const rejected: string[] = [];
  expect(calls.finished(auto, (c) => rejected.push(c.name))).toEqual([{ name: "get_time", arguments: "{}" }]);
  expect(rejected).toEqual(["nope", "get_time", "get_weather"]);
  const forcedWeather: GenerationTools = { specs, mode: { kind: "forced", names: ["get_weather"] } };
  expect(calls.finished(forcedWeather, () => undefined)).toEqual([]);
  expect(calls.finished(undefined, () => undefined)).toEqual([]);
});
