/**
 * Tool calling on the embedded engine (issue 26, item 2), in protocol-neutral terms: the tools a
 * request offers, how the model is made to call one, and how a call is read back from its text.
 *
 * Prompt format (documented in the README; the tiny test models have no tool template of their
 * own): a system message lists the tools as JSON and says how to call one —
 * `<tool_call>{"name": …, "arguments": {…}}</tool_call>`; earlier calls and results in the history
 * are written the same way (`<tool_call>…</tool_call>` in the assistant's turn,
 * `<tool_response>…</tool_response>` as the tool's turn). The tool definitions are part of the
 * prompt, so they count in prompt tokens as the engine tokenizes them.
 * - A forced call (`required`, a named function; Anthropic `any` / `tool`) decodes under a grammar
 *   of `{"name": <one of the allowed names>, "arguments": <that tool's parameter schema>}`, so it
 *   always parses and its arguments validate.
 * - `auto` decodes freely; a well-formed `<tool_call>` naming a known tool with JSON object
 *   arguments becomes a call, anything else stays text (never a broken call).
 */
import { randomBytes } from "node:crypto";
import type { ChatMessage, ResponseFormat } from "../../../inference/engine.js";
import { jsonSchemaGrammar, schemaIssueField } from "../../../inference/structured/json-schema-gbnf.js";
import type { FieldIssue } from "../../../shared/errors.js";

/** One function a request offers. */
export interface ToolSpec {
  name: string;
  description?: string | null;
  /** JSON Schema of the arguments (an object schema). */
  parameters: Record<string, unknown>;
  /** The request's field of this tool's schema (400s name it), e.g. `tools[0].function.parameters`. */
  field: string;
  /** Refuse keywords the grammar cannot enforce (OpenAI `strict`). */
  strict: boolean;
}

/** How the model may use the tools: not at all, as it likes, or it must call one of `names`. */
export type ToolMode = { kind: "none" } | { kind: "auto" } | { kind: "forced"; names: string[] };

/** A call read back from the model's answer; `arguments` is compact JSON text. */
export interface ParsedToolCall {
  name: string;
  arguments: string;
}

/** Function names as OpenAI and Anthropic accept them. */
export const TOOL_NAME = /^[a-zA-Z0-9_-]{1,64}$/;

const OPEN = "<tool_call>";
const CLOSE = "</tool_call>";

/** A new tool call id: `call_…` (OpenAI) or `toolu_…` (Anthropic), 24 random letters and digits. */
export function toolCallId(prefix: "call_" | "toolu_" | "fc_"): string {
  const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
  const bytes = randomBytes(24);
  return prefix + Array.from(bytes, (b) => alphabet[b % alphabet.length]).join("");
}

/** The system message that lists the tools and the call format. */
export function toolsPrompt(tools: ToolSpec[], mode: ToolMode): ChatMessage {
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

/**
 * The strict tools' parameter keywords the grammar cannot enforce, as 400 issues
 * (`tools[0].function.parameters.properties.x.pattern`).
 */
export function strictToolIssues(tools: ToolSpec[]): FieldIssue[] {
  return tools
    .filter((t) => t.strict)
    .flatMap((t) =>
      jsonSchemaGrammar(t.parameters).issues.map((i) => ({
        field: schemaIssueField(t.field, i.path),
        message: i.message,
      })),
    );
}

/** The grammar of a forced call: `{"name": n, "arguments": <n's parameters>}` for each allowed `n`. */
export function forcedCallFormat(tools: ToolSpec[], names: string[]): ResponseFormat {
  const allowed = tools.filter((t) => names.includes(t.name));
  const call = (t: ToolSpec) => ({
    type: "object",
    properties: { name: { const: t.name }, arguments: { type: "object", ...t.parameters } },
    required: ["name", "arguments"],
    additionalProperties: false,
  });
  const schema = allowed.length === 1 ? call(allowed[0]) : { anyOf: allowed.map(call) };
  // Strict tools were checked already (strictToolIssues); what is left is decoded as far as enforceable.
  return { type: "json_schema", schema, strict: false, field: "tools" };
}

/**
 * Reads a call from a finished answer: a forced call is the grammar's JSON; under `auto`, one
 * `<tool_call>{…}</tool_call>` naming an offered tool with object arguments. Anything else: null
 * (the answer stays text).
 */
export function parseToolCall(text: string, tools: ToolSpec[], mode: ToolMode): ParsedToolCall | null {
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
  if (typeof name !== "string" || !tools.some((t) => t.name === name)) return null;
  if (mode.kind === "forced" && !mode.names.includes(name)) return null;
  if (typeof args !== "object" || args === null || Array.isArray(args)) return null;
  return { name, arguments: JSON.stringify(args) };
}

/** The call a finished generation made, if any: an answer cut short or cancelled stays text. */
export function calledTool(
  result: { text: string; finishReason: string },
  tools: ToolSpec[],
  mode: ToolMode,
): ParsedToolCall | null {
  if (result.finishReason === "length" || result.finishReason === "cancelled") return null;
  return parseToolCall(result.text, tools, mode);
}

/** Where the tools go in the prompt: after the request's own system messages, before the rest. */
export function withToolsPrompt(messages: ChatMessage[], tools: ToolSpec[], mode: ToolMode): ChatMessage[] {
  if (mode.kind === "none" || tools.length === 0) return messages;
  const lead = messages.findIndex((m) => m.role !== "system" && m.role !== "developer");
  const at = lead < 0 ? messages.length : lead;
  return [...messages.slice(0, at), toolsPrompt(tools, mode), ...messages.slice(at)];
}
