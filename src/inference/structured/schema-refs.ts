/**
 * Local `$ref`s of a JSON Schema (issue 26, item 1; review findings F2, F3): resolving a pointer,
 * moving a schema under another document without changing what its refs name, and finding a ref
 * that comes back to itself before any input is read (a cycle no grammar can decode).
 */

/** Keywords whose value is a literal JSON value, not a schema (a `$ref` inside is data). */
const LITERALS = new Set(["const", "enum", "default", "examples"]);
/** Keywords whose value maps names to schemas (a key there is a name, not a keyword). */
const SCHEMA_MAPS = new Set(["properties", "$defs", "definitions", "patternProperties", "dependentSchemas"]);

function isObject(v: unknown): v is Record<string, unknown> {
  return typeof v === "object" && v !== null && !Array.isArray(v);
}

/** A JSON pointer token with `~` and `/` escaped (RFC 6901). */
export function escapePointer(key: string): string {
  return key.replace(/~/g, "~0").replace(/\//g, "~1");
}

/** The schema a local `$ref` names (`#`, `#/$defs/X`, `#/definitions/X`, any JSON pointer in the document); undefined if none. */
export function resolvePointer(root: unknown, ref: string): unknown {
  if (!ref.startsWith("#")) return undefined;
  const parts = ref
    .slice(1)
    .split("/")
    .filter((p, i) => i > 0 || p !== "")
    .map((p) => {
      try {
        return decodeURIComponent(p).replace(/~1/g, "/").replace(/~0/g, "~");
      } catch {
        return undefined; // malformed %-escape: names nothing
      }
    });
  if (parts.includes(undefined)) return undefined;
  let node: unknown = root;
  for (const part of parts) {
    if (!isObject(node) && !Array.isArray(node)) return undefined;
    node = (node as Record<string, unknown>)[part!];
  }
  return node;
}

/**
 * `schema` with every local `$ref` (`#…`) rewritten to `base` + its pointer, for a schema that is
 * moved to `base` inside another document (`#` → `base`, `#/$defs/P` → `base/$defs/P`), so each
 * ref still names the schema it named. Literal values (`const`, `enum`, `default`, `examples`)
 * are kept as they are; other refs (not starting with `#`) too. Review finding F2: a forced tool
 * call nests each tool's parameters inside the call's wrapper schema.
 */
export function rebaseRefs(schema: unknown, base: string): unknown {
  const walk = (node: unknown): unknown => {
    if (Array.isArray(node)) return node.map(walk);
    if (!isObject(node)) return node;
    const out: Record<string, unknown> = {};
    for (const [key, value] of Object.entries(node)) {
      if (key === "$ref" && typeof value === "string" && value.startsWith("#")) out[key] = base + value.slice(1);
      else if (LITERALS.has(key)) out[key] = value;
      else if (SCHEMA_MAPS.has(key) && isObject(value)) {
        out[key] = Object.fromEntries(Object.entries(value).map(([name, sub]) => [name, walk(sub)]));
      } else out[key] = walk(value);
    }
    return out;
  };
  return walk(schema);
}

/**
 * The refs `schema` may expand to before it reads any input: its own `$ref`, or those of its
 * `anyOf` / `oneOf` / `allOf` alternatives (every other schema starts with a character of its
 * own: `{`, `[`, `"`, a digit, a literal). Mirrors the grammar builder's precedence: `$ref`
 * first, then `const` and `enum` (literals).
 */
function leadingRefs(schema: unknown): string[] {
  if (!isObject(schema)) return [];
  if (typeof schema.$ref === "string") return [schema.$ref];
  if ("const" in schema || Array.isArray(schema.enum)) return [];
  return ["anyOf", "oneOf", "allOf"].flatMap((k) => (Array.isArray(schema[k]) ? schema[k].flatMap(leadingRefs) : []));
}

/**
 * Whether expanding `ref` in `root` can reach `ref` again before reading any input: a chain of
 * refs (`a → b → a`) or left recursion through alternatives (`{anyOf: [{$ref: "#"}, …]}`). Such
 * a grammar never makes progress (llama.cpp refuses it), so the place is reported whatever
 * `strict` says (review finding F3).
 */
export function refLoopsWithoutInput(root: unknown, ref: string): boolean {
  // By the schema each ref names, so two spellings of one pointer are one place.
  const target = resolvePointer(root, ref);
  if (target === undefined) return false;
  const seen = new Set<unknown>();
  const pending = leadingRefs(target);
  while (pending.length > 0) {
    const next = resolvePointer(root, pending.pop()!);
    if (next === target) return true;
    if (next === undefined || seen.has(next)) continue;
    seen.add(next);
    pending.push(...leadingRefs(next));
  }
  return false;
}
