/**
 * An OpenAPI-driven fuzzer over the document the service serves (issue 28, item 5 and Checks):
 * requests built from each operation's JSON Schemas with fast-check, judged against the same
 * document. Shared by test/openapi-conformance.test.ts (a fixed seed, a few hundred requests) and
 * bench/fuzz-openapi.bench.ts (12,000), so it imports nothing of Jest.
 *
 * Values. `validValue(schema)` draws instances of a (dereferenced) JSON Schema 2020-12 — the
 * keywords the document uses: type (and type lists), const, enum, anyOf/oneOf, properties,
 * required, additionalProperties, propertyNames, min/maxProperties, items, min/maxItems,
 * min/maxLength, pattern, format (uuid, email, uri, date-time), minimum/maximum — and keeps only
 * those the validator accepts (so `allOf`, `not`, `if`/`then` and `dependentRequired` hold too).
 * Text is printable (no control characters, no lone surrogates: hostile bytes are
 * test/fuzz.test.ts's). `invalidValue(schema)` takes a valid instance and breaks one thing the
 * schema says at one place in it — a required property left out, a value of another type, a
 * value outside an enum, a string past its length, a number past its bound, too few items — and
 * keeps it only when the validator refuses the result; `everyBreakage` lists every such break of
 * one instance.
 *
 * Requests. `requestArbitrary` draws, for one operation, path and query parameters and a JSON body
 * (query values are strings, one per name), valid or with one part made invalid, with the caller's
 * credentials. A valid request's query values are never empty and its body is `application/json`;
 * an invalid one may give a query parameter an empty value (which every query schema of the
 * document refuses: `minLength`, an integer or an enum) or send a valid body under a media type
 * the operation does not document (`text/plain`, XML, a form: the service's 415).
 * Values the document cannot know (real ids, a model the server has, a signature it made) come
 * from the `FuzzWorld` the caller builds; they are still checked against the schema.
 *
 * Judging (`judge`): no 5xx; every status is one the operation documents (or its `4XX`/`5XX`); a
 * JSON answer fits the schema documented for that status (on REST every 4xx is the error envelope
 * with `status_code` equal to the status); an invalid request gets no 2xx; a valid one gets no 400.
 */
import { Validator } from "@cfworker/json-schema";
import fc from "fast-check";

type Json = Record<string, any>;

// ---------------------------------------------------------------------------------------------
// Schemas

/** Validation errors of `value` against a dereferenced JSON Schema 2020-12; empty when it fits. */
export function schemaErrors(schema: Json, value: unknown): string[] {
  const result = new Validator(schema as never, "2020-12", false).validate(value);
  return result.errors.map((e) => `${e.instanceLocation}: ${e.error}`);
}

const fits = (schema: Json, value: unknown) => new Validator(schema as never, "2020-12", false).validate(value).valid;

/** The schema's types (`type` as a list; none for an untyped schema). */
function typesOf(schema: Json): string[] {
  if (Array.isArray(schema.type)) return schema.type as string[];
  if (typeof schema.type === "string") return [schema.type];
  if (schema.properties || schema.additionalProperties !== undefined) return ["object"];
  if (schema.items) return ["array"];
  return [];
}

// ---------------------------------------------------------------------------------------------
// Valid values

/** Printable text: mostly ASCII, some other scripts and emoji; never control characters or lone surrogates. */
const printable = (min: number, max: number) =>
  fc
    .oneof(
      { weight: 4, arbitrary: fc.string({ unit: "grapheme-ascii", minLength: min, maxLength: max }) },
      { weight: 1, arbitrary: fc.string({ unit: "grapheme", minLength: min, maxLength: max }) },
    )
    .map((s) => s.replace(/[\p{Cc}\p{Cs}\p{Cn}]/gu, "x"))
    .filter((s) => [...s].length >= min && s.length <= max);

/** A JSON value of any type, small. */
const anyJson: fc.Arbitrary<unknown> = fc.oneof(
  fc.constant(null),
  fc.boolean(),
  fc.integer({ min: -1000, max: 1000 }),
  printable(0, 12),
  fc.array(fc.oneof(fc.integer({ min: 0, max: 9 }), printable(0, 6)), { maxLength: 3 }),
  fc.dictionary(printable(1, 8), fc.oneof(fc.integer({ min: 0, max: 9 }), printable(0, 6)), { maxKeys: 3 }),
);

/** `pattern` without a leading lookahead `^(?=…)` (balanced parentheses), which fast-check cannot generate. */
function withoutLookahead(pattern: string): string {
  if (!pattern.startsWith("^(?=")) return pattern;
  let depth = 0;
  for (let i = 1; i < pattern.length; i++) {
    if (pattern[i] === "\\") i++;
    else if (pattern[i] === "(") depth++;
    else if (pattern[i] === ")" && --depth === 0) return `^${pattern.slice(i + 1)}`;
  }
  return pattern;
}

/** Strings matching `pattern` (a leading lookahead is checked afterwards: fast-check cannot generate one). */
function matching(pattern: string): fc.Arbitrary<string> {
  const full = new RegExp(pattern, "u");
  return fc.stringMatching(new RegExp(withoutLookahead(pattern))).filter((s) => full.test(s));
}

function stringValue(schema: Json): fc.Arbitrary<string> {
  const min = schema.minLength ?? 0;
  const max = schema.maxLength ?? Math.max(min, 40);
  const inBounds = (s: string) => s.length >= min && s.length <= (schema.maxLength ?? Infinity);
  switch (schema.format) {
    case "uuid":
      return fc.uuid({ version: [4, 7] });
    case "email":
      return fc
        .tuple(fc.stringMatching(/^[a-z][a-z0-9]{0,11}$/), fc.nat(), fc.constantFrom("example.com", "mail.test"))
        .map(([local, n, domain]) => `${local}.${n.toString(36)}@${domain}`)
        .filter((s) => (schema.pattern ? new RegExp(schema.pattern, "u").test(s) : true) && inBounds(s));
    case "uri":
      return fc
        .tuple(
          fc.constantFrom("https", "http"),
          fc.stringMatching(/^[a-z]{1,10}$/),
          fc.stringMatching(/^[a-z0-9/]{0,12}$/),
        )
        .map(([scheme, host, path]) => `${scheme}://${host}.example.com/${path}`)
        .filter(inBounds);
    case "date-time":
      return fc
        .date({ min: new Date("2000-01-01T00:00:00Z"), max: new Date("2100-12-31T23:59:59Z"), noInvalidDate: true })
        .map((d) => d.toISOString())
        .filter((s) => (schema.pattern ? new RegExp(schema.pattern, "u").test(s) : true));
  }
  if (schema.pattern) return matching(schema.pattern).filter(inBounds);
  return printable(min, Math.min(max, min + 40));
}

function numberValue(schema: Json, integer: boolean): fc.Arbitrary<number> {
  const lo = schema.exclusiveMinimum !== undefined ? schema.exclusiveMinimum + (integer ? 1 : 1e-9) : schema.minimum;
  const hi = schema.exclusiveMaximum !== undefined ? schema.exclusiveMaximum - (integer ? 1 : 1e-9) : schema.maximum;
  if (integer) {
    return fc.integer({
      min: lo ?? Math.min(-1_000_000, hi ?? 0),
      max: hi ?? Math.max(1_000_000, lo ?? 0),
    });
  }
  return fc.double({
    min: lo ?? Math.min(-1e6, hi ?? 0),
    max: hi ?? Math.max(1e6, lo ?? 0),
    noNaN: true,
    noDefaultInfinity: true,
  });
}

/** Most levels of nested objects and arrays drawn before only required parts are drawn. */
const MAX_DEPTH = 5;

function objectValue(schema: Json, depth: number, hints: Hints): fc.Arbitrary<Json> {
  const properties = (schema.properties ?? {}) as Record<string, Json>;
  const required = new Set<string>((schema.required as string[] | undefined) ?? []);
  const shape: Record<string, fc.Arbitrary<unknown>> = {};
  for (const [name, sub] of Object.entries(properties)) {
    if (!required.has(name) && depth >= MAX_DEPTH) continue;
    shape[name] = hinted(name, sub, depth + 1, hints, required.has(name));
  }
  // A hint of `undefined` leaves an optional property out.
  const declared = fc.record(shape, { requiredKeys: [...required].filter((n) => n in shape) }).map((o) => {
    for (const [k, v] of Object.entries(o)) if (v === undefined) delete (o as Json)[k];
    return o;
  });
  const extra = schema.additionalProperties;
  const minKeys = schema.minProperties ?? 0;
  // A record (no declared properties): its keys come from `propertyNames`.
  if (Object.keys(properties).length === 0 && extra && typeof extra === "object") {
    const maxKeys = Math.min(schema.maxProperties ?? Math.max(minKeys, 3), minKeys + 3);
    const keys = schema.propertyNames ? stringValue(schema.propertyNames) : printable(1, 12);
    const values = depth >= MAX_DEPTH && Object.keys(extra).length === 0 ? fc.constant(1) : anyValue(extra, depth + 1);
    return fc
      .uniqueArray(fc.tuple(keys, values), { minLength: minKeys, maxLength: maxKeys, selector: ([k]) => k })
      .map((pairs) => {
        const out: Json = {};
        for (const [k, v] of pairs) Object.defineProperty(out, k, { value: v, enumerable: true, writable: true });
        return out;
      });
  }
  return declared as fc.Arbitrary<Json>;
}

/**
 * Values for a property: the caller's hint for its name when any of its values fits here (then
 * only the hint's values that fit: see `Hints`), else drawn from its schema.
 */
function hinted(name: string, schema: Json, depth: number, hints: Hints, required: boolean): fc.Arbitrary<unknown> {
  const hint = hints[name];
  const usable = (v: unknown) => (v === undefined ? !required : fits(schema, v));
  // A hint none of whose values fit here (another operation's `model`, say) is not used.
  if (!hint || !fc.sample(hint, { numRuns: 30, seed: 1 }).some(usable)) return anyValue(schema, depth, hints);
  return hint.filter(usable);
}

/**
 * Values for properties by name, drawn instead of the schema's wherever one fits (`undefined`
 * leaves an optional property out): what the document cannot know — a model the server has, a
 * generation kept short, a conversation whose tool calls are answered — so that a valid request
 * is refused only where the document is wrong.
 */
export type Hints = Record<string, fc.Arbitrary<unknown>>;

function anyValue(schema: Json, depth = 0, hints: Hints = {}): fc.Arbitrary<unknown> {
  if (schema.const !== undefined) return fc.constant(schema.const);
  if (Array.isArray(schema.enum)) return fc.constantFrom(...(schema.enum as unknown[]));
  const union = (schema.anyOf ?? schema.oneOf) as Json[] | undefined;
  if (union) {
    // The branch's own keywords apply with the union's siblings (e.g. a `description`).
    const { anyOf: _a, oneOf: _o, ...rest } = schema;
    return fc.oneof(...union.map((branch) => anyValue({ ...rest, ...branch }, depth, hints)));
  }
  const types = typesOf(schema);
  if (types.length === 0) return anyJson;
  return fc.oneof(
    ...types.map((type): fc.Arbitrary<unknown> => {
      switch (type) {
        case "null":
          return fc.constant(null);
        case "boolean":
          return fc.boolean();
        case "integer":
          return numberValue(schema, true);
        case "number":
          return numberValue(schema, false);
        case "string":
          return stringValue(schema);
        case "array": {
          const minLength = schema.minItems ?? 0;
          const maxLength = Math.min(schema.maxItems ?? minLength + 3, minLength + (depth >= MAX_DEPTH ? 0 : 3));
          return fc.array(schema.items ? anyValue(schema.items, depth + 1, hints) : anyJson, { minLength, maxLength });
        }
        default:
          return objectValue(schema, depth, hints);
      }
    }),
  );
}

/** Instances of `schema` that the validator accepts (see the module header), repaired by `repair` first. */
export function validValue(schema: Json, hints: Hints = {}, repair: Repair = (v) => v): fc.Arbitrary<unknown> {
  return anyValue(schema, 0, hints)
    .map((v) => repair(structuredClone(v)))
    .filter((v) => fits(schema, v));
}

/**
 * Makes a drawn body keep the rules between its fields that a JSON Schema cannot state (a
 * minimum below a maximum, a period that ended long enough ago); returns the body to send.
 */
export type Repair = (body: unknown) => unknown;

// ---------------------------------------------------------------------------------------------
// Invalid values

/** One place in a value and the schema that governs it there. */
interface Site {
  path: Array<string | number>;
  schema: Json;
  value: unknown;
}

/** The branch of a union that `value` fits (the first), or the schema itself. */
function governing(schema: Json, value: unknown): Json {
  const union = (schema.anyOf ?? schema.oneOf) as Json[] | undefined;
  if (!union) return schema;
  const { anyOf: _a, oneOf: _o, ...rest } = schema;
  const branch = union.map((b) => ({ ...rest, ...b })).find((b) => fits(b, value));
  return branch ? governing(branch, value) : schema;
}

/** Every place in `value` with the schema that governs it, the root first. */
function sites(schema: Json, value: unknown, path: Array<string | number> = []): Site[] {
  const own = governing(schema, value);
  const out: Site[] = [{ path, schema: own, value }];
  if (Array.isArray(value) && own.items) {
    value.forEach((v, i) => out.push(...sites(own.items, v, [...path, i])));
  } else if (value && typeof value === "object") {
    for (const [k, v] of Object.entries(value)) {
      const sub = (own.properties as Record<string, Json> | undefined)?.[k] ?? own.additionalProperties;
      if (sub && typeof sub === "object") out.push(...sites(sub, v, [...path, k]));
    }
  }
  return out;
}

/** A value of none of `schema`'s types (an object for a string, a string for an object, …). */
function wrongType(schema: Json): unknown[] {
  const types = typesOf(schema);
  const candidates: Array<[string, unknown]> = [
    ["string", "not-the-type"],
    ["integer", 7],
    ["number", 7.5],
    ["boolean", true],
    ["object", { unexpected: 1 }],
    ["array", [1]],
    ["null", null],
  ];
  return candidates
    .filter(([t]) => !types.includes(t) && !(t === "integer" && types.includes("number")))
    .map(([, v]) => v);
}

/** Ways to break the value at one site, each a replacement (or `undefined`: remove the property). */
function breakages(site: Site): Array<{ why: string; apply: (root: unknown) => unknown }> {
  const { schema, value, path } = site;
  const at = path.length ? path.join(".") : "(body)";
  const set = (replacement: unknown) => (root: unknown) => replaceAt(root, path, replacement);
  const out: Array<{ why: string; apply: (root: unknown) => unknown }> = [];
  if (typesOf(schema).length > 0) {
    for (const v of wrongType(schema))
      out.push({ why: `${at}: a ${JSON.stringify(v)} for ${typesOf(schema)}`, apply: set(v) });
  }
  if (Array.isArray(schema.enum) || schema.const !== undefined) {
    out.push({ why: `${at}: a value outside the enum`, apply: set("not-one-of-them") });
  }
  if (typeof value === "string" && schema.maxLength !== undefined) {
    out.push({ why: `${at}: longer than ${schema.maxLength}`, apply: set("x".repeat(schema.maxLength + 1)) });
  }
  if (typeof value === "string" && schema.minLength > 0) {
    out.push({ why: `${at}: shorter than ${schema.minLength}`, apply: set("x".repeat(schema.minLength - 1)) });
  }
  if (typeof value === "number" && schema.maximum !== undefined) {
    out.push({ why: `${at}: above ${schema.maximum}`, apply: set(schema.maximum + 1) });
  }
  if (typeof value === "number" && schema.minimum !== undefined) {
    out.push({ why: `${at}: below ${schema.minimum}`, apply: set(schema.minimum - 1) });
  }
  if (value && typeof value === "object" && !Array.isArray(value)) {
    for (const name of (schema.required as string[] | undefined) ?? []) {
      out.push({
        why: `${at}: required '${name}' left out`,
        apply: (root) => replaceAt(root, [...path, name], undefined),
      });
    }
  }
  if (Array.isArray(value) && schema.minItems > 0) {
    out.push({ why: `${at}: fewer than ${schema.minItems} items`, apply: set(value.slice(0, schema.minItems - 1)) });
  }
  return out;
}

/** A copy of `root` with the value at `path` replaced (`undefined`: the property removed). */
function replaceAt(root: unknown, path: Array<string | number>, replacement: unknown): unknown {
  if (path.length === 0) return replacement;
  const copy: any = Array.isArray(root) ? [...root] : { ...(root as Json) };
  const [head, ...rest] = path;
  if (rest.length === 0 && replacement === undefined && !Array.isArray(copy)) delete copy[head];
  else copy[head] = replaceAt(copy[head], rest, replacement);
  return copy;
}

/**
 * Every way `breakages` knows to break `valid` in one place (every place, every kind) that the
 * validator then refuses, with what was broken.
 */
export function everyBreakage(schema: Json, valid: unknown): Array<{ value: unknown; why: string }> {
  const seen = new Set<string>();
  const out: Array<{ value: unknown; why: string }> = [];
  for (const b of sites(schema, valid).flatMap(breakages)) {
    const value = b.apply(valid);
    const key = JSON.stringify(value) ?? "undefined";
    if (seen.has(key) || fits(schema, value)) continue;
    seen.add(key);
    out.push({ value, why: b.why });
  }
  return out;
}

/**
 * Instances that break `schema` in one place, with what was broken. `null` when the drawn valid
 * value has no breakable place that the validator then refuses (rare; the caller skips it).
 */
export function invalidValue(
  schema: Json,
  hints: Hints = {},
  repair?: Repair,
): fc.Arbitrary<{ value: unknown; why: string } | null> {
  return fc.tuple(validValue(schema, hints, repair), fc.nat(), fc.nat()).map(([valid, i, j]) => {
    const candidates = sites(schema, valid).flatMap(breakages);
    for (let n = 0; n < candidates.length; n++) {
      const c = candidates[(i + n * (j + 1)) % candidates.length];
      const value = c.apply(valid);
      if (!fits(schema, value)) return { value, why: c.why };
    }
    return null;
  });
}

// ---------------------------------------------------------------------------------------------
// Requests

const METHODS = ["get", "head", "post", "patch", "put", "delete"] as const;

/** One operation of the (dereferenced) document. */
export interface Operation {
  id: string;
  method: string;
  path: string;
  op: Json;
}

/** Every operation of a dereferenced document, in document order. */
export function operationsOf(document: Json): Operation[] {
  return Object.entries(document.paths as Record<string, Json>).flatMap(([path, item]) =>
    METHODS.filter((m) => item[m]).map((method) => ({
      id: item[method].operationId as string,
      method,
      path,
      op: item[method],
    })),
  );
}

/** The operation's JSON request schema, when it has one. */
export function jsonBodySchema(op: Json): Json | undefined {
  return op.requestBody?.content?.["application/json"]?.schema as Json | undefined;
}

/** What the fuzzer knows that the document cannot: credentials, real ids, values to prefer. */
export interface FuzzWorld {
  url: string;
  /** `Authorization` for an operation (data plane: an API key; control plane: an access token). */
  credentials: (operation: Operation) => string | undefined;
  /** Real values of path and query parameters by name (ids of the caller's resources); drawn half the time. */
  params: Record<string, string[]>;
  /** Values of parameters by name drawn instead of their schema's (a long-poll kept short). */
  fixedParams?: Record<string, string[]>;
  /** Rules between query parameters the document cannot state, per operation (like `repair`). */
  repairQuery?: (operation: Operation) => ((query: Record<string, string>) => Record<string, string>) | undefined;
  /** Body property values to draw by name, per operation (see `Hints`). */
  hints: (operation: Operation) => Hints;
  /** Rules between body fields the schema cannot state, per operation (see `Repair`). */
  repair?: (operation: Operation) => Repair | undefined;
  /**
   * Body fields whose values only the server issues (a reset token, a configured provider's
   * name), per operation: a drawn value is made up, so a 400 naming only these fields is the
   * service refusing the made-up value, not the document being wrong (counted apart).
   */
  opaque?: Record<string, string[]>;
  /** Query parameters that only make sense together, by operation: drawn as one set, half the time. */
  paramSets?: Record<string, Array<Record<string, string>>>;
  /** Operations not to send (their `operationId`s) and why (the caller documents it). */
  skip?: Record<string, string>;
}

/** One request to send, and whether the document says it is valid. */
export interface FuzzCase {
  operation: Operation;
  path: string;
  query: Record<string, string>;
  body?: unknown;
  valid: boolean;
  /** What was made invalid (empty for a valid request). */
  why: string;
  /** The body's `Content-Type` when not `application/json` (a type the operation does not take). */
  contentType?: string;
}

/** A parameter's value as the validator sees it: query strings turned into the number they spell. */
export function parameterValue(schema: Json, raw: string): unknown {
  const types = typesOf(schema);
  if ((types.includes("integer") || types.includes("number")) && /^-?[0-9]+(\.[0-9]+)?$/.test(raw)) return Number(raw);
  if (types.includes("boolean") && (raw === "true" || raw === "false")) return raw === "true";
  return raw;
}

/** Well-formed query or path values of a parameter's schema: never empty, as strings. */
function parameterArbitrary(name: string, schema: Json, world: FuzzWorld): fc.Arbitrary<string> {
  const fixed = world.fixedParams?.[name];
  if (fixed) return fc.constantFrom(...fixed);
  const own = validValue(schema)
    .map((v) => String(v))
    .filter((s) => s.length > 0 && fits(schema, parameterValue(schema, s)));
  const real = (world.params[name] ?? []).filter((v) => fits(schema, parameterValue(schema, v)));
  return real.length ? fc.oneof(fc.constantFrom(...real), own) : own;
}

/**
 * A value of the parameter's schema made wrong (a word for a number, past a bound, not a uuid,
 * outside the enum; for a query parameter also the empty value, `?name=`). Not empty in a path:
 * `/v1/responses/` is another route, not a bad id.
 */
function badParameter(schema: Json, where: string): string[] {
  const out = ["not-valid", "-1", "99999999999", `${"x".repeat((schema.maxLength ?? 600) + 1)}`, "1.5"];
  if (where === "query") out.push("");
  return out.filter((s) => !fits(schema, parameterValue(schema, s)));
}

/** Media types a JSON body may be sent under by mistake (issue 28, item 4: each is the service's 415). */
const NOT_JSON = ["text/plain", "application/xml", "application/x-www-form-urlencoded"];

/**
 * Requests for one operation: about a third invalid (the body, a query parameter or a path
 * parameter broken in one place, or a required query parameter left out), the rest valid.
 */
export function requestArbitrary(operation: Operation, world: FuzzWorld): fc.Arbitrary<FuzzCase> {
  const params = (operation.op.parameters as Json[] | undefined) ?? [];
  const pathParams = params.filter((p) => p.in === "path");
  const queryParams = params.filter((p) => p.in === "query");
  const bodySchema = jsonBodySchema(operation.op);

  const paths = fc
    .tuple(...pathParams.map((p) => parameterArbitrary(p.name, p.schema, world)))
    .map((values) => Object.fromEntries(pathParams.map((p, i) => [p.name, values[i]])) as Record<string, string>);
  const sets = world.paramSets?.[operation.id] ?? [];
  const drawnQuery = fc
    .tuple(
      ...queryParams.map((p) =>
        p.required
          ? parameterArbitrary(p.name, p.schema, world).map((v) => [v])
          : fc
              .option(parameterArbitrary(p.name, p.schema, world), { nil: undefined })
              .map((v) => (v === undefined ? [] : [v])),
      ),
    )
    .map((values) => {
      const q: Record<string, string> = {};
      queryParams.forEach((p, i) => {
        if (values[i].length) q[p.name] = values[i][0];
      });
      return q;
    });
  const repairQuery = world.repairQuery?.(operation) ?? ((q: Record<string, string>) => q);
  const queries = (
    sets.length
      ? fc.oneof(
          drawnQuery,
          fc.constantFrom(...sets).map((s) => ({ ...s })),
        )
      : drawnQuery
  ).map(repairQuery);
  const hints = world.hints(operation);
  const repair = world.repair?.(operation);
  const bodies: fc.Arbitrary<unknown> = bodySchema ? validValue(bodySchema, hints, repair) : fc.constant(undefined);

  const valid = fc
    .record({ pathValues: paths, query: queries, body: bodies })
    .map(({ pathValues, query, body }): FuzzCase => ({
      operation,
      path: fillPath(operation.path, pathValues),
      query,
      body,
      valid: true,
      why: "",
    }));

  const breakers: Array<fc.Arbitrary<FuzzCase | null>> = [];
  if (bodySchema) {
    breakers.push(
      fc
        .record({ pathValues: paths, query: queries, broken: invalidValue(bodySchema, hints, repair) })
        .map(({ pathValues, query, broken }) =>
          broken
            ? {
                operation,
                path: fillPath(operation.path, pathValues),
                query,
                body: broken.value,
                valid: false,
                why: `body ${broken.why}`,
              }
            : null,
        ),
    );
  }
  const undocumentedTypes = NOT_JSON.filter((t) => !(t in (operation.op.requestBody?.content ?? {})));
  if (bodySchema && undocumentedTypes.length) {
    // A valid body, but not said to be JSON.
    breakers.push(
      fc
        .record({ pathValues: paths, query: queries, body: bodies, contentType: fc.constantFrom(...undocumentedTypes) })
        .map(({ pathValues, query, body, contentType }) => ({
          operation,
          path: fillPath(operation.path, pathValues),
          query,
          body,
          valid: false,
          why: `body sent as ${contentType}`,
          contentType,
        })),
    );
  }
  for (const p of [...queryParams, ...pathParams]) {
    const bad = badParameter(p.schema, p.in as string);
    if (bad.length === 0) continue;
    breakers.push(
      fc
        .record({ pathValues: paths, query: queries, body: bodies, value: fc.constantFrom(...bad) })
        .map(({ pathValues, query, body, value }) => {
          const isPath = p.in === "path";
          const path = fillPath(operation.path, isPath ? { ...pathValues, [p.name]: value } : pathValues);
          return {
            operation,
            path,
            query: isPath ? query : { ...query, [p.name]: value },
            body,
            valid: false,
            why: `${p.in} ${p.name}=${value.slice(0, 40)}`,
          };
        }),
    );
  }
  for (const p of queryParams.filter((q) => q.required)) {
    breakers.push(
      fc.record({ pathValues: paths, query: queries, body: bodies }).map(({ pathValues, query, body }) => {
        const { [p.name]: _left, ...rest } = query;
        return {
          operation,
          path: fillPath(operation.path, pathValues),
          query: rest,
          body,
          valid: false,
          why: `query ${p.name} left out`,
        };
      }),
    );
  }
  if (breakers.length === 0) return valid;
  return fc.oneof(
    { weight: 2, arbitrary: valid },
    { weight: 1, arbitrary: fc.oneof(...breakers).filter((c): c is FuzzCase => c !== null) },
  );
}

function fillPath(path: string, values: Record<string, string>): string {
  return path.replace(/\{([^}]+)\}/g, (_m, name: string) => encodeURIComponent(values[name] ?? ""));
}

// ---------------------------------------------------------------------------------------------
// Sending and judging

/** What came back. */
export interface FuzzAnswer {
  status: number;
  contentType: string;
  text: string;
}

/**
 * Sends a case with the world's credentials (or the `credentials` headers given instead); JSON
 * bodies only.
 */
export async function send(
  world: FuzzWorld,
  c: FuzzCase,
  opts: { credentials?: Record<string, string> } = {},
): Promise<FuzzAnswer> {
  const headers: Record<string, string> = { ...opts.credentials };
  const credential = world.credentials(c.operation);
  if (!opts.credentials && credential) headers.authorization = `Bearer ${credential}`;
  let body: string | undefined;
  if (c.body !== undefined && c.operation.method !== "get" && c.operation.method !== "head") {
    body = JSON.stringify(c.body);
    headers["content-type"] = c.contentType ?? "application/json";
  }
  const query = new URLSearchParams(c.query).toString();
  const res = await fetch(`${world.url}${c.path}${query ? `?${query}` : ""}`, {
    method: c.operation.method.toUpperCase(),
    headers,
    body,
  });
  return {
    status: res.status,
    contentType: (res.headers.get("content-type") ?? "").split(";")[0].trim(),
    text: await res.text(),
  };
}

/** The ways an answer can break the document, as the Checks count them. */
export const VIOLATIONS = ["5xx", "not the envelope", "invalid accepted", "valid refused", "off schema"] as const;
export type Violation = (typeof VIOLATIONS)[number];

/** The fields a 400 envelope's `extra` names (none when it names none). */
function refusedFields(text: string): string[] {
  try {
    const extra = (JSON.parse(text) as Json).extra;
    return Array.isArray(extra) ? extra.map((e: Json) => String(e?.field ?? "")) : [];
  } catch {
    return [];
  }
}

/**
 * What is wrong with `answer` to `c` by the document (nothing: an empty list). A 400 to a valid
 * request that names only `opaque` fields (see `FuzzWorld.opaque`) is no violation; `madeUp` says so.
 */
export function judge(
  c: FuzzCase,
  answer: FuzzAnswer,
  envelope: Json,
  opaque: string[] = [],
): { violations: Array<{ violation: Violation; detail: string }>; madeUp: boolean } {
  const found: Array<{ violation: Violation; detail: string }> = [];
  const { op, path } = c.operation;
  const add = (violation: Violation, detail: string) => found.push({ violation, detail });
  if (answer.status >= 500) add("5xx", answer.text.slice(0, 300));
  const ok = answer.status >= 200 && answer.status < 300;
  if (!c.valid && ok) add("invalid accepted", c.why);
  const fields = answer.status === 400 ? refusedFields(answer.text) : [];
  const madeUp = c.valid && fields.length > 0 && fields.every((f) => opaque.includes(f));
  if (c.valid && answer.status === 400 && !madeUp) add("valid refused", answer.text.slice(0, 300));
  const result = () => ({ violations: found, madeUp });
  const documented = op.responses[String(answer.status)] ?? op.responses[`${String(answer.status)[0]}XX`];
  if (!documented) {
    add("off schema", `status ${answer.status} is not documented`);
    return result();
  }
  let parsed: unknown;
  const isJson = answer.contentType === "application/json";
  if (isJson && answer.text) {
    try {
      parsed = JSON.parse(answer.text);
    } catch {
      add("off schema", "the body is not JSON");
      return result();
    }
  }
  if (answer.status >= 400 && path !== "/graphql") {
    const errors = isJson ? schemaErrors(envelope, parsed) : ["not JSON"];
    if (errors.length || (parsed as Json).status_code !== answer.status) {
      add("not the envelope", `${answer.status}: ${errors.join("; ")} ${answer.text.slice(0, 200)}`);
    }
    return result();
  }
  if (c.operation.method === "head" || answer.status === 204) {
    if (answer.text !== "") add("off schema", "a body where none is documented");
    return result();
  }
  const content = documented.content as Json | undefined;
  if (!content) return result();
  if (!(answer.contentType in content)) {
    add("off schema", `content type ${answer.contentType} is not documented (${Object.keys(content)})`);
    return result();
  }
  if (isJson) {
    const errors = schemaErrors(content[answer.contentType].schema, parsed);
    if (errors.length) add("off schema", `${answer.status}: ${errors.slice(0, 3).join("; ")}`);
  }
  return result();
}
