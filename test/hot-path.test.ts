/**
 * The lean path of the hot POSTs (issue 30, item 3): `POST /v1/chat/completions`, `/v1/responses`,
 * `/v1/embeddings` and `/v1/messages` skip Express's router (`rest/hot-path.ts`) and read plain
 * JSON bodies without body-parser (`rest/json-body.ts`). Every answer must be the one Express
 * gives: each request is sent twice, once as the lean path takes it and once with a trailing
 * slash (the same route, which only Express serves), and the two answers are compared — status,
 * the error body, the headers every answer carries; the same body is also sent with a `+json`
 * type, which body-parser reads, and must be answered alike; and the metrics count both paths
 * under the same route label (or `unmatched` for a refusal before the route).
 */
import { CHAT_MODEL, EMBED_MODEL, type TestServer, createTestCaller, startTestServer } from "./support/harness.js";

const BODY_LIMIT = 64 * 1024;

let server: TestServer;
let caller: Awaited<ReturnType<typeof createTestCaller>>;
beforeAll(async () => {
  server = await startTestServer({ bodyLimitBytes: BODY_LIMIT });
  caller = await createTestCaller(server.url);
});
afterAll(() => server.close());

interface Answer {
  status: number;
  body: any;
  headers: Headers;
}

/** POSTs `body` (bytes or text) to `path` with `type` (none when null) and the caller's key unless `auth` is false. */
async function post(
  path: string,
  body: string | Buffer,
  opts: { type?: string | null; auth?: boolean | string } = {},
): Promise<Answer> {
  const headers: Record<string, string> = {};
  if (opts.type !== null) headers["content-type"] = opts.type ?? "application/json";
  if (opts.auth !== false) headers.authorization = `Bearer ${typeof opts.auth === "string" ? opts.auth : caller.key}`;
  const res = await fetch(server.url + path, { method: "POST", headers, body });
  const text = await res.text();
  let parsed: unknown = text;
  try {
    parsed = JSON.parse(text);
  } catch {
    /* not JSON */
  }
  return { status: res.status, body: parsed, headers: res.headers };
}

/** The headers two answers to the same request share: names, and values that are not per request. */
function stableHeaders(headers: Headers): Record<string, string> {
  const out: Record<string, string> = {};
  headers.forEach((value, name) => {
    if (["date", "x-request-id", "x-switchyard-overhead-ms", "keep-alive"].includes(name)) out[name] = "(varies)";
    else if (name === "content-length") out[name] = "(length)";
    else out[name] = value;
  });
  return out;
}

/** An answer without what differs per request (ids, timestamps, generated text). */
function shape(answer: Answer): unknown {
  if (answer.status < 400) {
    return { status: answer.status, keys: Object.keys(answer.body as object).sort() };
  }
  return { status: answer.status, body: answer.body };
}

/** Sends the same request through the lean path and through Express; both answers must be alike. */
async function expectSameAnswer(path: string, body: string | Buffer, opts: Parameters<typeof post>[2] = {}) {
  const lean = await post(path, body, opts);
  const express = await post(`${path}/`, body, opts);
  expect(shape(lean)).toEqual(shape(express));
  expect(stableHeaders(lean.headers)).toEqual(stableHeaders(express.headers));
  expect(lean.headers.get("x-request-id")).toMatch(/^[0-9a-f-]{36}$/);
  expect(lean.headers.get("x-switchyard-overhead-ms")).toMatch(/^\d+\.\d\d$/);
  return lean;
}

const VALID: Record<string, string> = {
  "/v1/chat/completions": JSON.stringify({
    model: CHAT_MODEL,
    max_tokens: 2,
    messages: [{ role: "user", content: "Hi" }],
  }),
  "/v1/responses": JSON.stringify({ model: CHAT_MODEL, max_output_tokens: 2, input: "Hi", store: false }),
  "/v1/embeddings": JSON.stringify({ model: EMBED_MODEL, input: "Hi" }),
  "/v1/messages": JSON.stringify({ model: CHAT_MODEL, max_tokens: 2, messages: [{ role: "user", content: "Hi" }] }),
};

describe("each hot POST answers through the lean path as through Express", () => {
  for (const [path, valid] of Object.entries(VALID)) {
    it(`${path}: a valid request, then 200 with the same shape and headers`, async () => {
      const lean = await expectSameAnswer(path, valid);
      expect(lean.status).toBe(200);
    });

    it(`${path}: no credentials, a wrong key, then the same 401`, async () => {
      expect((await expectSameAnswer(path, valid, { auth: false })).status).toBe(401);
      expect((await expectSameAnswer(path, valid, { auth: "sk_not_a_key" })).status).toBe(401);
    });

    it(`${path}: a body that is not valid for the route, then the same 400`, async () => {
      expect((await expectSameAnswer(path, JSON.stringify({ model: 7 }))).status).toBe(400);
    });

    it(`${path}: a body that does not say it is JSON, then the same 415`, async () => {
      expect((await expectSameAnswer(path, valid, { type: "text/plain" })).status).toBe(415);
      expect((await expectSameAnswer(path, valid, { type: null })).status).toBe(415);
    });

    it(`${path}: a body over the limit, then the same 413`, async () => {
      const big = JSON.stringify({ model: CHAT_MODEL, pad: "x".repeat(BODY_LIMIT) });
      expect((await expectSameAnswer(path, big)).status).toBe(413);
    });
  }

  it("/v1/messages: a query parameter given twice, then the same 400 in Anthropic's dialect", async () => {
    const answer = await expectSameAnswer("/v1/messages?beta=true&beta=false", VALID["/v1/messages"]);
    expect(answer.status).toBe(400);
    expect(answer.body.type).toBe("error");
  });
});

/** Bodies whose reading is the body reader's own work: each read alike by it and by body-parser. */
const BODIES: Record<string, string | Buffer> = {
  "a byte-order mark before the JSON": `\uFEFF${VALID["/v1/chat/completions"]}`,
  "only a byte-order mark": "\uFEFF",
  "whitespace before the JSON": ` \r\n\t${VALID["/v1/chat/completions"]}`,
  "only whitespace": "  \n ",
  "a JSON string": '"hello"',
  "a JSON number": "42",
  "a JSON array": "[1, 2]",
  "malformed JSON": '{"model": ',
  "JSON followed by other text": `${VALID["/v1/chat/completions"]} x`,
  "invalid UTF-8": Buffer.concat([Buffer.from('{"model":"a'), Buffer.from([0xc0, 0xaf]), Buffer.from('"}')]),
  "nesting deeper than allowed": `{"a":${"[".repeat(200)}${"]".repeat(200)}}`,
};

describe("a plain JSON body is read as body-parser reads it", () => {
  for (const [label, body] of Object.entries(BODIES)) {
    it(`when the body is ${label}, then the same answer as through body-parser and as through Express`, async () => {
      const plain = await post("/v1/chat/completions", body);
      const parsed = await post("/v1/chat/completions", body, { type: "application/vnd.switchyard+json" });
      expect(shape(plain)).toEqual(shape(parsed));
      await expectSameAnswer("/v1/chat/completions", body);
      await expectSameAnswer("/v1/chat/completions", body, { type: "Application/JSON; charset=UTF-8" });
    });
  }
});

describe("metrics", () => {
  /** The count of `switchyard_http_requests_total` with these labels, read from `/metrics`. */
  async function counted(route: string, status: number): Promise<number> {
    const text = await (await fetch(`${server.url}/metrics`)).text();
    const line = text
      .split("\n")
      .find((l) => l.startsWith(`switchyard_http_requests_total{method="POST",route="${route}",status="${status}"}`));
    return line ? Number(line.split(" ").at(-1)) : 0;
  }

  it("when refused at the route (401) or before it (415), then both paths are counted under the same label", async () => {
    const before401 = await counted("/v1/embeddings", 401);
    const before415 = await counted("unmatched", 415);
    await expectSameAnswer("/v1/embeddings", VALID["/v1/embeddings"], { auth: false });
    await expectSameAnswer("/v1/embeddings", VALID["/v1/embeddings"], { type: "text/plain" });
    expect(await counted("/v1/embeddings", 401)).toBe(before401 + 2);
    expect(await counted("unmatched", 415)).toBe(before415 + 2);
  });
});
