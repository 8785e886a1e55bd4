/**
 * Activity and usage reads (issue 10, items 1 and 2; spec: Activity record, Usage, Limits):
 * the activity list's filters and pages, the detail with bodies, the models used, daily and
 * summed usage equal to the activity records' own sums over generated data spanning 400 days
 * (window edges at midnight UTC), `service_tier` in `by_model`, member scoping, bad input and 401.
 */
import { randomUUID } from "node:crypto";
import {
  CHAT_MODEL,
  EMBED_MODEL,
  type TestServer,
  createTestCaller,
  expectEnvelope,
  expectInvalid,
  http,
  startTestServer,
} from "./support/harness.js";
import { joinTeam } from "./support/teams.js";

let server: TestServer;

beforeAll(async () => {
  server = await startTestServer();
}, 30_000);
afterAll(() => server.close());

const get = (path: string, token?: string) => http(server.url, "GET", path, { token });

async function chat(key: string, customId: string) {
  const res = await http(server.url, "POST", "/v1/chat/completions", {
    token: key,
    body: {
      model: CHAT_MODEL,
      messages: [{ role: "user", content: "Tom" }],
      max_tokens: 2,
      metadata: { custom_id: customId },
    },
  });
  expect(res.status).toBe(200);
  return res;
}

describe("GET /control/v1/activity", () => {
  test("when a team made requests, then the list pages newest first and every filter narrows it", async () => {
    const caller = await createTestCaller(server.url);
    for (const id of ["a1", "a2", "a3"]) await chat(caller.key, id);
    const embed = await http(server.url, "POST", "/v1/embeddings", {
      token: caller.key,
      body: { model: EMBED_MODEL, input: "Lily" },
    });
    expect(embed.status).toBe(200);

    const all = await get("/control/v1/activity", caller.token);
    expect(all.status).toBe(200);
    expect(all.body).toMatchObject({ page: 1, page_size: 25, total: 4 });
    expect(all.body.items.map((i: { model: string }) => i.model)).toEqual([
      EMBED_MODEL,
      CHAT_MODEL,
      CHAT_MODEL,
      CHAT_MODEL,
    ]);
    expect(Object.keys(all.body.items[1]).sort()).toEqual(
      [
        "api_key_id",
        "api_key_name",
        "api_key_prefix",
        "batch_id",
        "cached_prompt_tokens",
        "completed_at",
        "completion_tokens",
        "cost_micros",
        "created_at",
        "custom_id",
        "error",
        "id",
        "model",
        "prompt_tokens",
        "status",
        "stream_id",
        "total_tokens",
        "type",
      ].sort(),
    );
    expect(all.body.items[1]).toMatchObject({ custom_id: "a3", type: "standalone", status: "completed" });

    const page2 = await get("/control/v1/activity?page=2&page_size=3", caller.token);
    expect(page2.body).toMatchObject({ page: 2, page_size: 3, total: 4 });
    expect(page2.body.items.map((i: { custom_id: string }) => i.custom_id)).toEqual(["a1"]);

    const count = async (q: string) => (await get(`/control/v1/activity?${q}`, caller.token)).body.total;
    expect(await count(`model=${EMBED_MODEL}`)).toBe(1);
    expect(await count("type=standalone")).toBe(4);
    expect(await count("type=batch")).toBe(0);
    expect(await count("status=completed")).toBe(4);
    expect(await count("status=failed")).toBe(0);
    expect(await count(`api_key_id=${caller.keyId}`)).toBe(4);
    expect(await count(`api_key_id=${randomUUID()}`)).toBe(0);
    const newest = all.body.items[0].created_at as string;
    expect(await count(`created_before=${encodeURIComponent(newest)}`)).toBe(3);
    expect(await count(`created_after=${encodeURIComponent(newest)}`)).toBe(0);
    expect(await count("created_after=2020-01-01")).toBe(4);
    expect(await count("created_after=2099-01-01T00:00:00%2B02:00")).toBe(0);

    const models = await get("/control/v1/activity/models", caller.token);
    expect(models.status).toBe(200);
    expect(models.body).toEqual([CHAT_MODEL, EMBED_MODEL].sort());
  });

  test("when the query is bad, then 400 names the field", async () => {
    const caller = await createTestCaller(server.url);
    for (const [q, field] of [
      ["page=0", "page"],
      ["page=abc", "page"],
      ["page_size=0", "page_size"],
      ["page_size=101", "page_size"],
      ["type=bogus", "type"],
      ["status=done", "status"],
      ["created_after=yesterday", "created_after"],
      ["created_before=2024-13-45", "created_before"],
      // Strict dates (issue 10 review, finding 7): no roll-over, no year 0000, no hour 24.
      ["created_after=2024-02-30", "created_after"],
      ["created_after=2023-02-29T00:00:00Z", "created_after"],
      ["created_before=2024-04-31", "created_before"],
      ["created_before=0000-01-01", "created_before"],
      ["created_after=1999-12-31T23:59:59Z", "created_after"],
      ["created_after=2101-01-01", "created_after"],
      ["created_after=2024-01-01T24:00:00Z", "created_after"],
      ["created_after=2024-01-01T12:00:00%2B15:00", "created_after"],
      // A window that ends before it starts (or where it starts) is refused, not silently empty.
      ["created_after=2024-03-02&created_before=2024-03-01", "created_before"],
      ["created_after=2024-03-01&created_before=2024-03-01T00:00:00Z", "created_before"],
      ["api_key_id=nope", "api_key_id"],
      ["user_id=nope", "user_id"],
    ]) {
      expectInvalid(await get(`/control/v1/activity?${q}`, caller.token), field);
    }
    expectInvalid(await get("/control/v1/activity/models?user_id=x", caller.token), "user_id");
  });

  test("when unauthenticated, then 401 on every read", async () => {
    for (const path of [
      "/control/v1/activity",
      `/control/v1/activity/${randomUUID()}`,
      "/control/v1/activity/models",
      "/control/v1/usage/daily",
      "/control/v1/usage/summary",
    ]) {
      expectEnvelope(await get(path), 401);
    }
  });
});

describe("GET /control/v1/activity/{request_id}", () => {
  test("when the record is the caller's, then the detail carries the request and result bodies; another team gets 404", async () => {
    const caller = await createTestCaller(server.url);
    const res = await chat(caller.key, "detail");
    const [row] = await server.db<{ id: string }>("SELECT id FROM activity WHERE team_id = $1", [caller.teamId]);
    const detail = await get(`/control/v1/activity/${row.id}`, caller.token);
    expect(detail.status).toBe(200);
    expect(detail.body).toMatchObject({
      id: row.id,
      custom_id: "detail",
      model: CHAT_MODEL,
      body_json: { model: CHAT_MODEL, max_tokens: 2 },
      result_json: { id: res.body.id },
      error_json: null,
    });
    expect(detail.body.total_tokens).toBe(res.body.usage.total_tokens);

    const other = await createTestCaller(server.url);
    expectEnvelope(await get(`/control/v1/activity/${row.id}`, other.token), 404);
    expectEnvelope(await get(`/control/v1/activity/${randomUUID()}`, caller.token), 404);
    expectInvalid(await get("/control/v1/activity/not-a-uuid", caller.token), "request_id");
  });

  test("when pages of records are listed, then their bodies are not read (detail only; REST and GraphQL)", async () => {
    // A page holds up to 100 records whose bodies may be 8 MiB each: the list reads none of them
    // (a page of 100 read them all, ~1.6 GB for REST to throw away and GraphQL to send).
    const caller = await createTestCaller(server.url);
    await chat(caller.key, "list-bodies");
    const gql = (query: string) => http(server.url, "POST", "/graphql", { token: caller.token, body: { query } });
    const list = await gql(`{ activityRecords { items { id customId bodyJson resultJson } } }`);
    expect(list.body.errors).toBeUndefined();
    const [item] = list.body.data.activityRecords.items;
    expect(item).toEqual({ id: expect.any(String), customId: "list-bodies", bodyJson: null, resultJson: null });
    const rest = await get("/control/v1/activity", caller.token);
    expect(rest.body.items[0]).not.toHaveProperty("body_json");
    const detail = await gql(`{ activityRecord(id: "${item.id}") { bodyJson resultJson } }`);
    expect(detail.body.data.activityRecord.bodyJson).toMatchObject({ model: CHAT_MODEL, max_tokens: 2 });
    expect(detail.body.data.activityRecord.resultJson).not.toBeNull();
  });
});

describe("member scope", () => {
  test("when a member and the owner both made requests, then the member sees only theirs and the owner may filter by user", async () => {
    const owner = await createTestCaller(server.url);
    const member = await joinTeam(server.url, owner, "member");
    const memberKey = await http(server.url, "POST", "/control/v1/auth/api-keys", {
      token: member.token,
      body: { name: "m" },
    });
    await chat(owner.key, "owner-1");
    await chat(memberKey.body.plaintext, "member-1");

    const mine = await get("/control/v1/activity", member.token);
    expect(mine.body.items.map((i: { custom_id: string }) => i.custom_id)).toEqual(["member-1"]);
    expect((await get("/control/v1/usage/summary", member.token)).body.summary.total_requests).toBe(1);
    expectEnvelope(await get(`/control/v1/activity?user_id=${owner.userId}`, member.token), 403);

    expect((await get("/control/v1/activity", owner.token)).body.total).toBe(2);
    const filtered = await get(`/control/v1/activity?user_id=${member.userId}`, owner.token);
    expect(filtered.body.items.map((i: { custom_id: string }) => i.custom_id)).toEqual(["member-1"]);
    const ownerRecord = (await get(`/control/v1/activity?user_id=${owner.userId}`, owner.token)).body.items[0];
    expectEnvelope(await get(`/control/v1/activity/${ownerRecord.id}`, member.token), 404);
  });
});

describe("usage", () => {
  /** Activity rows for `teamId` at `at`, straight into the table (the group commit's columns). */
  async function seed(teamId: string, rows: Array<{ at: Date; model: string; p: number; c: number; cost: number }>) {
    await server.db(
      `INSERT INTO activity (id, team_id, type, status, endpoint, model, prompt_tokens, completion_tokens,
                             total_tokens, cached_prompt_tokens, cost_micros, created_at, completed_at)
       SELECT gen_random_uuid(), $1, 'standalone', 'completed', '/v1/chat/completions', r.model, r.p, r.c,
              r.p + r.c, r.p / 2, r.cost, r.at, r.at
         FROM jsonb_to_recordset($2::jsonb) AS r(at timestamptz, model text, p int, c int, cost bigint)`,
      [teamId, JSON.stringify(rows)],
    );
  }

  test("when activity spans 400 days, then daily and summary sums equal the records' sums in each window, edges at midnight UTC", async () => {
    const caller = await createTestCaller(server.url);
    const [now] = await server.db<{ today: Date }>(
      "SELECT date_trunc('day', now() AT TIME ZONE 'UTC') AT TIME ZONE 'UTC' AS today",
    );
    const today = new Date(now.today).getTime();
    const day = 86_400_000;
    const rows: Array<{ at: Date; model: string; p: number; c: number; cost: number }> = [];
    for (let d = 0; d < 400; d += 3) {
      rows.push({ at: new Date(today - d * day + 3_600_000), model: "m-a", p: 10 + d, c: 5, cost: 7 * d + 1 });
      if (d % 9 === 0) rows.push({ at: new Date(today - d * day), model: "m-b", p: 3, c: d, cost: 11 });
    }
    // Edges of the 30-day window: its first instant is in, the millisecond before is out.
    rows.push({ at: new Date(today - 29 * day), model: "edge", p: 1, c: 1, cost: 1 });
    rows.push({ at: new Date(today - 29 * day - 1), model: "edge", p: 100, c: 100, cost: 100 });
    await seed(caller.teamId, rows);

    for (const days of [1, 30, 365]) {
      const start = today - (days - 1) * day;
      const inWindow = rows.filter((r) => r.at.getTime() >= start);
      const expected = {
        total_prompt_tokens: inWindow.reduce((s, r) => s + r.p, 0),
        total_completion_tokens: inWindow.reduce((s, r) => s + r.c, 0),
        total_tokens: inWindow.reduce((s, r) => s + r.p + r.c, 0),
        total_cached_prompt_tokens: inWindow.reduce((s, r) => s + Math.floor(r.p / 2), 0),
        total_requests: inWindow.length,
        total_cost_micros: inWindow.reduce((s, r) => s + r.cost, 0),
      };
      const summary = await get(`/control/v1/usage/summary?days=${days}`, caller.token);
      expect(summary.status).toBe(200);
      expect(summary.body.summary).toEqual(expected);
      const byModelCost = Object.fromEntries(
        summary.body.by_model.map((m: { model: string; total_cost_micros: number }) => [m.model, m.total_cost_micros]),
      );
      for (const model of new Set(inWindow.map((r) => r.model))) {
        expect(byModelCost[model]).toBe(inWindow.filter((r) => r.model === model).reduce((s, r) => s + r.cost, 0));
      }

      const daily = await get(`/control/v1/usage/daily?days=${days}`, caller.token);
      expect(daily.status).toBe(200);
      const items = daily.body.items as Array<{
        date: string;
        model: string;
        request_count: number;
        cost_micros: number;
      }>;
      expect(items.reduce((s, i) => s + i.request_count, 0)).toBe(expected.total_requests);
      expect(items.reduce((s, i) => s + i.cost_micros, 0)).toBe(expected.total_cost_micros);
      for (const item of items) {
        const rowsOfDay = inWindow.filter(
          (r) => r.model === item.model && r.at.toISOString().slice(0, 10) === item.date,
        );
        expect(item.request_count).toBe(rowsOfDay.length);
      }
      expect([...items].sort((x, y) => x.date.localeCompare(y.date))).toEqual(items);
    }
    const edge = (await get("/control/v1/usage/summary?days=30", caller.token)).body.by_model.find(
      (m: { model: string }) => m.model === "edge",
    );
    expect(edge.total_requests).toBe(1);
  });

  test("when a response asked for the flex tier, then by_model shows it apart from default", async () => {
    const caller = await createTestCaller(server.url);
    for (const tier of ["flex", undefined]) {
      const res = await http(server.url, "POST", "/v1/responses", {
        token: caller.key,
        body: { model: CHAT_MODEL, input: "Tom", max_output_tokens: 2, ...(tier ? { service_tier: tier } : {}) },
      });
      expect(res.status).toBe(200);
    }
    const summary = await get("/control/v1/usage/summary", caller.token);
    expect(
      summary.body.by_model.map((m: { model: string; service_tier: string; total_requests: number }) => [
        m.model,
        m.service_tier,
        m.total_requests,
      ]),
    ).toEqual([
      [CHAT_MODEL, "default", 1],
      [CHAT_MODEL, "flex", 1],
    ]);
  });

  test("when a request is in flight, then usage counts it as the activity list and the billing summary do (no tokens yet)", async () => {
    const caller = await createTestCaller(server.url);
    await chat(caller.key, "ended");
    // A request in flight: its early row (services/metering/in-flight-activity.ts), pending, no usage yet.
    await server.db(
      `INSERT INTO activity (id, team_id, user_id, api_key_id, api_key_name, api_key_prefix, type, status, endpoint,
                             model, custom_id, prompt_tokens, completion_tokens, total_tokens, cached_prompt_tokens,
                             cost_micros, created_at, service_tier)
       SELECT gen_random_uuid(), team_id, user_id, api_key_id, api_key_name, api_key_prefix, type, 'pending', endpoint,
              model, 'in-flight', 0, 0, 0, 0, 0, now(), 'flex'
         FROM activity WHERE team_id = $1`,
      [caller.teamId],
    );
    const list = (await get("/control/v1/activity", caller.token)).body;
    expect(list.total).toBe(2);
    const tokens = list.items.reduce((t: number, i: { total_tokens: number }) => t + i.total_tokens, 0);
    const billing = (await get("/control/v1/billing/summary?days=1", caller.token)).body;
    expect(billing.summary.total_requests).toBe(2);

    const summary = (await get("/control/v1/usage/summary?days=1", caller.token)).body;
    expect(summary.summary.total_requests).toBe(2);
    expect(summary.summary.total_tokens).toBe(tokens);
    expect(summary.by_model.map((m: any) => [m.model, m.service_tier, m.total_requests, m.total_tokens])).toEqual([
      [CHAT_MODEL, "default", 1, tokens],
      [CHAT_MODEL, "flex", 1, 0],
    ]);
    const daily = (await get("/control/v1/usage/daily?days=1", caller.token)).body;
    const today = new Date().toISOString().slice(0, 10);
    expect(daily.items).toEqual([
      expect.objectContaining({ date: today, model: CHAT_MODEL, request_count: 2, total_tokens: tokens }),
    ]);
  });

  test("when days is out of 1–365 or not an integer, then 400 names it", async () => {
    const caller = await createTestCaller(server.url);
    for (const path of ["/control/v1/usage/daily", "/control/v1/usage/summary"]) {
      for (const days of ["0", "366", "1.5", "x"])
        expectInvalid(await get(`${path}?days=${days}`, caller.token), "days");
    }
  });

  test("when asked over GraphQL, then the same totals come back", async () => {
    const caller = await createTestCaller(server.url);
    await chat(caller.key, "gql");
    const res = await http(server.url, "POST", "/graphql", {
      token: caller.token,
      body: {
        query: `{ usageSummary(days: 7) { summary { totalRequests totalTokens } byModel { model serviceTier } }
                  activityRecords(pageSize: 1) { total items { customId costMicros serviceTier } } }`,
      },
    });
    expect(res.body.errors).toBeUndefined();
    const rest = (await get("/control/v1/usage/summary?days=7", caller.token)).body;
    expect(res.body.data.usageSummary.summary).toEqual({
      totalRequests: rest.summary.total_requests,
      totalTokens: rest.summary.total_tokens,
    });
    expect(res.body.data.activityRecords).toMatchObject({
      total: 1,
      items: [{ customId: "gql", serviceTier: "default" }],
    });
  });
});
