/**
 * Tool calling behind the engine interface (issue 26, items 2 and 5), in protocol-neutral terms:
 * the functions a request offers, how the model may use them, the calls earlier turns made, and
 * the call an answer makes. The protocols translate their bodies into these shapes (chat
 * `tool_calls` / `tool` messages, Anthropic `tool_use` / `tool_result`, Responses `function_call`
 * / `function_call_output`) and render `GenerateResult.toolCalls` back, whichever engine made
 * them; each engine does its own part: the embedded one writes them into its prompt and reads a
 * call back from its text, in the chat template's own tool format where the model has one
 * (`engines/llama-cpp/template-tools.ts`) or a documented one (`tool-calls.ts`); the upstream one
 * sends them as OpenAI's `tools` / `tool_choice` and reads the streamed `delta.tool_calls`
 * (`engines/openai-compatible/tool-wire.ts`).
 */

/** One function a request offers. */
export interface ToolDefinition {
  name: string;
  description?: string | null;
  /** JSON Schema of the arguments (an object schema). */
  parameters: Record<string, unknown>;
  /** OpenAI `strict`: every keyword of `parameters` must be enforced (refused where it cannot be). */
  strict: boolean;
}

/** How the model may use the tools: not at all, as it likes, or it must call one of `names`. */
export type ToolMode = { kind: "none" } | { kind: "auto" } | { kind: "forced"; names: string[] };

/** The tools of a generation (`GenerateRequest.tools`). */
export interface GenerationTools {
  specs: ToolDefinition[];
  mode: ToolMode;
  /**
   * The answer may make more than one call (OpenAI `parallel_tool_calls`, true by default;
   * Anthropic's `disable_parallel_tool_use` false), at most `MAX_PARALLEL_CALLS` where the engine
   * decodes them under a grammar. Absent or false: at most one call, the first the model makes.
   * The protocols set it false for a named function (`tool_choice: {type: "function", name}`,
   * Anthropic `tool`): exactly that one call, as OpenAI answers it.
   */
  parallel?: boolean;
}

/**
 * The most calls a forced answer (`required`, Anthropic `any`) decodes with `parallel` set: the
 * grammar allows one to this many, each valid against its function's schema. Bounded because an
 * unbounded repetition lets a model that keeps choosing "another call" run on until `max_tokens`,
 * and an answer cut short makes no call at all; with the bound the grammar itself closes the answer
 * (a small model under a grammar rarely chooses to stop on its own). Eight is more than the calls
 * one turn of a real agent makes at once (a handful of lookups) and keeps the worst case of the
 * tiny test model within a few hundred tokens. `auto` answers are not bounded: every well-formed
 * call the model writes is kept.
 */
export const MAX_PARALLEL_CALLS = 8;

/** A call an earlier assistant turn made (`ChatMessage.toolCalls`); `arguments` is JSON text. */
export interface HistoryToolCall {
  /** The caller's id of the call, which the tool turn answering it names (`ChatMessage.toolCallId`). */
  id: string;
  name: string;
  arguments: string;
}

/**
 * A call an answer makes (`GenerateResult.toolCalls`, in the order the model made them): `name` is one of the offered tools (under
 * a forced mode, one of the allowed ones) and `arguments` is the compact text of a JSON object.
 * `id` is the upstream's id when it gave one; the protocols always mint their own.
 */
export interface ToolCall {
  id?: string;
  name: string;
  arguments: string;
}

/**
 * A call as an engine read it (name and arguments text) → a `ToolCall` when it names an allowed
 * tool and its arguments are a JSON object (empty text: no arguments, `{}`), else null: the
 * neutral contract every engine's `toolCalls` keeps, so a protocol never renders a broken call.
 */
export function validToolCall(
  call: { id?: string; name: string; arguments: string },
  tools: GenerationTools,
): ToolCall | null {
  const { mode, specs } = tools;
  if (mode.kind === "none" || !specs.some((t) => t.name === call.name)) return null;
  if (mode.kind === "forced" && !mode.names.includes(call.name)) return null;
  let args: unknown;
  try {
    args = JSON.parse(call.arguments.trim() === "" ? "{}" : call.arguments);
  } catch {
    return null;
  }
  if (typeof args !== "object" || args === null || Array.isArray(args)) return null;
  return { ...(call.id ? { id: call.id } : {}), name: call.name, arguments: JSON.stringify(args) };
}
