/**
 * API key policy (issue 29, item 1): a budget per period, requests and tokens per minute, allowed
 * models and expiry, set on create and by `PATCH /control/v1/auth/api-keys/{key_id}` (REST and
 * GraphQL), shown with the key's spend, and enforced on the data plane: 403 for a model the key
 * may not use, 429 for its per-minute limits, 402 for its budget — each naming the limit, its
 * window and when it resets, readable through the official `openai` client — on synchronous,
 * streamed, background, batch and decision requests. Prices: 1 µUSD per prompt token, 10 per
 * completion token, so a chat of "Once upon a time" with `max_tokens: 8` may cost up to about
 * 86 µUSD. test/api-key-policy-concurrency.test.ts races two processes.
 */
import OpenAI from "openai";
import {
  CHAT_MODEL,
  EMBED_MODEL,
  type TestServer,
  createTestApiKey,
  createTestCaller,
  createTestUser,
  eventually,
  expectEnvelope,
  expectInvalid,
  http,
  openaiClient,
  startTestServer,
} from "./support/harness.js";
import { writeTestCatalog } from "./support/test-catalog.js";
import { principalOf, usageRecordFor } from "./support/records.js";
import { joinTeam } from "./support/teams.js";

let server: TestServer;

beforeAll(async () => {
  const catalogPath = writeTestCatalog(CHAT_MODEL, { input: "1", cachedInput: "0.5", output: "10" });
  server = await startTestServer({ catalogPath });
}, 60_000);
afterAll(() => server.close());

const chat = { model: CHAT_MODEL, messages: [{ role: "user" as const, content: "Once upon a time" }], max_tokens: 8 };

const embed = { model: EMBED_MODEL, input: "a red ball" };

/** Creates a key of `token`'s user with `policy`; @returns the 201 answer's body. */
async function createKey(token: string, policy: Record<string, unknown> = {}): Promise<any> {
  const res = await http(server.url, "POST", "/control/v1/auth/api-keys", {
    token,
    body: { name: "policy", ...policy },
  });
  expect(res.status).toBe(201);
  return res.body;
}

function patchKey(token: string | undefined, keyId: string, body: unknown) {
  return http(server.url, "PATCH", `/control/v1/auth/api-keys/${keyId}`, { token, body });
}

/** The key as `GET /control/v1/auth/api-keys` lists it. */
async function listed(token: string, keyId: string): Promise<any> {
  const res = await http(server.url, "GET", "/control/v1/auth/api-keys", { token });
  expect(res.status).toBe(200);
  return res.body.items.find((k: any) => k.id === keyId);
}

/** The first instant of the next UTC month, as ISO 8601. */
function nextMonthUtc(): string {
  const now = new Date();
  return new Date(Date.UTC(now.getUTCFullYear(), now.getUTCMonth() + 1, 1)).toISOString();
}

/** What the `openai` client throws for a request (undefined when it succeeds). */
async function clientError(run: () => Promise<unknown>): Promise<InstanceType<typeof OpenAI.APIError>> {
  try {
    await run();
  } catch (err) {
    expect(err).toBeInstanceOf(OpenAI.APIError);
    return err as InstanceType<typeof OpenAI.APIError>;
  }
  throw new Error("the request succeeded");
}

describe("setting a key's policy", () => {
  test("when a key is created with a policy, then the answer and the list show it with nothing spent yet", async () => {
    const user = await createTestUser(server.url);
    const created = await createKey(user.token, {
      budget_micros: 1_000,
      budget_period: "month",
      rpm_limit: 60,
      tpm_limit: 10_000,
      allowed_models: [CHAT_MODEL, CHAT_MODEL, EMBED_MODEL],
    });
    const policy = {
      budget_micros: 1_000,
      budget_period: "month",
      spent_micros: 0,
      remaining_micros: 1_000,
      budget_resets_at: nextMonthUtc(),
      rpm_limit: 60,
      tpm_limit: 10_000,
      allowed_models: [CHAT_MODEL, EMBED_MODEL],
    };
    expect(created).toMatchObject({ ...policy, plaintext: expect.stringMatching(/^sk_/) });
    expect(await listed(user.token, created.id)).toMatchObject(policy);

    const plain = await createKey(user.token);
    expect(await listed(user.token, plain.id)).toMatchObject({
      budget_micros: null,
      budget_period: null,
      spent_micros: null,
      remaining_micros: null,
      budget_resets_at: null,
      rpm_limit: null,
      tpm_limit: null,
      allowed_models: ["*"],
    });
  });

  test("when the owner patches a key, then the fields given change, null lifts a limit, and REST and GraphQL agree", async () => {
    const user = await createTestUser(server.url);
    const key = await createKey(user.token, { rpm_limit: 5, allowed_models: [CHAT_MODEL] });
    const res = await patchKey(user.token, key.id, {
      name: "renamed",
      budget_micros: 2_500,
      budget_period: "total",
      tpm_limit: 900,
      allowed_models: ["*"],
      rpm_limit: null,
    });
    expect(res.status).toBe(200);
    const expected = {
      id: key.id,
      name: "renamed",
      budget_micros: 2_500,
      budget_period: "total",
      spent_micros: 0,
      remaining_micros: 2_500,
      budget_resets_at: null,
      rpm_limit: null,
      tpm_limit: 900,
      allowed_models: ["*"],
      expires_at: null,
    };
    expect(res.body).toMatchObject(expected);
    expect(await listed(user.token, key.id)).toMatchObject(expected);

    const gql = await http(server.url, "POST", "/graphql", {
      token: user.token,
      body: {
        query: `mutation($id: String!) {
          updateApiKey(id: $id, input: { budgetPeriod: "day", allowedModels: ["${EMBED_MODEL}"], tpmLimit: null }) {
            id name budgetMicros budgetPeriod spentMicros remainingMicros budgetResetsAt rpmLimit tpmLimit allowedModels
          }
        }`,
        variables: { id: key.id },
      },
    });
    expect(gql.body.errors).toBeUndefined();
    const tomorrow = new Date();
    tomorrow.setUTCHours(24, 0, 0, 0);
    expect(gql.body.data.updateApiKey).toEqual({
      id: key.id,
      name: "renamed",
      budgetMicros: 2_500,
      budgetPeriod: "day",
      spentMicros: 0,
      remainingMicros: 2_500,
      budgetResetsAt: tomorrow.toISOString(),
      rpmLimit: null,
      tpmLimit: null,
      allowedModels: [EMBED_MODEL],
    });
    const rest = await listed(user.token, key.id);
    expect(rest).toMatchObject({ budget_period: "day", tpm_limit: null, allowed_models: [EMBED_MODEL] });
  });

  test("when a patch is invalid, then 400 names the field and nothing changes", async () => {
    const user = await createTestUser(server.url);
    const key = await createKey(user.token, { rpm_limit: 5 });
    expectInvalid(await patchKey(user.token, key.id, { budget_period: "year", budget_micros: 5 }), "budget_period");
    expectInvalid(await patchKey(user.token, key.id, { budget_micros: 5 }), "budget_period");
    expectInvalid(await patchKey(user.token, key.id, { budget_period: "day" }), "budget_period");
    expectInvalid(await patchKey(user.token, key.id, { budget_micros: -1, budget_period: "day" }), "budget_micros");
    expectInvalid(await patchKey(user.token, key.id, { rpm_limit: 0 }), "rpm_limit");
    expectInvalid(await patchKey(user.token, key.id, { tpm_limit: 1.5 }), "tpm_limit");
    expectInvalid(await patchKey(user.token, key.id, { allowed_models: [] }), "allowed_models");
    expectInvalid(await patchKey(user.token, key.id, { expires_at: "2001-01-01T00:00:00Z" }), "expires_at");
    expectInvalid(await patchKey(user.token, key.id, { name: "" }), "name");
    expectInvalid(await patchKey(user.token, "not-a-uuid", { rpm_limit: 1 }), "key_id");
    expectInvalid(
      await http(server.url, "POST", "/control/v1/auth/api-keys", {
        token: user.token,
        body: { name: "k", budget_micros: 10 },
      }),
      "budget_period",
    );
    expect(await listed(user.token, key.id)).toMatchObject({ rpm_limit: 5, budget_micros: null });
  });

  test("when a patch comes without credentials, then 401", async () => {
    const user = await createTestUser(server.url);
    const key = await createKey(user.token);
    expectEnvelope(await patchKey(undefined, key.id, { rpm_limit: 1 }), 401);
  });

  test("when another team's owner patches a key, then 404 and the key is unchanged", async () => {
    const user = await createTestUser(server.url);
    const other = await createTestUser(server.url);
    const key = await createKey(user.token, { rpm_limit: 5 });
    expectEnvelope(await patchKey(other.token, key.id, { rpm_limit: null }), 404);
    expect(await listed(user.token, key.id)).toMatchObject({ rpm_limit: 5 });
  });

  test("when a member patches their own key, then they may tighten its limits but not raise or lift one; an owner may", async () => {
    const owner = await createTestUser(server.url);
    const member = await joinTeam(server.url, owner, "member");
    const key = await createTestApiKey(server.url, member.token);
    const tightened = await patchKey(member.token, key.id, {
      budget_micros: 500,
      budget_period: "week",
      rpm_limit: 10,
      allowed_models: [CHAT_MODEL],
    });
    expect(tightened.status).toBe(200);
    // Stricter still: less, a longer period, fewer models, an expiry.
    expect(
      (
        await patchKey(member.token, key.id, {
          budget_micros: 400,
          budget_period: "month",
          rpm_limit: 5,
          expires_at: new Date(Date.now() + 86_400_000).toISOString(),
        })
      ).status,
    ).toBe(200);
    for (const [body, field] of [
      [{ budget_micros: null }, "budget_micros"],
      [{ budget_micros: 401 }, "budget_micros"],
      [{ budget_period: "day" }, "budget_period"],
      [{ rpm_limit: 6 }, "rpm_limit"],
      [{ allowed_models: ["*"] }, "allowed_models"],
      [{ allowed_models: [CHAT_MODEL, EMBED_MODEL] }, "allowed_models"],
      [{ expires_at: null }, "expires_at"],
    ] as const) {
      const res = await patchKey(member.token, key.id, body);
      expectEnvelope(res, 403);
      expect(res.body.extra.fields).toEqual([field]);
    }
    expect(await listed(member.token, key.id)).toMatchObject({ budget_micros: 400, rpm_limit: 5 });
    const lifted = await patchKey(owner.token, key.id, { budget_micros: null, rpm_limit: null, allowed_models: ["*"] });
    expect(lifted.status).toBe(200);
    expect(lifted.body).toMatchObject({
      budget_micros: null,
      budget_period: null,
      rpm_limit: null,
      allowed_models: ["*"],
    });
  });
});

describe("enforcing a key's policy", () => {
  test("when a key may not use a model, then 403 names the model and the allowed ones, on every path, readable through the openai client", async () => {
    const caller = await createTestCaller(server.url);
    await patchKey(caller.token, caller.keyId, { allowed_models: [EMBED_MODEL] });
    const client = openaiClient(server.url, caller.key);
    expect((await client.embeddings.create({ model: EMBED_MODEL, input: "a red ball" })).data).toHaveLength(1);

    const err = await clientError(() => client.chat.completions.create({ ...chat }));
    expect(err.status).toBe(403);
    expect(err.message).toContain(`This API key may not use model '${CHAT_MODEL}'`);
    expect(err.message).toContain(`'${EMBED_MODEL}'`);
    expect(err.code).toBe("model_not_allowed");

    const res = await http(server.url, "POST", "/v1/chat/completions", { token: caller.key, body: chat });
    expectEnvelope(res, 403);
    expect(res.body.extra).toEqual({
      limit: "allowed_models",
      scope: "api_key",
      api_key_id: caller.keyId,
      model: CHAT_MODEL,
      allowed_models: [EMBED_MODEL],
    });
    const streamed = await clientError(async () => {
      const stream = await client.chat.completions.create({ ...chat, stream: true });
      for await (const chunk of stream) void chunk;
    });
    expect(streamed.status).toBe(403);
    const background = await http(server.url, "POST", "/v1/responses", {
      token: caller.key,
      body: { model: CHAT_MODEL, input: "Once", background: true, max_output_tokens: 4 },
    });
    expectEnvelope(background, 403);
    const decision = await http(server.url, "POST", "/v1/decisions", {
      token: caller.key,
      body: { model: CHAT_MODEL, state: { s: "Lily" }, questions: { q: { type: "noul", instructions: "A dog?" } } },
    });
    expectEnvelope(decision, 403);

    // A batch item fails with the refusal; nothing is charged for it.
    const batch = await http(server.url, "POST", "/v1/batches", {
      token: caller.key,
      body: { requests: [{ custom_id: "forbidden", body: chat }] },
    });
    expect(batch.status).toBe(201);
    let ended: any;
    expect(
      await eventually(async () => {
        ended = (await http(server.url, "GET", `/v1/batches/${batch.body.id}`, { token: caller.key })).body;
        return ended.status === "completed" || ended.status === "failed";
      }, 30_000),
    ).toBe(true);
    const results = await http(server.url, "GET", `/v1/batches/${batch.body.id}/results`, { token: caller.key });
    expect(results.body.results[0]).toMatchObject({ custom_id: "forbidden", status: "failed" });
    expect(JSON.stringify(results.body.results[0])).toContain("may not use model");
  }, 60_000);

  test("when a key's requests per minute are used up, then 429 names rpm_limit, its window and reset, with Retry-After", async () => {
    const caller = await createTestCaller(server.url);
    await patchKey(caller.token, caller.keyId, { rpm_limit: 2 });
    // Not across a minute's end, which would start a new window mid-test.
    await untilEarlyInMinute();
    for (let i = 0; i < 2; i++) {
      expect((await http(server.url, "POST", "/v1/chat/completions", { token: caller.key, body: chat })).status).toBe(
        200,
      );
    }
    const res = await http(server.url, "POST", "/v1/chat/completions", { token: caller.key, body: chat });
    expectEnvelope(res, 429);
    expect(res.body.extra).toEqual({
      limit: "rpm_limit",
      scope: "api_key",
      api_key_id: caller.keyId,
      value: 2,
      window: "minute",
      resets_at: expect.stringMatching(/:00\.000Z$/),
    });
    const retryAfter = Number(res.headers.get("retry-after"));
    expect(retryAfter).toBeGreaterThanOrEqual(1);
    expect(retryAfter).toBeLessThanOrEqual(60);
    const err = await clientError(() => openaiClient(server.url, caller.key).chat.completions.create({ ...chat }));
    expect(err.status).toBe(429);
    expect(err.message).toMatch(
      /Rate limit reached for this API key: 2 requests per minute \(rpm_limit\); retry after \d+ s/,
    );
    // Another key of the same team is not limited by this one's rpm.
    const other = await createTestApiKey(server.url, caller.token);
    expect((await http(server.url, "POST", "/v1/chat/completions", { token: other.key, body: chat })).status).toBe(200);
  });

  test("when a key's tokens per minute are used up, then 429 names tpm_limit", async () => {
    const caller = await createTestCaller(server.url);
    await patchKey(caller.token, caller.keyId, { tpm_limit: 5 });
    await untilEarlyInMinute();
    // Admitted on the tokens used so far (none); it uses more than 5.
    expect((await http(server.url, "POST", "/v1/chat/completions", { token: caller.key, body: chat })).status).toBe(
      200,
    );
    let res: any;
    // Its tokens are counted just after the answer.
    expect(
      await eventually(async () => {
        res = await http(server.url, "POST", "/v1/embeddings", {
          token: caller.key,
          body: { model: EMBED_MODEL, input: "x" },
        });
        return res.status === 429;
      }),
    ).toBe(true);
    expect(res.body.extra).toMatchObject({ limit: "tpm_limit", value: 5, window: "minute" });
    const err = await clientError(() =>
      openaiClient(server.url, caller.key).embeddings.create({ model: EMBED_MODEL, input: "x" }),
    );
    expect(err.message).toMatch(/5 tokens per minute \(tpm_limit\)/);
  });

  test("when a key's budget does not cover a request, then 402 names budget_micros, its window and reset; spend matches the ledger", async () => {
    const caller = await createTestCaller(server.url);
    await patchKey(caller.token, caller.keyId, { budget_micros: 100, budget_period: "day" });
    const first = await http(server.url, "POST", "/v1/chat/completions", { token: caller.key, body: chat });
    expect(first.status).toBe(200);
    const res = await http(server.url, "POST", "/v1/chat/completions", { token: caller.key, body: chat });
    expectEnvelope(res, 402);
    const tomorrow = new Date();
    tomorrow.setUTCHours(24, 0, 0, 0);
    const [activity] = await server.db<any>(
      "SELECT cost_micros::int AS cost FROM activity WHERE api_key_id = $1 AND status = 'completed'",
      [caller.keyId],
    );
    expect(res.body.extra).toEqual({
      limit: "budget_micros",
      scope: "api_key",
      api_key_id: caller.keyId,
      value: 100,
      window: "day",
      resets_at: tomorrow.toISOString(),
      spent_micros: activity.cost,
      required_micros: expect.any(Number),
      available_micros: 100 - activity.cost,
    });
    expect(res.body.extra.required_micros).toBeGreaterThan(100 - activity.cost);
    expect(Number(res.headers.get("retry-after"))).toBeGreaterThanOrEqual(1);
    expect(res.body.error.code).toBe("api_key_budget_exceeded");

    const client = openaiClient(server.url, caller.key);
    const err = await clientError(() => client.chat.completions.create({ ...chat }));
    expect(err.status).toBe(402);
    expect(err.message).toMatch(/API key budget reached: this request may cost up to \d+ micro-USD and \d+ micro-USD/);
    expect(err.message).toContain(`it starts over at ${tomorrow.toISOString()}`);
    const streamed = await clientError(async () => {
      const stream = await client.chat.completions.create({ ...chat, stream: true });
      for await (const chunk of stream) void chunk;
    });
    expect(streamed.message).toContain("API key budget reached");
    // A request that fits what is left is served.
    const small = await http(server.url, "POST", "/v1/chat/completions", {
      token: caller.key,
      body: { ...chat, max_tokens: 1 },
    });
    expect(small.status).toBe(200);

    const [ledger] = await server.db<any>(
      `SELECT coalesce(-sum(l.amount_micros), 0)::int AS charged FROM credit_ledger l
        WHERE l.type = 'usage' AND l.source_id IN (SELECT id::text FROM activity WHERE api_key_id = $1)`,
      [caller.keyId],
    );
    const key = await listed(caller.token, caller.keyId);
    expect(key.spent_micros).toBe(ledger.charged);
    expect(key.remaining_micros).toBe(100 - ledger.charged);
    expect(key.spent_micros).toBeLessThanOrEqual(100);

    // Raising the budget serves the key again at once.
    expect((await patchKey(caller.token, caller.keyId, { budget_micros: 10_000 })).status).toBe(200);
    expect((await http(server.url, "POST", "/v1/chat/completions", { token: caller.key, body: chat })).status).toBe(
      200,
    );
  });

  test("when a total budget is spent, then 402 says it does not start over and sends no Retry-After", async () => {
    const caller = await createTestCaller(server.url);
    await patchKey(caller.token, caller.keyId, { budget_micros: 0, budget_period: "total" });
    const res = await http(server.url, "POST", "/v1/chat/completions", { token: caller.key, body: chat });
    expectEnvelope(res, 402);
    expect(res.body.extra).toMatchObject({ limit: "budget_micros", window: "total", resets_at: null });
    expect(res.headers.get("retry-after")).toBeNull();
    expect(res.body.detail).toContain("a total budget does not start over");
  });

  test("when a key expires while its credential is still cached, then the data plane refuses its work with 401", async () => {
    // What a batch item or a background response of the key meets when it runs after the expiry:
    // the key's policy is read where the work is admitted, not only when credentials are checked.
    const caller = await createTestCaller(server.url);
    expect((await http(server.url, "POST", "/v1/embeddings", { token: caller.key, body: embed })).status).toBe(200);
    await server.db("UPDATE api_keys SET expires_at = now() - interval '1 second' WHERE id = $1", [caller.keyId]);
    await server.db("SELECT pg_notify('switchyard_cache', 'api_key_policy:' || $1::text)", [caller.keyId]);
    let res: any;
    expect(
      await eventually(async () => {
        res = await http(server.url, "POST", "/v1/embeddings", { token: caller.key, body: embed });
        return res.status === 401;
      }),
    ).toBe(true);
    expect(res.body.detail).toBe("API key has expired");
    // And through the official client: a 401 whose message says why.
    const err = await clientError(() =>
      openaiClient(server.url, caller.key).embeddings.create({ model: EMBED_MODEL, input: "a red ball" }),
    );
    expect(err.status).toBe(401);
    expect(err.message).toContain("API key has expired");
  });

  test("when a budget is set on a key that already spent this period, then its spend counts from the period's start", async () => {
    const caller = await createTestCaller(server.url);
    expect((await http(server.url, "POST", "/v1/chat/completions", { token: caller.key, body: chat })).status).toBe(
      200,
    );
    await server.app.metering.drainAll();
    const [row] = await server.db<any>("SELECT sum(cost_micros)::int AS cost FROM activity WHERE api_key_id = $1", [
      caller.keyId,
    ]);
    const res = await patchKey(caller.token, caller.keyId, { budget_micros: 1_000, budget_period: "month" });
    expect(res.body).toMatchObject({ spent_micros: row.cost, remaining_micros: 1_000 - row.cost });
  });
});

describe("the group commit's key spend", () => {
  test("when charges reach a key whose budget was not reserved (a lease lost, a budget lowered), then they are capped at what is left and spend equals the ledger", async () => {
    // The safety net under the reservation: costs recorded straight through metering, with no
    // reservation, as a process whose lease expired would write them.
    const caller = await createTestCaller(server.url);
    await patchKey(caller.token, caller.keyId, { budget_micros: 1_000, budget_period: "week" });
    const principal = principalOf(caller);
    const charges = await Promise.all(
      [600n, 300n, 250n, 50n].map((cost) =>
        server.app.metering.record(usageRecordFor(principal, { costMicros: cost })),
      ),
    );
    expect(charges.reduce((sum, c) => sum + c.chargedMicros, 0n)).toBe(1_000n);
    const entries = await server.db<any>(
      `SELECT -l.amount_micros::int AS charged, l.description, a.cost_micros::int AS cost
         FROM credit_ledger l JOIN activity a ON a.id::text = l.source_id
        WHERE a.api_key_id = $1 ORDER BY l.id`,
      [caller.keyId],
    );
    expect(entries.map((e: any) => e.cost)).toEqual([600, 300, 250, 50]);
    expect(entries.map((e: any) => e.charged)).toEqual([600, 300, 100, 0]);
    expect(entries[2].description).toContain("(cost 250 capped at the API key's budget)");
    expect(entries[0].description).not.toContain("capped");
    const key = await listed(caller.token, caller.keyId);
    expect(key).toMatchObject({ spent_micros: 1_000, remaining_micros: 0 });
    // Another key of the team is not capped by this one's budget.
    const other = await createTestApiKey(server.url, caller.token);
    const free = await server.app.metering.record(
      usageRecordFor(
        { ...principal, apiKey: { id: other.id, name: "other", prefix: other.prefix } },
        { costMicros: 700n },
      ),
    );
    expect(free.chargedMicros).toBe(700n);
  });
});

/** Waits until the database clock is in the first 40 s of a minute (rate windows are whole minutes). */
async function untilEarlyInMinute(): Promise<void> {
  const [row] = await server.db<any>("SELECT extract(second FROM now())::float AS s");
  if (row.s > 40) await new Promise((r) => setTimeout(r, (61 - row.s) * 1000));
}
