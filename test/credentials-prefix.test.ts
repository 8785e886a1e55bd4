/**
 * An API key is found by the SHA-256 of the whole key, never by its public 12-character prefix
 * (DESIGN §3 Credentials; issue 14, item 1). The prefix is shown in every key list and activity
 * record, so a key that only matches it must be refused, and two keys that share it must each
 * authenticate as their own owner: on the data plane and the control plane, through
 * `Authorization: Bearer` and `x-api-key`, over REST and GraphQL (HTTP and graphql-ws).
 */
import { createHash, randomInt } from "node:crypto";
import { createClient } from "graphql-ws";
import { v7 as uuidv7 } from "uuid";
import WebSocket from "ws";
import {
  CHAT_MODEL,
  type TestServer,
  activityByCustomId,
  createTestCaller,
  expectEnvelope,
  http,
  startTestServer,
} from "./support/harness.js";

let server: TestServer;
let alice: Awaited<ReturnType<typeof createTestCaller>>;
let bob: Awaited<ReturnType<typeof createTestCaller>>;

beforeAll(async () => {
  server = await startTestServer({ engineSequences: 2 });
  alice = await createTestCaller(server.url);
  bob = await createTestCaller(server.url);
});
afterAll(() => server.close());

const BASE62 = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
const PREFIX_CHARS = 12;

/** A well-formed key (`sk_` + 48 base62) that starts with `key`'s public prefix and differs after it. */
function samePrefixOtherTail(key: string): string {
  let tail = "";
  while (tail.length < key.length - PREFIX_CHARS) tail += BASE62[randomInt(62)];
  const forged = key.slice(0, PREFIX_CHARS) + tail;
  return forged === key ? samePrefixOtherTail(key) : forged;
}

/** How a credential travels: both headers, on every surface that authenticates. */
const carriers: Array<[string, (credential: string) => Record<string, string>]> = [
  ["Authorization: Bearer", (credential) => ({ authorization: `Bearer ${credential}` })],
  ["x-api-key", (credential) => ({ "x-api-key": credential })],
];

const ME = "query { me { id email teamId } }";

async function graphqlMe(headers: Record<string, string>) {
  const res = await http(server.url, "POST", "/graphql", { headers, body: { query: ME } });
  return res.body as { data: { me: { id: string; email: string; teamId: string } } | null; errors?: any[] };
}

function wsClient(credential: string) {
  return createClient({
    url: `${server.url.replace(/^http/, "ws")}/graphql`,
    webSocketImpl: WebSocket,
    connectionParams: { authorization: `Bearer ${credential}` },
    retryAttempts: 0,
    lazy: true,
  });
}

async function wsMe(credential: string): Promise<unknown> {
  const client = wsClient(credential);
  try {
    const results: unknown[] = [];
    for await (const result of client.iterate({ query: ME })) results.push(result);
    return results;
  } finally {
    await client.dispose();
  }
}

describe("a key that only shares a real key's prefix", () => {
  test.each(carriers)(
    "when it is sent as %s to /v1 and /control/v1 (REST), then every surface answers 401",
    async (_name, headers) => {
      // The real key works first, so a lookup by prefix would find (and cache) its row.
      expect((await http(server.url, "GET", "/v1/auth/me", { headers: headers(alice.key) })).status).toBe(200);
      const forged = samePrefixOtherTail(alice.key);
      expect(forged.slice(0, PREFIX_CHARS)).toBe(alice.keyPrefix);

      expectEnvelope(await http(server.url, "GET", "/v1/auth/me", { headers: headers(forged) }), 401);
      expectEnvelope(await http(server.url, "GET", "/v1/models", { headers: headers(forged) }), 401);
      expectEnvelope(await http(server.url, "GET", "/control/v1/auth/me", { headers: headers(forged) }), 401);
      expectEnvelope(await http(server.url, "GET", "/control/v1/auth/api-keys", { headers: headers(forged) }), 401);
      const chat = await http(server.url, "POST", "/v1/chat/completions", {
        headers: headers(forged),
        body: {
          model: CHAT_MODEL,
          messages: [{ role: "user", content: "Once" }],
          max_tokens: 2,
          metadata: { custom_id: `forged-${_name}` },
        },
      });
      expectEnvelope(chat, 401);
      const [{ n }] = await server.db<{ n: number }>("SELECT count(*)::int AS n FROM activity WHERE custom_id = $1", [
        `forged-${_name}`,
      ]);
      expect(n).toBe(0);
    },
  );

  test.each(carriers)("when it is sent as %s to /graphql, then me answers 401", async (_name, headers) => {
    expect((await graphqlMe(headers(alice.key))).data?.me.id).toBe(alice.userId);
    const answer = await graphqlMe(headers(samePrefixOtherTail(alice.key)));
    expect(answer.data).toBeNull();
    expect(answer.errors).toHaveLength(1);
    expect(answer.errors![0].extensions).toMatchObject({ code: "UNAUTHENTICATED", status_code: 401 });
  });

  test("when it opens a graphql-ws socket, then the socket is refused (4403)", async () => {
    expect(await wsMe(alice.key)).toEqual([
      { data: { me: { id: alice.userId, email: alice.email, teamId: alice.teamId } } },
    ]);
    await expect(wsMe(samePrefixOtherTail(alice.key))).rejects.toMatchObject({ code: 4403 });
  });
});

describe("two keys of different owners that share a prefix", () => {
  /** Bob's key, stored as the service stores keys (SHA-256 only) but under Alice's prefix. */
  let twin: { key: string; id: string };

  beforeAll(async () => {
    const key = samePrefixOtherTail(alice.key);
    const id = uuidv7();
    await server.db(
      `INSERT INTO api_keys (id, team_id, user_id, name, prefix, key_hash) VALUES ($1, $2, $3, 'twin', $4, $5)`,
      [id, bob.teamId, bob.userId, key.slice(0, PREFIX_CHARS), createHash("sha256").update(key).digest()],
    );
    twin = { key, id };
    const rows = await server.db("SELECT id FROM api_keys WHERE prefix = $1", [alice.keyPrefix]);
    expect(rows).toHaveLength(2);
  });

  test.each(carriers)("when each is sent as %s over REST, then each is its own owner", async (_name, headers) => {
    for (const [key, owner] of [
      [alice.key, alice],
      [twin.key, bob],
      [alice.key, alice],
    ] as const) {
      const data = await http(server.url, "GET", "/v1/auth/me", { headers: headers(key) });
      expect(data.status).toBe(200);
      expect(data.body.username).toBe(owner.email);
      const control = await http(server.url, "GET", "/control/v1/auth/me", { headers: headers(key) });
      expect(control.status).toBe(200);
      expect(control.body).toMatchObject({ id: owner.userId, email: owner.email, team_id: owner.teamId });
    }
  });

  test.each(carriers)("when each is sent as %s over GraphQL, then me is its own owner", async (_name, headers) => {
    expect((await graphqlMe(headers(twin.key))).data?.me).toEqual({
      id: bob.userId,
      email: bob.email,
      teamId: bob.teamId,
    });
    expect((await graphqlMe(headers(alice.key))).data?.me).toEqual({
      id: alice.userId,
      email: alice.email,
      teamId: alice.teamId,
    });
  });

  test("when each opens a graphql-ws socket, then me is its own owner", async () => {
    expect(await wsMe(twin.key)).toEqual([{ data: { me: { id: bob.userId, email: bob.email, teamId: bob.teamId } } }]);
    expect(await wsMe(alice.key)).toEqual([
      { data: { me: { id: alice.userId, email: alice.email, teamId: alice.teamId } } },
    ]);
  });

  test.each(carriers)(
    "when each makes a chat completion with %s, then its activity row names its own key, user and team",
    async (name, headers) => {
      for (const [key, owner, keyId, tag] of [
        [twin.key, bob, twin.id, "twin"],
        [alice.key, alice, alice.keyId, "alice"],
      ] as const) {
        const customId = `${tag}-${name}`;
        const res = await http(server.url, "POST", "/v1/chat/completions", {
          headers: headers(key),
          body: {
            model: CHAT_MODEL,
            messages: [{ role: "user", content: "Once upon a time" }],
            max_tokens: 3,
            metadata: { custom_id: customId },
          },
        });
        expect(res.status).toBe(200);
        const row = await activityByCustomId(server, customId);
        expect(row).toMatchObject({
          api_key_id: keyId,
          api_key_prefix: alice.keyPrefix,
          user_id: owner.userId,
          team_id: owner.teamId,
        });
      }
    },
  );
});
