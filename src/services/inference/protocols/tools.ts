/**
 * Tool calling in the protocols (issue 26, item 2): the tools a request offers as the engine
 * interface takes them (`inference/tools.ts`), with the request field each came from, the ids the
 * protocols mint for the calls they answer, and the schema check of the embedded engine's grammar.
 * How a model is prompted and how a call is read back is each engine's own (the embedded engine's
 * `<tool_call>` prompt format, the upstream's OpenAI `tools`).
 */
import { randomBytes } from "node:crypto";
import { jsonSchemaGrammar, schemaIssueField } from "../../../inference/structured/json-schema-gbnf.js";
import type { ToolDefinition, ToolMode } from "../../../inference/tools.js";
import type { FieldIssue } from "../../../shared/errors.js";

export type { ToolMode } from "../../../inference/tools.js";

/** One function a request offers, and where in the request it came from. */
export interface ToolSpec extends ToolDefinition {
  /** The request's field of this tool's schema (400s name it), e.g. `tools[0].function.parameters`. */
  field: string;
}

/** The tools a protocol body offers and how the model may use them. */
export interface Tooling {
  tools: ToolSpec[];
  mode: ToolMode;
  /**
   * More than one call per answer is allowed (`GenerationTools.parallel`): OpenAI's
   * `parallel_tool_calls` (true unless sent false), Anthropic's `disable_parallel_tool_use` not
   * set; never for a named function, which is exactly one call.
   */
  parallel: boolean;
}

/** Function names as OpenAI and Anthropic accept them. */
export const TOOL_NAME = /^[a-zA-Z0-9_-]{1,64}$/;

/**
 * A new tool call id: `call_…` (OpenAI), `toolu_…` (Anthropic) or `fc_…` (a Responses item), 24
 * random letters and digits. Minted for every call answered, whichever engine made it (an
 * upstream's own ids are not passed on), so ids are unique and in the caller's dialect.
 */
export function toolCallId(prefix: "call_" | "toolu_" | "fc_"): string {
  const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
  const bytes = randomBytes(24);
  return prefix + Array.from(bytes, (b) => alphabet[b % alphabet.length]).join("");
}

/**
 * The tools' parameter keywords the embedded engine's grammar cannot enforce, as 400 issues
 * (`tools[0].function.parameters.properties.x.pattern`): a strict tool's every one; and for a tool
 * a forced call decodes under the grammar (`mode.names`), a fatal one whatever `strict` says (a
 * `$ref` cycle that reads no input, review finding F3), and parameters whose `type` is not
 * `object` whatever `strict` says. `fatal` says which the first one is.
 */
export function toolSchemaIssues(tools: ToolSpec[], mode: ToolMode): { issues: FieldIssue[]; fatal: boolean } {
  const forced = mode.kind === "forced" ? mode.names : [];
  const found = tools.flatMap((t) => {
    // A call's arguments are a JSON object: parameters of another type make no call at all, only
    // a forced answer that comes back empty (review of issue 26; OpenAI refuses them too).
    const type = t.parameters.type;
    if (type !== undefined && !(type === "object" || (Array.isArray(type) && type.includes("object")))) {
      return [{ field: `${t.field}.type`, message: "a function's parameters must be an object schema", fatal: true }];
    }
    const { issues } = jsonSchemaGrammar(t.parameters);
    const refused = t.strict ? issues : forced.includes(t.name) ? issues.filter((i) => i.fatal) : [];
    return refused.map((i) => ({ field: schemaIssueField(t.field, i.path), message: i.message, fatal: !!i.fatal }));
  });
  return { issues: found.map(({ field, message }) => ({ field, message })), fatal: found[0]?.fatal ?? false };
}
