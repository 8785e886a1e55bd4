/**
 * The completion events feed (issue 6, item 6; DESIGN §3 "Completion events feed") over real
 * HTTP against two API processes on one database: one event per finished request with the
 * activity record's numbers, cursor paging both ways with no gaps or duplicates (also for flushes
 * that commit out of id order), `wait_ms` woken by NOTIFY from another process, `stream_id` and
 * team isolation, and the 400s.
 */
import pg from "pg";
import { v7 as uuidv7 } from "uuid";
import type { Principal } from "../src/services/platform/context.js";
import type { UsageRecord } from "../src/services/metering/metering.service.js";
import {
  CHAT_MODEL,
  EMBED_MODEL,
  type TestServer,
  anthropicClient,
  createTestCaller,
  eventually,
  expectEnvelope,
  expectInvalid,
  http,
  openaiClient,
  startTestServer,
} from "./support/harness.js";
import { principalOf, usageRecordFor } from "./support/records.js";

let a: TestServer;
let b: TestServer;
beforeAll(async () => {
  a = await startTestServer();
  b = await startTestServer({}, a);
}, 60_000);
afterAll(async () => {
  await b?.close();
  await a?.close();
});

function record(principal: Principal, opts: Partial<UsageRecord> = {}): UsageRecord {
  return usageRecordFor(principal, {
    usage: { promptTokens: 3, completionTokens: 4, cachedPromptTokens: 0 },
    resultJson: { ok: true },
    ...opts,
  });
}

async function feed(server: TestServer, key: string, query = "") {
  return http(server.url, "GET", `/v1/responses/events${query}`, { token: key });
}

/** Every event of the team, walked backwards from the newest with `ending_before`. */
async function walkBackwards(key: string, limit: number, extra = ""): Promise<any[]> {
  const seen: any[] = [];
  let page = await feed(a, key, `?limit=${limit}${extra}`);
  for (;;) {
    expect(page.status).toBe(200);
    seen.push(...page.body.data);
    if (!page.body.has_more) return seen;
    page = await feed(b, key, `?limit=${limit}&ending_before=${seen.at(-1).completion_id}${extra}`);
  }
}

test("when requests of every create operation finish, then each makes one event equal to its activity record", async () => {
  const caller = await createTestCaller(a.url);
  const openai = openaiClient(a.url, caller.key);
  const chat = await openai.chat.completions.create({
    model: CHAT_MODEL,
    messages: [{ role: "user", content: "Once upon a time" }],
    max_tokens: 5,
    metadata: { custom_id: "ev-chat" },
  } as never);
  const response = await openai.responses.create({ model: CHAT_MODEL, input: "Hello", max_output_tokens: 5 });
  await openai.embeddings.create({ model: EMBED_MODEL, input: "a cat" });
  await anthropicClient(a.url, caller.key).messages.create({
    model: CHAT_MODEL,
    max_tokens: 5,
    messages: [{ role: "user", content: "Hi" }],
  });
  const page = await feed(a, caller.key);
  expect(page.status).toBe(200);
  expect(page.body).toEqual({ object: "list", data: expect.any(Array), has_more: false });
  expect(page.body.data).toHaveLength(4);
  const activity = await a.db<any>("SELECT * FROM activity WHERE team_id = $1", [caller.teamId]);
  expect(activity).toHaveLength(4);
  for (const event of page.body.data) {
    const row = activity.find((r) => r.id === event.response_id);
    expect(row).toBeDefined();
    expect(event).toEqual({
      completion_id: expect.stringMatching(/^[0-9a-f]{8}-[0-9a-f]{4}-7/),
      response_id: row.id,
      custom_id: row.custom_id,
      stream_id: null,
      batch_id: null,
      model: row.model,
      // A Response cut at its token limit is `incomplete` in the feed, as it says itself.
      status: row.result_json?.object === "response" ? row.result_json.status : row.status,
      result: row.result_json,
      error: row.error_json,
      prompt_tokens: row.prompt_tokens,
      completion_tokens: row.completion_tokens,
      total_tokens: row.total_tokens,
      cost_micros: Number(row.cost_micros),
      completed_at: new Date(row.completed_at).toISOString(),
    });
  }
  // The Responses event names the Response (its id is the request id) and says its status.
  const responseEvent = page.body.data.find((e: any) => e.response_id === response.id);
  expect(responseEvent.status).toBe(response.status);
  expect(response.status).toBe("incomplete"); // 5 tokens: cut at the limit
  expect(chat.id).toBeTruthy();
  expect(page.body.data.find((e: any) => e.custom_id === "ev-chat")).toBeDefined();
  // Newest first: the Anthropic message was the last request.
  expect(page.body.data[0].response_id).toBe(activity.sort((x, y) => (x.id < y.id ? 1 : -1))[0].id);
});

test("when a request fails or is cancelled, then its event carries that status and the error", async () => {
  const caller = await createTestCaller(a.url);
  const principal = principalOf(caller);
  await a.app.metering.record(
    record(principal, { status: "failed", resultJson: null, errorJson: { code: "engine_error", message: "x" } }),
  );
  await a.app.metering.record(record(principal, { status: "cancelled" }));
  const page = await feed(a, caller.key);
  expect(page.body.data.map((e: any) => e.status)).toEqual(["cancelled", "failed"]);
  expect(page.body.data[1].error).toEqual({ code: "engine_error", message: "x" });
});

test("when the same request is recorded twice, then it has one event", async () => {
  const caller = await createTestCaller(a.url);
  const twice = record(principalOf(caller), { costMicros: 5n });
  await Promise.all([a.app.metering.record(twice), b.app.metering.record(twice)]);
  await a.app.metering.record(twice);
  const page = await feed(a, caller.key);
  expect(page.body.data.map((e: any) => e.response_id)).toEqual([twice.id]);
});

test("when 250 events are recorded concurrently by two processes, then a tailer and both paging directions see each once", async () => {
  const caller = await createTestCaller(a.url);
  const principal = principalOf(caller);
  const seed = record(principal);
  await a.app.metering.record(seed);
  const [{ completion_id: start }] = (await feed(a, caller.key)).body.data;

  // A tailer follows the feed with `starting_after` while the records commit.
  const tailed: string[] = [];
  let done = false;
  const tailer = (async () => {
    let cursor = start;
    for (;;) {
      const finished = done;
      const page = await feed(b, caller.key, `?starting_after=${cursor}&limit=100`);
      expect(page.status).toBe(200);
      for (const e of page.body.data) tailed.push(e.response_id);
      if (page.body.data.length > 0) cursor = page.body.data.at(-1).completion_id;
      if (finished && !page.body.has_more) return;
    }
  })();

  const records = Array.from({ length: 250 }, (_, i) => record(principal, { customId: `n${i}`, costMicros: 10n }));
  // Alternate processes and small delays, so the two processes' flushes interleave.
  await Promise.all(
    records.map(async (r, i) => {
      await new Promise((resolve) => setTimeout(resolve, (i % 25) * 2));
      return (i % 2 === 0 ? a : b).app.metering.record(r);
    }),
  );
  done = true;
  await tailer;
  const ids = records.map((r) => r.id).sort();
  expect([...tailed].sort()).toEqual(ids);

  const backwards = await walkBackwards(caller.key, 7);
  expect(backwards.map((e) => e.response_id).sort()).toEqual([...ids, seed.id].sort());
  // Forwards from the oldest: the same order, reversed; no gaps, no duplicates.
  const forwards: any[] = [];
  let cursor = backwards.at(-1).completion_id;
  for (;;) {
    const page = await feed(a, caller.key, `?limit=9&starting_after=${cursor}`);
    forwards.push(...page.body.data);
    if (!page.body.has_more) break;
    cursor = page.body.data.at(-1).completion_id;
  }
  expect(forwards.map((e) => e.completion_id)).toEqual(
    backwards
      .slice(0, -1)
      .reverse()
      .map((e) => e.completion_id),
  );
  // The feed's order is the commit order, which the tailer saw too.
  expect(tailed).toEqual(forwards.map((e) => e.response_id));
}, 60_000);

/**
 * Ways to stall process A's flush after its completion id was allocated while process B's free,
 * unstored record is not stalled by them: the team row (A's charge locks it early in its
 * statement), or an uncommitted Response row with A's id (A's stored-response insert waits for
 * it late in its statement, after its events were positioned). Each returns how to let A go.
 */
const stalls: Array<[string, (holder: pg.Client, older: UsageRecord) => Promise<string>]> = [
  [
    "the team row is locked",
    async (holder, older) => {
      await holder.query("SELECT 1 FROM teams WHERE id = $1 FOR NO KEY UPDATE", [older.principal.teamId]);
      return "COMMIT";
    },
  ],
  [
    "its stored response conflicts with an uncommitted one",
    async (holder, older) => {
      await holder.query(
        `INSERT INTO responses (id, team_id, model, status, request_json, response_json, created_at)
         VALUES ($1, $2, 'm', 'completed', '{}', '{}', now())`,
        [older.id, older.principal.teamId],
      );
      return "ROLLBACK";
    },
  ],
];

test.each(stalls)(
  "when a flush with an older completion id commits after a newer one (%s), then a tailer still gets it",
  async (_name, stall) => {
    const caller = await createTestCaller(a.url);
    const principal = principalOf(caller);
    await a.app.metering.record(record(principal));
    let cursor = (await feed(a, caller.key)).body.data[0].completion_id;
    const seen: string[] = [];
    const poll = async () => {
      const page = await feed(a, caller.key, `?starting_after=${cursor}`);
      for (const e of page.body.data) seen.push(e.response_id);
      if (page.body.data.length > 0) cursor = page.body.data.at(-1).completion_id;
    };

    const holder = new pg.Client({ connectionString: a.databaseUrl });
    await holder.connect();
    try {
      await holder.query("BEGIN");
      const older = record(principal, {
        costMicros: 100n,
        response: { status: "completed", background: false, metadata: null, requestJson: {}, responseJson: {} },
      });
      const release = await stall(holder, older);
      const pendingOlder = a.app.metering.record(older);
      const waiting = () =>
        holder
          .query<{ n: number }>(
            "SELECT count(*)::int AS n FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'",
          )
          .then((r) => r.rows[0].n);
      expect(await eventually(async () => (await waiting()) >= 1, 5_000)).toBe(true);
      const newer = record(principal);
      let newerDone = false;
      const pendingNewer = b.app.metering.record(newer).then(() => (newerDone = true));
      // B's flush either commits now (out of id order) or queues behind A's; either way, look.
      await eventually(async () => newerDone || (await waiting()) >= 2, 5_000);
      await poll();
      await holder.query(release);
      await Promise.all([pendingOlder, pendingNewer]);
      await poll();
      expect(seen.sort()).toEqual([older.id, newer.id].sort());
    } finally {
      await holder.end();
    }
  },
);

test("when a long-poll waits and another process records an event, then it returns with that event", async () => {
  const caller = await createTestCaller(a.url);
  const principal = principalOf(caller);
  await a.app.metering.record(record(principal));
  const [{ completion_id: cursor }] = (await feed(a, caller.key)).body.data;

  const waitingBefore = a.app.events.waiting;
  const started = Date.now();
  const pending = feed(a, caller.key, `?starting_after=${cursor}&wait_ms=30000`);
  expect(await eventually(async () => a.app.events.waiting > waitingBefore, 5_000)).toBe(true);
  const later = record(principal);
  await b.app.metering.record(later);
  const page = await pending;
  expect(page.status).toBe(200);
  expect(page.body.data.map((e: any) => e.response_id)).toEqual([later.id]);
  // Woken by the event, not by the end of the wait.
  expect(Date.now() - started).toBeLessThan(30_000);
}, 40_000);

test("when the whole feed is empty and wait_ms is set, then the first event ends the wait", async () => {
  const caller = await createTestCaller(a.url);
  const started = Date.now();
  const pending = feed(a, caller.key, "?wait_ms=30000");
  expect(await eventually(async () => a.app.events.waiting > 0, 5_000)).toBe(true);
  const first = record(principalOf(caller));
  await b.app.metering.record(first);
  const page = await pending;
  expect(page.body.data.map((e: any) => e.response_id)).toEqual([first.id]);
  // Woken by the event, not by the end of the wait.
  expect(Date.now() - started).toBeLessThan(30_000);
}, 40_000);

test("when nothing arrives during wait_ms, then an empty page comes back after the wait", async () => {
  const caller = await createTestCaller(a.url);
  await a.app.metering.record(record(principalOf(caller)));
  const [{ completion_id: cursor }] = (await feed(a, caller.key)).body.data;
  // Another team's event does not end the wait.
  const other = await createTestCaller(a.url);
  const pending = feed(a, caller.key, `?starting_after=${cursor}&wait_ms=400`);
  await b.app.metering.record(record(principalOf(other)));
  const page = await pending;
  expect(page.status).toBe(200);
  expect(page.body).toEqual({ object: "list", data: [], has_more: false });
});

test("when events carry stream ids, then stream_id shows only that stream's, in both directions", async () => {
  const caller = await createTestCaller(a.url);
  const principal = principalOf(caller);
  const s1 = uuidv7();
  const s2 = uuidv7();
  for (let i = 0; i < 6; i++) {
    await (i % 2 ? a : b).app.metering.record(record(principal, { streamId: i % 3 === 0 ? s1 : s2 }));
  }
  const page = await feed(a, caller.key, `?stream_id=${s1}`);
  expect(page.body.data).toHaveLength(2);
  expect(page.body.data.every((e: any) => e.stream_id === s1)).toBe(true);
  const back = await walkBackwards(caller.key, 1, `&stream_id=${s2}`);
  expect(back).toHaveLength(4);
  expect(back.every((e: any) => e.stream_id === s2)).toBe(true);
  expect((await feed(a, caller.key, `?stream_id=${uuidv7()}`)).body.data).toEqual([]);
});

test("when another team reads the feed, then it sees none of this team's events and cannot use its cursors", async () => {
  const caller = await createTestCaller(a.url);
  const other = await createTestCaller(a.url);
  await a.app.metering.record(record(principalOf(caller)));
  const [{ completion_id: cursor }] = (await feed(a, caller.key)).body.data;
  expect((await feed(a, other.key)).body).toEqual({ object: "list", data: [], has_more: false });
  expectInvalid(await feed(a, other.key, `?starting_after=${cursor}`), "starting_after");
  expectInvalid(await feed(a, other.key, `?ending_before=${cursor}`), "ending_before");
});

test("when the feed is read without credentials, then 401", async () => {
  expectEnvelope(await http(a.url, "GET", "/v1/responses/events"), 401);
  expectEnvelope(await http(a.url, "GET", "/v1/responses/events", { token: "sk-nope" }), 401);
});

test("when limit, wait_ms or a cursor is bad, then 400 names it", async () => {
  const caller = await createTestCaller(a.url);
  for (const bad of ["0", "101", "-1", "1e1", "0x10", "5.0", "abc"]) {
    expectInvalid(await feed(a, caller.key, `?limit=${bad}`), "limit");
  }
  for (const bad of ["30001", "-5", "1.5", "x"]) {
    expectInvalid(await feed(a, caller.key, `?wait_ms=${bad}`), "wait_ms");
  }
  expectInvalid(await feed(a, caller.key, "?starting_after=nope"), "starting_after");
  expectInvalid(await feed(a, caller.key, `?starting_after=${uuidv7()}`), "starting_after");
  expectInvalid(await feed(a, caller.key, `?ending_before=${uuidv7()}`), "ending_before");
  expectInvalid(await feed(a, caller.key, "?stream_id=nope"), "stream_id");
  await a.app.metering.record(record(principalOf(caller)));
  const [{ completion_id: id }] = (await feed(a, caller.key)).body.data;
  expectInvalid(await feed(a, caller.key, `?starting_after=${id}&ending_before=${id}`), "ending_before");
  // Limits at the edges are fine.
  expect((await feed(a, caller.key, "?limit=1&wait_ms=0")).status).toBe(200);
  expect((await feed(a, caller.key, "?limit=100")).status).toBe(200);
});

test("when events are older than 30 days, then the feed no longer shows them and cleanup deletes them", async () => {
  const caller = await createTestCaller(a.url);
  const old = record(principalOf(caller));
  await a.app.metering.record(old);
  await a.app.metering.record(record(principalOf(caller)));
  await a.db("UPDATE completion_events SET completed_at = now() - interval '31 days' WHERE response_id = $1", [old.id]);
  const page = await feed(a, caller.key);
  expect(page.body.data.map((e: any) => e.response_id)).not.toContain(old.id);
  expect(page.body.data).toHaveLength(1);
  expect(await a.app.events.deleteExpired()).toBeGreaterThanOrEqual(1);
  expect(await a.db("SELECT 1 FROM completion_events WHERE response_id = $1", [old.id])).toHaveLength(0);
});

test("when the server shuts down while a long-poll waits, then the poll is answered instead of holding the shutdown", async () => {
  const c = await startTestServer({}, a);
  const caller = await createTestCaller(a.url);
  const pending = feed(c, caller.key, "?wait_ms=30000");
  expect(await eventually(async () => c.app.events.waiting > 0, 5_000)).toBe(true);
  const started = Date.now();
  await c.close();
  const page = await pending;
  expect(page.status).toBe(200);
  expect(page.body).toEqual({ object: "list", data: [], has_more: false });
  // The long-poll did not hold the HTTP drain until the end of its wait.
  expect(Date.now() - started).toBeLessThan(30_000);
}, 60_000);
