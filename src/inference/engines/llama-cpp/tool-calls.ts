/**
 * Tool calling on the embedded engine (issue 26, item 2): how the tools a request offers and the
 * calls in its history are written into the prompt, how a forced call is decoded, and how a call
 * is read back from the answer's text.
 *
 * The documented prompt format (docs/structured-outputs-and-tools.md), for models whose chat
 * template has no tool format of its own (the tiny test models; `template-tools.ts` serves the
 * others): a system message lists the tools as JSON and says how to call one —
 * `<tool_call>{"name": …, "arguments": {…}}</tool_call>`; earlier calls and results in the history
 * are written the same way (`<tool_call>…</tool_call>` in the assistant's turn after its text,
 * `<tool_response>…</tool_response>` as the tool's turn). The tool definitions are part of the
 * prompt, so they count in prompt tokens as the engine tokenizes them.
 * - A forced call (`required`, a named function; Anthropic `any` / `tool`) decodes under a grammar
 *   of `{"name": <one of the allowed names>, "arguments": <that tool's parameter schema>}`, so it
 *   always parses and its arguments validate; where several calls are allowed (`parallel`, not a
 *   named function), of a JSON array of one to `MAX_PARALLEL_CALLS` of them.
 * - `auto` decodes freely; the well-formed `<tool_call>` blocks (one after another, whitespace
 *   between) naming known tools with JSON object arguments become the calls (the first alone
 *   without `parallel`), the text before the first is the answer's text beside them; a block that
 *   is not well-formed leaves the whole answer text (never a broken call). Text streams as it
 *   comes, but for a possible start of `<tool_call>` (`call-gate.ts`).
 */
import type { ChatMessage, GenerateRequest, GenerateResult, ResponseFormat } from "../../engine.js";
import { rebaseRefs } from "../../structured/schema-refs.js";
import {
  type GenerationTools,
  MAX_PARALLEL_CALLS,
  type ToolCall,
  type ToolDefinition,
  type ToolMode,
  validToolCall,
} from "../../tools.js";
import type { GenerationResult, PromptedRequest } from "./prompted.js";

const OPEN = "<tool_call>";
const CLOSE = "</tool_call>";

/** The system message that lists the tools and the call format; `parallel`: more than one call may be made. */
export function toolsPrompt(tools: ToolDefinition[], mode: ToolMode, parallel = false): ChatMessage {
  const listed = tools.map((t) => ({
    name: t.name,
    ...(t.description ? { description: t.description } : {}),
    parameters: t.parameters,
  }));
  const some = parallel ? "one or more of them" : "one of them";
  const must = mode.kind === "forced" ? `You must call ${some} now.` : `You may call ${some}.`;
  return {
    role: "system",
    content:
      `You have these tools: ${JSON.stringify(listed)}. ${must} To call a tool, answer only ` +
      `${OPEN}{"name": "<tool name>", "arguments": {<arguments>}}${CLOSE}` +
      (parallel ? `, one such block per call.` : "."),
  };
}

/** An earlier call as the assistant's turn writes it. */
export function toolCallText(name: string, args: string): string {
  let parsed: unknown = {};
  try {
    parsed = JSON.parse(args);
  } catch {
    parsed = args;
  }
  return `${OPEN}${JSON.stringify({ name, arguments: parsed })}${CLOSE}`;
}

/** A tool's result as its turn writes it. */
export function toolResultText(content: string): string {
  return `<tool_response>${content}</tool_response>`;
}

/** A history turn as text: a tool's result wrapped, an assistant's calls after its text, one a line. */
function turnText(m: ChatMessage): ChatMessage {
  if (m.role === "tool") return { role: m.role, content: toolResultText(m.content) };
  const calls = (m.toolCalls ?? []).map((c) => toolCallText(c.name, c.arguments));
  if (calls.length === 0) return { role: m.role, content: m.content };
  return { role: m.role, content: [m.content, ...calls].filter(Boolean).join("\n") };
}

/**
 * The grammar of a forced call: `{"name": n, "arguments": <n's parameters>}` for each allowed `n`;
 * with `maxCalls` above 1, a JSON array of one to `maxCalls` such calls.
 * Each tool's parameters are hoisted whole to the wrapper's `$defs` under the tool's name, and
 * their local `$ref`s rebased onto it (`#` → `#/$defs/<name>`, `#/$defs/P` →
 * `#/$defs/<name>/$defs/P`), so every ref names the schema it named in the tool's own document
 * (review finding F2; tool names are `[a-zA-Z0-9_-]`, plain pointer tokens). Parameters with no
 * `type` of their own (nor a `$ref`, alternatives or a literal) are decoded as an object.
 */
export function forcedCallFormat(tools: ToolDefinition[], names: string[], maxCalls = 1): ResponseFormat {
  const allowed = tools.filter((t) => names.includes(t.name));
  const $defs = Object.fromEntries(
    allowed.map((t) => {
      const own = ["type", "$ref", "anyOf", "oneOf", "const", "enum"].some((k) => k in t.parameters);
      const params = rebaseRefs(t.parameters, `#/$defs/${t.name}`) as Record<string, unknown>;
      return [t.name, own ? params : { type: "object", ...params }];
    }),
  );
  const call = (t: ToolDefinition) => ({
    type: "object",
    properties: { name: { const: t.name }, arguments: { $ref: `#/$defs/${t.name}` } },
    required: ["name", "arguments"],
    additionalProperties: false,
  });
  const one = allowed.length === 1 ? call(allowed[0]) : { anyOf: allowed.map(call) };
  const schema =
    maxCalls > 1 ? { type: "array", items: one, minItems: 1, maxItems: maxCalls, $defs } : { ...one, $defs };
  // Strict tools were checked already (the use cases' strict check); what is left is decoded as far as enforceable.
  return { type: "json_schema", schema, strict: false, field: "tools" };
}

/** The most calls a forced answer decodes: `MAX_PARALLEL_CALLS` with `parallel`, else one. */
export function forcedCalls(tools: GenerationTools): number {
  return tools.parallel ? MAX_PARALLEL_CALLS : 1;
}

/** A `{"name": …, "arguments": {…}}` value as a call naming an allowed tool, or null. */
function callOf(value: unknown, tools: GenerationTools): ToolCall | null {
  if (typeof value !== "object" || value === null) return null;
  const { name, arguments: args } = value as { name?: unknown; arguments?: unknown };
  if (typeof name !== "string" || typeof args !== "object" || args === null || Array.isArray(args)) return null;
  return validToolCall({ name, arguments: JSON.stringify(args) }, tools);
}

function jsonValue(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    return undefined;
  }
}

/**
 * Reads the calls of a finished answer, or null (the answer stays text). A forced answer is the
 * grammar's JSON: one call, or with `parallel` an array of them. Under `auto`: the first
 * `<tool_call>{…}</tool_call>` (whitespace before it belongs to it: `start` is where that
 * whitespace starts, the text before is the answer's own), then each block that follows it after
 * whitespace (with `parallel`); every block must name an offered tool with object arguments.
 */
export function parseToolCalls(text: string, tools: GenerationTools): { calls: ToolCall[]; start: number } | null {
  const { mode } = tools;
  if (mode.kind === "none") return null;
  if (mode.kind === "forced") {
    const value = jsonValue(text.trim());
    const values = tools.parallel && Array.isArray(value) ? value : [value];
    const calls = values.map((v) => callOf(v, tools));
    if (calls.length === 0 || calls.length > forcedCalls(tools) || calls.some((c) => c === null)) return null;
    return { calls: calls as ToolCall[], start: 0 };
  }
  const first = /\s*<tool_call>/.exec(text);
  if (!first) return null;
  const calls: ToolCall[] = [];
  let at = first.index + first[0].length;
  for (;;) {
    const end = text.indexOf(CLOSE, at);
    if (end < 0) return null;
    const call = callOf(jsonValue(text.slice(at, end).trim()), tools);
    if (!call) return null;
    calls.push(call);
    if (!tools.parallel) break;
    const next = /^\s*<tool_call>/.exec(text.slice(end + CLOSE.length));
    if (!next) break;
    at = end + CLOSE.length + next[0].length;
  }
  return { calls, start: first.index };
}

/** Where the tools go in the prompt: after the request's own system messages, before the rest. */
export function withToolsPrompt(messages: ChatMessage[], tools: GenerationTools): ChatMessage[] {
  if (tools.mode.kind === "none" || tools.specs.length === 0) return messages;
  const lead = messages.findIndex((m) => m.role !== "system" && m.role !== "developer");
  const at = lead < 0 ? messages.length : lead;
  const parallel = tools.parallel === true && (tools.mode.kind === "auto" || forcedCalls(tools) > 1);
  return [...messages.slice(0, at), toolsPrompt(tools.specs, tools.mode, parallel), ...messages.slice(at)];
}

/**
 * A request as the embedded engine decodes it: the history's calls and results written as text,
 * the tools prompt after the system messages, and a forced call's grammar as the response format
 * (it replaces one the request had); streamed text gated on `<tool_call>` under `auto`, held
 * whole under a forced call. Without tools and tool turns, `req` itself.
 */
export function toolPromptRequest(req: GenerateRequest): PromptedRequest {
  const turns = req.messages.some((m) => m.role === "tool" || (m.toolCalls?.length ?? 0) > 0);
  if (!req.tools && !turns) return req;
  const messages = turns ? req.messages.map(turnText) : req.messages;
  const tools = req.tools ?? { specs: [], mode: { kind: "none" } };
  const { mode } = tools;
  return {
    ...req,
    messages: withToolsPrompt(messages, tools),
    ...(mode.kind === "forced"
      ? { responseFormat: forcedCallFormat(tools.specs, mode.names, forcedCalls(tools)), callOpeners: null }
      : mode.kind === "auto"
        ? { callOpeners: [OPEN] }
        : {}),
  };
}

/**
 * The result with the calls its text makes, if any (`parseToolCalls`; an `auto` answer is read
 * from its raw text, special tokens written out, and the text before its first call is its
 * `callPreamble`). An answer cut short or cancelled makes none.
 * Under `auto` an answer that is no call stays text; under a forced mode it is the grammar's
 * `{"name": …, "arguments": …}` wrapper cut short, never the caller's text: it comes back with
 * empty text (and no log-probabilities of the wrapper's tokens), the protocols answer no text
 * at all (review finding F6).
 */
export function withToolCalls(result: GenerationResult, tools: GenerationTools | undefined): GenerateResult {
  const { rawText, gate, ...plain } = result;
  if (!tools) return plain;
  const cut = result.finishReason === "length" || result.finishReason === "cancelled";
  const answer = tools.mode.kind === "auto" ? (rawText ?? plain.text) : plain.text;
  const read = cut ? null : parseToolCalls(answer, tools);
  if (read) return withCalls(plain, read.calls, gate ? gate.plainBefore(read.start) : answer.slice(0, read.start));
  if (tools.mode.kind !== "forced") return plain;
  return { ...plain, text: "", ...(plain.logprobs ? { logprobs: [] } : {}) };
}

/** `result` with `calls`, and `preamble` (the text before them) as its `callPreamble` when there is some. */
export function withCalls(result: GenerateResult, calls: ToolCall[], preamble: string): GenerateResult {
  return { ...result, toolCalls: calls, ...(preamble ? { callPreamble: preamble } : {}) };
}
