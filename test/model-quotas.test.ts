/**
 * What a team may take on the model side (issue 9 review, findings 2 and 3):
 * - per-team quotas of deployments and custom models (409 past them, nothing stored);
 * - bringing a model up needs credit (402, nothing stored);
 * - every team's dedicated runtimes together stay within `SWITCHYARD_DEDICATED_SLOTS` (a deployment
 *   that would go beyond fails with a reason, and fits again once another is deleted);
 * - a custom model over a platform model's GGUF is priced and rate-limited as that model, whatever
 *   its `base_model_id` says, and does not get windows of its own.
 */
import { symlinkSync } from "node:fs";
import path from "node:path";
import { randomUUID } from "node:crypto";
import {
  CHAT_MODEL,
  MODELS_DIR,
  type TestServer,
  activityByCustomId,
  createTestCaller,
  expectEnvelope,
  http,
  openaiClient,
  startTestServer,
} from "./support/harness.js";
import {
  SHARED_GGUF,
  createCustomModel,
  createDeployment,
  customModelSettles,
  deploymentSettles,
  modelsDirWithGarbage,
  requestDeployment,
} from "./support/models.js";
import { writeEditedCatalog } from "./support/test-catalog.js";

/** A platform model of its own GGUF (a copy of the shared one), priced high, 3 requests a minute. */
const PRICEY = "pricey-260k";
const PRICEY_GGUF = "pricey.gguf";
const SLOW_MS = 60_000;
/** A platform model not served yet, over a GGUF of its own. */
const SOON = "soon-260k";
const SOON_GGUF = "soon.gguf";

let server: TestServer;

beforeAll(async () => {
  const modelsDir = modelsDirWithGarbage();
  symlinkSync(path.join(MODELS_DIR, SHARED_GGUF), path.join(modelsDir, PRICEY_GGUF));
  symlinkSync(path.join(MODELS_DIR, SHARED_GGUF), path.join(modelsDir, SOON_GGUF));
  const catalogPath = writeEditedCatalog((catalog) => {
    const base = catalog.models.find((m) => m.id === CHAT_MODEL)!;
    catalog.models.push({
      ...structuredClone(base),
      id: PRICEY,
      display_name: "Pricey 260K",
      pricing: { input_per_million_usd: 5, output_per_million_usd: 10, cached_input_per_million_usd: 5 },
      rpm_limit: 3,
      engine: { ...(base.engine as object), file: PRICEY_GGUF },
    });
    catalog.models.push({
      ...structuredClone(base),
      id: SOON,
      display_name: "Soon 260K",
      platform_status: "coming_soon",
      engine: { ...(base.engine as object), file: SOON_GGUF },
    });
  });
  server = await startTestServer({
    modelsDir,
    catalogPath,
    reconcileIntervalMs: 250,
    deploymentMaxSlots: 4,
    dedicatedSlots: 3,
    teamDedicatedSlots: 2,
    engineSequences: 1,
    teamMaxDeployments: 2,
    teamMaxCustomModels: 2,
  });
}, SLOW_MS);
afterAll(() => server.close());

/** Waits for a fresh minute by the database clock when fewer than 20 s of this one are left. */
async function freshMinute(): Promise<void> {
  const [row] = await server.db<{ s: number }>("SELECT extract(second FROM now())::float8 AS s");
  if (row.s > 40) await new Promise((r) => setTimeout(r, (60.2 - row.s) * 1000));
}

const post = (path: string, token: string, body: unknown) => http(server.url, "POST", path, { token, body });

describe("the dedicated slot budget of the server", () => {
  test(
    "when one team's deployment holds slots, then another team's that would go beyond the budget fails saying so, and fits once the first is deleted",
    async () => {
      const first = await createTestCaller(server.url);
      const second = await createTestCaller(server.url);
      const a = await createDeployment(server, first.token, {
        name: "a",
        model_source: "platform",
        model_id: CHAT_MODEL,
        min_replicas: 2,
        max_replicas: 2,
      });
      expect((await deploymentSettles(server, first.token, a.id)).status).toBe("available");
      // The server has room for one more, the team has none.
      const own = await createDeployment(server, first.token, {
        name: "a2",
        model_source: "platform",
        model_id: CHAT_MODEL,
      });
      const teamFull = await deploymentSettles(server, first.token, own.id);
      expect(teamFull.status).toBe("failed");
      expect(teamFull.status_reason).toContain("SWITCHYARD_TEAM_DEDICATED_SLOTS");

      const b = await createDeployment(server, second.token, {
        name: "b",
        model_source: "platform",
        model_id: CHAT_MODEL,
        min_replicas: 2,
        max_replicas: 2,
      });
      const refused = await deploymentSettles(server, second.token, b.id);
      expect(refused.status).toBe("failed");
      expect(refused.status_reason).toContain("SWITCHYARD_DEDICATED_SLOTS");
      expect(refused.status_reason).toContain("2 are taken");

      expect((await http(server.url, "DELETE", `/control/v1/deployments/${a.id}`, { token: first.token })).status).toBe(
        204,
      );
      const again = await createDeployment(server, second.token, {
        name: "b2",
        model_source: "platform",
        model_id: CHAT_MODEL,
        min_replicas: 2,
        max_replicas: 2,
      });
      expect((await deploymentSettles(server, second.token, again.id)).status).toBe("available");
      // Leave the budget free for the other tests.
      await http(server.url, "DELETE", `/control/v1/deployments/${again.id}`, { token: second.token });
      await http(server.url, "DELETE", `/control/v1/deployments/${b.id}`, { token: second.token });
    },
    SLOW_MS,
  );
});

describe("per-team quotas and credit", () => {
  test("when a team has as many deployments as allowed, then the next create is 409 and stores nothing", async () => {
    const caller = await createTestCaller(server.url);
    for (const name of ["one", "two"]) {
      // An unknown model: rejected by the reconciler, so no runtime takes the shared budget.
      await createDeployment(server, caller.token, { name, model_source: "platform", model_id: "no-such-model" });
    }
    const third = await post("/control/v1/deployments", caller.token, {
      name: "three",
      model_source: "platform",
      model_id: "no-such-model",
    });
    expectEnvelope(third, 409);
    expect(third.body.detail).toContain("SWITCHYARD_TEAM_MAX_DEPLOYMENTS=2");
    const listed = await http(server.url, "GET", "/control/v1/deployments", { token: caller.token });
    expect((listed.body.items as any[]).map((d) => d.name).sort()).toEqual(["one", "two"]);
    // Another team is not counted against it.
    const other = await createTestCaller(server.url);
    expect(
      (
        await post("/control/v1/deployments", other.token, {
          name: "x",
          model_source: "platform",
          model_id: "no-such-model",
        })
      ).status,
    ).toBe(201);
  });

  test("when a team sends many creates at once, then no more than its quota are stored", async () => {
    const caller = await createTestCaller(server.url);
    const answers = await Promise.all(
      Array.from({ length: 10 }, (_, i) =>
        post("/control/v1/deployments", caller.token, {
          name: `race-${i}`,
          model_source: "platform",
          model_id: "no-such-model",
        }),
      ),
    );
    expect(answers.filter((a) => a.status === 201)).toHaveLength(2);
    expect(answers.filter((a) => a.status === 409)).toHaveLength(8);
    const models = await Promise.all(
      Array.from({ length: 10 }, (_, i) =>
        post("/control/v1/models/custom", caller.token, { model_id: `race-${i}`, architecture: "llama" }),
      ),
    );
    expect(models.filter((a) => a.status === 201)).toHaveLength(2);
    const [counts] = await server.db<{ d: number; c: number }>(
      `SELECT (SELECT count(*)::int FROM deployments WHERE team_id = $1) AS d,
              (SELECT count(*)::int FROM custom_models WHERE team_id = $1) AS c`,
      [caller.teamId],
    );
    expect(counts).toEqual({ d: 2, c: 2 });
  });

  test("when a team has as many custom models as allowed, then the next create is 409 and stores nothing", async () => {
    const caller = await createTestCaller(server.url);
    for (const id of ["m1", "m2"])
      await createCustomModel(server, caller.token, { model_id: id, architecture: "llama" });
    const third = await post("/control/v1/models/custom", caller.token, { model_id: "m3", architecture: "llama" });
    expectEnvelope(third, 409);
    expect(third.body.detail).toContain("SWITCHYARD_TEAM_MAX_CUSTOM_MODELS=2");
    const catalog = await http(server.url, "GET", "/control/v1/models/catalog", { token: caller.token });
    expect((catalog.body.models as any[]).filter((m) => m.ownership === "custom").map((m) => m.id)).toEqual([
      "m1",
      "m2",
    ]);
  });

  test("when a team has no credit, then creating a deployment or requesting a custom model's is 402 and changes nothing", async () => {
    const poor = await createTestCaller(server.url);
    await createCustomModel(server, poor.token, { model_id: "poor-model", architecture: "llama" });
    await server.db("UPDATE teams SET credit_balance_micros = 0 WHERE id = $1", [poor.teamId]);

    const created = await post("/control/v1/deployments", poor.token, {
      name: "d",
      model_source: "platform",
      model_id: CHAT_MODEL,
    });
    expectEnvelope(created, 402);
    const listed = await http(server.url, "GET", "/control/v1/deployments", { token: poor.token });
    expect(listed.body.items).toEqual([]);

    const requested = await post("/control/v1/models/request-deployment", poor.token, { model_id: "poor-model" });
    expectEnvelope(requested, 402);
    const [row] = await server.db<{ deploy_status: string; deployment_requested_at: Date | null }>(
      "SELECT deploy_status, deployment_requested_at FROM custom_models WHERE team_id = $1",
      [poor.teamId],
    );
    expect(row).toEqual({ deploy_status: "pending_deploy", deployment_requested_at: null });
  });
});

describe("custom models over a platform model's weights", () => {
  test(
    "when a custom model names the GGUF of a platform model that is coming_soon, then its deployment request is rejected",
    async () => {
      const caller = await createTestCaller(server.url);
      await createCustomModel(server, caller.token, {
        model_id: "early",
        architecture: "llama",
        hf_repo: `x/${SOON_GGUF}`,
      });
      await requestDeployment(server, caller.token, "early");
      const settled = await customModelSettles(server, caller.token, "early");
      expect(settled.deploy_status).toBe("rejected");
      expect(settled.status_reason).toContain(SOON);
      const res = await post("/v1/chat/completions", caller.key, {
        model: "early",
        messages: [{ role: "user", content: "Hi" }],
        max_tokens: 1,
      });
      expectEnvelope(res, 404);
    },
    SLOW_MS,
  );

  test(
    "when a custom model names a platform model's GGUF with a cheaper base_model_id, then it is priced and rate-limited as the platform model",
    async () => {
      const caller = await createTestCaller(server.url);
      const created = await createCustomModel(server, caller.token, {
        model_id: "cheap-alias",
        architecture: "llama",
        hf_repo: `someone/repo/${PRICEY_GGUF}`,
        base_model_id: CHAT_MODEL,
      });
      // Shown at the platform model's prices and limits before it is up...
      expect(created).toMatchObject({ input_per_million_usd: 5, output_per_million_usd: 10, rpm_limit: "3" });
      await requestDeployment(server, caller.token, "cheap-alias");
      expect((await customModelSettles(server, caller.token, "cheap-alias")).deploy_status).toBe("available");

      // ... and charged at them, in one window with the platform model: 3 requests a minute
      // between them.
      await freshMinute();
      const call = (model: string) =>
        post("/v1/chat/completions", caller.key, { model, messages: [{ role: "user", content: "Hi" }], max_tokens: 1 });
      expect((await call(PRICEY)).status).toBe(200);
      expect((await call(PRICEY)).status).toBe(200);
      const customId = randomUUID();
      await openaiClient(server.url, caller.key).chat.completions.create({
        model: "cheap-alias",
        messages: [{ role: "user", content: "Once upon a time" }],
        max_tokens: 4,
        metadata: { custom_id: customId },
      } as never);
      const activity = await activityByCustomId(server, customId);
      expect(activity.prompt_tokens).toBeGreaterThan(0);
      expect(Number(activity.cost_micros)).toBe(activity.prompt_tokens * 5 + activity.completion_tokens * 10);
      const refused = await call("cheap-alias");
      expectEnvelope(refused, 429);
      expect(refused.body.extra).toEqual({ limit: "rpm_limit", model: "cheap-alias" });
    },
    SLOW_MS,
  );
});
