/**
 * The shapes a request and its result take inside the embedded engine's generation
 * (`generation.ts`), with tools written the chat template's way (`template-tools.ts`) or the
 * documented way (`tool-calls.ts`); apart, so that those modules and the generation share them
 * without importing one another.
 */
import type { GenerateRequest, GenerateResult } from "../../engine.js";
import type { CallTextGate } from "./call-gate.js";
import type { ToolDefinition } from "../../tools.js";

/** How the prompt formatter writes a request's tools (`PromptedRequest.templateTools`). */
export interface TemplatePromptTools {
  /** Tools offered to the model (none under `tool_choice: none`). */
  functions: ToolDefinition[];
  /** The prompt ends with the call prefix (a forced call). */
  forced: boolean;
}

/**
 * A request as the embedded engine decodes it (`llama-cpp.engine.ts` prepares it): with tools in
 * the chat template's own format (`template-tools.ts`), the prompt formatter writes them, a forced
 * call decodes under its own grammar, and an `auto` answer comes back with its special tokens too.
 */
export interface PromptedRequest extends GenerateRequest {
  /** Tools and the history's calls written by the chat template (`formatPrompt`'s `tools`). */
  templateTools?: TemplatePromptTools;
  /** GBNF the answer decodes under, instead of `responseFormat`'s. */
  gbnf?: string;
  /** Return `rawText`: the answer's tokens with special tokens written out (a call's markers). */
  rawText?: boolean;
  /**
   * With tools offered (issue 26, item 2): streamed text goes through a `CallTextGate` with these
   * call openers (null: a forced call, nothing streamed), which the result returns for the
   * reader of the call (`callPreamble`) and the last of the text (`CallTextGate.finish`).
   */
  callOpeners?: string[] | null;
}

/**
 * What `generate` returns: the result; with `rawText` or `callOpeners`, the answer (up to its
 * end or a caller's stop string) with special tokens written out; with `callOpeners`, its gate.
 */
export type GenerationResult = GenerateResult & { rawText?: string; gate?: CallTextGate };
