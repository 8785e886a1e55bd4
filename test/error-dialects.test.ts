/**
 * Errors in every dialect at once (issue 27, item 1): through the official `openai` and
 * `@anthropic-ai/sdk` clients against a real server, every refusal throws the client's error class
 * for its status and carries our `detail` (the `openai` client reads `error.message`, the Anthropic
 * client `error.type` and `error.message`), while the body keeps the spec's envelope
 * `{status_code, detail, extra}`; a stream that fails after it opened ends with the same objects.
 *
 * Each status is provoked by a real request: 400 a bad body, 401 a wrong key, 402 a team without
 * credit, 403 a batch of a zero-data-retention team, 404 a model typo or a model not downloaded,
 * 409 a second signup, 413 a body over `bodyLimitBytes`, 429 a request that waits longer than the
 * queue wait for the one busy sequence, 502 a failure inside llama.cpp (`support/engine-faults.ts`).
 * `/v1/messages` cannot answer 403 or 409; Anthropic's types for those are checked on the mapper.
 */
import Anthropic from "@anthropic-ai/sdk";
import OpenAI from "openai";
import { anthropicErrorType, openAiErrorType } from "../src/shared/error-dialects.js";
import { ErrorCode } from "../src/shared/errors.js";
import { failNextGeneration, holdNextGeneration, releaseAllHolds } from "./support/engine-faults.js";
import {
  CHAT_MODEL,
  type TestServer,
  anthropicClient,
  createTestCaller,
  eventually,
  expectEnvelope,
  http,
  openaiClient,
  startTestServer,
} from "./support/harness.js";

let server: TestServer;
let caller: Awaited<ReturnType<typeof createTestCaller>>;
let openai: OpenAI;
let anthropic: Anthropic;

/** Body limit of this file's server: a prompt of 80 KB is over it. */
const BODY_LIMIT = 64 * 1024;
const TOO_BIG = "x".repeat(80 * 1024);

beforeAll(async () => {
  // One sequence and a 1 s queue wait: a second request while one is held gets 429 at once.
  server = await startTestServer({ engineSequences: 1, maxQueueWaitS: 1, bodyLimitBytes: BODY_LIMIT });
  caller = await createTestCaller(server.url);
  openai = openaiClient(server.url, caller.key);
  anthropic = anthropicClient(server.url, caller.key);
});
afterEach(() => releaseAllHolds());
afterAll(() => server.close());

const chat = (content = "Once upon a time") => ({
  model: CHAT_MODEL,
  messages: [{ role: "user" as const, content }],
  max_tokens: 4,
});
const message = (content = "Once upon a time") => ({
  model: CHAT_MODEL,
  messages: [{ role: "user" as const, content }],
  max_tokens: 4,
});

/** An error class of either client (compared with `toBeInstanceOf`). */
type ErrorClass = abstract new (...args: never[]) => Error;

/** What `promise` rejects with. @throws Error when it resolves. */
async function rejection(promise: Promise<unknown>): Promise<any> {
  try {
    await promise;
  } catch (err) {
    return err;
  }
  throw new Error("expected the call to fail");
}

/** What iterating a stream throws. @throws Error when the stream ends without an error. */
async function streamRejection(stream: AsyncIterable<unknown>): Promise<any> {
  return rejection(
    (async () => {
      for await (const _event of stream);
    })(),
  );
}

/** Asserts an `openai` client error: its class, status, `err.message` (`"<status> <detail>"`) and fields. */
function expectOpenAi(
  err: any,
  errorClass: ErrorClass,
  status: number,
  detail: RegExp,
  fields: { type: string; code: string; param?: string | null },
): void {
  expect(err).toBeInstanceOf(errorClass);
  if (errorClass === OpenAI.APIError) expect(err.constructor).toBe(OpenAI.APIError);
  expect(err.status).toBe(status);
  expect(err.message).toMatch(new RegExp(`^${status} ${detail.source}`));
  expect(err.message).not.toContain("no body");
  expect({ type: err.type, code: err.code, param: err.param }).toEqual({ param: null, ...fields });
  // The spec's envelope stays beside the dialect's object.
  expect(err.error.message).toBe(err.message.slice(`${status} `.length));
}

/**
 * Asserts an Anthropic client error: its class, status, `type`, and our detail as `error.message`
 * (the client's `err.message` is the body as JSON, so it holds the detail too).
 */
function expectAnthropic(err: any, errorClass: ErrorClass, status: number, detail: RegExp, type: string): void {
  expect(err).toBeInstanceOf(errorClass);
  expect(err.status).toBe(status);
  expect(err.type).toBe(type);
  expect(err.error).toMatchObject({ type: "error", status_code: status, error: { type } });
  expect(err.error.error.message).toMatch(detail);
  expect(err.error.error.message).toBe(err.error.detail);
  expect(err.message).toContain(JSON.stringify(err.error.detail));
}

/** A caller of a fresh team whose credit is 0 (seen by the server once its balance cache hears of it). */
async function brokeCaller(): Promise<Awaited<ReturnType<typeof createTestCaller>>> {
  const broke = await createTestCaller(server.url);
  await server.db("UPDATE teams SET credit_balance_micros = 0 WHERE id = $1", [broke.teamId]);
  await server.db("SELECT pg_notify('switchyard_cache', $1)", [`balance:${broke.teamId}`]);
  const refused = await eventually(
    async () =>
      (await http(server.url, "POST", "/v1/chat/completions", { token: broke.key, body: chat() })).status === 402,
    5_000,
  );
  expect(refused).toBe(true);
  return broke;
}

/** Runs `refuse` while the one sequence is held by another request, so it waits past the 1 s queue wait. */
async function whileEngineBusy<T>(refuse: () => Promise<T>): Promise<T> {
  const busy = await holdNextGeneration();
  const holder = http(server.url, "POST", "/v1/chat/completions", { token: caller.key, body: chat() });
  await busy.started;
  try {
    return await refuse();
  } finally {
    busy.release();
    expect((await holder).status).toBe(200);
  }
}

describe("the openai client", () => {
  test("when the body is invalid, then BadRequestError with our detail and the field as param", async () => {
    const err = await rejection(
      openai.chat.completions.create({ model: CHAT_MODEL, messages: [{ role: "user" } as never], max_tokens: 4 }),
    );
    expectOpenAi(err, OpenAI.BadRequestError, 400, /Invalid request: messages\[0\]\.content/, {
      type: "invalid_request_error",
      code: "invalid_request",
      param: "messages[0].content",
    });
  });

  test("when the key is wrong, then AuthenticationError 'Invalid API key' with code invalid_api_key", async () => {
    const err = await rejection(openaiClient(server.url, "sk_wrong").chat.completions.create(chat()));
    expectOpenAi(err, OpenAI.AuthenticationError, 401, /Invalid API key$/, {
      type: "authentication_error",
      code: "invalid_api_key",
    });
    const models = await rejection(openaiClient(server.url, "sk_wrong").models.list());
    expectOpenAi(models, OpenAI.AuthenticationError, 401, /Invalid API key$/, {
      type: "authentication_error",
      code: "invalid_api_key",
    });
  });

  test("when the team has no credit, then APIError 402 with OpenAI's insufficient_quota", async () => {
    const broke = await brokeCaller();
    const err = await rejection(openaiClient(server.url, broke.key).chat.completions.create(chat()));
    expectOpenAi(err, OpenAI.APIError, 402, /Insufficient credit/, {
      type: "insufficient_quota",
      code: "insufficient_quota",
    });
  });

  test("when a zero-data-retention team posts a batch, then PermissionDeniedError with our detail", async () => {
    const zdr = await createTestCaller(server.url);
    const on = await http(server.url, "PATCH", "/control/v1/teams/me", {
      token: zdr.token,
      body: { zero_data_retention_enabled: true },
    });
    expect(on.status).toBe(200);
    const batch = { requests: [{ custom_id: "b1", url: "/v1/chat/completions", body: chat() }] };
    const err = await rejection(openaiClient(server.url, zdr.key).post("/batches", { body: batch }));
    expectOpenAi(err, OpenAI.PermissionDeniedError, 403, /Batches store request and result bodies/, {
      type: "permission_error",
      code: "forbidden",
    });
  });

  test("when the model is a typo or not downloaded, then NotFoundError that says which", async () => {
    const typo = await rejection(openai.chat.completions.create({ ...chat(), model: "tinystories-260k-typo" }));
    expectOpenAi(typo, OpenAI.NotFoundError, 404, /Model 'tinystories-260k-typo' not found$/, {
      type: "invalid_request_error",
      code: "model_not_found",
      param: "model",
    });
    const absent = await rejection(openai.chat.completions.create({ ...chat(), model: "qwen2.5-0.5b-instruct" }));
    expectOpenAi(
      absent,
      OpenAI.NotFoundError,
      404,
      /Model 'qwen2.5-0.5b-instruct' is not downloaded: run npm run models -- pull qwen2.5-0.5b-instruct$/,
      { type: "invalid_request_error", code: "model_not_downloaded", param: "model" },
    );
    const route = await rejection(openai.get("/nowhere"));
    expectOpenAi(route, OpenAI.NotFoundError, 404, /No route for GET \/v1\/nowhere$/, {
      type: "invalid_request_error",
      code: "not_found",
    });
  });

  test("when an address signs up twice (control plane, same dialect), then ConflictError with our detail", async () => {
    const control = new OpenAI({ apiKey: "unused", baseURL: server.url, maxRetries: 0 });
    const err = await rejection(
      control.post("/control/v1/auth/signup", { body: { email: caller.email, password: "correct horse battery" } }),
    );
    expectOpenAi(err, OpenAI.ConflictError, 409, /Email is already registered$/, {
      type: "invalid_request_error",
      code: "conflict",
    });
  });

  test("when the body is over the size limit, then APIError 413 from the body parser with our detail", async () => {
    const err = await rejection(openai.chat.completions.create(chat(TOO_BIG)));
    expectOpenAi(err, OpenAI.APIError, 413, /Request body too large$/, {
      type: "invalid_request_error",
      code: "payload_too_large",
    });
  });

  test("when the engine stays busy past the queue wait, then RateLimitError with our detail", async () => {
    const err = await whileEngineBusy(() => rejection(openai.chat.completions.create(chat())));
    expectOpenAi(err, OpenAI.RateLimitError, 429, /No engine capacity within 1 s; retry later$/, {
      type: "rate_limit_error",
      code: "rate_limit_exceeded",
    });
  });

  test("when llama.cpp fails, then InternalServerError 502 with our detail", async () => {
    await failNextGeneration();
    const err = await rejection(openai.chat.completions.create(chat()));
    expectOpenAi(err, OpenAI.InternalServerError, 502, /The engine failed to generate a completion$/, {
      type: "server_error",
      code: "engine_failure",
    });
  });

  test("when a chat stream fails after it opened, then iterating throws our detail (a data: error chunk)", async () => {
    await failNextGeneration();
    const stream = await openai.chat.completions.create({ ...chat(), max_tokens: 200, stream: true });
    const err = await streamRejection(stream);
    expect(err).toBeInstanceOf(OpenAI.APIError);
    expect(err.message).toBe("The engine failed to generate a completion");
    expect({ type: err.type, code: err.code, param: err.param }).toEqual({
      type: "server_error",
      code: "engine_failure",
      param: null,
    });
  });

  test("when a Responses stream fails after it opened, then iterating throws our detail (the error event)", async () => {
    await failNextGeneration();
    const stream = await openai.responses.create({
      model: CHAT_MODEL,
      input: "Once upon a time",
      max_output_tokens: 200,
      stream: true,
    });
    const err = await streamRejection(stream);
    expect(err).toBeInstanceOf(OpenAI.APIError);
    expect(err.message).toBe("The engine failed to generate a completion");
    expect({ type: err.type, code: err.code }).toEqual({ type: "server_error", code: "engine_failure" });
  });
});

describe("the anthropic client", () => {
  test("when the body is invalid, then BadRequestError invalid_request_error with our detail", async () => {
    const err = await rejection(anthropic.messages.create(message("")));
    expectAnthropic(
      err,
      Anthropic.BadRequestError,
      400,
      /Invalid request: messages\[0\]\.content/,
      "invalid_request_error",
    );
  });

  test("when the key is wrong, then AuthenticationError authentication_error", async () => {
    const err = await rejection(anthropicClient(server.url, "sk_wrong").messages.create(message()));
    expectAnthropic(err, Anthropic.AuthenticationError, 401, /^Invalid API key$/, "authentication_error");
  });

  test("when the team has no credit, then PaymentRequiredError billing_error", async () => {
    const broke = await brokeCaller();
    const err = await rejection(anthropicClient(server.url, broke.key).messages.create(message()));
    expectAnthropic(err, Anthropic.PaymentRequiredError, 402, /Insufficient credit/, "billing_error");
  });

  test("when the model is a typo, then NotFoundError not_found_error", async () => {
    const err = await rejection(anthropic.messages.create({ ...message(), model: "tinystories-260k-typo" }));
    expectAnthropic(err, Anthropic.NotFoundError, 404, /^Model 'tinystories-260k-typo' not found$/, "not_found_error");
  });

  test("when the body is over the size limit, then ContentTooLargeError request_too_large", async () => {
    const err = await rejection(anthropic.messages.create(message(TOO_BIG)));
    expectAnthropic(err, Anthropic.ContentTooLargeError, 413, /^Request body too large$/, "request_too_large");
  });

  test("when the engine stays busy past the queue wait, then RateLimitError rate_limit_error", async () => {
    const err = await whileEngineBusy(() => rejection(anthropic.messages.create(message())));
    expectAnthropic(
      err,
      Anthropic.RateLimitError,
      429,
      /^No engine capacity within 1 s; retry later$/,
      "rate_limit_error",
    );
  });

  test("when llama.cpp fails, then InternalServerError api_error", async () => {
    await failNextGeneration();
    const err = await rejection(anthropic.messages.create(message()));
    expectAnthropic(
      err,
      Anthropic.InternalServerError,
      502,
      /^The engine failed to generate a completion$/,
      "api_error",
    );
  });

  test("when a stream fails after it opened, then iterating throws api_error with our detail (event: error)", async () => {
    await failNextGeneration();
    const stream = await anthropic.messages.create({ ...message(), max_tokens: 200, stream: true });
    const err = await streamRejection(stream);
    expect(err).toBeInstanceOf(Anthropic.APIError);
    expect(err.type).toBe("api_error");
    expect(err.error).toMatchObject({
      type: "error",
      status_code: 502,
      detail: "The engine failed to generate a completion",
      error: { type: "api_error", message: "The engine failed to generate a completion" },
    });
  });

  test("the types of refusals /v1/messages cannot provoke: 403, 409, 503 and 504", () => {
    expect(anthropicErrorType(ErrorCode.Forbidden)).toBe("permission_error");
    expect(anthropicErrorType(ErrorCode.Conflict)).toBe("conflict_error");
    expect(anthropicErrorType(ErrorCode.EngineUnavailable)).toBe("overloaded_error");
    expect(anthropicErrorType(ErrorCode.EngineTimeout)).toBe("timeout_error");
    expect(openAiErrorType(ErrorCode.EngineUnavailable)).toBe("server_error");
  });
});

describe("which path speaks which dialect", () => {
  const post = (path: string, body: unknown, token?: string) => http(server.url, "POST", path, { token, body });

  test("when /v1/messages refuses (any case, trailing slash, malformed JSON), then Anthropic's shape beside the envelope", async () => {
    for (const path of ["/v1/messages", "/V1/Messages/"]) {
      const res = await post(path, message(), "sk_wrong");
      expectEnvelope(res, 401);
      expect(res.body).toEqual({
        status_code: 401,
        detail: "Invalid API key",
        type: "error",
        error: { type: "authentication_error", message: "Invalid API key" },
      });
    }
    const malformed = await post("/v1/messages", "{", caller.key);
    expectEnvelope(malformed, 400);
    expect(malformed.body).toMatchObject({ type: "error", error: { type: "invalid_request_error" } });
  });

  test("when any other path refuses, then OpenAI's error object beside the envelope and no top-level type", async () => {
    const invalid = await post("/v1/chat/completions", { model: CHAT_MODEL }, caller.key);
    expectEnvelope(invalid, 400);
    expect(invalid.body).toEqual({
      status_code: 400,
      detail: "Invalid request: messages",
      extra: [{ field: "messages", message: expect.any(String) }],
      error: {
        message: "Invalid request: messages",
        type: "invalid_request_error",
        code: "invalid_request",
        param: "messages",
      },
    });
    const malformed = await post("/v1/embeddings", "{", caller.key);
    expect(malformed.body.error).toEqual({
      message: "Malformed JSON body",
      type: "invalid_request_error",
      code: "invalid_json",
      param: null,
    });
    for (const res of [
      await http(server.url, "GET", "/control/v1/auth/me"),
      await http(server.url, "GET", "/nowhere"),
      await http(server.url, "GET", "/v1/messages/nowhere"),
    ]) {
      expect(res.status).toBeGreaterThanOrEqual(400);
      expectEnvelope(res, res.status);
    }
    expect((await http(server.url, "GET", "/control/v1/auth/me")).body.type).toBeUndefined();
    expect((await http(server.url, "GET", "/nowhere")).body.error.type).toBe("invalid_request_error");
    // Under /v1/messages even an unknown path answers as Anthropic does.
    expect((await http(server.url, "GET", "/v1/messages/nowhere")).body.error).toEqual({
      type: "not_found_error",
      message: "No route for GET /v1/messages/nowhere",
    });
  });
});
