/**
 * Hostile bytes (issue 28, item 4), each through the real HTTP server: client values an error
 * repeats are cut to 200 characters.
 */
import {
  CHAT_MODEL,
  type TestServer,
  createTestCaller,
  expectEnvelope,
  http,
  startTestServer,
} from "./support/harness.js";

let server: TestServer;
let caller: Awaited<ReturnType<typeof createTestCaller>>;
beforeAll(async () => {
  server = await startTestServer();
  caller = await createTestCaller(server.url);
});
afterAll(() => server.close());

/** POSTs raw bytes with a content type (default JSON) and credentials; the answer as `http` gives it. */
async function postBytes(path: string, body: Uint8Array | string, opts: { type?: string | null; token?: string } = {}) {
  const headers: Record<string, string> = {};
  if (opts.token !== undefined) headers.authorization = `Bearer ${opts.token}`;
  if (opts.type !== null) headers["content-type"] = opts.type ?? "application/json";
  const res = await fetch(server.url + path, { method: "POST", headers, body });
  const text = await res.text();
  let parsed: any = text;
  try {
    parsed = JSON.parse(text);
  } catch {
    /* not JSON */
  }
  return { status: res.status, body: parsed, text, headers: res.headers };
}

const chat = (extra: Record<string, unknown> = {}) =>
  JSON.stringify({ model: CHAT_MODEL, max_tokens: 2, messages: [{ role: "user", content: "Hi" }], ...extra });

describe("client values repeated in errors", () => {
  /** Asserts `text` repeats 150–200 characters of a run of `char` (with what came before it), then the cut marker. */
  function expectCut(text: string, char: string) {
    const run = new RegExp(`${char}{201}`);
    expect(text).not.toMatch(run);
    expect(text).toMatch(new RegExp(`${char}{150,200}…\\(\\+\\d+ characters\\)`));
  }

  it("when chat names a 1,048,000-character model, then the 404 repeats 200 of them", async () => {
    const res = await postBytes("/v1/chat/completions", chat({ model: "m".repeat(1_048_000) }), { token: caller.key });
    expectEnvelope(res, 404);
    expect(res.text.length).toBeLessThan(2_000);
    expectCut(res.body.detail, "m");
    expect(res.body.detail).toContain("…(+1047800 characters)");
  });

  it("when a path or a model id in the path is long, then the 404 repeats 200 characters of it", async () => {
    const model = await http(server.url, "GET", `/v1/models/${"q".repeat(8_000)}`, { token: caller.key });
    expectEnvelope(model, 404);
    expectCut(model.body.detail, "q");
    const route = await http(server.url, "GET", `/no/such/${"z".repeat(8_000)}`);
    expectEnvelope(route, 404);
    expectCut(route.body.detail, "z");
    const custom = await http(server.url, "DELETE", `/control/v1/models/custom?model_id=${"k".repeat(500)}`, {
      token: caller.token,
    });
    expectEnvelope(custom, 404);
    expectCut(custom.body.detail, "k");
  });

  it("when tool_choice names a long tool that is not in tools, then the 400 repeats 200 characters of it", async () => {
    const res = await postBytes(
      "/v1/chat/completions",
      chat({
        tools: [{ type: "function", function: { name: "f", parameters: { type: "object" } } }],
        tool_choice: { type: "function", function: { name: "t".repeat(50_000) } },
      }),
      { token: caller.key },
    );
    expectEnvelope(res, 400);
    expect(res.text.length).toBeLessThan(3_000);
    expectCut(res.body.detail, "t");
  });

  it("when a refused field's name is a client's long key, then the field named is cut", async () => {
    const res = await http(server.url, "POST", "/v1/decisions", {
      token: caller.key,
      body: { model: CHAT_MODEL, state: 1, questions: { ["w".repeat(20_000)]: { type: "yes_no" } } },
    });
    expectEnvelope(res, 400);
    expect(res.text.length).toBeLessThan(4_000);
    expect(res.text).not.toMatch(/w{201}/);
    expect(res.body.extra[0].field).toMatch(/^questions\.w{190,}…\(\+\d+ characters\)$/);
  });

  it("when a GraphQL variable carries a long refused value, then the message is cut", async () => {
    const res = await http(server.url, "POST", "/graphql", {
      body: { query: "query ($b: Boolean!) { __typename @include(if: $b) }", variables: { b: "v".repeat(100_000) } },
    });
    expect(res.status).toBe(400);
    expect(res.text.length).toBeLessThan(2_000);
    expect(res.body.errors[0].message).toMatch(/…\(\+\d+ characters\)$/);
  });
});
