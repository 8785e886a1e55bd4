// The subscription example of docs/graphql.md: prints the team's completion events as they happen,
// over graphql-ws (make requests in another terminal), until Ctrl-C or, given a number, that many.
//   SWITCHYARD_BASE_URL=$BASE SWITCHYARD_API_KEY=sk_… node examples/graphql-events.mjs [count]
// SWITCHYARD_BASE_URL (the server, without /v1) defaults to http://localhost:$PORT, PORT to 8080.
import { createClient } from "graphql-ws";
import WebSocket from "ws";

const base = process.env.SWITCHYARD_BASE_URL ?? `http://localhost:${process.env.PORT ?? 8080}`;
const count = Number(process.argv[2] ?? Infinity);

const client = createClient({
  url: `${base.replace(/^http/, "ws")}/graphql`,
  webSocketImpl: WebSocket, // Node 22 and later have a global WebSocket; Node 20 does not
  // An API key or an access token, checked when the socket opens (refused: closed with 4403).
  connectionParams: { authorization: `Bearer ${process.env.SWITCHYARD_API_KEY}` },
  on: { connected: () => console.log("subscribed: waiting for completion events") },
  // A refused credential closes the socket with 4403: say so at once instead of retrying.
  retryAttempts: 0,
});

const events = client.iterate({
  query: `subscription {
    completionEvents { completionId status model totalTokens costMicros }
  }`,
});
let seen = 0;
try {
  for await (const { data, errors } of events) {
    if (errors) throw new Error(errors[0].message);
    const e = data.completionEvents;
    console.log("event:", e.status, e.model, e.totalTokens, "tokens,", e.costMicros, "micro-USD");
    if (++seen >= count) break;
  }
} catch (err) {
  // graphql-ws rejects with the socket's CloseEvent: print its code and reason, not the object.
  const reason = err && typeof err === "object" && "code" in err ? `closed ${err.code} ${err.reason}` : String(err);
  console.error(`subscription failed: ${reason}`);
  process.exitCode = 1;
}
await client.dispose();
