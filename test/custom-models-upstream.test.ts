/**
 * Custom models served by upstream engines (issue 9, items 2–4 with helper U's engine): a custom
 * model whose GGUF is not in the models folder runs on the OpenAI-compatible endpoints that list
 * its `model_id`. Here the upstream is a second Switchyard on loopback whose catalog has a model
 * of that id; the gateway team's custom model becomes available once the reconciler finds the
 * endpoint healthy and serving it, its requests go there (recorded on the gateway under the
 * custom model's id), other teams get 404, and one no endpoint serves fails with the engine's
 * reason.
 */
import { randomUUID } from "node:crypto";
import {
  CHAT_MODEL,
  type TestServer,
  activityByCustomId,
  createTestCaller,
  expectEnvelope,
  http,
  openaiClient,
  startTestServer,
} from "./support/harness.js";
import { createCustomModel, customModelSettles, requestDeployment } from "./support/models.js";
import { writeEditedCatalog } from "./support/test-catalog.js";

/** The id the upstream serves and the gateway team names its custom model. */
const REMOTE = "remote-stories";

let upstream: TestServer;
let gateway: TestServer;

/** These tests wait on the reconciler and a second server on a shared machine. */
const SLOW_MS = 60_000;

beforeAll(async () => {
  const upstreamCatalog = writeEditedCatalog((c) => {
    const chat = c.models.find((m) => m.id === CHAT_MODEL)!;
    c.models.push({ ...chat, id: REMOTE, display_name: "Remote stories" });
  });
  upstream = await startTestServer({ catalogPath: upstreamCatalog });
  const account = await createTestCaller(upstream.url);
  gateway = await startTestServer({
    reconcileIntervalMs: 250,
    upstreams: [{ name: "up", base_url: `${upstream.url}/v1`, api_key: account.key, models: [REMOTE] }],
  });
}, 120_000);

afterAll(async () => {
  await gateway?.close();
  await upstream?.close();
});

test(
  "when a custom model has no local file and an upstream endpoint serves its id, then it becomes available and its team's requests run upstream",
  async () => {
    const caller = await createTestCaller(gateway.url);
    const other = await createTestCaller(gateway.url);
    await createCustomModel(gateway, caller.token, {
      model_id: REMOTE,
      architecture: "llama",
      base_model_id: CHAT_MODEL,
    });
    await requestDeployment(gateway, caller.token, REMOTE);
    const done = await customModelSettles(gateway, caller.token, REMOTE);
    expect(done).toMatchObject({ deploy_status: "available", status_reason: null });

    const customId = randomUUID();
    const completion = await openaiClient(gateway.url, caller.key).chat.completions.create({
      model: REMOTE,
      messages: [{ role: "user", content: "Once upon a time" }],
      max_tokens: 4,
      metadata: { custom_id: customId },
    } as never);
    expect(completion.model).toBe(REMOTE);
    const ours = await activityByCustomId(gateway, customId);
    expect(ours).toMatchObject({ model: REMOTE, status: "completed" });
    // It ran upstream: the upstream recorded a request for the same model with the same tokens.
    const [theirs] = await upstream.db<{ model: string; prompt_tokens: number; completion_tokens: number }>(
      "SELECT model, prompt_tokens, completion_tokens FROM activity ORDER BY created_at DESC LIMIT 1",
    );
    expect(theirs).toEqual({
      model: REMOTE,
      prompt_tokens: ours.prompt_tokens,
      completion_tokens: ours.completion_tokens,
    });

    const refused = await http(gateway.url, "POST", "/v1/chat/completions", {
      token: other.key,
      body: { model: REMOTE, messages: [{ role: "user", content: "Hi" }], max_tokens: 2 },
    });
    expectEnvelope(refused, 404);
  },
  SLOW_MS,
);

test(
  "when no endpoint serves a custom model's id, then failed with the engine's reason",
  async () => {
    const caller = await createTestCaller(gateway.url);
    await createCustomModel(gateway, caller.token, { model_id: "nobody-serves-this", architecture: "qwen" });
    await requestDeployment(gateway, caller.token, "nobody-serves-this");
    const done = await customModelSettles(gateway, caller.token, "nobody-serves-this");
    expect(done.deploy_status).toBe("failed");
    expect(done.status_reason).toMatch(/No upstream endpoint is configured to serve nobody-serves-this/);
  },
  SLOW_MS,
);
