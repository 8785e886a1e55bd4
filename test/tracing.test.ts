/**
 * Traces (issue 29, item 2) against a real OTLP receiver: an HTTP server on loopback that takes
 * what the exporter posts to `/v1/traces` (`OTEL_EXPORTER_OTLP_PROTOCOL=http/json`) and decodes
 * it. A gateway Switchyard routes `up-chat` to a loopback fake of an OpenAI-compatible server that
 * records the headers it receives. Checked: one chat request's span tree (the caller's
 * `traceparent` → the request's server span → the engine span with the GenAI attributes; the
 * group-commit flush linked to it), no prompt or answer in any span, the `traceparent` the
 * upstream received, the trace id in `x-trace-id` and in the request's log lines, a job's span
 * under the request that sent it, a webhook attempt's span; content only when opted in and never
 * for a team with zero data retention; nothing of it with tracing off.
 */
import { randomBytes } from "node:crypto";
import http, { type IncomingHttpHeaders, type IncomingMessage, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { loadConfig } from "../src/config/config.js";
import { tracedEngine } from "../src/inference/traced-engine.js";
import type { InferenceEngine } from "../src/inference/engine.js";
import { Tracing } from "../src/shared/tracing.js";
import { type CapturedLogs, captureLogs } from "./support/log-capture.js";
import {
  type TestServer,
  createTestCaller,
  eventually,
  http as call,
  openaiClient,
  startTestServer,
} from "./support/harness.js";
import { writeEditedCatalog } from "./support/test-catalog.js";
import { type WebhookReceiver, startWebhookReceiver } from "./support/webhook-receiver.js";

const MODEL = "up-chat";
const UPSTREAM_MODEL = "fake-model";
/** Words of the prompt and of the answer: no span may carry them unless content is opted in. */
const PROMPT = "Tell me about the purple elephant";
const ANSWER = "Once upon a zebra";
/** A prompt the fake upstream refuses with 500 (a warning logged inside the request). */
const REFUSED = "please refuse this one";

/** OTLP span kinds (`SPAN_KIND_*`). */
const KIND = { INTERNAL: 1, SERVER: 2, CLIENT: 3, CONSUMER: 5 };

interface Span {
  traceId: string;
  spanId: string;
  parentSpanId: string;
  name: string;
  kind: number;
  attributes: Record<string, unknown>;
  links: Array<{ traceId: string; spanId: string }>;
  status: { code?: number };
}

/** An OTLP/JSON `AnyValue` as a plain value. */
function plain(value: Record<string, any>): unknown {
  if ("stringValue" in value) return value.stringValue;
  if ("intValue" in value) return Number(value.intValue);
  if ("doubleValue" in value) return value.doubleValue;
  if ("boolValue" in value) return value.boolValue;
  if ("arrayValue" in value) return ((value.arrayValue.values ?? []) as Array<Record<string, any>>).map(plain);
  return undefined;
}

/** The OTLP receiver: every export's raw text and its spans, decoded. */
const receiver = { bodies: [] as string[], spans: [] as Span[], contentTypes: new Set<string>() };
let otlp: http.Server;

function readBody(req: IncomingMessage): Promise<string> {
  return new Promise((resolve) => {
    let text = "";
    req.on("data", (c: Buffer) => (text += c.toString("utf8")));
    req.on("end", () => resolve(text));
  });
}

async function receive(req: IncomingMessage, res: ServerResponse): Promise<void> {
  const text = await readBody(req);
  if (req.method !== "POST" || req.url !== "/v1/traces") {
    res.writeHead(404).end();
    return;
  }
  receiver.contentTypes.add(req.headers["content-type"] ?? "");
  receiver.bodies.push(text);
  const json = JSON.parse(text) as {
    resourceSpans: Array<{ scopeSpans: Array<{ spans: Array<Record<string, any>> }> }>;
  };
  for (const rs of json.resourceSpans)
    for (const ss of rs.scopeSpans)
      for (const s of ss.spans) {
        receiver.spans.push({
          traceId: s.traceId,
          spanId: s.spanId,
          parentSpanId: s.parentSpanId ?? "",
          name: s.name,
          kind: s.kind,
          attributes: Object.fromEntries(
            ((s.attributes ?? []) as Array<{ key: string; value: Record<string, any> }>).map((a) => [
              a.key,
              plain(a.value),
            ]),
          ),
          links: ((s.links ?? []) as Array<{ traceId: string; spanId: string }>).map((l) => ({
            traceId: l.traceId,
            spanId: l.spanId,
          })),
          status: s.status ?? {},
        });
      }
  res.writeHead(200, { "content-type": "application/json" }).end("{}");
}

/** What the fake upstream received: each chat request's headers. */
const upstreamHeaders: IncomingHttpHeaders[] = [];
let upstream: http.Server;

async function serveUpstream(req: IncomingMessage, res: ServerResponse): Promise<void> {
  const body = await readBody(req);
  if (req.method === "GET" && req.url === "/v1/models") {
    res.writeHead(200, { "content-type": "application/json" });
    res.end(JSON.stringify({ object: "list", data: [{ id: UPSTREAM_MODEL, object: "model" }] }));
    return;
  }
  if (req.method !== "POST" || req.url !== "/v1/chat/completions") {
    res.writeHead(404, { "content-type": "application/json" }).end('{"error":{"message":"not found"}}');
    return;
  }
  upstreamHeaders.push(req.headers);
  if (body.includes(REFUSED)) {
    res.writeHead(500, { "content-type": "application/json" }).end('{"error":{"message":"refused"}}');
    return;
  }
  const chunk = (delta: Record<string, unknown>, finish: string | null, usage?: unknown) =>
    `data: ${JSON.stringify({
      id: "c1",
      object: "chat.completion.chunk",
      created: 1,
      model: UPSTREAM_MODEL,
      choices: usage ? [] : [{ index: 0, delta, finish_reason: finish }],
      ...(usage ? { usage } : {}),
    })}\n\n`;
  res.writeHead(200, { "content-type": "text/event-stream" });
  res.end(
    chunk({ role: "assistant", content: ANSWER }, null) +
      chunk({}, "stop") +
      chunk({}, null, { prompt_tokens: 7, completion_tokens: 4, total_tokens: 11 }) +
      "data: [DONE]\n\n",
  );
}

async function listen(server: http.Server): Promise<string> {
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
}

let gateway: TestServer;
let content: TestServer;
let untraced: TestServer;
let logs: CapturedLogs;
let webhooks: WebhookReceiver;
let key: string;
const bspDelay = process.env.OTEL_BSP_SCHEDULE_DELAY;

beforeAll(async () => {
  // Spans leave every 100 ms instead of every 5 s (the SDK reads it when the processor is built).
  process.env.OTEL_BSP_SCHEDULE_DELAY = "100";
  otlp = http.createServer((req, res) => void receive(req, res));
  upstream = http.createServer((req, res) => void serveUpstream(req, res));
  const otlpUrl = await listen(otlp);
  const upstreamUrl = await listen(upstream);
  webhooks = await startWebhookReceiver();
  const catalogPath = writeEditedCatalog((c) => {
    const chat = c.models.find((m) => m.modality === "text_generation")!;
    c.models.push({
      ...chat,
      id: MODEL,
      display_name: MODEL,
      engine: { type: "openai_compatible", upstream_model: UPSTREAM_MODEL },
    });
  });
  const common = {
    catalogPath,
    upstreams: [{ name: "fake", base_url: `${upstreamUrl}/v1`, models: [UPSTREAM_MODEL] }],
    webhookAllowPrivate: true,
  };
  const traced = { ...common, otlpTracesEndpoint: `${otlpUrl}/v1/traces`, otlpProtocol: "http/json" as const };
  logs = captureLogs("debug");
  gateway = await startTestServer(traced, undefined, { logger: logs.logger });
  content = await startTestServer({ ...traced, traceContent: true });
  untraced = await startTestServer(common);
  key = (await createTestCaller(gateway.url)).key;
}, 120_000);

afterAll(async () => {
  await gateway?.close();
  await content?.close();
  await untraced?.close();
  await webhooks?.close();
  await new Promise((resolve) => otlp?.close(resolve));
  await new Promise((resolve) => upstream?.close(resolve));
  if (bspDelay === undefined) delete process.env.OTEL_BSP_SCHEDULE_DELAY;
  else process.env.OTEL_BSP_SCHEDULE_DELAY = bspDelay;
});

/** The spans of `traceId` once `ready` holds for them (exports arrive every 100 ms). */
async function spansOf(traceId: string, ready: (spans: Span[]) => boolean): Promise<Span[]> {
  const of = () => receiver.spans.filter((s) => s.traceId === traceId);
  await eventually(async () => ready(of()), 10_000);
  return of();
}

const hex = (bytes: number) => randomBytes(bytes).toString("hex");

describe("a traced chat request", () => {
  test("when a chat completion comes with a traceparent, then its spans form the expected tree with GenAI attributes, no content, and the upstream gets the engine span as parent", async () => {
    const traceId = hex(16);
    const callerSpan = hex(8);
    const { data, response } = await openaiClient(gateway.url, key)
      .chat.completions.create(
        { model: MODEL, messages: [{ role: "user", content: PROMPT }], max_tokens: 16, temperature: 0.5 },
        { headers: { traceparent: `00-${traceId}-${callerSpan}-01` } },
      )
      .withResponse();
    expect(data.choices[0].message.content).toBe(ANSWER);
    expect(response.headers.get("x-trace-id")).toBe(traceId);

    const spans = await spansOf(
      traceId,
      (s) => s.some((x) => x.kind === KIND.SERVER) && s.some((x) => x.kind === KIND.CLIENT),
    );
    const server = spans.find((s) => s.kind === KIND.SERVER)!;
    expect(server).toMatchObject({
      name: "POST /v1/chat/completions",
      parentSpanId: callerSpan,
      attributes: expect.objectContaining({
        "http.request.method": "POST",
        "http.route": "/v1/chat/completions",
        "http.response.status_code": 200,
        "url.path": "/v1/chat/completions",
        "switchyard.request_id": response.headers.get("x-request-id"),
      }),
    });
    expect(server.attributes["switchyard.team_id"]).toMatch(/^[0-9a-f-]{36}$/);
    const engine = spans.find((s) => s.name === `chat ${MODEL}`)!;
    expect(engine).toMatchObject({ kind: KIND.CLIENT, parentSpanId: server.spanId });
    expect(engine.attributes).toMatchObject({
      "gen_ai.operation.name": "chat",
      "gen_ai.request.model": MODEL,
      "gen_ai.provider.name": "openai_compatible",
      "gen_ai.system": "openai_compatible",
      "gen_ai.request.max_tokens": 16,
      "gen_ai.request.temperature": 0.5,
      "gen_ai.usage.input_tokens": 7,
      "gen_ai.usage.output_tokens": 4,
      "gen_ai.response.finish_reasons": ["stop"],
    });
    expect(engine.attributes["gen_ai.input.messages"]).toBeUndefined();
    expect(engine.attributes["gen_ai.output.messages"]).toBeUndefined();

    // The upstream got the engine span as its parent, in the caller's trace.
    const sent = upstreamHeaders.at(-1)!;
    expect(sent.traceparent).toBe(`00-${traceId}-${engine.spanId}-01`);

    // The group commit that wrote it: a root span of its own, linked to the request.
    await eventually(
      async () =>
        receiver.spans.some((s) => s.name === "metering flush" && s.links.some((l) => l.spanId === server.spanId)),
      10_000,
    );
    const flush = receiver.spans.find(
      (s) => s.name === "metering flush" && s.links.some((l) => l.spanId === server.spanId),
    )!;
    expect(flush.parentSpanId).toBe("");
    expect(flush.attributes["switchyard.flush.rows"]).toBeGreaterThanOrEqual(1);

    // No prompt and no answer anywhere in what was exported.
    const exported = receiver.bodies.join("\n");
    expect(exported).not.toContain("purple elephant");
    expect(exported).not.toContain("zebra");
    expect([...receiver.contentTypes]).toEqual(["application/json"]);
  });

  test("when a request comes without a traceparent, then it starts its own trace, named in x-trace-id and in its log lines", async () => {
    const from = logs.lines.length;
    const res = await call(gateway.url, "POST", "/v1/chat/completions", {
      token: key,
      body: { model: MODEL, messages: [{ role: "user", content: REFUSED }], max_tokens: 4 },
    });
    expect(res.status).toBe(502);
    const traceId = res.headers.get("x-trace-id")!;
    expect(traceId).toMatch(/^[0-9a-f]{32}$/);
    expect(upstreamHeaders.at(-1)!.traceparent).toMatch(new RegExp(`^00-${traceId}-[0-9a-f]{16}-01$`));
    // The upstream's refusal is logged inside the engine call, the request line after it.
    await eventually(async () => logs.records(from).some((r) => r.msg === "request"));
    const lines = logs.records(from).filter((r) => r.msg === "upstream refused a request" || r.msg === "request");
    expect(lines.map((r) => r.msg).sort()).toEqual(["request", "upstream refused a request"]);
    for (const line of lines) expect(line.trace_id).toBe(traceId);
    const spans = await spansOf(traceId, (s) => s.some((x) => x.kind === KIND.SERVER));
    const server = spans.find((s) => s.kind === KIND.SERVER)!;
    expect(server.parentSpanId).toBe("");
    expect(server.status.code).toBe(2); // STATUS_CODE_ERROR: a 5xx answer
    const engine = spans.find((s) => s.name === `chat ${MODEL}`)!;
    expect(engine.status.code).toBe(2);
    expect(engine.attributes["error.type"]).toBe("engine_failure");
  });
});

describe("jobs and webhooks", () => {
  test("when a background response with a webhook is created, then its job runs in a span under the create request and the webhook attempt has its own span", async () => {
    const res = await call(gateway.url, "POST", "/v1/responses", {
      token: key,
      body: {
        model: MODEL,
        input: PROMPT,
        max_output_tokens: 8,
        background: true,
        metadata: { completion_webhook: `${webhooks.url}/traced` },
      },
    });
    expect(res.status).toBe(200);
    const traceId = res.headers.get("x-trace-id")!;
    // The job's span ends after the engine's: it may come in a later export.
    const names = ["POST /v1/responses", "job response-generate", `chat ${MODEL}`];
    const spans = await spansOf(traceId, (s) => names.every((n) => s.some((x) => x.name === n)));
    const server = spans.find((s) => s.kind === KIND.SERVER)!;
    expect(server.name).toBe("POST /v1/responses");
    const job = spans.find((s) => s.name === "job response-generate")!;
    expect(job).toMatchObject({
      kind: KIND.CONSUMER,
      parentSpanId: server.spanId,
      attributes: expect.objectContaining({
        "messaging.system": "pg-boss",
        "messaging.destination.name": "response-generate",
      }),
    });
    expect(spans.find((s) => s.name === `chat ${MODEL}`)!.parentSpanId).toBe(job.spanId);

    expect(
      await eventually(
        async () => receiver.spans.some((s) => s.attributes["switchyard.response_id"] === res.body.id),
        15_000,
      ),
    ).toBe(true);
    const attempt = receiver.spans.find((s) => s.attributes["switchyard.response_id"] === res.body.id)!;
    expect(attempt).toMatchObject({
      name: "webhook attempt",
      kind: KIND.CLIENT,
      parentSpanId: "",
      attributes: expect.objectContaining({
        "http.response.status_code": 200,
        "server.address": "127.0.0.1",
        "switchyard.webhook.attempt": 1,
        "switchyard.webhook.delivered": true,
      }),
    });
    expect(webhooks.on("/traced")).toHaveLength(1);
  });
});

describe("content in spans", () => {
  async function tracedChat(token: string): Promise<Span> {
    const res = await call(content.url, "POST", "/v1/chat/completions", {
      token,
      body: { model: MODEL, messages: [{ role: "user", content: PROMPT }], max_tokens: 8 },
    });
    expect(res.status).toBe(200);
    const traceId = res.headers.get("x-trace-id")!;
    const spans = await spansOf(traceId, (s) => s.some((x) => x.name === `chat ${MODEL}`));
    return spans.find((s) => s.name === `chat ${MODEL}`)!;
  }

  test("when SWITCHYARD_TRACE_CONTENT is on, then the engine span carries the prompt and the answer", async () => {
    const caller = await createTestCaller(content.url);
    const span = await tracedChat(caller.key);
    expect(JSON.parse(span.attributes["gen_ai.input.messages"] as string)).toEqual([
      { role: "user", parts: [{ type: "text", content: PROMPT }] },
    ]);
    expect(JSON.parse(span.attributes["gen_ai.output.messages"] as string)).toEqual([
      { role: "assistant", parts: [{ type: "text", content: ANSWER }], finish_reason: "stop" },
    ]);
  });

  test("when the team has zero data retention on, then no content goes into its spans even with SWITCHYARD_TRACE_CONTENT on", async () => {
    const caller = await createTestCaller(content.url);
    const zdr = await call(content.url, "PATCH", "/control/v1/teams/me", {
      token: caller.token,
      body: { zero_data_retention_enabled: true },
    });
    expect(zdr.status).toBe(200);
    const span = await tracedChat(caller.key);
    expect(span.attributes["gen_ai.usage.input_tokens"]).toBe(7);
    expect(span.attributes["gen_ai.input.messages"]).toBeUndefined();
    expect(span.attributes["gen_ai.output.messages"]).toBeUndefined();
  });
});

describe("tracing off", () => {
  test("when no OTLP endpoint is configured, then no trace id is answered and no traceparent goes upstream", async () => {
    const caller = await createTestCaller(untraced.url);
    const before = receiver.spans.length;
    const res = await call(untraced.url, "POST", "/v1/chat/completions", {
      token: caller.key,
      body: { model: MODEL, messages: [{ role: "user", content: PROMPT }], max_tokens: 4 },
      headers: { traceparent: `00-${hex(16)}-${hex(8)}-01` },
    });
    expect(res.status).toBe(200);
    expect(res.headers.get("x-trace-id")).toBeNull();
    expect(upstreamHeaders.at(-1)!.traceparent).toBeUndefined();
    await new Promise((r) => setTimeout(r, 300));
    expect(receiver.spans.slice(before).filter((s) => s.attributes["switchyard.team_id"] === caller.teamId)).toEqual(
      [],
    );
  });

  test("when tracing is off, then engines are not wrapped and no span is started", () => {
    const engine = {} as InferenceEngine;
    expect(tracedEngine(engine, Tracing.off)).toBe(engine);
    expect(Tracing.off.enabled).toBe(false);
    expect(Tracing.off.start("x")).toBeUndefined();
  });
});

describe("configuration from the standard variables", () => {
  const load = (env: Record<string, string>) => loadConfig(env, { jwtSecret: "x".repeat(32), dataDir: "/tmp" });

  test("when OTEL_EXPORTER_OTLP_ENDPOINT is set, then traces go to its /v1/traces; the traces-specific variables win", () => {
    expect(load({}).otlpTracesEndpoint).toBeUndefined();
    const base = load({ OTEL_EXPORTER_OTLP_ENDPOINT: "http://collector:4318/" });
    expect(base.otlpTracesEndpoint).toBe("http://collector:4318/v1/traces");
    expect(base.otlpProtocol).toBe("http/protobuf");
    const specific = load({
      OTEL_EXPORTER_OTLP_ENDPOINT: "http://collector:4318",
      OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: "http://traces:9999/in",
      OTEL_EXPORTER_OTLP_PROTOCOL: "http/protobuf",
      OTEL_EXPORTER_OTLP_TRACES_PROTOCOL: "http/json",
    });
    expect(specific.otlpTracesEndpoint).toBe("http://traces:9999/in");
    expect(specific.otlpProtocol).toBe("http/json");
  });

  test("when OTEL_SDK_DISABLED or OTEL_TRACES_EXPORTER=none is set, then tracing is off; grpc is refused by name", () => {
    const endpoint = { OTEL_EXPORTER_OTLP_ENDPOINT: "http://collector:4318" };
    expect(load({ ...endpoint, OTEL_SDK_DISABLED: "true" }).otlpTracesEndpoint).toBeUndefined();
    expect(load({ ...endpoint, OTEL_TRACES_EXPORTER: "none" }).otlpTracesEndpoint).toBeUndefined();
    expect(() => load({ ...endpoint, OTEL_EXPORTER_OTLP_PROTOCOL: "grpc" })).toThrow(
      /OTEL_EXPORTER_OTLP_TRACES_PROTOCOL: use http\/protobuf or http\/json/,
    );
    expect(load({ SWITCHYARD_TRACE_CONTENT: "true" }).traceContent).toBe(true);
  });
});
