/**
 * `oneOf` under a grammar (issue 26, item 1): a grammar lets the model pick any alternative, as
 * for `anyOf`, so "exactly one matches" holds only when no value can match two alternatives. This
 * module proves that for the unions clients write: alternatives of different JSON types
 * (`.nullable()`, a string-or-number union), of different `const` / `enum` values, or objects told
 * apart by a property both require whose schemas are themselves disjoint (zod's
 * `discriminatedUnion`). What it cannot prove is reported (a 400 under `strict`).
 */
import { resolvePointer } from "./schema-refs.js";

type JsonType = "null" | "boolean" | "string" | "number" | "integer" | "array" | "object";

function isObject(v: unknown): v is Record<string, unknown> {
  return typeof v === "object" && v !== null && !Array.isArray(v);
}

function typeOfValue(v: unknown): JsonType {
  if (v === null) return "null";
  if (Array.isArray(v)) return "array";
  if (typeof v === "number") return Number.isInteger(v) ? "integer" : "number";
  return typeof v as JsonType;
}

/** `$ref`s followed (a few steps; a loop or a missing target gives undefined). */
function resolved(root: unknown, schema: unknown, depth = 0): unknown {
  if (!isObject(schema) || typeof schema.$ref !== "string") return schema;
  if (depth > 8) return undefined;
  return resolved(root, resolvePointer(root, schema.$ref), depth + 1);
}

/** The only values `s` allows (`const`, `enum`), or undefined. */
function valuesOf(s: Record<string, unknown>): unknown[] | undefined {
  if ("const" in s) return [s.const];
  return Array.isArray(s.enum) ? s.enum : undefined;
}

/**
 * The most steps (comparisons of two schemas, or of two `enum` values) one `oneOf` may take to be
 * shown disjoint. Without it a recursive discriminator (`A` requiring n properties that are
 * `$ref: A`, compared with a `B` alike) takes n^9 steps, and nested `anyOf`s of n alternatives 8
 * deep n^8: seconds to hours of the event loop for one request (review of issue 26).
 * A `oneOf` past it is one that cannot be shown disjoint (a 400 under `strict`).
 */
const MAX_STEPS = 100_000;

/** What is left of `MAX_STEPS` for one `oneOf`. */
interface Budget {
  left: number;
}

/** The JSON types `s` allows, or undefined when any type may match (or `budget` runs out). */
function typesOf(root: unknown, s: unknown, budget: Budget, depth = 0): Set<JsonType> | undefined {
  if (--budget.left < 0) return undefined;
  const schema = resolved(root, s);
  if (!isObject(schema) || depth > 8) return undefined;
  const values = valuesOf(schema);
  if (values) return new Set(values.map(typeOfValue));
  const list = Array.isArray(schema.anyOf) ? schema.anyOf : Array.isArray(schema.oneOf) ? schema.oneOf : undefined;
  if (list) {
    const all = new Set<JsonType>();
    for (const alt of list) {
      const t = typesOf(root, alt, budget, depth + 1);
      if (!t) return undefined;
      for (const x of t) all.add(x);
    }
    return all;
  }
  if (typeof schema.type === "string") return new Set([schema.type as JsonType]);
  if (Array.isArray(schema.type)) return new Set(schema.type as JsonType[]);
  return undefined;
}

/** Whether a value of type `a` can also be of type `b` (an integer is a number). */
function typesMeet(a: JsonType, b: JsonType): boolean {
  return a === b || (a === "integer" && b === "number") || (a === "number" && b === "integer");
}

/** Whether no value matches both `a` and `b` (false when that cannot be shown, or `budget` runs out). */
export function disjoint(
  root: unknown,
  a: unknown,
  b: unknown,
  depth = 0,
  budget: Budget = { left: MAX_STEPS },
): boolean {
  if (--budget.left < 0) return false;
  const x = resolved(root, a);
  const y = resolved(root, b);
  if (!isObject(x) || !isObject(y) || depth > 8) return false;
  const vx = valuesOf(x);
  const vy = valuesOf(y);
  if (vx && vy) {
    budget.left -= vx.length + vy.length;
    if (budget.left < 0) return false;
    const seen = new Set(vx.map((p) => JSON.stringify(p)));
    return !vy.some((q) => seen.has(JSON.stringify(q)));
  }
  const tx = typesOf(root, x, budget);
  const ty = typesOf(root, y, budget);
  if (vx && ty) return !vx.some((v) => [...ty].some((t) => typesMeet(typeOfValue(v), t)));
  if (vy && tx) return !vy.some((v) => [...tx].some((t) => typesMeet(typeOfValue(v), t)));
  if (tx && ty && ![...tx].some((p) => [...ty].some((q) => typesMeet(p, q)))) return true;
  // Objects told apart by a property both require.
  const onlyObjects = tx?.size === 1 && tx.has("object") && ty?.size === 1 && ty.has("object");
  if (!onlyObjects || !isObject(x.properties) || !isObject(y.properties)) return false;
  const required = (s: Record<string, unknown>) => new Set(Array.isArray(s.required) ? s.required.map(String) : []);
  const rx = required(x);
  const ry = required(y);
  for (const key of Object.keys(x.properties)) {
    if (!rx.has(key) || !ry.has(key) || !(key in y.properties)) continue;
    if (disjoint(root, x.properties[key], y.properties[key], depth + 1, budget)) return true;
  }
  return false;
}

/**
 * Why the alternatives of a `oneOf` may overlap (the first pair that cannot be shown disjoint,
 * e.g. "alternatives 0 and 2 may both match"), or undefined when every pair is disjoint. `root`
 * is the document the alternatives' `$ref`s point into.
 */
export function oneOfOverlap(root: unknown, alternatives: unknown[]): string | undefined {
  const budget: Budget = { left: MAX_STEPS };
  for (let i = 0; i < alternatives.length; i++) {
    for (let j = i + 1; j < alternatives.length; j++) {
      if (!disjoint(root, alternatives[i], alternatives[j], 0, budget)) {
        if (budget.left < 0) {
          return (
            `its alternatives take more than ${MAX_STEPS} steps to tell apart (too many or too deeply nested` +
            "); use anyOf, or fewer alternatives"
          );
        }
        return (
          `alternatives ${i} and ${j} may both match, and a grammar cannot keep a value from matching two; ` +
          "oneOf is enforced when its alternatives have different types, different const/enum values, or a " +
          "required property that tells them apart (use anyOf otherwise)"
        );
      }
    }
  }
  return undefined;
}
