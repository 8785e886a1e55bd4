/**
 * Tool calling in the model's own chat-template format on the embedded engine (issue 26, item 2):
 * where the GGUF's chat template resolves to a node-llama-cpp chat wrapper that knows the model
 * family's function-calling format (Llama 3.1, Qwen, Mistral, DeepSeek, a Jinja template whose
 * tool syntax node-llama-cpp extracted …), the offered tools and the history's calls and results
 * are written the way the model was trained (`availableFunctions` and `functionCall` history items
 * of `ChatWrapper.generateContextState`), and the answer is read back with the wrapper's call
 * syntax (`settings.functions.call`: prefix, name, params prefix, JSON arguments, suffix).
 * Other models keep the documented format (`tool-calls.ts`).
 *
 * Why the answer is decoded by `LlamaCompletion` and parsed here, rather than by node-llama-cpp's
 * `LlamaChat.generateResponse({functions})` (which detects and parses calls itself): one
 * generation path keeps what `generation.ts` guarantees for every request — the prompt counted
 * once and metered as decoded (LlamaChat re-renders the history itself and compresses it when it
 * nears the context end, reserving a tenth of the context by default), prefix reuse on the chosen
 * slot, the caller's stop strings, log-probabilities and cancellation. LlamaChat also reports no
 * tokens of a call through `onToken` (metering), separates thought segments from the text, and
 * constrains call arguments with node-llama-cpp's own JSON-schema grammar, which lacks what the
 * official clients' schemas use (`anyOf`, numeric bounds; see `structured/json-schema-gbnf.ts`).
 * The cost: an `auto` call is not grammar-constrained once the model starts it, so a malformed
 * one stays text, which is what the issue asks for.
 *
 * - `auto`: the model decodes freely; the first well-formed call in its text (special tokens
 *   written out) naming an offered tool, with JSON object arguments (or a JSON string holding
 *   one, as some templates write them), becomes the call, and with `parallel` each call that
 *   follows it in the wrapper's syntax for parallel calls; the text before the first call is the
 *   answer's text beside them; a call that is not well-formed leaves the whole answer text.
 *   Text streams as it comes, but for a possible start of a call (`call-gate.ts`).
 * - Forced (`required`, a named function): the prompt ends with the wrapper's call prefix and the
 *   answer decodes under a grammar of `<name><params prefix><arguments of that tool's schema>`
 *   for each allowed tool, so it always parses; with `parallel` (`required`, Anthropic `any`)
 *   and a wrapper that writes parallel calls, up to `MAX_PARALLEL_CALLS` of them, each after the
 *   call suffix, the wrapper's text between calls and the call prefix. Where a params prefix
 *   (or that text between calls) holds special tokens (which a grammar cannot spell), the request
 *   takes the documented format instead (one call, where only the text between calls cannot).
 * - The tool definitions are part of the prompt either way, so they count in prompt tokens.
 */
import type {
  ChatHistoryItem,
  ChatModelFunctionCall,
  ChatModelFunctions,
  ChatWrapper,
  LlamaText,
} from "node-llama-cpp";
import type { ChatMessage, GenerateRequest, GenerateResult } from "../../engine.js";
import { jsonSchemaChoiceGrammar } from "../../structured/json-schema-gbnf.js";
import { type GenerationTools, type ToolCall, type ToolDefinition, validToolCall } from "../../tools.js";
import type { GenerationResult, PromptedRequest } from "./prompted.js";
import { forcedCalls, withCalls } from "./tool-calls.js";

export type { TemplatePromptTools } from "./prompted.js";

/** A chat wrapper's call syntax as text (special tokens written out, as `detokenize(…, true)` does). */
export interface CallSyntax {
  /** What opens a call: the wrapper's prefix, then the alternatives it also accepts. */
  prefixes: string[];
  /** Between the name and the arguments; `{{functionName}}` stands for the name. */
  paramsPrefix: string;
  /** What closes a call. */
  suffix: string;
  /** What a forced call's prompt ends with: the section prefix of parallel calls, if any, and the call prefix. */
  lead: string;
  /** What opens a section of parallel calls (before the first call prefix); "" when none. */
  sectionPrefix: string;
  /** Between one call's suffix and the next call's prefix; null where the wrapper writes no parallel calls. */
  betweenCalls: string | null;
}

/** A runtime's tool format when its chat template has a usable one (`promptFormatter`, `templateCallSyntax`). */
export interface TemplateToolFormat {
  syntax: CallSyntax;
  /** True when `text` holds no special token (the model's tokenizer reads it the same either way). */
  plain: (text: string) => boolean;
}

type Text = string | LlamaText;
const text = (v: Text | undefined): string => (v === undefined ? "" : typeof v === "string" ? v : v.toString());

/** The call syntax of `wrapper`'s settings, as text. */
export function callSyntax(wrapper: ChatWrapper): CallSyntax {
  const { call, parallelism } = wrapper.settings.functions;
  const prefix = text(call.prefix);
  return {
    prefixes: [prefix, ...(call.prefixAlternateMatches ?? []).map(text)],
    paramsPrefix: text(call.paramsPrefix),
    suffix: text(call.suffix),
    lead: text(parallelism?.call.sectionPrefix) + prefix,
    sectionPrefix: text(parallelism?.call.sectionPrefix),
    betweenCalls: parallelism ? text(parallelism.call.betweenCalls) : null,
  };
}

/**
 * What opens a call in `syntax`: each call prefix, and the section prefix of parallel calls before
 * it (so the text before a call never ends with the section's opening).
 */
export function callOpeners(syntax: CallSyntax): string[] {
  const prefixes = syntax.prefixes.filter((p) => p.trim() !== "");
  return syntax.sectionPrefix.trim() === ""
    ? prefixes
    : [...prefixes.map((p) => syntax.sectionPrefix + p), ...prefixes];
}

/** The node-llama-cpp prefix of its own generic call syntax, which no model was trained on. */
const GENERIC_PREFIX = "||call:";

/**
 * The call syntax of `wrapper` when it is the model's own and this module can read it, else null
 * (the documented format serves the model). Usable means: a Jinja template wrapper that extracted
 * the function-call syntax from the template (`usingJinjaFunctionCallTemplate`), or a specialized
 * wrapper, but not node-llama-cpp's generic `||call: name(params)` syntax (General, ChatML,
 * Llama 2, Llama 3.0, Alpaca, Falcon, Gemma wrappers); and a call the wrapper writes
 * (`generateFunctionCall`) reads back as the same name and arguments (a wrapper writing
 * non-JSON arguments fails this).
 */
export function templateCallSyntax(wrapper: ChatWrapper): CallSyntax | null {
  if ("usingJinjaFunctionCallTemplate" in wrapper && wrapper.usingJinjaFunctionCallTemplate !== true) return null;
  const syntax = callSyntax(wrapper);
  if (syntax.prefixes.some((p) => p.trim().startsWith(GENERIC_PREFIX))) return null;
  const probe = { name: "probe_tool", params: { text: 'a "quoted" value', n: 1, list: [true, null] } };
  let written: string;
  try {
    written = text(wrapper.generateFunctionCall(probe.name, probe.params));
  } catch {
    return null;
  }
  const read = parseTemplateCall(written, syntax, {
    specs: [{ name: probe.name, parameters: { type: "object" }, strict: false }],
    mode: { kind: "auto" },
  });
  return read?.name === probe.name && read.arguments === JSON.stringify(probe.params) ? syntax : null;
}

/** The tools as node-llama-cpp's `availableFunctions`. */
export function templateFunctions(specs: ToolDefinition[]): ChatModelFunctions {
  return Object.fromEntries(
    specs.map((t) => [
      t.name,
      { ...(t.description ? { description: t.description } : {}), params: t.parameters as never },
    ]),
  );
}

/** JSON text as a value (a tool's result, a call's arguments); text that is not JSON stays a string. */
function jsonValue(s: string): unknown {
  try {
    return JSON.parse(s);
  } catch {
    return s;
  }
}

/**
 * Chat messages → node-llama-cpp's chat history, ending with the model turn to generate. An
 * assistant's calls are `functionCall` items of its response, each with the result the `tool`
 * message answering it holds (by `toolCallId`, else the first call still unanswered); text the
 * assistant writes after the results continues the same response, as the model saw it. A last
 * model turn with calls is continued (the answer follows the results); otherwise an empty model
 * turn is added. A tool message answering no call is a user turn.
 */
export function templateHistory(messages: ChatMessage[]): ChatHistoryItem[] {
  const history: ChatHistoryItem[] = [];
  /** The calls of the last model turn with calls still awaiting a result. */
  let pending: { id: string; call: ChatModelFunctionCall }[] = [];
  /** The last model turn made calls and no user or system turn came since: the model goes on in it. */
  let continuing = false;
  for (const m of messages) {
    if (m.role === "tool") {
      const at = pending.findIndex((p) => p.id === m.toolCallId);
      const match = pending.splice(at < 0 ? 0 : at, 1)[0];
      if (match) match.call.result = jsonValue(m.content);
      else history.push({ type: "user", text: m.content });
      continue;
    }
    if (m.role !== "assistant") {
      history.push(m.role === "user" ? { type: "user", text: m.content } : { type: "system", text: m.content });
      continuing = false;
      pending = [];
      continue;
    }
    const calls = (m.toolCalls ?? []).map((c) => ({
      id: c.id,
      call: {
        type: "functionCall",
        name: c.name,
        params: jsonValue(c.arguments),
        result: undefined,
      } as ChatModelFunctionCall,
    }));
    const response =
      calls.length === 0 ? [m.content] : [...(m.content ? [m.content] : []), ...calls.map((c) => c.call)];
    const last = history.at(-1);
    if (continuing && last?.type === "model") last.response.push(...response);
    else history.push({ type: "model", response });
    if (calls.length > 0) {
      pending = calls;
      continuing = true;
    }
  }
  const last = messages.at(-1);
  const answerFollows = last?.role === "tool" || (last?.role === "assistant" && (last.toolCalls?.length ?? 0) > 0);
  if (!(answerFollows && history.at(-1)?.type === "model")) history.push({ type: "model", response: [] });
  return history;
}

/** A regular expression source matching `literal` with any whitespace where it has whitespace, after optional whitespace. */
function loose(literal: string): string {
  return (
    "\\s*" +
    literal
      .trim()
      .split(/\s+/)
      .map((part) => part.replace(/[.*+?^${}()|[\]\\]/g, "\\$&"))
      .join("\\s*")
  );
}

/** The end (exclusive) of the JSON object or string starting at `from` (after whitespace), or -1. */
function jsonEnd(s: string, from: number): number {
  let i = from;
  while (i < s.length && /\s/.test(s[i])) i++;
  if (s[i] !== "{" && s[i] !== '"') return -1;
  let depth = 0;
  let inString = false;
  for (; i < s.length; i++) {
    const c = s[i];
    if (inString) {
      if (c === "\\") i++;
      else if (c === '"') {
        inString = false;
        if (depth === 0) return i + 1;
      }
    } else if (c === '"') inString = true;
    else if (c === "{" || c === "[") depth++;
    else if (c === "}" || c === "]") {
      depth--;
      if (depth === 0) return i + 1;
    }
  }
  return -1;
}

/**
 * The calls an answer makes in the template's syntax, or null (the answer stays text): the first
 * call opener in `answer` (`callOpeners`; `start` is where it starts, whitespace before it
 * included), then an offered tool's name and the params prefix, then JSON object arguments (or a
 * JSON string holding them), then the suffix — or the text ends inside it, where an end-of-turn
 * token closed the call (no arguments at all: `{}`, where the suffix follows and closes no JSON
 * object). With `tools.parallel`, each call that follows in the same way after the wrapper's text
 * between calls is one more. Whitespace may differ from the syntax's. Each name must be an offered
 * tool (an allowed one when forced; `validToolCall`); one call that is not well-formed: null.
 */
export function parseTemplateCalls(
  answer: string,
  syntax: CallSyntax,
  tools: GenerationTools,
): { calls: ToolCall[]; start: number } | null {
  if (tools.mode.kind === "none") return null;
  // The earliest call opener in the answer (the longest where two start at the same place).
  let first: RegExpExecArray | null = null;
  for (const opener of callOpeners(syntax)) {
    const m = new RegExp(loose(opener)).exec(answer);
    if (m && (!first || m.index < first.index || (m.index === first.index && m[0].length > first[0].length))) first = m;
  }
  if (!first) return null;
  const calls: ToolCall[] = [];
  let rest = answer.slice(first.index + first[0].length);
  for (;;) {
    const read = readCall(rest, syntax, tools);
    if (!read) return null;
    calls.push(read.call);
    if (!tools.parallel || syntax.betweenCalls === null) break;
    const after = rest.slice(read.end);
    const next = syntax.prefixes
      .filter((p) => p.trim() !== "")
      .map((p) => new RegExp(`^${loose(syntax.betweenCalls ?? "")}${loose(p)}`).exec(after))
      .find((m) => m !== null);
    if (!next) break;
    rest = after.slice(next[0].length);
  }
  return { calls, start: first.index };
}

/** The first call of `answer` in the template's syntax (`parseTemplateCalls`), or null. */
export function parseTemplateCall(answer: string, syntax: CallSyntax, tools: GenerationTools): ToolCall | null {
  return parseTemplateCalls(answer, syntax, { ...tools, parallel: false })?.calls[0] ?? null;
}

/**
 * One call right after its opener: the name, params prefix, arguments and suffix (or the end of
 * the text inside the suffix); `end` is where it ends in `rest`. Null: not a well-formed call.
 */
function readCall(rest: string, syntax: CallSyntax, tools: GenerationTools): { call: ToolCall; end: number } | null {
  // Longer names first, so a name that begins another is not taken for it.
  const names = tools.specs.map((t) => t.name).sort((a, b) => b.length - a.length);
  const suffix = syntax.suffix.replace(/\s+/g, "");
  /** Where the suffix ends after `from`, or the end of the text inside it; -1: something else follows. */
  const suffixEnd = (from: number): number => {
    const m = new RegExp(`^${loose(syntax.suffix)}`).exec(rest.slice(from));
    if (m) return from + m[0].length;
    return suffix.startsWith(rest.slice(from).replace(/\s+/g, "")) ? rest.length : -1;
  };
  for (const name of names) {
    const lead = new RegExp(
      `^\\s*${name.replace(/[.*+?^${}()|[\]\\]/g, "\\$&")}${loose(syntax.paramsPrefix.replaceAll("{{functionName}}", name))}`,
    ).exec(rest);
    if (!lead) continue;
    const from = lead[0].length;
    const end = jsonEnd(rest, from);
    if (end < 0) {
      // No arguments written: a call (`{}`) only where the suffix closes a call of its own (not
      // a JSON object the arguments sit in, as `"arguments": …}`), and it follows.
      const tail = rest.slice(from).replace(/\s+/g, "");
      if (tail === "" || /^[}\]]/.test(suffix)) return null;
      const closed = suffixEnd(from);
      const call = closed < 0 ? null : validToolCall({ name, arguments: "{}" }, tools);
      return call ? { call, end: closed } : null;
    }
    let args = jsonValue(rest.slice(from, end));
    if (typeof args === "string") args = jsonValue(args);
    const closed = suffixEnd(end);
    if (closed < 0 || typeof args !== "object" || args === null || Array.isArray(args)) return null;
    const call = validToolCall({ name, arguments: JSON.stringify(args) }, tools);
    return call ? { call, end: closed } : null;
  }
  return null;
}

/** `text` as a GBNF string literal. */
function gbnfLiteral(text: string): string {
  const escaped = text
    .replace(/\\/g, "\\\\")
    .replace(/"/g, '\\"')
    .replace(/\n/g, "\\n")
    .replace(/\r/g, "\\r")
    .replace(/\t/g, "\\t");
  return `"${escaped}"`;
}

/**
 * The grammar of a forced call in the template's syntax (the prompt ends with `syntax.lead`):
 * for each allowed tool, its name and params prefix, then arguments valid against its schema.
 * With `maxCalls` above 1 and a wrapper that writes parallel calls, up to `maxCalls` such calls,
 * each after the suffix of the one before, the text between calls and the call prefix (one call
 * where that text holds special tokens). Null where a params prefix holds special tokens: the
 * documented format serves the request.
 */
export function forcedTemplateGrammar(
  format: TemplateToolFormat,
  specs: ToolDefinition[],
  names: string[],
  maxCalls = 1,
): string | null {
  const { syntax } = format;
  const choices = specs
    .filter((t) => names.includes(t.name))
    .map((t) => ({
      lead: t.name + syntax.paramsPrefix.replaceAll("{{functionName}}", t.name),
      schema: { type: "object", ...t.parameters },
    }));
  if (choices.length === 0 || !choices.every((c) => format.plain(c.lead))) return null;
  const one = jsonSchemaChoiceGrammar(choices);
  const glue = syntax.betweenCalls === null ? null : syntax.suffix + syntax.betweenCalls + syntax.prefixes[0];
  if (maxCalls <= 1 || glue === null || !format.plain(glue) || !one.startsWith("root ::= ")) return one;
  // The choice of one call becomes `tool-call`; the root repeats it (no rule of the choice grammar
  // has that name: its own rules are `c<i>-…`, the shared ones JSON's).
  return (
    `root ::= tool-call (${gbnfLiteral(glue)} tool-call){0,${maxCalls - 1}}\n` +
    `tool-call ::= ${one.slice("root ::= ".length)}`
  );
}

/**
 * A request as the embedded engine decodes it in the template's tool format
 * (`PromptedRequest` in `generation.ts`), or null where the documented format serves it: no tools
 * and no tool turns (the plain template prompt), or a forced call `forcedTemplateGrammar` cannot
 * write. A forced call's grammar replaces the request's response format, and its text is not
 * streamed; under `auto`, streamed text is gated on the template's call openers (`call-gate.ts`).
 */
export function templateToolRequest(req: GenerateRequest, format: TemplateToolFormat): PromptedRequest | null {
  const turns = req.messages.some((m) => m.role === "tool" || (m.toolCalls?.length ?? 0) > 0);
  if (!req.tools && !turns) return null;
  const tools = req.tools ?? { specs: [], mode: { kind: "none" } };
  if (tools.mode.kind === "forced") {
    const gbnf = forcedTemplateGrammar(format, tools.specs, tools.mode.names, forcedCalls(tools));
    if (!gbnf) return null;
    return {
      ...req,
      responseFormat: undefined,
      templateTools: { functions: tools.specs, forced: true },
      gbnf,
      callOpeners: null,
    };
  }
  if (tools.mode.kind === "none") return { ...req, templateTools: { functions: [], forced: false } };
  return {
    ...req,
    templateTools: { functions: tools.specs, forced: false },
    rawText: true,
    callOpeners: callOpeners(format.syntax),
  };
}

/**
 * The result with the calls its answer makes in the template's syntax, if any
 * (`parseTemplateCalls`; `rawText`: the answer with special tokens written out, up to a caller's
 * stop string; a forced answer follows `syntax.lead`), and the text before the first call as its
 * `callPreamble`. An answer cut short or cancelled makes none; under `auto` it stays text. A
 * forced answer that makes no call is the call cut short, never the caller's text: empty text and
 * no log-probabilities of it (review finding F6, as `withToolCalls`).
 */
export function withTemplateToolCalls(
  result: GenerationResult,
  tools: GenerationTools | undefined,
  syntax: CallSyntax,
): GenerateResult {
  const { rawText, gate, ...plain } = result;
  if (!tools) return plain;
  const noCall =
    tools.mode.kind === "forced" ? { ...plain, text: "", ...(plain.logprobs ? { logprobs: [] } : {}) } : plain;
  if (result.finishReason === "length" || result.finishReason === "cancelled") return noCall;
  // Without a gate, the raw text runs past a caller's stop string: the text is read instead.
  const answer =
    tools.mode.kind === "forced"
      ? syntax.lead + result.text
      : result.finishReason === "stop_sequence" && !gate
        ? result.text
        : (rawText ?? result.text);
  const read = parseTemplateCalls(answer, syntax, tools);
  if (!read) return noCall;
  return withCalls(plain, read.calls, gate ? gate.plainBefore(read.start) : answer.slice(0, read.start));
}
