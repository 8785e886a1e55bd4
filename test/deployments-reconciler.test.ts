/**
 * The deployment reconciler and routing (issue 9, items 3–4; DESIGN §3 "Models and
 * deployments"): deployments and requested custom models move pending_deploy → deploying →
 * available | failed (with the engine's reason) | rejected, by really loading the model in the
 * embedded engine; a team's requests for a model with an available deployment run on that
 * deployment's own runtime (activity still under the model id the caller named), its custom models
 * serve only it, deleting a deployment releases its runtime once requests in flight finish, a row
 * left `deploying` by a dead process is picked up again, and a second API process learns of a
 * team's models through NOTIFY.
 */
import { randomUUID } from "node:crypto";
import {
  CHAT_MODEL,
  EMBED_MODEL,
  type TestServer,
  activityByCustomId,
  createTestCaller,
  eventually,
  expectEnvelope,
  http,
  openaiClient,
  startTestServer,
} from "./support/harness.js";
import { holdNextGeneration } from "./support/engine-faults.js";
import {
  GARBAGE_GGUF,
  SHARED_GGUF,
  createCustomModel,
  createDeployment,
  customModelSettles,
  deploymentSettles,
  holdNextContext,
  listedDeployment,
  modelsDirWithGarbage,
  requestDeployment,
  runtimeSlots,
} from "./support/models.js";

let server: TestServer;
let modelsDir: string;

/** These tests wait on background work (the reconciler, loads) on a shared machine. */
const SLOW_MS = 60_000;

/** Holds taken by a test; released after it whatever happened, so a failed test wedges no later load. */
const holds: Array<{ release: () => void }> = [];
function track<T extends { release: () => void }>(hold: T): T {
  holds.push(hold);
  return hold;
}
afterEach(() => {
  for (const hold of holds.splice(0)) hold.release();
});

beforeAll(async () => {
  modelsDir = modelsDirWithGarbage();
  server = await startTestServer({ modelsDir, reconcileIntervalMs: 250, deploymentMaxSlots: 4 });
}, SLOW_MS);
afterAll(() => server.close());

/** A chat completion through the official client; @returns the completion. */
function chat(key: string, model: string, customId = randomUUID()) {
  return openaiClient(server.url, key).chat.completions.create({
    model,
    messages: [{ role: "user", content: "Once upon a time" }],
    max_tokens: 4,
    metadata: { custom_id: customId },
  } as never);
}

describe("platform model deployments", () => {
  test(
    "when a deployment is created, then it is deploying while the model loads, then available with activated_at",
    async () => {
      const caller = await createTestCaller(server.url);
      const hold = track(await holdNextContext());
      const created = await createDeployment(server, caller.token, {
        name: "stories",
        model_source: "platform",
        model_id: CHAT_MODEL,
        min_replicas: 2,
        max_replicas: 3,
      });
      expect(created.status).toBe("pending_deploy");
      await hold.started;
      const loading = await listedDeployment(server, caller.token, created.id);
      expect(loading).toMatchObject({ status: "deploying", activated_at: null, status_reason: null });
      hold.release();
      const done = await deploymentSettles(server, caller.token, created.id);
      expect(done).toMatchObject({ status: "available", status_reason: null });
      expect(Date.parse(done.activated_at)).toBeGreaterThanOrEqual(Date.parse(created.created_at));
      // Its own runtime: min_replicas parallel sequences, apart from the shared platform one.
      expect(await runtimeSlots(server, CHAT_MODEL, `deployment:${created.id}`)).toEqual({
        size: 2,
        available: 2,
        waiting: 0,
      });
    },
    SLOW_MS,
  );

  test(
    "when the team calls the deployed model, then its deployment's runtime serves it and the activity keeps the model id; another team uses the shared one",
    async () => {
      const caller = await createTestCaller(server.url);
      const other = await createTestCaller(server.url);
      const dep = await createDeployment(server, caller.token, {
        name: "mine",
        model_source: "platform",
        model_id: CHAT_MODEL,
      });
      expect((await deploymentSettles(server, caller.token, dep.id)).status).toBe("available");
      const runtime = `deployment:${dep.id}`;
      expect((await runtimeSlots(server, CHAT_MODEL, runtime))?.size).toBe(1); // min_replicas 0 → one sequence

      const held = track(await holdNextGeneration());
      const customId = randomUUID();
      const pending = chat(caller.key, CHAT_MODEL, customId);
      await held.started;
      expect((await runtimeSlots(server, CHAT_MODEL, runtime))?.available).toBe(0);
      const shared = await runtimeSlots(server, CHAT_MODEL);
      expect(shared?.available).toBe(shared?.size);
      held.release();
      const completion = await pending;
      expect(completion.model).toBe(CHAT_MODEL);
      expect((await activityByCustomId(server, customId)).model).toBe(CHAT_MODEL);

      const heldOther = track(await holdNextGeneration());
      const otherCall = chat(other.key, CHAT_MODEL);
      await heldOther.started;
      expect((await runtimeSlots(server, CHAT_MODEL, runtime))?.available).toBe(1);
      heldOther.release();
      await otherCall;
    },
    SLOW_MS,
  );

  test(
    "when a deployment is deleted while a request runs on it, then the request finishes, the runtime is released and later requests use the shared model",
    async () => {
      const caller = await createTestCaller(server.url);
      const dep = await createDeployment(server, caller.token, {
        name: "gone",
        model_source: "platform",
        model_id: CHAT_MODEL,
      });
      expect((await deploymentSettles(server, caller.token, dep.id)).status).toBe("available");
      const runtime = `deployment:${dep.id}`;
      const lib = await import("node-llama-cpp");
      const proto = lib.LlamaContext.prototype as unknown as { dispose: (...a: unknown[]) => Promise<void> };
      const dispose = proto.dispose;
      let disposed = 0;
      proto.dispose = function counted(this: unknown, ...args: unknown[]) {
        disposed++;
        return dispose.apply(this, args);
      };
      try {
        const held = track(await holdNextGeneration());
        const pending = chat(caller.key, CHAT_MODEL);
        await held.started;
        expect((await runtimeSlots(server, CHAT_MODEL, runtime))?.available).toBe(0);
        const deleted = await http(server.url, "DELETE", `/control/v1/deployments/${dep.id}`, { token: caller.token });
        expect(deleted.status).toBe(204);
        expect(await listedDeployment(server, caller.token, dep.id)).toBeUndefined();
        // The runtime is retired (nothing new reaches it) but not freed: a request still holds its slot.
        const platform = server.app.catalog.all().find((m) => m.id === CHAT_MODEL)!;
        expect(server.app.engines.isLoaded({ ...platform, runtime: { key: runtime, slots: 1 } })).toBe(false);
        expect(disposed).toBe(0);
        held.release();
        expect((await pending).choices[0].message.content).toEqual(expect.any(String));
        expect(await eventually(async () => disposed === 1)).toBe(true);
      } finally {
        proto.dispose = dispose;
      }
      // The next request of the team runs on the shared runtime.
      const after = await chat(caller.key, CHAT_MODEL);
      expect(after.model).toBe(CHAT_MODEL);
    },
    SLOW_MS,
  );

  test(
    "when the model is not in the catalog, then the deployment is rejected with a reason",
    async () => {
      const caller = await createTestCaller(server.url);
      const dep = await createDeployment(server, caller.token, {
        name: "nope",
        model_source: "platform",
        model_id: "no-such-model",
      });
      const done = await deploymentSettles(server, caller.token, dep.id);
      expect(done).toMatchObject({ status: "rejected", activated_at: null });
      expect(done.status_reason).toMatch(/no-such-model.*not in the platform catalog/);
    },
    SLOW_MS,
  );

  test(
    "when min_replicas asks for more sequences than the server allows, then failed with a reason naming the setting",
    async () => {
      const caller = await createTestCaller(server.url);
      const dep = await createDeployment(server, caller.token, {
        name: "big",
        model_source: "platform",
        model_id: CHAT_MODEL,
        min_replicas: 5,
        max_replicas: 10,
      });
      const done = await deploymentSettles(server, caller.token, dep.id);
      expect(done.status).toBe("failed");
      expect(done.status_reason).toMatch(/min_replicas 5 .* at most 4 .*SWITCHYARD_DEPLOYMENT_MAX_SLOTS/);
    },
    SLOW_MS,
  );

  test(
    "when an embedding model is deployed, then embeddings of the team run on it",
    async () => {
      const caller = await createTestCaller(server.url);
      const dep = await createDeployment(server, caller.token, {
        name: "vectors",
        model_source: "platform",
        model_id: EMBED_MODEL,
        min_replicas: 1,
      });
      expect((await deploymentSettles(server, caller.token, dep.id)).status).toBe("available");
      const out = await openaiClient(server.url, caller.key).embeddings.create({ model: EMBED_MODEL, input: "hello" });
      expect(out.data[0].embedding).toHaveLength(64);
      expect(await runtimeSlots(server, EMBED_MODEL, `deployment:${dep.id}`)).toEqual({
        size: 1,
        available: 1,
        waiting: 0,
      });
    },
    SLOW_MS,
  );
});

describe("custom models", () => {
  test(
    "when a custom model's GGUF is in the models folder and its deployment is requested, then it becomes available and only its team can use it",
    async () => {
      const caller = await createTestCaller(server.url);
      const other = await createTestCaller(server.url);
      const created = await createCustomModel(server, caller.token, {
        model_id: "acme/stories-ft",
        architecture: "llama",
        hf_repo: `ggml-org/models/tinyllamas/${SHARED_GGUF}`,
        base_model_id: CHAT_MODEL,
      });
      expect(created.deploy_status).toBe("pending_deploy");
      // Not served before it is available.
      const early = await http(server.url, "POST", "/v1/chat/completions", {
        token: caller.key,
        body: { model: "acme/stories-ft", messages: [{ role: "user", content: "Hi" }], max_tokens: 2 },
      });
      expectEnvelope(early, 404);

      const hold = track(await holdNextContext());
      await requestDeployment(server, caller.token, "acme/stories-ft");
      await hold.started;
      expect((await customModelSettles(server, caller.token, "acme/stories-ft", ["deploying"])).deploy_status).toBe(
        "deploying",
      );
      hold.release();
      const done = await customModelSettles(server, caller.token, "acme/stories-ft");
      expect(done).toMatchObject({ deploy_status: "available", status_reason: null, deployed_on_platform: true });

      const customId = randomUUID();
      const completion = await chat(caller.key, "acme/stories-ft", customId);
      expect(completion.model).toBe("acme/stories-ft");
      const activity = await activityByCustomId(server, customId);
      expect(activity.model).toBe("acme/stories-ft");
      expect(activity.prompt_tokens).toBeGreaterThan(0);

      // Listed to its team, priced and shaped as its base model, owned by the team.
      const listed = await http(server.url, "GET", "/v1/models", { token: caller.key });
      const items = listed.body.data as any[];
      const mine = items.find((m) => m.id === "acme/stories-ft");
      const base = items.find((m) => m.id === CHAT_MODEL);
      expect(mine).toMatchObject({
        object: "model",
        owned_by: "switchyard",
        provider: "custom",
        modality: "text_generation",
        pricing: base.pricing,
        context_tokens: base.context_tokens,
      });
      const otherList = await http(server.url, "GET", "/v1/models", { token: other.key });
      expect((otherList.body.data as any[]).map((m) => m.id)).not.toContain("acme/stories-ft");
      const otherCall = await http(server.url, "POST", "/v1/chat/completions", {
        token: other.key,
        body: { model: "acme/stories-ft", messages: [{ role: "user", content: "Hi" }], max_tokens: 2 },
      });
      expectEnvelope(otherCall, 404);
      const otherGet = await http(server.url, "GET", "/v1/models/acme%2Fstories-ft", { token: other.key });
      expectEnvelope(otherGet, 404);
    },
    SLOW_MS,
  );

  test(
    "when the team's custom model is named by responses (plain and background), messages and a batch, then each runs on it under its id",
    async () => {
      const caller = await createTestCaller(server.url);
      await createCustomModel(server, caller.token, {
        model_id: "everywhere",
        architecture: "llama",
        base_model_id: CHAT_MODEL,
        hf_repo: `x/${SHARED_GGUF}`,
      });
      await requestDeployment(server, caller.token, "everywhere");
      expect((await customModelSettles(server, caller.token, "everywhere")).deploy_status).toBe("available");
      const post = (path: string, body: unknown) => http(server.url, "POST", path, { token: caller.key, body });

      const plain = await post("/v1/responses", { model: "everywhere", input: "Once", max_output_tokens: 3 });
      expect(plain.status).toBe(200);
      expect(plain.body.model).toBe("everywhere");
      const message = await post("/v1/messages", {
        model: "everywhere",
        max_tokens: 3,
        messages: [{ role: "user", content: "Once" }],
      });
      expect(message.status).toBe(200);
      expect(message.body.model).toBe("everywhere");
      const background = await post("/v1/responses", {
        model: "everywhere",
        input: "Once",
        max_output_tokens: 3,
        background: true,
      });
      expect(background.status).toBe(200);
      const batch = await post("/v1/batches", {
        requests: [
          {
            custom_id: "b1",
            body: { model: "everywhere", messages: [{ role: "user", content: "Once" }], max_tokens: 3 },
          },
        ],
      });
      expect(batch.status).toBe(201);
      let response: any;
      let finished: any;
      expect(
        await eventually(async () => {
          response = (await http(server.url, "GET", `/v1/responses/${background.body.id}`, { token: caller.key })).body;
          finished = (await http(server.url, "GET", `/v1/batches/${batch.body.id}`, { token: caller.key })).body;
          return response.status !== "in_progress" && ["completed", "failed"].includes(finished.status);
        }, 30_000),
      ).toBe(true);
      expect(response.model).toBe("everywhere");
      expect(["completed", "incomplete"]).toContain(response.status); // 3 tokens may cut it short
      expect(finished.status).toBe("completed");
      const rows = await server.db<{ model: string; type: string; status: string }>(
        "SELECT model, type, status FROM activity WHERE team_id = $1 ORDER BY created_at",
        [caller.teamId],
      );
      expect(rows).toHaveLength(4);
      for (const r of rows) expect(r).toMatchObject({ model: "everywhere", status: "completed" });
      // Another team cannot put it in a batch either.
      const other = await createTestCaller(server.url);
      const refused = await http(server.url, "POST", "/v1/batches", {
        token: other.key,
        body: { requests: [{ body: { model: "everywhere", messages: [{ role: "user", content: "Once" }] } }] },
      });
      expectEnvelope(refused, 400);
      expect(refused.body.extra[0].field).toBe("requests[0].body.model");
    },
    SLOW_MS,
  );

  test(
    "when a custom model's file cannot be loaded, then failed with the engine's reason, no server folder in it",
    async () => {
      const caller = await createTestCaller(server.url);
      await createCustomModel(server, caller.token, {
        model_id: "broken",
        architecture: "custom",
        hf_repo: `acme/broken/${GARBAGE_GGUF}`,
      });
      await requestDeployment(server, caller.token, "broken");
      const done = await customModelSettles(server, caller.token, "broken");
      expect(done.deploy_status).toBe("failed");
      expect(done.status_reason).toMatch(/GGUF/);
      expect(done.status_reason).not.toContain(modelsDir);
      // Asking again starts over (and fails the same way).
      await requestDeployment(server, caller.token, "broken");
      expect((await customModelSettles(server, caller.token, "broken")).deploy_status).toBe("failed");
    },
    SLOW_MS,
  );

  test(
    "when a custom model has no local file and no upstream endpoint serves it, then failed with the engine's reason",
    async () => {
      const caller = await createTestCaller(server.url);
      await createCustomModel(server, caller.token, { model_id: "remote-only", architecture: "qwen" });
      await requestDeployment(server, caller.token, "remote-only");
      const done = await customModelSettles(server, caller.token, "remote-only");
      expect(done.deploy_status).toBe("failed");
      expect(done.status_reason).toMatch(/No upstream endpoint is configured to serve remote-only/);
    },
    SLOW_MS,
  );

  test(
    "when a custom model is deployed through a deployment, then requests of its team route to it",
    async () => {
      const caller = await createTestCaller(server.url);
      await createCustomModel(server, caller.token, {
        model_id: "stories",
        architecture: "llama",
        base_model_id: CHAT_MODEL,
      });
      // File rule: `<model_id>.gguf` is not there, but hf_repo names the file.
      await http(server.url, "DELETE", "/control/v1/models/custom?model_id=stories", { token: caller.token });
      await createCustomModel(server, caller.token, {
        model_id: "stories",
        architecture: "llama",
        base_model_id: CHAT_MODEL,
        hf_repo: `x/y/${SHARED_GGUF}`,
      });
      const dep = await createDeployment(server, caller.token, {
        name: "custom one",
        model_source: "custom",
        model_id: "stories",
        min_replicas: 2,
        max_replicas: 2,
      });
      expect((await deploymentSettles(server, caller.token, dep.id)).status).toBe("available");
      expect((await runtimeSlots(server, CHAT_MODEL, `deployment:${dep.id}`))?.size).toBe(2);
      const customId = randomUUID();
      expect((await chat(caller.key, "stories", customId)).model).toBe("stories");
      expect((await activityByCustomId(server, customId)).model).toBe("stories");
      // A custom model with deployments cannot be deleted.
      const refused = await http(server.url, "DELETE", "/control/v1/models/custom?model_id=stories", {
        token: caller.token,
      });
      expectEnvelope(refused, 409);
    },
    SLOW_MS,
  );
  test(
    "when a deployment of a team's available custom model is deleted, then the custom model is served again (its runtime comes back)",
    async () => {
      const caller = await createTestCaller(server.url);
      await createCustomModel(server, caller.token, {
        model_id: "acme/comeback",
        architecture: "llama",
        hf_repo: `ggml-org/models/tinyllamas/${SHARED_GGUF}`,
        base_model_id: CHAT_MODEL,
      });
      await requestDeployment(server, caller.token, "acme/comeback");
      expect((await customModelSettles(server, caller.token, "acme/comeback")).deploy_status).toBe("available");
      await chat(caller.key, "acme/comeback");

      const deployment = await createDeployment(server, caller.token, {
        name: "comeback",
        model_source: "custom",
        model_id: "acme/comeback",
      });
      expect((await deploymentSettles(server, caller.token, deployment.id)).status).toBe("available");
      await chat(caller.key, "acme/comeback");

      const deleted = await http(server.url, "DELETE", `/control/v1/deployments/${deployment.id}`, {
        token: caller.token,
      });
      expect(deleted.status).toBe(204);
      let last = 0;
      const served = await eventually(async () => {
        const res = await http(server.url, "POST", "/v1/chat/completions", {
          token: caller.key,
          body: { model: "acme/comeback", messages: [{ role: "user", content: "Hi" }], max_tokens: 2 },
        });
        last = res.status;
        return res.status === 200;
      }, 20_000);
      expect({ served, last }).toEqual({ served: true, last: 200 });
    },
    SLOW_MS,
  );
});

describe("restarts and processes", () => {
  test(
    "when a deployment was left deploying by a dead process, then it is brought up once its lease runs out",
    async () => {
      const caller = await createTestCaller(server.url);
      const id = randomUUID();
      await server.db(
        `INSERT INTO deployments (id, team_id, name, model_source, model_id, status, lease_expires_at)
       VALUES ($1, $2, 'orphan', 'platform', $3, 'deploying', now() - interval '1 second')`,
        [id, caller.teamId, CHAT_MODEL],
      );
      const done = await deploymentSettles(server, caller.token, id);
      expect(done.status).toBe("available");
    },
    SLOW_MS,
  );

  test(
    "when a deploying row's lease is still running, then no other sweep takes it",
    async () => {
      const caller = await createTestCaller(server.url);
      const id = randomUUID();
      await server.db(
        `INSERT INTO deployments (id, team_id, name, model_source, model_id, status, lease_expires_at)
       VALUES ($1, $2, 'claimed', 'platform', $3, 'deploying', now() + interval '1 hour')`,
        [id, caller.teamId, CHAT_MODEL],
      );
      // Several sweeps run meanwhile (every 250 ms); a later deployment goes through them.
      const later = await createDeployment(server, caller.token, {
        name: "later",
        model_source: "platform",
        model_id: CHAT_MODEL,
      });
      expect((await deploymentSettles(server, caller.token, later.id)).status).toBe("available");
      expect((await listedDeployment(server, caller.token, id)).status).toBe("deploying");
    },
    SLOW_MS,
  );

  test(
    "when another API process serves the team, then it routes to the custom model once it becomes available (NOTIFY)",
    async () => {
      const api = await startTestServer({ modelsDir, role: "api" }, server);
      try {
        const caller = await createTestCaller(server.url);
        await createCustomModel(server, caller.token, {
          model_id: "shared-stories",
          architecture: "llama",
          base_model_id: CHAT_MODEL,
          hf_repo: `x/${SHARED_GGUF}`,
        });
        await requestDeployment(api, caller.token, "shared-stories");
        expect((await customModelSettles(api, caller.token, "shared-stories")).deploy_status).toBe("available");
        const served = await eventually(async () => {
          const res = await http(api.url, "POST", "/v1/chat/completions", {
            token: caller.key,
            body: { model: "shared-stories", messages: [{ role: "user", content: "Hi" }], max_tokens: 2 },
          });
          return res.status === 200 && res.body.model === "shared-stories";
        }, 10_000);
        expect(served).toBe(true);
        // Deleting it in the worker process stops it in the API process too.
        const deleted = await http(server.url, "DELETE", "/control/v1/models/custom?model_id=shared-stories", {
          token: caller.token,
        });
        expect(deleted.status).toBe(204);
        const gone = await eventually(async () => {
          const res = await http(api.url, "GET", "/v1/models", { token: caller.key });
          return !(res.body.data as any[]).some((m) => m.id === "shared-stories");
        }, 10_000);
        expect(gone).toBe(true);
      } finally {
        await api.close();
      }
    },
    SLOW_MS,
  );
});
