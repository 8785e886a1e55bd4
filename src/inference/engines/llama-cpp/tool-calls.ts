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
 *   always parses and its arguments validate.
 * - `auto` decodes freely; a well-formed `<tool_call>` naming a known tool with JSON object
 *   arguments becomes a call, anything else stays text (never a broken call).
 */
import type { ChatMessage, GenerateRequest, GenerateResult, ResponseFormat } from "../../engine.js";
import { rebaseRefs } from "../../structured/schema-refs.js";
import { type GenerationTools, type ToolCall, type ToolDefinition, type ToolMode, validToolCall } from "../../tools.js";

const OPEN = "<tool_call>";
const CLOSE = "</tool_call>";

/** The system message that lists the tools and the call format. */
export function toolsPrompt(tools: ToolDefinition[], mode: ToolMode): ChatMessage {
  const listed = tools.map((t) => ({
    name: t.name,
    ...(t.description ? { description: t.description } : {}),
    parameters: t.parameters,
  }));
  const must = mode.kind === "forced" ? "You must call one of them now." : "You may call one of them.";
  return {
    role: "system",
    content:
      `You have these tools: ${JSON.stringify(listed)}. ${must} To call a tool, answer only ` +
      `${OPEN}{"name": "<tool name>", "arguments": {<arguments>}}${CLOSE}.`,
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
 * The grammar of a forced call: `{"name": n, "arguments": <n's parameters>}` for each allowed `n`.
 * Each tool's parameters are hoisted whole to the wrapper's `$defs` under the tool's name, and
 * their local `$ref`s rebased onto it (`#` → `#/$defs/<name>`, `#/$defs/P` →
 * `#/$defs/<name>/$defs/P`), so every ref names the schema it named in the tool's own document
 * (review finding F2; tool names are `[a-zA-Z0-9_-]`, plain pointer tokens). Parameters with no
 * `type` of their own (nor a `$ref`, alternatives or a literal) are decoded as an object.
 */
export function forcedCallFormat(tools: ToolDefinition[], names: string[]): ResponseFormat {
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
  const schema = allowed.length === 1 ? { ...call(allowed[0]), $defs } : { anyOf: allowed.map(call), $defs };
  // Strict tools were checked already (the use cases' strict check); what is left is decoded as far as enforceable.
  return { type: "json_schema", schema, strict: false, field: "tools" };
}

/**
 * Reads a call from a finished answer: a forced call is the grammar's JSON; under `auto`, one
 * `<tool_call>{…}</tool_call>` naming an offered tool with object arguments. Anything else: null
 * (the answer stays text).
 */
export function parseToolCall(text: string, tools: ToolDefinition[], mode: ToolMode): ToolCall | null {
  if (mode.kind === "none") return null;
  let json = text.trim();
  if (mode.kind === "auto") {
    const start = json.indexOf(OPEN);
    const end = json.indexOf(CLOSE, start + OPEN.length);
    if (start < 0 || end < 0) return null;
    json = json.slice(start + OPEN.length, end).trim();
  }
  let value: unknown;
  try {
    value = JSON.parse(json);
  } catch {
    return null;
  }
  if (typeof value !== "object" || value === null) return null;
  const { name, arguments: args } = value as { name?: unknown; arguments?: unknown };
  if (typeof name !== "string" || typeof args !== "object" || args === null || Array.isArray(args)) return null;
  return validToolCall({ name, arguments: JSON.stringify(args) }, { specs: tools, mode });
}

/** Where the tools go in the prompt: after the request's own system messages, before the rest. */
export function withToolsPrompt(messages: ChatMessage[], tools: ToolDefinition[], mode: ToolMode): ChatMessage[] {
  if (mode.kind === "none" || tools.length === 0) return messages;
  const lead = messages.findIndex((m) => m.role !== "system" && m.role !== "developer");
  const at = lead < 0 ? messages.length : lead;
  return [...messages.slice(0, at), toolsPrompt(tools, mode), ...messages.slice(at)];
}

/**
 * A request as the embedded engine decodes it: the history's calls and results written as text,
 * the tools prompt after the system messages, and a forced call's grammar as the response format
 * (it replaces one the request had). Without tools and tool turns, `req` itself.
 */
export function toolPromptRequest(req: GenerateRequest): GenerateRequest {
  const turns = req.messages.some((m) => m.role === "tool" || (m.toolCalls?.length ?? 0) > 0);
  if (!req.tools && !turns) return req;
  const messages = turns ? req.messages.map(turnText) : req.messages;
  const tools = req.tools ?? { specs: [], mode: { kind: "none" } };
  return {
    ...req,
    messages: withToolsPrompt(messages, tools.specs, tools.mode),
    ...(tools.mode.kind === "forced" ? { responseFormat: forcedCallFormat(tools.specs, tools.mode.names) } : {}),
  };
}

/**
 * The result with the call its text makes, if any. An answer cut short or cancelled makes none.
 * Under `auto` an answer that is no call stays text; under a forced mode it is the grammar's
 * `{"name": …, "arguments": …}` wrapper cut short, never the caller's text: it comes back with
 * empty text (and no log-probabilities of the wrapper's tokens), the protocols answer no text
 * at all (review finding F6).
 */
export function withToolCalls(result: GenerateResult, tools: GenerationTools | undefined): GenerateResult {
  if (!tools) return result;
  const cut = result.finishReason === "length" || result.finishReason === "cancelled";
  const call = cut ? null : parseToolCall(result.text, tools.specs, tools.mode);
  if (call) return { ...result, toolCalls: [call] };
  if (tools.mode.kind !== "forced") return result;
  return { ...result, text: "", ...(result.logprobs ? { logprobs: [] } : {}) };
}
