/** The OpenAI-compatible wire format of the upstream engine: SSE splitting, error mapping, bounds, config. */
import { mkdtempSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { ConfigError, loadConfig } from "../../src/config/config.js";
import { failedBeforeSending } from "../../src/inference/engines/openai-compatible/endpoint.js";
import {
  SseDecoder,
  errorForStatus,
  logprobsUpTo,
  parseLogprobs,
  promptTokenBound,
  retryAfterSeconds,
  tokenizePath,
} from "../../src/inference/engines/openai-compatible/wire.js";
import { ErrorCode } from "../../src/shared/errors.js";

const tmp = () => mkdtempSync(path.join(os.tmpdir(), "switchyard-upstreams-"));
const bytes = (s: string) => new TextEncoder().encode(s);

test("when an event stream arrives in arbitrary pieces, then each event's data comes out once, whole", () => {
  const stream = 'data: {"a":1}\r\n\r\n: comment\nevent: x\ndata: {"b":\ndata: 2}\n\ndata: [DONE]\n\n';
  for (let cut = 1; cut < stream.length; cut++) {
    const decoder = new SseDecoder();
    const events = [...decoder.push(bytes(stream.slice(0, cut))), ...decoder.push(bytes(stream.slice(cut)))];
    expect([...events, ...decoder.end()]).toEqual(['{"a":1}', '{"b":\n2}', "[DONE]"]);
  }
  const unterminated = new SseDecoder();
  expect(unterminated.push(bytes("data: last"))).toEqual([]);
  expect(unterminated.end()).toEqual(["last"]);
});

test("when a multi-byte character is split across chunks, then it is decoded intact", () => {
  const all = bytes("data: héllo ✓\n\n");
  const decoder = new SseDecoder();
  expect([...decoder.push(all.subarray(0, 9)), ...decoder.push(all.subarray(9))]).toEqual(["héllo ✓"]);
});

test("when the upstream refuses, then its status maps onto ours (caller mistakes 400 with detail, 429, 503, 504, 502)", () => {
  const switchyard = JSON.stringify({
    status_code: 400,
    detail: "too long",
    extra: [{ field: "messages", message: "x" }],
  });
  expect(errorForStatus(400, switchyard)).toMatchObject({
    code: ErrorCode.InvalidRequest,
    detail: "too long",
    extra: [{ field: "messages", message: "x" }],
  });
  expect(errorForStatus(422, JSON.stringify({ error: { message: "bad temperature" } }))).toMatchObject({
    code: ErrorCode.InvalidRequest,
    detail: "bad temperature",
  });
  expect(errorForStatus(429, "{}", 7)).toMatchObject({ code: ErrorCode.RateLimited, retryAfterS: 7 });
  expect(errorForStatus(401, "no")).toMatchObject({ code: ErrorCode.EngineUnavailable });
  expect(errorForStatus(503, "")).toMatchObject({ code: ErrorCode.EngineUnavailable, retryAfterS: 5 });
  expect(errorForStatus(504, "")).toMatchObject({ code: ErrorCode.EngineTimeout });
  expect(errorForStatus(500, "secret stack")).toMatchObject({ code: ErrorCode.EngineFailure });
  expect(errorForStatus(500, "secret stack").detail).not.toMatch(/secret/);
  expect(retryAfterSeconds("12")).toBe(12);
  expect(retryAfterSeconds(new Date(Date.now() + 30_000).toUTCString())).toBeGreaterThanOrEqual(29);
  expect(retryAfterSeconds(undefined)).toBeUndefined();
});

test("when a prompt is bounded for admission, then the bound covers one token per UTF-8 byte and stops at the context", () => {
  const messages = [
    { role: "system" as const, content: "héllo" },
    { role: "user" as const, content: "✓✓" },
  ];
  expect(promptTokenBound(messages, 10_000)).toBe(6 + 6 + 3 * 16);
  expect(promptTokenBound(messages, 20)).toBe(20);
  expect(tokenizePath("/v1")).toBe("/tokenize");
  expect(tokenizePath("/openai/v1")).toBe("/openai/tokenize");
});

test("when an error happened before the request left, then only that is retried on another replica", () => {
  expect(failedBeforeSending(Object.assign(new Error("refused"), { code: "ECONNREFUSED", syscall: "connect" }))).toBe(
    true,
  );
  expect(failedBeforeSending({ code: "UND_ERR_CONNECT_TIMEOUT" })).toBe(true);
  expect(failedBeforeSending({ code: "ENOTFOUND", syscall: "getaddrinfo" })).toBe(true);
  expect(failedBeforeSending({ code: "UND_ERR_SOCKET" })).toBe(false);
  expect(failedBeforeSending({ code: "ECONNRESET", syscall: "read" })).toBe(false);
  expect(failedBeforeSending({ code: "UND_ERR_HEADERS_TIMEOUT" })).toBe(false);
});

describe("SWITCHYARD_UPSTREAMS", () => {
  const endpoint = { name: "vllm-1", base_url: "http://10.0.0.5:8000/v1/", models: ["m"] };

  test("when endpoints are set in the environment and a file, then both are read with their defaults", () => {
    const dir = tmp();
    const file = path.join(dir, "upstreams.json");
    writeFileSync(file, JSON.stringify([{ ...endpoint, name: "vllm-2", api_key: "k", weight: 2 }]));
    const cfg = loadConfig({
      SWITCHYARD_DATA_DIR: dir,
      SWITCHYARD_UPSTREAMS: JSON.stringify([endpoint]),
      SWITCHYARD_UPSTREAMS_FILE: file,
    });
    expect(cfg.upstreams).toEqual([
      { name: "vllm-1", baseUrl: "http://10.0.0.5:8000/v1", models: ["m"], weight: 1, maxConcurrency: 64 },
      { name: "vllm-2", baseUrl: "http://10.0.0.5:8000/v1", apiKey: "k", models: ["m"], weight: 2, maxConcurrency: 64 },
    ]);
    expect(cfg.upstreamConnectMs).toBe(5_000);
  });

  test("when an endpoint is invalid, then ConfigError names the variable and the field", () => {
    const env = (list: unknown) => ({ SWITCHYARD_DATA_DIR: tmp(), SWITCHYARD_UPSTREAMS: JSON.stringify(list) });
    expect(() => loadConfig(env([{ ...endpoint, base_url: "ftp://x/v1" }]))).toThrow(
      /SWITCHYARD_UPSTREAMS\[0\]\.base_url/,
    );
    expect(() => loadConfig(env([{ ...endpoint, models: [] }]))).toThrow(/SWITCHYARD_UPSTREAMS\[0\]\.models/);
    expect(() => loadConfig(env([endpoint, endpoint]))).toThrow(/names must be unique/);
    expect(() => loadConfig({ SWITCHYARD_DATA_DIR: tmp(), SWITCHYARD_UPSTREAMS: "[{" })).toThrow(ConfigError);
  });
});

test("when an upstream's answer is cut here by a stop string, then its log-probabilities stop at the token that reaches the cut", () => {
  const parsed = parseLogprobs({
    content: [
      { token: "hello", logprob: -0.1, bytes: [...bytes("hello")], top_logprobs: [] },
      { token: " world", logprob: -0.2, top_logprobs: [{ token: " there", logprob: -2 }] },
      { token: " again", logprob: -0.3, bytes: [...bytes(" again")], top_logprobs: [] },
      { nonsense: true },
    ],
  })!;
  expect(parsed.map((l) => l.token)).toEqual(["hello", " world", " again"]);
  expect(parsed[1].bytes).toEqual([...bytes(" world")]);
  expect(parsed[1].top).toEqual([{ token: " there", logprob: -2, bytes: [...bytes(" there")] }]);
  expect(logprobsUpTo(parsed, "hello ").map((l) => l.token)).toEqual(["hello", " world"]);
  expect(logprobsUpTo(parsed, "hello")).toHaveLength(1);
  expect(logprobsUpTo(parsed, "")).toEqual([]);
  expect(parseLogprobs(null)).toBeNull();
});
