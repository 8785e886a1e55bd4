/**
 * The webhook client connects to the address it checked (DESIGN §3 Webhooks: "resolve, classify,
 * connect to that address"), never to a second resolution of the name, and keeps the URL's host
 * in the Host header. A resolver stands in for DNS; the receiver is real (loopback).
 */
import { attemptDelivery } from "../../src/services/events/webhooks/webhook-client.js";
import { type WebhookReceiver, startWebhookReceiver } from "../support/webhook-receiver.js";

let receiver: WebhookReceiver;
beforeAll(async () => {
  receiver = await startWebhookReceiver();
});
afterAll(() => receiver.close());

const port = () => new URL(receiver.url).port;

test("when a name resolves to an allowed address, then the connection goes to that address and Host stays the name", async () => {
  const asked: string[] = [];
  const result = await attemptDelivery({
    // `.invalid` never resolves through the system resolver: only the checked address can be reached.
    url: `http://hooks.example.invalid:${port()}/checked`,
    headers: { "content-type": "application/json" },
    body: "{}",
    timeoutMs: 2000,
    allowPrivate: true,
    resolve: async (host) => {
      asked.push(host);
      return [{ address: "127.0.0.1", family: 4 }];
    },
  });
  expect(result).toMatchObject({ ok: true, statusCode: 200, error: null, refused: false });
  expect(asked).toEqual(["hooks.example.invalid"]);
  const [got] = receiver.on("/checked");
  expect(got.headers.host).toBe(`hooks.example.invalid:${port()}`);
});

test("when any resolved address is private, then the attempt is refused without a connection", async () => {
  const before = receiver.received.length;
  const result = await attemptDelivery({
    url: `http://rebind.example.invalid:${port()}/refused`,
    headers: {},
    body: "{}",
    timeoutMs: 2000,
    allowPrivate: false,
    resolve: async () => [
      { address: "93.184.216.34", family: 4 },
      { address: "127.0.0.1", family: 4 },
    ],
  });
  expect(result).toMatchObject({ ok: false, refused: true, statusCode: null });
  expect(result.error).toBe("refused: private address (loopback); set SWITCHYARD_WEBHOOK_ALLOW_PRIVATE=true to allow");
  expect(receiver.received.length).toBe(before);
});
