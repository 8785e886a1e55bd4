/**
 * Price history follows the weights (issue 10, review finding 8; issue 9 review, finding 3): a
 * custom model is charged its reference model's prices as they stood when the request was
 * received — never the stored price history of another model that happens to share its id (a
 * platform model dropped from the catalog whose `model_prices` versions remain).
 * Catalog prices: 1 µUSD per prompt token, 10 per completion token for the test chat model.
 */
import {
  CHAT_MODEL,
  type TestServer,
  activityByCustomId,
  createTestCaller,
  http,
  openaiClient,
  startTestServer,
} from "./support/harness.js";
import { SHARED_GGUF, createCustomModel, customModelSettles, requestDeployment } from "./support/models.js";
import { writeTestCatalog } from "./support/test-catalog.js";

let server: TestServer;

beforeAll(async () => {
  const catalogPath = writeTestCatalog(CHAT_MODEL, { input: "1", cachedInput: "0.5", output: "10" });
  server = await startTestServer({ catalogPath, reconcileIntervalMs: 250 });
}, 60_000);
afterAll(async () => {
  await server?.close();
});

test("when a custom model is named after a dropped platform model that has price history, then it is charged its reference model's price", async () => {
  const dropped = "acme/dropped-model";
  // The dropped model's versions stay in the history: a dear price, 1 USD per token.
  await server.db(
    `INSERT INTO model_prices (model_id, effective_from, input_per_million_micros, cached_input_per_million_micros,
                               output_per_million_micros)
     VALUES ($1, 'epoch', 1000000000000, 1000000000000, 1000000000000)`,
    [dropped],
  );
  await server.app.prices.reload();
  expect(server.app.prices.history(dropped)).toHaveLength(1);

  const caller = await createTestCaller(server.url);
  await createCustomModel(server, caller.token, {
    model_id: dropped,
    architecture: "llama",
    hf_repo: `ggml-org/models/tinyllamas/${SHARED_GGUF}`,
  });
  await requestDeployment(server, caller.token, dropped);
  expect((await customModelSettles(server, caller.token, dropped)).deploy_status).toBe("available");

  const completion = await openaiClient(server.url, caller.key).chat.completions.create({
    model: dropped,
    messages: [{ role: "user", content: "Once upon a time" }],
    max_tokens: 4,
    metadata: { custom_id: "dropped-1" },
  } as never);
  expect(completion.model).toBe(dropped);
  const row = await activityByCustomId(server, "dropped-1");
  expect(row.model).toBe(dropped);
  // The reference model's (the test chat model's) catalog price: 1 per prompt token, 10 per completion token.
  expect(Number(row.cost_micros)).toBe(row.prompt_tokens * 1 + row.completion_tokens * 10);

  // The billing summary shows the pricing the request paid: its reference model's version, not
  // the dropped model's versions stored under the custom model's id (nor null).
  await server.app.metering.drainAll();
  const summary = await http(server.url, "GET", "/control/v1/billing/summary", { token: caller.token });
  expect(summary.status).toBe(200);
  const [reference] = server.app.prices.history(CHAT_MODEL);
  expect(summary.body.by_model).toEqual([
    {
      model: dropped,
      service_tier: "default",
      prompt_tokens: row.prompt_tokens,
      completion_tokens: row.completion_tokens,
      total_tokens: row.total_tokens,
      cached_prompt_tokens: row.cached_prompt_tokens,
      total_requests: 1,
      cost_micros: Number(row.cost_micros),
      pricing: {
        model: CHAT_MODEL,
        prompt_token_price_micros: 1_000_000,
        completion_token_price_micros: 10_000_000,
        effective_from: reference.effectiveFrom.toISOString(),
      },
    },
  ]);

  // The reference model's price changes during the day: the custom model's requests are split
  // by the reference model's versions (the day's rows are read one by one, each at its price).
  await server.db(
    `INSERT INTO model_prices (model_id, effective_from, input_per_million_micros, cached_input_per_million_micros,
                               output_per_million_micros)
     VALUES ($1, date_trunc('milliseconds', clock_timestamp()), 2000000, 1000000, 20000000)`,
    [CHAT_MODEL],
  );
  await server.app.prices.reload();
  const [, changed] = server.app.prices.history(CHAT_MODEL);
  await openaiClient(server.url, caller.key).chat.completions.create({
    model: dropped,
    messages: [{ role: "user", content: "Once upon a time" }],
    max_tokens: 4,
    metadata: { custom_id: "dropped-2" },
  } as never);
  const second = await activityByCustomId(server, "dropped-2");
  // The new price (the prompt may be read from the cache: 1 per cached token).
  const uncached = second.prompt_tokens - second.cached_prompt_tokens;
  expect(Number(second.cost_micros)).toBe(uncached * 2 + second.cached_prompt_tokens + second.completion_tokens * 20);
  await server.app.metering.drainAll();
  const split = await http(server.url, "GET", "/control/v1/billing/summary", { token: caller.token });
  expect(split.body.by_model.map((m: any) => [m.model, m.total_requests, m.cost_micros, m.pricing])).toEqual([
    [dropped, 1, Number(row.cost_micros), summary.body.by_model[0].pricing],
    [
      dropped,
      1,
      Number(second.cost_micros),
      {
        model: CHAT_MODEL,
        prompt_token_price_micros: 2_000_000,
        completion_token_price_micros: 20_000_000,
        effective_from: changed.effectiveFrom.toISOString(),
      },
    ],
  ]);
}, 90_000);
