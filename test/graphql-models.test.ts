/**
 * The GraphQL operations of models and deployments (issue 9, item 5) over real HTTP: the same
 * resolvers as REST, so the same answers and the same 400 details; 401 without credentials and
 * 404 for another team's custom model or deployment. Also: the `models` query of a team lists its
 * available custom model as soon as a NOTIFY tells the process about it (and no other team's).
 */
import { randomUUID } from "node:crypto";
import { CHAT_MODEL, type TestServer, createTestCaller, eventually, http, startTestServer } from "./support/harness.js";
import { SHARED_GGUF, createCustomModel, createDeployment } from "./support/models.js";

let server: TestServer;
type Caller = Awaited<ReturnType<typeof createTestCaller>>;
let owner: Caller;
let other: Caller;

beforeAll(async () => {
  server = await startTestServer({ reconcileIntervalMs: 3_600_000 });
  owner = await createTestCaller(server.url);
  other = await createTestCaller(server.url);
});
afterAll(() => server.close());

interface GraphqlAnswer {
  data: any;
  errors: Array<{ message: string; extensions: Record<string, any> }> | undefined;
}

async function gql(query: string, variables?: Record<string, unknown>, token?: string): Promise<GraphqlAnswer> {
  const res = await http(server.url, "POST", "/graphql", { body: { query, variables }, token });
  if (typeof res.body !== "object" || res.body === null) throw new Error(`not GraphQL: ${res.status} ${res.text}`);
  return { data: res.body.data, errors: res.body.errors };
}

function onlyError(answer: GraphqlAnswer, statusCode: number) {
  expect(answer.errors).toHaveLength(1);
  expect(answer.errors![0].extensions.status_code).toBe(statusCode);
  return answer.errors![0];
}

async function countRows(table: "custom_models" | "deployments"): Promise<number> {
  const [row] = await server.db<{ n: number }>(`SELECT count(*)::int AS n FROM ${table}`);
  return row.n;
}

const CATALOG = `query { modelCatalog { models {
  id displayName provider platformStatus modality contextTokens released deprecated inputPerMillionUsd
  outputPerMillionUsd cachedInputPerMillionUsd tpmLimit rpmLimit requestsPerHour deployedOnPlatform
  capabilities { tools { supported } dimensions } ownership deployStatus architecture hasModelHubToken statusReason
} } }`;
const SEARCH = `query ($q: String, $modality: String, $status: String) {
  searchModels(q: $q, modality: $modality, status: $status) { items { id displayName catalogStatus source tpmLimit } }
}`;
const CREATE_CUSTOM = `mutation ($input: CreateCustomModelInput!) {
  createCustomModel(input: $input) { id ownership deployStatus hasModelHubToken architecture modality artifactType notes }
}`;
const DELETE_CUSTOM = `mutation ($m: String!) { deleteCustomModel(modelId: $m) }`;
const REQUEST = `mutation ($m: String!) { requestDeployment(input: { modelId: $m }) { ok } }`;
const DEPLOYMENTS = `query { deployments { items {
  id name modelSource modelId region performance minReplicas maxReplicas notes status statusReason activatedAt createdAt updatedAt
} } }`;
const CREATE_DEPLOYMENT = `mutation ($input: CreateDeploymentInput!) {
  createDeployment(input: $input) { id name modelSource modelId region performance minReplicas maxReplicas status activatedAt }
}`;
const DELETE_DEPLOYMENT = `mutation ($id: ID!) { deleteDeployment(id: $id) }`;

describe("modelCatalog and searchModels", () => {
  test("when read, then the same models as REST in camelCase", async () => {
    await createCustomModel(server, owner.token, { model_id: "gql-cat", architecture: "glm", hf_token: "hf_x" });
    const answer = await gql(CATALOG, undefined, owner.token);
    expect(answer.errors).toBeUndefined();
    const rest = (await http(server.url, "GET", "/control/v1/models/catalog", { token: owner.token })).body.models;
    const models = answer.data.modelCatalog.models;
    expect(models.map((m: any) => m.id)).toEqual(rest.map((m: any) => m.id));
    const custom = models.find((m: any) => m.id === "gql-cat");
    expect(custom).toMatchObject({
      ownership: "custom",
      deployStatus: "pending_deploy",
      hasModelHubToken: true,
      architecture: "glm",
      requestsPerHour: "—",
    });
    const platform = models.find((m: any) => m.id === CHAT_MODEL);
    const restPlatform = rest.find((m: any) => m.id === CHAT_MODEL);
    expect(platform).toMatchObject({
      inputPerMillionUsd: restPlatform.input_per_million_usd,
      tpmLimit: restPlatform.tpm_limit,
      deployedOnPlatform: true,
    });
  });

  test("when searched, then REST's items; a bad status is 400 with REST's detail and extra", async () => {
    const answer = await gql(SEARCH, { q: "TINY" }, owner.token);
    expect(answer.data.searchModels.items).toEqual([
      {
        id: CHAT_MODEL,
        displayName: "TinyStories 260K",
        catalogStatus: "available",
        source: "catalog",
        tpmLimit: "unlimited",
      },
    ]);
    const bad = onlyError(await gql(SEARCH, { status: "gone" }, owner.token), 400);
    const rest = await http(server.url, "GET", "/control/v1/models/search?status=gone", { token: owner.token });
    expect(bad.message).toBe(rest.body.detail);
    expect(bad.extensions.extra).toEqual(rest.body.extra);
  });

  test("when no credentials are sent, then 401", async () => {
    onlyError(await gql(CATALOG), 401);
    onlyError(await gql(SEARCH, {}), 401);
  });
});

describe("custom models", () => {
  test("when created, then the catalog model; null optional fields count as absent", async () => {
    const answer = await gql(
      CREATE_CUSTOM,
      { input: { modelId: "gql-made", architecture: "deepseek", hfToken: "hf_tok", notes: null, modality: null } },
      owner.token,
    );
    expect(answer.errors).toBeUndefined();
    expect(answer.data.createCustomModel).toEqual({
      id: "gql-made",
      ownership: "custom",
      deployStatus: "pending_deploy",
      hasModelHubToken: true,
      architecture: "deepseek",
      modality: "text_generation",
      artifactType: "full",
      notes: null,
    });
  });

  test("when the input is invalid, then 400 with REST's detail and extra, and nothing stored", async () => {
    const before = await countRows("custom_models");
    const bad = onlyError(
      await gql(CREATE_CUSTOM, { input: { modelId: "gql-bad", architecture: "transformer" } }, owner.token),
      400,
    );
    const rest = await http(server.url, "POST", "/control/v1/models/custom", {
      token: owner.token,
      body: { model_id: "gql-bad", architecture: "transformer" },
    });
    expect(rest.status).toBe(400);
    expect(bad.message).toBe(rest.body.detail);
    expect(bad.extensions.extra).toEqual(rest.body.extra);
    expect(await countRows("custom_models")).toBe(before);
  });

  test("when the id is a platform model's, then 409", async () => {
    onlyError(await gql(CREATE_CUSTOM, { input: { modelId: CHAT_MODEL, architecture: "llama" } }, owner.token), 409);
  });

  test("when deleted or its deployment requested, then true / ok; another team's is 404 and stays", async () => {
    await createCustomModel(server, owner.token, { model_id: "gql-mine", architecture: "llama" });
    await createCustomModel(server, other.token, { model_id: "gql-theirs", architecture: "llama" });
    expect((await gql(REQUEST, { m: "gql-mine" }, owner.token)).data.requestDeployment).toEqual({ ok: true });
    onlyError(await gql(REQUEST, { m: "gql-theirs" }, owner.token), 404);
    onlyError(await gql(DELETE_CUSTOM, { m: "gql-theirs" }, owner.token), 404);
    expect((await gql(DELETE_CUSTOM, { m: "gql-mine" }, owner.token)).data.deleteCustomModel).toBe(true);
    const left = await server.db("SELECT model_id FROM custom_models WHERE model_id IN ('gql-mine', 'gql-theirs')");
    expect(left).toEqual([{ model_id: "gql-theirs" }]);
  });

  test("when no credentials are sent, then 401", async () => {
    onlyError(await gql(CREATE_CUSTOM, { input: { modelId: "x", architecture: "llama" } }), 401);
    onlyError(await gql(DELETE_CUSTOM, { m: "x" }), 401);
    onlyError(await gql(REQUEST, { m: "x" }), 401);
  });
});

describe("deployments", () => {
  test("when created, listed and deleted, then the same fields as REST", async () => {
    const team = await createTestCaller(server.url);
    await createCustomModel(server, team.token, { model_id: "nothing-yet", architecture: "llama" });
    const created = await gql(
      CREATE_DEPLOYMENT,
      { input: { name: "gql", modelSource: "custom", modelId: "nothing-yet", maxReplicas: 2, region: null } },
      team.token,
    );
    expect(created.errors).toBeUndefined();
    expect(created.data.createDeployment).toMatchObject({
      name: "gql",
      modelSource: "custom",
      modelId: "nothing-yet",
      region: "emea",
      performance: "standard",
      minReplicas: 0,
      maxReplicas: 2,
      status: "pending_deploy",
      activatedAt: null,
    });
    const id = created.data.createDeployment.id;
    const listed = await gql(DEPLOYMENTS, undefined, team.token);
    const rest = await http(server.url, "GET", "/control/v1/deployments", { token: team.token });
    expect(listed.data.deployments.items.map((d: any) => d.id)).toEqual(rest.body.items.map((d: any) => d.id));
    expect(listed.data.deployments.items[0].createdAt).toBe(rest.body.items[0].created_at);
    expect((await gql(DELETE_DEPLOYMENT, { id }, team.token)).data.deleteDeployment).toBe(true);
    expect((await gql(DEPLOYMENTS, undefined, team.token)).data.deployments.items).toEqual([]);
  });

  test("when minReplicas exceeds maxReplicas, then 400 with REST's detail and extra, and nothing stored", async () => {
    const before = await countRows("deployments");
    const bad = onlyError(
      await gql(
        CREATE_DEPLOYMENT,
        { input: { name: "x", modelSource: "platform", modelId: CHAT_MODEL, minReplicas: 3, maxReplicas: 2 } },
        owner.token,
      ),
      400,
    );
    const rest = await http(server.url, "POST", "/control/v1/deployments", {
      token: owner.token,
      body: { name: "x", model_source: "platform", model_id: CHAT_MODEL, min_replicas: 3, max_replicas: 2 },
    });
    expect(bad.message).toBe(rest.body.detail);
    expect(bad.extensions.extra).toEqual(rest.body.extra);
    expect(await countRows("deployments")).toBe(before);
  });

  test("when another team's deployment is deleted, then 404 and it stays; a non-uuid id is 400", async () => {
    const theirs = await createDeployment(server, other.token, { name: "t", model_source: "platform", model_id: "n" });
    onlyError(await gql(DELETE_DEPLOYMENT, { id: theirs.id }, owner.token), 404);
    expect(await server.db("SELECT id FROM deployments WHERE id = $1", [theirs.id])).toHaveLength(1);
    onlyError(await gql(DELETE_DEPLOYMENT, { id: "nope" }, owner.token), 400);
  });

  test("when no credentials are sent, then 401", async () => {
    onlyError(await gql(DEPLOYMENTS), 401);
    onlyError(await gql(DELETE_DEPLOYMENT, { id: randomUUID() }), 401);
  });
});

describe("models (the data-plane list) for a team", () => {
  test("when a NOTIFY announces the team's available custom model, then its models query lists it, and no other team's", async () => {
    const team = await createTestCaller(server.url);
    const id = randomUUID();
    await server.db(
      `INSERT INTO custom_models (id, team_id, model_id, architecture, deploy_status, engine)
       VALUES ($1, $2, 'notified', 'llama', 'available', $3::jsonb)`,
      [
        id,
        team.teamId,
        JSON.stringify({
          type: "llama_cpp",
          file: SHARED_GGUF,
          context_size: 512,
          chat_template: "none",
          eog_token_ids: [1],
        }),
      ],
    );
    await server.db("SELECT pg_notify('switchyard_cache', $1)", [`team_models:${team.teamId}`]);
    const listed = await eventually(async () => {
      const answer = await gql("query { models { id provider } }", undefined, team.token);
      return answer.data.models.some((m: any) => m.id === "notified" && m.provider === "custom");
    });
    expect(listed).toBe(true);
    const theirs = await gql("query { models { id } }", undefined, other.token);
    expect(theirs.data.models.some((m: any) => m.id === "notified")).toBe(false);
    onlyError(await gql(`query { model(id: "notified") { id } }`, undefined, other.token), 404);
  });
});
