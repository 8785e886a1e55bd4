/**
 * Completion events over GraphQL (issue 6, item 7): the `completionEvents` query with the REST
 * cursors, and the `completionEvents(streamId)` subscription over graphql-ws on `/graphql`,
 * which delivers events recorded by another API process on the same database (one LISTEN per
 * process, fan-out in memory), is scoped to the caller's team and refused with bad credentials.
 */
import { type Client, createClient } from "graphql-ws";
import { v7 as uuidv7 } from "uuid";
import WebSocket from "ws";
import type { Principal } from "../src/services/platform/context.js";
import type { UsageRecord } from "../src/services/metering/metering.service.js";
import { CHAT_MODEL, type TestServer, createTestCaller, eventually, http, startTestServer } from "./support/harness.js";
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
    costMicros: 7n,
    resultJson: { answer: "hi" },
    ...opts,
  });
}

function wsClient(server: TestServer, authorization?: string): Client {
  return createClient({
    url: `${server.url.replace(/^http/, "ws")}/graphql`,
    webSocketImpl: WebSocket,
    connectionParams: authorization ? { authorization } : {},
    retryAttempts: 0,
  });
}

const SUBSCRIPTION = `subscription ($streamId: ID) {
  completionEvents(streamId: $streamId) {
    completionId responseId customId streamId model status result error
    promptTokens completionTokens totalTokens costMicros completedAt
  }
}`;

/** Subscribes and collects what arrives; `errors` gets a refusal or a GraphQL error. */
function subscribe(client: Client, streamId?: string) {
  const received: any[] = [];
  const errors: unknown[] = [];
  const dispose = client.subscribe(
    { query: SUBSCRIPTION, variables: streamId ? { streamId } : {} },
    {
      next: (result) => {
        if (result.errors) errors.push(...result.errors);
        else received.push(result.data!.completionEvents);
      },
      error: (err) => errors.push(err),
      complete: () => undefined,
    },
  );
  return { received, errors, dispose };
}

test("when another process records events, then a graphql-ws subscriber on this one receives them", async () => {
  const caller = await createTestCaller(a.url);
  const principal = principalOf(caller);
  const client = wsClient(a, `Bearer ${caller.key}`);
  try {
    const sub = subscribe(client);
    expect(await eventually(async () => a.app.events.subscribers > 0, 5_000)).toBe(true);
    const recorded = record(principal, { customId: "from-b" });
    await b.app.metering.record(recorded);
    expect(await eventually(async () => sub.received.length > 0, 5_000)).toBe(true);
    expect(sub.errors).toEqual([]);
    const [row] = await a.db<any>("SELECT * FROM activity WHERE id = $1", [recorded.id]);
    expect(sub.received).toEqual([
      {
        completionId: expect.any(String),
        responseId: recorded.id,
        customId: "from-b",
        streamId: null,
        model: CHAT_MODEL,
        status: "completed",
        result: { answer: "hi" },
        error: null,
        promptTokens: row.prompt_tokens,
        completionTokens: row.completion_tokens,
        totalTokens: row.total_tokens,
        costMicros: Number(row.cost_micros),
        completedAt: new Date(row.completed_at).toISOString(),
      },
    ]);
    // Several more, from both processes, arrive in feed order.
    const more = Array.from({ length: 6 }, () => record(principal));
    await Promise.all(more.map((r, i) => (i % 2 ? a : b).app.metering.record(r)));
    expect(await eventually(async () => sub.received.length === 7, 5_000)).toBe(true);
    const feed = await http(a.url, "GET", "/v1/responses/events?limit=7", { token: caller.key });
    expect(sub.received.map((e) => e.completionId)).toEqual(feed.body.data.map((e: any) => e.completion_id).reverse());
    sub.dispose();
    expect(await eventually(async () => a.app.events.subscribers === 0, 5_000)).toBe(true);
  } finally {
    await client.dispose();
  }
});

test("when subscribed to one stream, then only that stream's events of the caller's team arrive", async () => {
  const caller = await createTestCaller(a.url);
  const other = await createTestCaller(a.url);
  const stream = uuidv7();
  const client = wsClient(a, `Bearer ${caller.key}`);
  try {
    const before = a.app.events.subscribers;
    const sub = subscribe(client, stream);
    expect(await eventually(async () => a.app.events.subscribers > before, 5_000)).toBe(true);
    await b.app.metering.record(record(principalOf(caller))); // no stream
    await b.app.metering.record(record(principalOf(caller), { streamId: uuidv7() })); // another stream
    await b.app.metering.record(record(principalOf(other), { streamId: stream })); // another team
    const wanted = record(principalOf(caller), { streamId: stream });
    await b.app.metering.record(wanted);
    expect(await eventually(async () => sub.received.length > 0, 5_000)).toBe(true);
    // The unwanted ones were committed first, so they would have arrived before it.
    expect(sub.received.map((e) => e.responseId)).toEqual([wanted.id]);
    sub.dispose();
  } finally {
    await client.dispose();
  }
});

test("when the subscription presents bad credentials, then it is refused", async () => {
  const client = wsClient(a, "Bearer sk-not-a-key");
  try {
    const sub = subscribe(client);
    expect(await eventually(async () => sub.errors.length > 0, 5_000)).toBe(true);
    expect(sub.errors[0]).toMatchObject({ code: 4403 });
  } finally {
    await client.dispose();
  }
  const anonymous = wsClient(a);
  try {
    const sub = subscribe(anonymous);
    expect(await eventually(async () => sub.errors.length > 0, 5_000)).toBe(true);
    expect(sub.errors[0]).toMatchObject({ extensions: { status_code: 401 } });
  } finally {
    await anonymous.dispose();
  }
});

test("when the completionEvents query pages with cursors, then it matches the REST feed", async () => {
  const caller = await createTestCaller(a.url);
  const principal = principalOf(caller);
  const stream = uuidv7();
  for (let i = 0; i < 5; i++) await a.app.metering.record(record(principal, { streamId: i < 3 ? stream : null }));
  const gql = (query: string, variables: Record<string, unknown> = {}) =>
    http(a.url, "POST", "/graphql", { token: caller.key, body: { query, variables } });
  const q = `query ($limit: Int, $after: ID, $before: ID, $streamId: ID) {
    completionEvents(limit: $limit, startingAfter: $after, endingBefore: $before, streamId: $streamId) {
      hasMore data { completionId responseId costMicros }
    }
  }`;
  const rest = (await http(a.url, "GET", "/v1/responses/events", { token: caller.key })).body.data;
  const newest = await gql(q, { limit: 2 });
  expect(newest.body.data.completionEvents).toEqual({
    hasMore: true,
    data: rest.slice(0, 2).map((e: any) => ({
      completionId: e.completion_id,
      responseId: e.response_id,
      costMicros: e.cost_micros,
    })),
  });
  const older = await gql(q, { limit: 10, before: rest[1].completion_id });
  expect(older.body.data.completionEvents.data.map((e: any) => e.completionId)).toEqual(
    rest.slice(2).map((e: any) => e.completion_id),
  );
  expect(older.body.data.completionEvents.hasMore).toBe(false);
  const after = await gql(q, { after: rest[4].completion_id, streamId: stream });
  expect(after.body.data.completionEvents.data).toHaveLength(2);
  const bad = await gql(q, { limit: 101 });
  expect(bad.body.errors[0].extensions).toMatchObject({ status_code: 400 });
  const unknown = await gql(q, { after: uuidv7() });
  expect(unknown.body.errors[0].extensions).toMatchObject({ status_code: 400 });
  const anonymous = await http(a.url, "POST", "/graphql", { body: { query: q } });
  expect(anonymous.body.errors[0].extensions).toMatchObject({ status_code: 401 });
});

test("when subscribed events name one of the team's streams, then each resolves that stream as it is now", async () => {
  const caller = await createTestCaller(a.url);
  const principal = principalOf(caller);
  const created = await http(a.url, "POST", "/v1/streams", { token: caller.key, body: { name: "before" } });
  const streamId = created.body.id as string;
  const client = wsClient(a, `Bearer ${caller.key}`);
  try {
    const received: any[] = [];
    const before = a.app.events.subscribers;
    const dispose = client.subscribe(
      { query: "subscription { completionEvents { responseId stream { id name status } } }" },
      {
        next: (r) => received.push(r.data?.completionEvents ?? r.errors),
        error: () => undefined,
        complete: () => undefined,
      },
    );
    expect(await eventually(async () => a.app.events.subscribers > before, 5_000)).toBe(true);
    await b.app.metering.record(record(principal, { streamId }));
    expect(await eventually(async () => received.length === 1, 5_000)).toBe(true);
    expect(received[0].stream).toEqual({ id: streamId, name: "before", status: "open" });
    // The subscription's context lives on; the stream it shows does not go stale.
    await http(a.url, "PATCH", `/v1/streams/${streamId}`, {
      token: caller.key,
      body: { name: "after", status: "archived" },
    });
    await b.app.metering.record(record(principal, { streamId }));
    await b.app.metering.record(record(principal));
    expect(await eventually(async () => received.length === 3, 5_000)).toBe(true);
    expect(received[1].stream).toEqual({ id: streamId, name: "after", status: "archived" });
    expect(received[2].stream).toBeNull();
    dispose();
  } finally {
    await client.dispose();
  }
});
