/**
 * The OpenAPI 3.1.0 document (issue 13, item 1), generated from the code at start: every row of
 * the two REST tables (`data-plane.routes.ts`, `control.routes.ts`) with what the row's `doc`
 * says — the zod schemas the services validate with, converted by zod 4's `z.toJSONSchema`
 * (JSON Schema 2020-12, OpenAPI 3.1's dialect), and the answer shapes of `openapi-shapes.ts` —
 * plus `/graphql`, `/metrics` and the document's own paths. A row without a `doc` is still listed
 * (a generic JSON object), so no served path is missing. The error envelope is documented on
 * every 4xx and 5xx; credentials are the bearer scheme (API key or access token) or `x-api-key`
 * (an access token alone where a row says so). Each JSON body has an example
 * (`openapi-examples.ts`); pipes and refinements whose checks zod cannot convert are documented
 * by what they accept (`documentPipes`, and `.meta()` beside the rule) — issue 28, item 5, where
 * test/openapi-conformance.test.ts holds the document to the service.
 *
 * Served at `/schema/openapi.json` and `/schema/openapi.yaml`, and read by the reference page at
 * `/docs` (Swagger UI from `swagger-ui-dist`, served from node_modules: no CDN).
 */
import { createRequire } from "node:module";
import path from "node:path";
import express, { type Express } from "express";
import { stringify } from "yaml";
import { z } from "zod";
import { loginInput, signupInput } from "../services/accounts/account.service.js";
import { createApiKeyInput } from "../services/accounts/api-key.service.js";
import { batchCreateBody } from "../services/batches/batches.service.js";
import { invoiceBody, topUpBody } from "../services/billing/billing.dto.js";
import { decisionRequest } from "../services/decisions/decisions.protocol.js";
import { inviteMemberInput, updateMemberInput } from "../services/teams/member.service.js";
import { createCustomModelInput, requestDeploymentInput } from "../services/models/custom-models.service.js";
import { createDeploymentInput } from "../services/models/deployments.service.js";
import { oauthCompleteInput } from "../services/accounts/oauth/oauth.service.js";
import { forgotPasswordInput, resetPasswordInput } from "../services/accounts/password-reset.service.js";
import { messagesRequest } from "../services/inference/protocols/anthropic-messages.protocol.js";
import { chatCompletionRequest } from "../services/inference/protocols/openai-chat.protocol.js";
import { embeddingRequest } from "../services/inference/protocols/openai-embeddings.protocol.js";
import { responseRequest } from "../services/inference/protocols/openai-responses.protocol.js";
import { createStreamInput, updateStreamInput } from "../services/inference/responses/streams.service.js";
import { updateTeamInput } from "../services/teams/team.service.js";
import { controlRoutes } from "./control.routes.js";
import { dataPlaneRoutes } from "./data-plane.routes.js";
import { requestExamples } from "./openapi-examples.js";
import { responseShapes } from "./openapi-shapes.js";
import type { RouteDoc } from "./route-doc.js";

type Json = Record<string, unknown>;

/**
 * Names of request schemas in `components.schemas` (the spec's names for the account group);
 * a body schema not named here is named after its operation (`PostV1BatchesBody`).
 */
const REQUEST_NAMES: ReadonlyArray<[z.ZodType, string]> = [
  [chatCompletionRequest, "ChatCompletionRequest"],
  [responseRequest, "ResponseRequest"],
  [embeddingRequest, "EmbeddingRequest"],
  [messagesRequest, "MessagesRequest"],
  [createStreamInput, "StreamCreateRequest"],
  [updateStreamInput, "StreamUpdateRequest"],
  [signupInput, "SignupRequest"],
  [loginInput, "LoginRequest"],
  [createApiKeyInput, "ApiKeyCreateRequest"],
  [oauthCompleteInput, "OAuthCompleteRequest"],
  [forgotPasswordInput, "ForgotPasswordRequest"],
  [resetPasswordInput, "ResetPasswordRequest"],
  [updateTeamInput, "TeamUpdateRequest"],
  [inviteMemberInput, "MemberInviteRequest"],
  [updateMemberInput, "MemberUpdateRequest"],
  [createCustomModelInput, "CustomModelCreateRequest"],
  [requestDeploymentInput, "DeploymentRequestRequest"],
  [createDeploymentInput, "DeploymentCreateRequest"],
  [topUpBody, "TopUpRequest"],
  [invoiceBody, "InvoiceCreateRequest"],
  [decisionRequest, "DecisionRequest"],
  [batchCreateBody, "BatchCreateRequest"],
];

/** A row of either table, as the document needs it. */
interface DocumentedRow {
  method: "get" | "post" | "patch" | "delete";
  path: string;
  auth: "required" | "optional" | "none";
  status: 200 | 201 | 204;
  raw: boolean;
  doc?: RouteDoc;
}

/** Every row of both tables, data plane first (the order the app mounts them). */
export function documentedRows(): DocumentedRow[] {
  return [
    ...dataPlaneRoutes.map((r) => ({
      method: r.method,
      path: r.path,
      auth: r.auth,
      status: r.doc?.status ?? 200,
      raw: r.body === "raw",
      doc: r.doc,
    })),
    ...controlRoutes.map((r) => ({
      method: r.method,
      path: r.path,
      auth: r.auth,
      status: r.doc?.status ?? r.status,
      raw: r.body === "raw",
      doc: r.doc,
    })),
  ];
}

/** Express `/a/:b/c` → OpenAPI `/a/{b}/c`. */
export function openApiPath(expressPath: string): string {
  return expressPath.replace(/:([A-Za-z0-9_]+)/g, "{$1}");
}

/** `post /v1/chat/completions` → `postV1ChatCompletions` (unique per row). */
function operationId(method: string, p: string): string {
  const words = p
    .replace(/\.jsonl$/, " jsonl")
    .split(/[^A-Za-z0-9]+/)
    .filter(Boolean)
    .map((w) => w[0].toUpperCase() + w.slice(1));
  return method + words.join("");
}

/** The reference page's group of a path: `/v1/chat/…` → `chat`, `/control/v1/billing/…` → `control: billing`. */
function tagOf(p: string): string {
  const control = p.startsWith("/control/v1/");
  const first = p.replace(/^\/(control\/)?v1\//, "").split("/")[0];
  return control ? `control: ${first}` : first;
}

const ERROR_REF = { $ref: "#/components/responses/Error" };
const GENERIC_OBJECT = { type: "object", description: "A JSON object (shape not documented yet)." };

/** A zod schema's definition, as far as `documentPipes` reads it. */
interface ZodDef {
  _zod: {
    def: {
      type: string;
      in?: z.ZodType;
      out?: z.ZodType;
      checks?: Array<{ _zod: { def: { check: string; tx?: (v: string) => string } } }>;
    };
  };
}

/** Whether a zod string trims its input before its length checks (`.trim()`). */
function trims(def: ZodDef["_zod"]["def"]): boolean {
  return (def.checks ?? []).some((c) => c._zod.def.check === "overwrite" && c._zod.def.tx?.(" a ") === "a");
}

/**
 * Documents a pipe by what it accepts, where zod's request side would document too little
 * (issue 28, item 5: the document disagreed with the service):
 * - `z.unknown().superRefine(…).pipe(X)` (a check before X parses: decision `questions` and
 *   `criteria`) is X, not `{}` (which let any JSON through where the service needs an object);
 * - a query integer (`queryInt`: digits, then a bounded integer) is `{type: integer, minimum,
 *   maximum}` as OpenAPI spells a query integer, not a digit string without its bounds;
 * and a string trimmed before its `min(1)` (names) says it needs a character that is not white
 * space (`pattern: "\\S"`).
 */
function documentPipes(ctx: { zodSchema: unknown; jsonSchema: Json }): void {
  const def = (ctx.zodSchema as ZodDef)._zod.def;
  // A trimmed string of at least one character needs one that is not white space.
  if (def.type === "string" && trims(def) && Number(ctx.jsonSchema.minLength ?? 0) >= 1 && !ctx.jsonSchema.pattern) {
    ctx.jsonSchema.pattern = "\\S";
  }
  if (def.type !== "pipe" || !def.in || !def.out) return;
  const input = (def.in as unknown as ZodDef)._zod.def;
  const output = (def.out as unknown as ZodDef)._zod.def;
  let documented: Json | undefined;
  if (input.type === "unknown") documented = jsonSchema(def.out);
  else if (input.type === "pipe" && output.type === "number") {
    documented = z.toJSONSchema(def.out, { io: "output", unrepresentable: "any" }) as Json;
    delete documented.$schema;
  }
  if (!documented) return;
  for (const key of Object.keys(ctx.jsonSchema)) delete ctx.jsonSchema[key];
  // The pipe's own `.meta()` (what its checks say: counts, key patterns) comes on top.
  const meta = z.globalRegistry.get(ctx.zodSchema as z.ZodType) as Json | undefined;
  Object.assign(ctx.jsonSchema, documented, meta);
  if (meta?.propertyNames && documented.propertyNames) {
    ctx.jsonSchema.propertyNames = { ...(documented.propertyNames as Json), ...(meta.propertyNames as Json) };
  }
}

/** JSON Schema of a zod schema, request side (defaults optional, transforms as their input). */
function jsonSchema(schema: z.ZodType): Json {
  const out = z.toJSONSchema(schema, { io: "input", unrepresentable: "any", override: documentPipes }) as Json;
  delete out.$schema;
  return out;
}

/**
 * Builds the document. Named schemas (`components.schemas`) are the answer shapes and every body
 * schema (named after its operation when it has no name of its own); query parameters are inlined.
 * @returns a plain JSON object: OpenAPI 3.1.0.
 */
export function buildOpenApiDocument(): Json {
  const registry = z.registry<{ id: string }>();
  const names = new Map<z.ZodType, string>();
  const name = (schema: z.ZodType, wanted: string): string => {
    const known = names.get(schema);
    if (known) return known;
    names.set(schema, wanted);
    registry.add(schema, { id: wanted });
    return wanted;
  };
  // Named when first used, so the components are exactly what the operations refer to.
  const preferred = new Map<z.ZodType, string>([
    ...REQUEST_NAMES,
    ...Object.entries(responseShapes).map(([n, schema]): [z.ZodType, string] => [schema, n]),
  ]);
  name(responseShapes.ErrorEnvelope, "ErrorEnvelope");
  const ref = (schema: z.ZodType, fallback: string) => ({
    $ref: `#/components/schemas/${name(schema, preferred.get(schema) ?? fallback)}`,
  });

  const paths: Record<string, Record<string, Json>> = {};
  for (const row of documentedRows()) {
    const p = openApiPath(row.path);
    const id = operationId(row.method, row.path);
    const doc = row.doc;
    const parameters: Json[] = [];
    for (const [, param] of row.path.matchAll(/:([A-Za-z0-9_]+)/g)) {
      // spec: path parameters named `*_id` are uuids (a model id is a name, not a uuid).
      const uuid = param.endsWith("_id") && param !== "model_id";
      parameters.push({
        name: param,
        in: "path",
        required: true,
        schema: { type: "string", ...(uuid ? { format: "uuid" } : {}) },
      });
    }
    if (doc?.query) {
      const q = jsonSchema(doc.query);
      const required = new Set((q.required as string[] | undefined) ?? []);
      for (const [qname, schema] of Object.entries((q.properties as Record<string, Json>) ?? {})) {
        parameters.push(queryParameter(qname, required.has(qname), schema));
      }
    }
    const op: Json = {
      operationId: id,
      summary: doc?.summary ?? `${row.method.toUpperCase()} ${p}`,
      tags: [tagOf(row.path)],
    };
    if (doc?.description) op.description = doc.description;
    if (parameters.length) op.parameters = parameters;

    if (row.method !== "get" && row.method !== "delete") {
      const content: Record<string, Json> = {};
      if (doc?.body) {
        const example = requestExamples[id];
        content["application/json"] = {
          schema: ref(doc.body, `${id[0].toUpperCase()}${id.slice(1)}Body`),
          ...(example === undefined ? {} : { example }),
        };
      }
      for (const type of doc?.bodyMediaTypes ?? [])
        content[type] = {
          schema: type.includes("json") && !type.includes("x-ndjson") ? GENERIC_OBJECT : { type: "string" },
        };
      if (row.raw && Object.keys(content).length === 0)
        content["application/octet-stream"] = { schema: { type: "string" } };
      // A POST that reads nothing but its path (cancel, accept) documents no body.
      if (Object.keys(content).length) op.requestBody = { required: Boolean(doc?.body) || row.raw, content };
    }

    const responses: Record<string, Json> = {};
    if (row.status === 204) responses["204"] = { description: "Done; no body." };
    else {
      const content: Record<string, Json> = {};
      if (doc?.responseMediaType) content[doc.responseMediaType] = { schema: { type: "string" } };
      else
        content["application/json"] = {
          schema: doc?.response ? ref(doc.response, `${id[0].toUpperCase()}${id.slice(1)}Answer`) : GENERIC_OBJECT,
        };
      if (doc?.sse) {
        content["text/event-stream"] = {
          schema: { type: "string", description: "Server-Sent Events, when the body asks for `stream: true`." },
        };
      }
      responses[String(row.status)] = { description: "Success.", content };
    }
    if (doc?.query || doc?.body || parameters.length || (row.method !== "get" && row.method !== "delete"))
      responses["400"] = ERROR_REF;
    // A JSON body that does not say it is JSON (issue 28, item 4).
    if (op.requestBody && "application/json" in (op.requestBody as { content: Json }).content)
      responses["415"] = ERROR_REF;
    // Node refuses headers over its limit before any route runs (the envelope, `clientErrorHandler`).
    responses["431"] = ERROR_REF;
    if (row.auth !== "none") responses["401"] = ERROR_REF;
    if (doc?.credentials === "access-token") responses["403"] = ERROR_REF;
    if (row.path.includes(":")) responses["404"] = ERROR_REF;
    responses["4XX"] = ERROR_REF;
    responses["5XX"] = ERROR_REF;
    op.responses = responses;
    op.security = doc?.credentials === "access-token" ? [{ accessToken: [] }] : security(row.auth);
    (paths[p] ??= {})[row.method] = op;
  }
  // HEAD answers as GET without a body (Express does this for every GET route; spec: Health).
  for (const p of ["/v1/health", "/v1/health/ready"]) {
    const get = paths[p]?.get;
    if (get) {
      paths[p].head = {
        operationId: `head${String(get.operationId).slice(3)}`,
        summary: `${String(get.summary)} (no body)`,
        tags: get.tags,
        responses: {
          "200": { description: "Success; no body." },
          "4XX": ERROR_REF,
          "5XX": ERROR_REF,
        },
        security: [],
      };
    }
  }
  Object.assign(paths, extraPaths());

  const schemas = (
    z.toJSONSchema(registry, {
      io: "input",
      unrepresentable: "any",
      uri: (i) => `#/components/schemas/${i}`,
      override: documentPipes,
    }) as {
      schemas: Record<string, Json>;
    }
  ).schemas;
  // zod names each schema by its `$id` (a fragment URI, not a valid 2020-12 `$id`): the
  // component's key names it, and `$ref`s between them resolve against the document.
  for (const s of Object.values(schemas)) {
    delete s.$schema;
    delete s.$id;
    delete s.id;
  }

  return {
    openapi: "3.1.0",
    info: {
      title: "Switchyard",
      version: "0.0.1",
      description:
        "Hosted model inference: an OpenAI- and Anthropic-compatible data plane (`/v1`) and a control plane (`/control/v1`, and the same over GraphQL at `/graphql`). Generated from the route tables and the schemas the service validates with. Every failure answers the error envelope `{status_code, detail, extra?}`, with the official clients' error object beside it: OpenAI's `error: {message, type, code, param}`, or on `/v1/messages` Anthropic's `type: error` and `error: {type, message}`.",
    },
    servers: [{ url: "/" }],
    security: [{ bearerAuth: [] }, { apiKeyHeader: [] }],
    tags: [
      ...new Set(Object.values(paths).flatMap((ops) => Object.values(ops).flatMap((o) => o.tags as string[]))),
    ].map((t) => ({ name: t })),
    paths,
    components: {
      schemas,
      responses: {
        Error: {
          description: "The error envelope.",
          content: { "application/json": { schema: { $ref: "#/components/schemas/ErrorEnvelope" } } },
        },
      },
      securitySchemes: {
        bearerAuth: {
          type: "http",
          scheme: "bearer",
          description:
            "`Authorization: Bearer <credential>`: an API key (`sk_…`, created at `POST /control/v1/auth/api-keys`) or an access token (from signup or login).",
        },
        accessToken: {
          type: "http",
          scheme: "bearer",
          description:
            "`Authorization: Bearer <access token>` from signup or login only: operations that name this scheme refuse API keys (403).",
        },
        apiKeyHeader: {
          type: "apiKey",
          in: "header",
          name: "x-api-key",
          description: "An API key (never an access token), as Anthropic's clients send it.",
        },
        metricsToken: {
          type: "http",
          scheme: "bearer",
          description: "`/metrics` only: the value of `SWITCHYARD_METRICS_TOKEN`.",
        },
      },
    },
  };
}

/**
 * What every query parameter says of its values (issue 28, item 4; docs/api.md "Query
 * parameters"): one plain value, never empty.
 */
const QUERY_VALUE_RULE =
  "Give it at most once, as one plain value: an empty value (`name=`), a repeated parameter, the array or object forms (`name[]=`, `name[key]=`) and percent-encoded bytes that are not UTF-8 are refused with 400. `null` is not special: it is read as the text null.";

/**
 * A query parameter of the document: its schema as the service validates it, said to take no
 * empty value (`minLength: 1` on a string that is not an `enum`, which lists its values).
 */
function queryParameter(name: string, required: boolean, schema: Json): Json {
  const nonEmpty =
    schema.type === "string" && !Array.isArray(schema.enum)
      ? { ...schema, minLength: Math.max(1, (schema.minLength as number | undefined) ?? 0) }
      : schema;
  return { name, in: "query", required, description: QUERY_VALUE_RULE, schema: nonEmpty };
}

/** An operation's `security`: required = either scheme; optional = none or either; none = `[]`. */
function security(auth: DocumentedRow["auth"]): Json[] {
  if (auth === "none") return [];
  const either = [{ bearerAuth: [] }, { apiKeyHeader: [] }];
  return auth === "optional" ? [{}, ...either] : either;
}

/** The paths outside the route tables: GraphQL, metrics, this document and its reference page. */
function extraPaths(): Record<string, Record<string, Json>> {
  const graphqlBody = {
    type: "object",
    required: ["query"],
    properties: {
      query: { type: "string" },
      variables: { type: ["object", "null"] },
      operationName: { type: ["string", "null"] },
    },
  };
  const graphqlAnswer = {
    description: "A GraphQL result: `{data, errors?}` (errors carry `extensions.status_code`).",
    content: {
      "application/json": {
        schema: { type: "object", properties: { data: {}, errors: { type: "array", items: { type: "object" } } } },
      },
    },
  };
  const open = (operationId: string, summary: string, tag: string, type: string, description?: string): Json => ({
    operationId,
    summary,
    tags: [tag],
    security: [],
    responses: {
      "200": {
        description: description ?? "Success.",
        content: { [type]: { schema: type.includes("json") ? { type: "object" } : { type: "string" } } },
      },
      "5XX": ERROR_REF,
    },
  });
  return {
    "/graphql": {
      post: {
        operationId: "postGraphql",
        summary: "GraphQL: the control plane's queries and mutations (subscriptions over graphql-ws on the same path)",
        description:
          "Credentials as for REST; some fields work without them (signup, login). See `schema.graphql` for the schema; introspection is on.",
        tags: ["graphql"],
        security: [{}, { bearerAuth: [] }, { apiKeyHeader: [] }],
        requestBody: {
          required: true,
          content: { "application/json": { schema: graphqlBody, example: requestExamples.postGraphql } },
        },
        responses: {
          "200": graphqlAnswer,
          "400": graphqlAnswer,
          "413": graphqlAnswer,
          // A body that does not say it is JSON, as on REST (issue 28, item 4).
          "415": graphqlAnswer,
          // Node's refusal of headers over its limit, before GraphQL runs: the REST envelope.
          "431": ERROR_REF,
        },
      },
    },
    "/metrics": {
      get: {
        operationId: "getMetrics",
        summary: "Prometheus metrics (text exposition format)",
        description:
          "With `SWITCHYARD_METRICS_TOKEN` set, only for `Authorization: Bearer <that token>` (401 otherwise); without it, only for loopback clients (403 otherwise).",
        tags: ["operations"],
        security: [{ metricsToken: [] }, {}],
        responses: {
          "200": { description: "The metrics.", content: { "text/plain": { schema: { type: "string" } } } },
          "401": ERROR_REF,
          "403": ERROR_REF,
          "4XX": ERROR_REF,
          "5XX": ERROR_REF,
        },
      },
    },
    "/schema/openapi.json": {
      get: open("getSchemaOpenapiJson", "OpenAPI document JSON", "operations", "application/json", "This document."),
    },
    "/schema/openapi.yaml": {
      get: open(
        "getSchemaOpenapiYaml",
        "OpenAPI document YAML",
        "operations",
        "application/yaml",
        "This document, as YAML.",
      ),
    },
    "/docs": {
      get: open(
        "getDocs",
        "API reference page",
        "operations",
        "text/html",
        "The interactive reference (Swagger UI) over this document.",
      ),
    },
  };
}

/** Where `swagger-ui-dist` is installed (its files are served as they are). */
function swaggerUiDir(): string {
  const require = createRequire(import.meta.url);
  return path.dirname(require.resolve("swagger-ui-dist/package.json"));
}

/** The reference page: Swagger UI from local files, started by `/docs/init.js` (no inline script). */
const DOCS_HTML = `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>Switchyard API reference</title>
<link rel="stylesheet" href="/docs/assets/swagger-ui.css">
<link rel="icon" type="image/png" href="/docs/assets/favicon-32x32.png">
</head>
<body>
<div id="swagger-ui"></div>
<script src="/docs/assets/swagger-ui-bundle.js"></script>
<script src="/docs/init.js"></script>
</body>
</html>
`;

const DOCS_INIT = `window.ui = SwaggerUIBundle({
  url: "/schema/openapi.json",
  dom_id: "#swagger-ui",
  deepLinking: true,
  persistAuthorization: false,
  validatorUrl: null,
  tryItOutEnabled: false,
});
`;

/** Content Security Policy of the reference page: this origin only (Swagger UI needs inline styles). */
const DOCS_CSP =
  "default-src 'none'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; connect-src 'self'; font-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

/**
 * Mounts `GET /schema/openapi.json`, `/schema/openapi.yaml` and the reference page `/docs` (no
 * credentials: the document describes the API, it holds nothing of anyone's). Each form of the
 * document is built on its first request and kept (YAML takes most of a second: not at start).
 */
export function mountOpenApi(app: Express): void {
  let document: Json | undefined;
  let json: string | undefined;
  let yaml: string | undefined;
  const built = () => (document ??= buildOpenApiDocument());
  app.get(
    "/schema/openapi.json",
    (_req, res) => void res.type("application/json").send((json ??= JSON.stringify(built()))),
  );
  app.get(
    "/schema/openapi.yaml",
    (_req, res) =>
      void res.type("application/yaml").send((yaml ??= stringify(built(), { aliasDuplicateObjects: false }))),
  );
  app.get(["/docs", "/docs/"], (_req, res) => {
    res.setHeader("Content-Security-Policy", DOCS_CSP);
    res.type("html").send(DOCS_HTML);
  });
  app.get("/docs/init.js", (_req, res) => void res.type("application/javascript").send(DOCS_INIT));
  app.use("/docs/assets", express.static(swaggerUiDir(), { index: false, fallthrough: true, dotfiles: "ignore" }));
}
