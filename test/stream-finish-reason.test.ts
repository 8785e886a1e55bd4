/**
 * The streamed `finish_reason` of chat completions over raw SSE (issue 14, item 3): `length` when
 * `max_tokens` ends the answer, `stop` when a caller's stop sequence does (OpenAI reports a stop
 * string as `stop`, never as `stop_sequence`) and when the model ends its turn. Exactly one
 * chunk carries it, the last one with a choice, and the streamed text matches the unstreamed one.
 */
import {
  CHAT_MODEL,
  type TestServer,
  activityByCustomId,
  createTestCaller,
  http,
  startTestServer,
} from "./support/harness.js";

let server: TestServer;
let caller: Awaited<ReturnType<typeof createTestCaller>>;

beforeAll(async () => {
  server = await startTestServer({ engineSequences: 2 });
  caller = await createTestCaller(server.url);
});
afterAll(() => server.close());

const greedy = (max_tokens: number, extra: Record<string, unknown> = {}) => ({
  model: CHAT_MODEL,
  messages: [{ role: "user", content: "Once upon a time" }],
  max_tokens,
  temperature: 0,
  ...extra,
});

interface Streamed {
  text: string;
  /** `finish_reason` of every chunk that has a choice, in order. */
  finishReasons: Array<string | null>;
  usage: { completion_tokens: number } | undefined;
}

/** Posts a streamed chat completion and reads its SSE frames (each `data:` JSON, then `[DONE]`). */
async function stream(body: Record<string, unknown>): Promise<Streamed> {
  const res = await fetch(`${server.url}/v1/chat/completions`, {
    method: "POST",
    headers: { authorization: `Bearer ${caller.key}`, "content-type": "application/json" },
    body: JSON.stringify({ ...body, stream: true, stream_options: { include_usage: true } }),
  });
  expect(res.status).toBe(200);
  const frames = (await res.text()).split("\n\n").filter(Boolean);
  expect(frames.at(-1)).toBe("data: [DONE]");
  const chunks = frames.slice(0, -1).map((f) => {
    expect(f.startsWith("data: ")).toBe(true);
    return JSON.parse(f.slice("data: ".length));
  });
  const out: Streamed = { text: "", finishReasons: [], usage: undefined };
  for (const chunk of chunks) {
    expect(chunk.object).toBe("chat.completion.chunk");
    if (chunk.choices.length === 0) out.usage = chunk.usage;
    for (const choice of chunk.choices) {
      out.text += choice.delta.content ?? "";
      out.finishReasons.push(choice.finish_reason);
    }
  }
  return out;
}

/** Exactly one chunk carries a finish reason, and it is the last chunk with a choice. */
function finishReasonOf(s: Streamed): string | null {
  const given = s.finishReasons.filter((r) => r !== null);
  expect(given).toHaveLength(1);
  expect(s.finishReasons.at(-1)).toBe(given[0]);
  return given[0];
}

test("when max_tokens ends a streamed answer, then its finish_reason is length", async () => {
  const plain = await http(server.url, "POST", "/v1/chat/completions", { token: caller.key, body: greedy(8) });
  const streamed = await stream(greedy(8, { metadata: { custom_id: "length" } }));
  expect(finishReasonOf(streamed)).toBe("length");
  expect(streamed.usage?.completion_tokens).toBe(8);
  expect(streamed.text).toBe(plain.body.choices[0].message.content);
  expect((await activityByCustomId(server, "length")).status).toBe("completed");
});

test("when a stop sequence ends a streamed answer, then its finish_reason is stop and the text ends before it", async () => {
  const full = await http(server.url, "POST", "/v1/chat/completions", { token: caller.key, body: greedy(40) });
  const text: string = full.body.choices[0].message.content;
  const stop = text.split(/\s+/).filter((w) => /^[a-z]{4,}$/.test(w))[2];
  expect(stop).toBeDefined();
  const streamed = await stream(greedy(40, { stop: [stop] }));
  expect(finishReasonOf(streamed)).toBe("stop");
  expect(streamed.text).toBe(text.slice(0, text.indexOf(stop)));
  expect(streamed.text).not.toContain(stop);
  expect(streamed.usage!.completion_tokens).toBeLessThan(40);
});

test("when the model ends its turn before max_tokens, then the streamed finish_reason is stop", async () => {
  const streamed = await stream(greedy(480));
  expect(streamed.usage!.completion_tokens).toBeLessThan(480);
  expect(finishReasonOf(streamed)).toBe("stop");
});
