/**
 * Pricing history and the billing summary (issue 10, item 3; spec: Billing; DESIGN §3 Money):
 * price versions seeded from the catalog (the first from the epoch, a changed price effective
 * now, an unchanged one adds nothing), a request charged at the price in force when it was
 * received even when a second process brings a new price while it runs, and the summary's sums,
 * window and one `by_model` item per model, tier and price version; bad input, 401, member 403,
 * GraphQL.
 */
import { randomUUID } from "node:crypto";
import { costMicros, type TokenPrices } from "../src/shared/money.js";
import { holdNextGeneration } from "./support/engine-faults.js";
import {
  CHAT_MODEL,
  type TestServer,
  createTestCaller,
  eventually,
  expectEnvelope,
  expectInvalid,
  http,
  startTestServer,
} from "./support/harness.js";
import { joinTeam } from "./support/teams.js";
import { writeTestCatalog } from "./support/test-catalog.js";

/** The first catalog's chat price (USD per million = µUSD per token) and the one a second process brings. */
const OLD = { input: "1", cachedInput: "0.5", output: "10" };
const NEW = { input: "3", cachedInput: "1", output: "30" };
const micros = (p: typeof OLD): TokenPrices => ({
  inputPerMillionMicros: BigInt(Number(p.input) * 1e6),
  cachedInputPerMillionMicros: BigInt(Number(p.cachedInput) * 1e6),
  outputPerMillionMicros: BigInt(Number(p.output) * 1e6),
});

let a: TestServer;
let b: TestServer | undefined;

beforeAll(async () => {
  a = await startTestServer({ catalogPath: writeTestCatalog(CHAT_MODEL, OLD), engineSequences: 2 });
}, 60_000);
afterAll(async () => {
  await b?.close();
  await a.close();
});

const summary = (token: string | undefined, query = "") =>
  http(a.url, "GET", `/control/v1/billing/summary${query}`, { token });

async function chat(server: TestServer, key: string, customId: string) {
  return http(server.url, "POST", "/v1/chat/completions", {
    token: key,
    body: {
      model: CHAT_MODEL,
      messages: [{ role: "user", content: "Once upon a time" }],
      max_tokens: 6,
      temperature: 0,
      metadata: { custom_id: customId },
    },
  });
}

/** Activity rows of `teamId` with their `usage` ledger amounts, by custom id. */
async function charged(teamId: string): Promise<Map<string, any>> {
  const rows = await a.db<any>(
    `SELECT a.custom_id, a.prompt_tokens, a.cached_prompt_tokens, a.completion_tokens, a.cost_micros::text,
            a.created_at, (SELECT array_agg(l.amount_micros::text) FROM credit_ledger l
                            WHERE l.type = 'usage' AND l.source_id = a.id::text) AS charges
       FROM activity a WHERE a.team_id = $1`,
    [teamId],
  );
  return new Map(rows.map((r) => [r.custom_id, r]));
}

const costOf = (row: any, prices: TokenPrices) =>
  costMicros(
    {
      promptTokens: row.prompt_tokens,
      completionTokens: row.completion_tokens,
      cachedPromptTokens: row.cached_prompt_tokens,
    },
    prices,
  );

describe("price versions", () => {
  test("when the service starts on an empty history, then each catalog model's price is a version effective from the epoch", async () => {
    const rows = await a.db<any>(
      "SELECT model_id, effective_from, input_per_million_micros::text AS input, output_per_million_micros::text AS output FROM model_prices",
    );
    expect(rows.length).toBeGreaterThan(1);
    for (const r of rows) expect(new Date(r.effective_from).getTime()).toBe(0);
    const chatRow = rows.find((r) => r.model_id === CHAT_MODEL);
    expect(chatRow).toMatchObject({ input: "1000000", output: "10000000" });
    expect(a.app.prices.history(CHAT_MODEL)).toHaveLength(1);
  });
});

describe("billing summary", () => {
  test("when an owner asks, then totals and by_model equal the activity records' sums, with the pricing and the balance", async () => {
    const owner = await createTestCaller(a.url);
    for (let i = 0; i < 3; i++) expect((await chat(a, owner.key, `s-${i}`)).status).toBe(200);
    await a.app.metering.drainAll();
    const res = await summary(owner.token);
    expect(res.status).toBe(200);
    const [sums] = await a.db<any>(
      `SELECT sum(prompt_tokens)::int AS p, sum(completion_tokens)::int AS c, sum(total_tokens)::int AS t,
              sum(cached_prompt_tokens)::int AS cached, count(*)::int AS n, sum(cost_micros)::int AS cost,
              (SELECT credit_balance_micros::int FROM teams WHERE id = $1) AS balance
         FROM activity WHERE team_id = $1`,
      [owner.teamId],
    );
    expect(sums.n).toBe(3);
    expect(sums.cost).toBeGreaterThan(0);
    expect(res.body.summary).toEqual({
      days: 30,
      total_prompt_tokens: sums.p,
      total_completion_tokens: sums.c,
      total_tokens: sums.t,
      total_cached_prompt_tokens: sums.cached,
      total_requests: 3,
      estimated_cost_micros: sums.cost,
      credit_balance_micros: sums.balance,
    });
    expect(res.body.by_model).toEqual([
      {
        model: CHAT_MODEL,
        service_tier: "default",
        prompt_tokens: sums.p,
        completion_tokens: sums.c,
        total_tokens: sums.t,
        cached_prompt_tokens: sums.cached,
        total_requests: 3,
        cost_micros: sums.cost,
        pricing: {
          model: CHAT_MODEL,
          prompt_token_price_micros: 1_000_000,
          completion_token_price_micros: 10_000_000,
          effective_from: "1970-01-01T00:00:00.000Z",
        },
      },
    ]);
    // An admin reads it too; the same answer over GraphQL.
    const admin = await joinTeam(a.url, owner, "admin");
    expect((await summary(admin.token, "?days=7")).body.summary.total_requests).toBe(3);
    const gql = await http(a.url, "POST", "/graphql", {
      token: owner.token,
      body: {
        query: `{ billingSummary(days: 30) { summary { days totalRequests estimatedCostMicros creditBalanceMicros }
                  byModel { model serviceTier costMicros pricing { promptTokenPriceMicros effectiveFrom } } } }`,
      },
    });
    expect(gql.body.errors).toBeUndefined();
    expect(gql.body.data.billingSummary).toEqual({
      summary: { days: 30, totalRequests: 3, estimatedCostMicros: sums.cost, creditBalanceMicros: sums.balance },
      byModel: [
        {
          model: CHAT_MODEL,
          serviceTier: "default",
          costMicros: sums.cost,
          pricing: { promptTokenPriceMicros: 1_000_000, effectiveFrom: "1970-01-01T00:00:00.000Z" },
        },
      ],
    });
  });

  test("when a model's price changed inside the window, then by_model has one item per price version, each with the requests of its time, and the window edge is midnight UTC", async () => {
    const owner = await createTestCaller(a.url);
    const model = `priced-${randomUUID()}`;
    const [now] = await a.db<{ today: Date }>(
      "SELECT date_trunc('day', now() AT TIME ZONE 'UTC') AT TIME ZONE 'UTC' AS today",
    );
    const today = new Date(now.today).getTime();
    const day = 86_400_000;
    const changes = [new Date(0), new Date(today - 10 * day + 5_000), new Date(today - 3 * day)];
    for (const [i, at] of changes.entries()) {
      await a.db(
        `INSERT INTO model_prices (model_id, effective_from, input_per_million_micros,
                                   cached_input_per_million_micros, output_per_million_micros)
         VALUES ($1, $2, $3, $3, $4)`,
        [model, at, (i + 1) * 1_000_000, (i + 1) * 2_000_000],
      );
    }
    // Requests before, at and after each change, and at the window's edges.
    const rows: Array<{ at: Date; p: number; cost: number; tier: string }> = [];
    for (let d = 0; d < 40; d++)
      rows.push({ at: new Date(today - d * day + 3_600_000), p: d + 1, cost: d, tier: "default" });
    rows.push({ at: changes[1], p: 7, cost: 70, tier: "default" }); // the first instant of version 2
    rows.push({ at: new Date(changes[1].getTime() - 1), p: 5, cost: 50, tier: "default" }); // the last of version 1
    rows.push({ at: new Date(today - 29 * day), p: 1, cost: 1000, tier: "flex" }); // the window's first instant
    rows.push({ at: new Date(today - 29 * day - 1), p: 1, cost: 5000, tier: "flex" }); // just outside
    await a.db(
      `INSERT INTO activity (id, team_id, type, status, endpoint, model, service_tier, prompt_tokens, completion_tokens,
                             total_tokens, cached_prompt_tokens, cost_micros, created_at, completed_at)
       SELECT gen_random_uuid(), $1, 'standalone', 'completed', '/v1/chat/completions', $2, r.tier, r.p, 2,
              r.p + 2, 0, r.cost, r.at, r.at
         FROM jsonb_to_recordset($3::jsonb) AS r(at timestamptz, p int, cost bigint, tier text)`,
      [owner.teamId, model, JSON.stringify(rows)],
    );
    const versionOf = (at: Date) => changes.filter((c) => c.getTime() <= at.getTime()).length - 1;
    for (const days of [1, 4, 11, 30]) {
      const start = today - (days - 1) * day;
      const inWindow = rows.filter((r) => r.at.getTime() >= start);
      const res = await summary(owner.token, `?days=${days}`);
      expect(res.status).toBe(200);
      expect(res.body.summary).toMatchObject({
        days,
        total_requests: inWindow.length,
        total_prompt_tokens: inWindow.reduce((s, r) => s + r.p, 0),
        total_tokens: inWindow.reduce((s, r) => s + r.p + 2, 0),
        estimated_cost_micros: inWindow.reduce((s, r) => s + r.cost, 0),
      });
      const expected = new Map<string, { n: number; cost: number; v: number; tier: string }>();
      for (const r of inWindow) {
        const v = versionOf(r.at);
        const key = `${r.tier}/${v}`;
        const e = expected.get(key) ?? { n: 0, cost: 0, v, tier: r.tier };
        e.n++;
        e.cost += r.cost;
        expected.set(key, e);
      }
      const items = [...expected.values()].sort((x, y) => x.tier.localeCompare(y.tier) || x.v - y.v);
      expect(res.body.by_model).toEqual(
        items.map((e) =>
          expect.objectContaining({
            model,
            service_tier: e.tier,
            total_requests: e.n,
            cost_micros: e.cost,
            pricing: {
              model,
              prompt_token_price_micros: (e.v + 1) * 1_000_000,
              completion_token_price_micros: (e.v + 1) * 2_000_000,
              effective_from: changes[e.v].toISOString(),
            },
          }),
        ),
      );
    }
    // 30 days: the window's first instant is in, the millisecond before it out.
    const flex = (await summary(owner.token)).body.by_model.filter((m: any) => m.service_tier === "flex");
    expect(flex.map((m: any) => m.cost_micros)).toEqual([1000]);
  });

  test("when days is out of 1–365 or not an integer, then 400 names it (REST and GraphQL)", async () => {
    const owner = await createTestCaller(a.url);
    for (const days of ["0", "366", "1.5", "x", "-1"])
      expectInvalid(await summary(owner.token, `?days=${days}`), "days");
    const gql = await http(a.url, "POST", "/graphql", {
      token: owner.token,
      body: { query: `{ billingSummary(days: 0) { summary { days } } }` },
    });
    expect(gql.body.errors[0].extensions).toMatchObject({ status_code: 400 });
  });

  test("when there are no credentials, then 401; when a member asks, then 403", async () => {
    expectEnvelope(await summary(undefined), 401);
    const owner = await createTestCaller(a.url);
    const member = await joinTeam(a.url, owner, "member");
    expectEnvelope(await summary(member.token), 403);
    const gql = await http(a.url, "POST", "/graphql", {
      token: member.token,
      body: { query: `{ billingSummary { summary { days } } }` },
    });
    expect(gql.body.errors[0].extensions).toMatchObject({ status_code: 403 });
  });
});

describe("a price change while a request runs", () => {
  test("when a second process brings a new price during a generation, then that request pays the old price and later ones the new, in both processes, and the summary shows both versions", async () => {
    const caller = await createTestCaller(a.url);
    const held = await holdNextGeneration();
    const before = chat(a, caller.key, "before-change");
    await held.started;
    // A second process with another catalog price on the same database adds a version effective now.
    b = await startTestServer({ catalogPath: writeTestCatalog(CHAT_MODEL, NEW), engineSequences: 2 }, a);
    const versions = await a.db<any>(
      "SELECT model_id, effective_from FROM model_prices WHERE model_id NOT LIKE 'priced-%' ORDER BY effective_from",
    );
    expect(versions.filter((v) => v.model_id === CHAT_MODEL)).toHaveLength(2);
    // Only the changed model got a new version.
    expect(versions.filter((v) => new Date(v.effective_from).getTime() > 0).map((v) => v.model_id)).toEqual([
      CHAT_MODEL,
    ]);
    const changedAt = new Date(versions[versions.length - 1].effective_from);
    // The first process hears of it through the cache bus.
    expect(await eventually(async () => a.app.prices.history(CHAT_MODEL).length === 2, 10_000)).toBe(true);
    held.release();
    expect((await before).status).toBe(200);
    expect((await chat(a, caller.key, "after-change-a")).status).toBe(200);
    expect((await chat(b, caller.key, "after-change-b")).status).toBe(200);
    await a.app.metering.drainAll();
    await b.app.metering.drainAll();

    const rows = await charged(caller.teamId);
    const old = rows.get("before-change");
    expect(new Date(old.created_at).getTime()).toBeLessThan(changedAt.getTime());
    const oldCost = costOf(old, micros(OLD));
    expect(oldCost).toBeGreaterThan(0n);
    expect(BigInt(old.cost_micros)).toBe(oldCost);
    expect(old.charges).toEqual([(-oldCost).toString()]);
    for (const id of ["after-change-a", "after-change-b"]) {
      const row = rows.get(id);
      const cost = costOf(row, micros(NEW));
      expect(cost).toBeGreaterThan(costOf(row, micros(OLD)));
      expect(BigInt(row.cost_micros)).toBe(cost);
      expect(row.charges).toEqual([(-cost).toString()]);
    }

    const res = await summary(caller.token);
    expect(res.body.by_model).toEqual([
      expect.objectContaining({
        model: CHAT_MODEL,
        total_requests: 1,
        cost_micros: Number(oldCost),
        pricing: expect.objectContaining({
          prompt_token_price_micros: 1_000_000,
          effective_from: new Date(0).toISOString(),
        }),
      }),
      expect.objectContaining({
        model: CHAT_MODEL,
        total_requests: 2,
        cost_micros: Number(
          BigInt(rows.get("after-change-a").cost_micros) + BigInt(rows.get("after-change-b").cost_micros),
        ),
        pricing: {
          model: CHAT_MODEL,
          prompt_token_price_micros: 3_000_000,
          completion_token_price_micros: 30_000_000,
          effective_from: changedAt.toISOString(),
        },
      }),
    ]);
  });
});
