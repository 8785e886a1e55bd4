/**
 * Structured outputs on the embedded engine (issue 26, item 1): a response format becomes a GBNF
 * grammar (`structured/json-schema-gbnf.ts`) that llama.cpp's sampler enforces token by token, so
 * an answer that ends with the model's own stop is JSON that validates against the schema. A
 * strict schema using a keyword the grammar cannot enforce is refused before admission (400, no
 * charge); a non-strict one is decoded without that keyword, as OpenAI does outside strict mode.
 */
import type { Llama, LlamaGrammar } from "node-llama-cpp";
import { AppError } from "../../../shared/errors.js";
import type { ResponseFormat } from "../../engine.js";
import { jsonObjectGrammar, jsonSchemaGrammar, schemaIssueField } from "../../structured/json-schema-gbnf.js";

/** Compiled grammars kept per process (schemas repeat: one per application and call site). */
const CACHE_SIZE = 64;

/**
 * The GBNF of a response format.
 * @throws AppError 400 under `strict` naming each keyword the grammar cannot enforce
 *   (`<field>.properties.x.pattern`) and the model.
 */
export function formatGrammar(format: ResponseFormat, modelId: string): string {
  if (format.type === "json_object") return jsonObjectGrammar();
  const { gbnf, issues } = jsonSchemaGrammar(format.schema);
  if (format.strict && issues.length > 0) {
    const first = issues[0];
    throw AppError.invalid(
      `Model '${modelId}' cannot enforce \`${first.keyword}\` (at ${schemaIssueField(format.field, first.path)}) while ` +
        `decoding; strict: true needs every keyword enforced (see the README's structured-output subset), ` +
        `or send strict: false to decode without it`,
      issues.map((i) => ({ field: schemaIssueField(format.field, i.path), message: i.message })),
    );
  }
  return gbnf;
}

/** Grammars compiled once per GBNF text, the least recently used dropped past `CACHE_SIZE`. */
export class GrammarCache {
  private readonly grammars = new Map<string, Promise<LlamaGrammar>>();

  constructor(private readonly llama: () => Promise<Llama>) {}

  /** The compiled grammar of `gbnf`. @throws what llama.cpp throws for a grammar it cannot parse. */
  get(gbnf: string): Promise<LlamaGrammar> {
    const known = this.grammars.get(gbnf);
    if (known) {
      this.grammars.delete(gbnf);
      this.grammars.set(gbnf, known);
      return known;
    }
    const made = this.llama().then((llama) => llama.createGrammar({ grammar: gbnf }));
    made.catch(() => this.grammars.delete(gbnf));
    this.grammars.set(gbnf, made);
    if (this.grammars.size > CACHE_SIZE) this.grammars.delete(this.grammars.keys().next().value!);
    return made;
  }
}
