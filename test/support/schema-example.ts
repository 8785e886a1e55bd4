/**
 * Request bodies built from the OpenAPI document's JSON Schemas (issue 13, item 1 checks): the
 * smallest instance — required properties only, the first non-null choice of a union, minimal
 * lengths and bounds. Shared by test/openapi.test.ts and test/openapi-operations.test.ts.
 */
import { randomUUID } from "node:crypto";

type Json = Record<string, any>;

export interface ExampleOptions {
  /** Take a schema's `default` when it has one. */
  useDefaults?: boolean;
  /** The enum value to prefer when an enum lists it (e.g. a `user` role). */
  preferEnum?: string;
}

/** The smallest instance of `schema` (see the module header). */
export function schemaExample(schema: Json, opts: ExampleOptions = {}): unknown {
  const example = (s: Json) => schemaExample(s, opts);
  if (schema.const !== undefined) return schema.const;
  if (opts.useDefaults && schema.default !== undefined) return schema.default;
  if (Array.isArray(schema.enum)) {
    return opts.preferEnum !== undefined && schema.enum.includes(opts.preferEnum) ? opts.preferEnum : schema.enum[0];
  }
  if (schema.anyOf) return example((schema.anyOf as Json[]).find((s) => s.type !== "null") ?? schema.anyOf[0]);
  if (schema.oneOf) return example((schema.oneOf as Json[]).find((s) => s.type !== "null") ?? schema.oneOf[0]);
  const type = Array.isArray(schema.type) ? schema.type.find((t: string) => t !== "null") : schema.type;
  switch (type) {
    case "object": {
      const out: Json = {};
      for (const name of (schema.required as string[] | undefined) ?? []) out[name] = example(schema.properties[name]);
      return out;
    }
    case "array":
      return Array.from({ length: schema.minItems ?? 1 }, () => example(schema.items ?? {}));
    case "integer":
    case "number":
      return Math.max(schema.minimum ?? 1, Math.min(1, schema.maximum ?? 1));
    case "boolean":
      return false;
    case "string":
      if (schema.format === "uuid") return randomUUID();
      return "Hi".padEnd(schema.minLength ?? 2, "i");
    default:
      return {};
  }
}
