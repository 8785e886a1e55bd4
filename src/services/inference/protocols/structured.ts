/**
 * Structured outputs and the capabilities a request may ask for, in the protocols' terms
 * (issue 26, items 1 and 6): OpenAI Chat `response_format`, Responses `text.format`, and the
 * fields the service does not honour yet (tools, log-probabilities, conversation state), which
 * are refused with a 400 naming the field and the model instead of being answered with prose.
 */
import { z } from "zod";
import type { ResponseFormat } from "../../../inference/engine.js";

/** `json_schema.name` (OpenAI: a-z, A-Z, 0-9, underscores and dashes, at most 64). */
const schemaName = z.string().regex(/^[a-zA-Z0-9_-]{1,64}$/, "must be 1–64 letters, digits, underscores or dashes");
const jsonSchema = z.record(z.string(), z.unknown()).meta({
  description:
    "JSON Schema of the answer. The embedded engine decodes under a grammar of it and enforces: type, enum, const, " +
    "anyOf, oneOf whose alternatives cannot both match (different types, const/enum values, or a required " +
    "property that tells objects apart), $ref to #, #/$defs or #/definitions (recursion too), properties, required, " +
    "additionalProperties: false, items, prefixItems, minItems, maxItems, minLength, maxLength, format " +
    "date/time/date-time/uuid/email/ipv4, pattern in a regular-expression subset (literals and escapes, ., classes " +
    "and negated classes, \\d \\w \\s and their negations, groups, (?: ), |, * + ? {n} {n,} {n,m}, ^ and $ at " +
    "the ends; without them up to 32 characters of any text on that side; zod's own email/datetime/date/uuid/ipv4 " +
    "patterns with their format; minLength/maxLength beside a pattern when implied by it or narrowing its one " +
    "repeated part, beside a format when its rule keeps within them), minimum/maximum/exclusiveMinimum/" +
    "exclusiveMaximum on integers, and on numbers with at most 15 significant digits. Any other keyword (a pattern " +
    "with lookarounds, backreferences, \\b or \\p{…}, a pattern with another format, multipleOf, uniqueItems, " +
    "overlapping oneOf, allOf, not, …) is a 400 naming its place under strict: true, and left " +
    "unenforced otherwise. A $ref that comes back to " +
    "itself before any value is read is a 400 naming it whatever strict says. With stop, a 400 naming stop " +
    "(a stop string would cut the JSON). Upstream engines pass the schema through.",
});

/** Chat Completions `response_format`. */
export const chatResponseFormat = z.discriminatedUnion("type", [
  z.object({ type: z.literal("text") }),
  z.object({ type: z.literal("json_object") }),
  z.object({
    type: z.literal("json_schema"),
    json_schema: z.object({
      name: schemaName,
      description: z.string().nullish(),
      schema: jsonSchema.nullish(),
      strict: z.boolean().nullish(),
    }),
  }),
]);

/** Responses `text.format`. */
export const responseTextFormat = z.discriminatedUnion("type", [
  z.object({ type: z.literal("text") }),
  z.object({ type: z.literal("json_object") }),
  z.object({
    type: z.literal("json_schema"),
    name: schemaName,
    description: z.string().nullish(),
    schema: jsonSchema,
    strict: z.boolean().nullish(),
  }),
]);

/** Chat `response_format` → the engine's response format (`field` names the schema in 400s). */
export function chatFormat(format: z.infer<typeof chatResponseFormat> | null | undefined): ResponseFormat | undefined {
  if (!format || format.type === "text") return undefined;
  if (format.type === "json_object" || !format.json_schema.schema) return { type: "json_object" };
  return {
    type: "json_schema",
    name: format.json_schema.name,
    schema: format.json_schema.schema,
    strict: format.json_schema.strict === true,
    field: "response_format.json_schema.schema",
  };
}

/** Responses `text.format` → the engine's response format. */
export function textFormat(format: z.infer<typeof responseTextFormat> | null | undefined): ResponseFormat | undefined {
  if (!format || format.type === "text") return undefined;
  if (format.type === "json_object") return { type: "json_object" };
  return {
    type: "json_schema",
    name: format.name,
    schema: format.schema,
    strict: format.strict === true,
    field: "text.format.schema",
  };
}

/** A field the request sets that this service does not honour yet, and why. */
export interface UnhonouredField {
  field: string;
  message: string;
}

/** Whether a list field is set to something (an empty list asks for nothing). */
export function isSet(value: unknown): boolean {
  return value !== undefined && value !== null && !(Array.isArray(value) && value.length === 0);
}
