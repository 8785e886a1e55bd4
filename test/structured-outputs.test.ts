/**
 * Structured outputs (issue 26, item 1) and fields never silently ignored (item 6), through the
 * official clients against the embedded engine with the tiny model: `chat.completions.parse` with
 * `zodResponseFormat`, `responses.parse` with `zodTextFormat`, `json_object`, streaming, strict
 * refusals naming the keyword, truncation as `length`, and 400s naming the field and the model for
 * tools (log-probabilities: `logprobs.test.ts`).
 */
import { Ajv } from "ajv";
import addFormatsModule from "ajv-formats";
import { LengthFinishReasonError } from "openai/core/error";
import { zodResponseFormat, zodTextFormat } from "openai/helpers/zod";
import { z } from "zod";
import {
  CHAT_MODEL,
  type TestServer,
  createTestCaller,
  expectEnvelope,
  expectInvalid,
  http,
  openaiClient,
  startTestServer,
} from "./support/harness.js";
import { addUpstreamChat, writeEditedCatalog } from "./support/test-catalog.js";

const addFormats = addFormatsModule as unknown as (ajv: Ajv) => Ajv;
/** zodResponseFormat writes draft-07 schemas (`$schema`), which this Ajv reads. */
const ajv = addFormats(new Ajv({ strict: false }));

let server: TestServer;
let caller: Awaited<ReturnType<typeof createTestCaller>>;

beforeAll(async () => {
  server = await startTestServer();
  caller = await createTestCaller(server.url);
});
afterAll(() => server.close());

const Pet = z.object({
  name: z.string().max(16),
  age: z.number().int(),
  kind: z.enum(["cat", "dog", "bird"]),
  nickname: z.string().max(8).nullable(),
  toys: z.array(z.string().max(8)).max(2),
});

const ask = { model: CHAT_MODEL, messages: [{ role: "user" as const, content: "Once upon a time" }] };

describe("chat response_format", () => {
  test("when chat.completions.parse is called with zodResponseFormat, then every answer parses into the schema", async () => {
    const client = openaiClient(server.url, caller.key);
    const format = zodResponseFormat(Pet, "pet");
    for (let seed = 0; seed < 6; seed++) {
      const completion = await client.chat.completions.parse({
        ...ask,
        response_format: format,
        max_tokens: 400,
        temperature: 1,
        seed,
      });
      const choice = completion.choices[0];
      expect(choice.finish_reason).toBe("stop");
      expect(Pet.parse(choice.message.parsed)).toEqual(choice.message.parsed);
      expect(ajv.validate(format.json_schema.schema!, JSON.parse(choice.message.content!))).toBe(true);
    }
  });

  test("when zod's .regex(), .email(), .datetime() and number .min().max() come strict, then every answer that stops validates", async () => {
    const client = openaiClient(server.url, caller.key);
    const Ticket = z.object({
      code: z.string().regex(/^[A-Z]{3}-\d{2}$/),
      email: z.string().email(),
      at: z.string().datetime(),
      score: z.number().min(0).max(1),
    });
    const format = zodResponseFormat(Ticket, "ticket");
    expect(format.json_schema.strict).toBe(true);
    let stopped = 0;
    for (let seed = 0; seed < 6; seed++) {
      const completion = await client.chat.completions
        .parse({ ...ask, response_format: format, max_tokens: 400, temperature: 1, seed })
        .catch((e: unknown) => {
          if (e instanceof LengthFinishReasonError) return null; // cut by max_tokens: no claim
          throw e;
        });
      if (!completion) continue;
      stopped++;
      const content = completion.choices[0].message.content!;
      const valid = ajv.validate(format.json_schema.schema!, JSON.parse(content));
      expect({ content, valid, errors: valid ? null : ajv.errors }).toEqual({ content, valid: true, errors: null });
      expect(Ticket.parse(completion.choices[0].message.parsed)).toEqual(completion.choices[0].message.parsed);
    }
    expect(stopped).toBeGreaterThan(2);
  });

  test("when a strict pattern's class could spell BOS's text (<s>), then every stopped answer still matches (BOS is never sampled)", async () => {
    const schema = {
      type: "object",
      properties: { code: { type: "string", pattern: "^\\d{3}-[A-Z]+(?:\\.[#-~]{1,3})?$" } },
      required: ["code"],
      additionalProperties: false,
    };
    let stopped = 0;
    for (let seed = 0; seed < 40; seed++) {
      const res = await http(server.url, "POST", "/v1/chat/completions", {
        token: caller.key,
        body: {
          ...ask,
          max_tokens: 60,
          temperature: 1,
          seed,
          response_format: { type: "json_schema", json_schema: { name: "code", strict: true, schema } },
        },
      });
      expect(res.status).toBe(200);
      if (res.body.choices[0].finish_reason !== "stop") continue;
      stopped++;
      const content = res.body.choices[0].message.content as string;
      expect([seed, content, ajv.validate(schema, JSON.parse(content))]).toEqual([seed, content, true]);
    }
    expect(stopped).toBeGreaterThan(20);
  });

  test("when the answer is streamed, then the chunks join into JSON valid against the schema", async () => {
    const client = openaiClient(server.url, caller.key);
    const format = zodResponseFormat(Pet, "pet");
    const stream = await client.chat.completions.create({
      ...ask,
      response_format: format,
      max_tokens: 400,
      seed: 3,
      stream: true,
    });
    let text = "";
    let finish: string | null = null;
    for await (const chunk of stream) {
      text += chunk.choices[0]?.delta?.content ?? "";
      finish = chunk.choices[0]?.finish_reason ?? finish;
    }
    expect(finish).toBe("stop");
    expect(Pet.parse(JSON.parse(text))).toBeDefined();
  });

  test("when json_object is asked for, then the answer is a JSON object", async () => {
    const client = openaiClient(server.url, caller.key);
    const completion = await client.chat.completions.create({
      ...ask,
      response_format: { type: "json_object" },
      max_tokens: 300,
      seed: 1,
    });
    if (completion.choices[0].finish_reason === "stop") {
      const value = JSON.parse(completion.choices[0].message.content!);
      expect(typeof value).toBe("object");
      expect(Array.isArray(value)).toBe(false);
    } else {
      expect(completion.choices[0].message.content!.startsWith("{")).toBe(true);
    }
  });

  test("when max_tokens cuts the answer, then finish_reason is length and the client reports the truncation", async () => {
    const client = openaiClient(server.url, caller.key);
    const err = await client.chat.completions
      .parse({ ...ask, response_format: zodResponseFormat(Pet, "pet"), max_tokens: 4 })
      .catch((e: unknown) => e);
    expect(err).toBeInstanceOf(LengthFinishReasonError);
  });

  test("when a strict schema uses a keyword the engine cannot enforce, then 400 names it and nothing runs", async () => {
    const res = await http(server.url, "POST", "/v1/chat/completions", {
      token: caller.key,
      body: {
        ...ask,
        response_format: {
          type: "json_schema",
          json_schema: {
            name: "code",
            strict: true,
            schema: {
              type: "object",
              properties: { code: { type: "string", pattern: "^(?=A)[A-Z]{3}$" } },
              required: ["code"],
              additionalProperties: false,
            },
          },
        },
      },
    });
    expectInvalid(res, "response_format.json_schema.schema.properties.code.pattern");
    expect(res.body.detail).toContain("pattern");
  });

  test("when the same schema is not strict, then it is answered (the keyword is not enforced)", async () => {
    const res = await http(server.url, "POST", "/v1/chat/completions", {
      token: caller.key,
      body: {
        ...ask,
        max_tokens: 60,
        response_format: {
          type: "json_schema",
          json_schema: {
            name: "code",
            schema: { type: "object", properties: { code: { type: "string", pattern: "^(?=A)[A-Z]{3}$" } } },
          },
        },
      },
    });
    expect(res.status).toBe(200);
    expect(res.body.choices[0].message.content.startsWith("{")).toBe(true);
  });

  test("when response_format is malformed, then 400 names it", async () => {
    const res = await http(server.url, "POST", "/v1/chat/completions", {
      token: caller.key,
      body: { ...ask, response_format: { type: "json_schema", json_schema: { name: "has space" } } },
    });
    expectInvalid(res, "response_format.json_schema.name");
  });

  test("when the key is missing, then a structured request gets 401", async () => {
    const res = await http(server.url, "POST", "/v1/chat/completions", {
      body: { ...ask, response_format: { type: "json_object" } },
    });
    expectEnvelope(res, 401);
  });
});

describe("Responses text.format", () => {
  test("when responses.parse is called with zodTextFormat, then output_parsed fits the schema", async () => {
    const client = openaiClient(server.url, caller.key);
    const response = await client.responses.parse({
      model: CHAT_MODEL,
      input: "Once upon a time",
      text: { format: zodTextFormat(Pet, "pet") },
      max_output_tokens: 400,
    });
    expect(response.status).toBe("completed");
    expect(Pet.parse(response.output_parsed)).toEqual(response.output_parsed);
  });

  test("when a strict text.format uses a keyword the engine cannot enforce, then 400 names it", async () => {
    const res = await http(server.url, "POST", "/v1/responses", {
      token: caller.key,
      body: {
        model: CHAT_MODEL,
        input: "Once upon a time",
        text: {
          format: {
            type: "json_schema",
            name: "n",
            strict: true,
            schema: { type: "object", properties: { n: { type: "number", multipleOf: 3 } }, required: ["n"] },
          },
        },
      },
    });
    expectInvalid(res, "text.format.schema.properties.n.multipleOf");
  });
});

describe("fields never silently ignored", () => {
  test("when chat asks for top_logprobs without logprobs, then 400 names top_logprobs", async () => {
    const res = await http(server.url, "POST", "/v1/chat/completions", {
      token: caller.key,
      body: { ...ask, top_logprobs: 2 },
    });
    expectInvalid(res, "top_logprobs");
  });

  test("when Responses asks for a built-in tool, then 400 names it", async () => {
    const res = await http(server.url, "POST", "/v1/responses", {
      token: caller.key,
      body: { model: CHAT_MODEL, input: "hi", tools: [{ type: "web_search" }] },
    });
    expectInvalid(res, "tools[0]");
  });

  test("when a batch item asks for a built-in tool, then the batch is refused naming the item's field", async () => {
    const res = await http(server.url, "POST", "/v1/batches", {
      token: caller.key,
      body: {
        requests: [
          {
            custom_id: "a",
            url: "/v1/responses",
            body: { model: CHAT_MODEL, input: "hi", tools: [{ type: "web_search" }] },
          },
        ],
      },
    });
    expectInvalid(res, "requests[0].body.tools[0]");
  });
});

describe("through the upstream engine (a gateway in front of another Switchyard)", () => {
  let upstream: TestServer;
  let gateway: TestServer;
  let gatewayKey: string;

  beforeAll(async () => {
    upstream = await startTestServer();
    const account = await createTestCaller(upstream.url);
    const catalog = writeEditedCatalog((c) => addUpstreamChat(c, "up-chat"));
    gateway = await startTestServer({
      catalogPath: catalog,
      upstreams: [{ name: "a", base_url: `${upstream.url}/v1`, api_key: account.key, models: [CHAT_MODEL] }],
    });
    gatewayKey = (await createTestCaller(gateway.url)).key;
  }, 120_000);
  afterAll(async () => {
    await gateway?.close();
    await upstream?.close();
  });

  test("when chat.completions.parse goes through the gateway, then the upstream decodes under the schema", async () => {
    const client = openaiClient(gateway.url, gatewayKey);
    const completion = await client.chat.completions.parse({
      ...ask,
      model: "up-chat",
      response_format: zodResponseFormat(Pet, "pet"),
      max_tokens: 400,
      seed: 2,
    });
    expect(completion.choices[0].finish_reason).toBe("stop");
    expect(Pet.parse(completion.choices[0].message.parsed)).toBeDefined();
  });

  test("when the upstream refuses a strict schema, then the gateway answers 400 naming the keyword", async () => {
    const res = await http(gateway.url, "POST", "/v1/chat/completions", {
      token: gatewayKey,
      body: {
        ...ask,
        model: "up-chat",
        response_format: {
          type: "json_schema",
          json_schema: {
            name: "code",
            strict: true,
            schema: {
              type: "object",
              properties: { code: { type: "string", pattern: "^(?!x)" } },
              required: ["code"],
            },
          },
        },
      },
    });
    expectEnvelope(res, 400);
    expect(res.body.detail).toContain("pattern");
  });
});
