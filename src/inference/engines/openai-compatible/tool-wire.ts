/**
 * Tools on the OpenAI-compatible wire (issue 26, item 5): what a request's tools and tool turns
 * become in a chat completion body — `tools` (`[{type: "function", function: {name, description,
 * parameters, strict}}]`), `tool_choice` (`auto`, `required`, `{type: "function", function:
 * {name}}`; a forced set of several names, or of one where several calls may be made, is
 * `required`), `parallel_tool_calls` as the caller asked (`GenerationTools.parallel`; false for
 * a named function), assistant messages with `tool_calls` and `tool` messages with
 * `tool_call_id` — and how the streamed `delta.tool_calls` fragments (index, id and
 * name once, the arguments in pieces) are put back together. vLLM, SGLang, llama.cpp server (with
 * `--jinja`) and Switchyard read these; an upstream that cannot refuses them (400 to the caller).
 */
import type { ChatMessage, GenerateRequest } from "../../engine.js";
import { type GenerationTools, type ToolCall, validToolCall } from "../../tools.js";

/**
 * Prompt tokens allowed for what an upstream's chat template writes around the tool definitions
 * (its instructions on how to call one), over one token per byte of their JSON.
 */
export const TOOLS_TEMPLATE_TOKENS = 256;

/** The `tools`, `tool_choice` and `parallel_tool_calls` fields of a body; none without tools. */
export function toolFields(tools: GenerationTools | undefined): Record<string, unknown> {
  if (!tools || tools.specs.length === 0) return {};
  const { specs, mode } = tools;
  let choice: unknown = mode.kind;
  if (mode.kind === "forced") {
    // One name is the named function, unless several calls may be made (`required` with one tool).
    const named = mode.names.length === 1 && tools.parallel !== true;
    choice = named ? { type: "function", function: { name: mode.names[0] } } : "required";
  }
  return {
    tools: specs.map((t) => ({
      type: "function",
      function: {
        name: t.name,
        ...(t.description ? { description: t.description } : {}),
        parameters: t.parameters,
        ...(t.strict ? { strict: true } : {}),
      },
    })),
    tool_choice: choice,
    parallel_tool_calls: tools.parallel === true,
  };
}

/**
 * The tool parts of a chat turn on the wire: an assistant's `tool_calls` (its content null when
 * it has no text), a tool turn's `tool_call_id`. A tool turn without an id (a legacy `function`
 * result) goes as a user turn, as the role map sends it.
 */
export function wireToolParts(m: ChatMessage): Record<string, unknown> {
  if (m.role === "tool" && m.toolCallId) return { role: "tool", tool_call_id: m.toolCallId };
  if (m.role !== "assistant" || !m.toolCalls || m.toolCalls.length === 0) return {};
  return {
    ...(m.content === "" ? { content: null } : {}),
    tool_calls: m.toolCalls.map((c) => ({
      id: c.id,
      type: "function",
      function: { name: c.name, arguments: c.arguments },
    })),
  };
}

/**
 * The text of a request's tools and history calls (their JSON), which the upstream's template
 * writes into the prompt besides the messages' content: what the prompt bounds count for them.
 */
export function toolPromptText(req: Pick<GenerateRequest, "messages" | "tools">): string {
  const calls = req.messages.flatMap((m) => (m.toolCalls ?? []).map((c) => JSON.stringify(c)));
  const specs = req.tools?.specs.length ? [JSON.stringify(req.tools.specs)] : [];
  return [...specs, ...calls].join("\n");
}

/** One `delta.tool_calls[i]` fragment as OpenAI streams it. */
interface ToolCallFragment {
  index?: unknown;
  id?: unknown;
  function?: { name?: unknown; arguments?: unknown } | null;
}

/**
 * Puts the streamed `delta.tool_calls` fragments back together: by `index` (a fragment without
 * one belongs to the last call), the id and name from the fragment that gives them (a repeated
 * name is not added again), the arguments joined in order.
 */
export class ToolCallAssembler {
  private readonly calls: Array<{ id: string; name: string; arguments: string }> = [];
  private readonly byIndex = new Map<number, number>();

  /** Feeds one chunk's `delta.tool_calls` (anything else is ignored). */
  push(fragments: unknown): void {
    if (!Array.isArray(fragments)) return;
    for (const f of fragments as ToolCallFragment[]) {
      if (typeof f !== "object" || f === null) continue;
      const index = typeof f.index === "number" ? f.index : undefined;
      let at = index === undefined ? this.calls.length - 1 : this.byIndex.get(index);
      if (at === undefined || at < 0) {
        at = this.calls.push({ id: "", name: "", arguments: "" }) - 1;
        if (index !== undefined) this.byIndex.set(index, at);
      }
      const call = this.calls[at];
      if (typeof f.id === "string" && f.id && !call.id) call.id = f.id;
      const name = f.function?.name;
      if (typeof name === "string" && name && !call.name) call.name = name;
      const args = f.function?.arguments;
      if (typeof args === "string") call.arguments += args;
    }
  }

  /** True once any fragment came. */
  get started(): boolean {
    return this.calls.length > 0;
  }

  /**
   * The calls made, in order, each checked against the offered tools (`validToolCall`): a call
   * naming no allowed tool, or whose arguments are not a JSON object, is left out.
   * @param rejected receives each call left out (to be logged).
   */
  finished(tools: GenerationTools | undefined, rejected: (call: { name: string }) => void): ToolCall[] {
    if (!tools) return [];
    return this.calls.flatMap((c) => {
      const valid = validToolCall(c, tools);
      if (!valid) rejected(c);
      return valid ? [valid] : [];
    });
  }
}
