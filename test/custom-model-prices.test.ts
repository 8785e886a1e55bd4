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
}, 90_000);
