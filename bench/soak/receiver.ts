/**
 * The soak's completion-webhook receiver (issue 28, Checks: "background with webhooks … every
 * webhook reconciled"): an HTTP server on loopback that records every delivery attempt by its
 * `webhook-id` header (the body's `id`: the Response id of a background response, `chatcmpl-<id>`
 * of a chat completion) with the answer it gave, the body's `status` and whether the
 * `Authorization` header carried the soak's `webhook_token`. It answers 200, except the first
 * attempt of every `failFirstEvery`-th new id, which gets a 500 so the service's retry runs (spec:
 * a non-2xx answer is retried); those re-sends are expected, not duplicates.
 */
import { randomBytes } from "node:crypto";
import http from "node:http";

/** One attempt as the receiver saw it. */
export interface ReceivedAttempt {
  /** What the receiver answered: 200, or 500 for a failed-once first attempt. */
  answered: number;
  /** The body's `status` (undefined when the body was not a JSON object with one). */
  status: string | undefined;
  /** `Authorization: Bearer <token>` was present and right. */
  authorized: boolean;
}

export interface Receiver {
  /** `http://127.0.0.1:<port>/hook`: the soak's `metadata.completion_webhook`. */
  url: string;
  /** The soak's `metadata.webhook_token`. */
  token: string;
  /** Attempts by `webhook-id`, in arrival order. */
  attempts: Map<string, ReceivedAttempt[]>;
  /** Attempts received in all. */
  requests(): number;
  /** Ids whose first attempt was answered 500 on purpose. */
  failedOnce: Set<string>;
  /** Deliveries of an id answered 2xx after it had already been answered 2xx (should be 0). */
  duplicates(): number;
  /** The first attempt of `id` answered 2xx (undefined when none was). */
  delivered(id: string): ReceivedAttempt | undefined;
  close(): Promise<void>;
}

/** Starts the receiver on 127.0.0.1 (a free port). `failFirstEvery`: 0 never fails on purpose. */
export async function startReceiver(failFirstEvery: number): Promise<Receiver> {
  const token = `soak-${randomBytes(12).toString("hex")}`;
  const attempts = new Map<string, ReceivedAttempt[]>();
  const failedOnce = new Set<string>();
  let total = 0;
  const server = http.createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on("data", (c: Buffer) => chunks.push(c));
    req.on("end", () => {
      total++;
      const id = String(req.headers["webhook-id"]);
      let status: string | undefined;
      try {
        const body = JSON.parse(Buffer.concat(chunks).toString("utf8")) as { status?: unknown } | null;
        if (typeof body?.status === "string") status = body.status;
      } catch {
        // Recorded with no status: the reconciliation counts it as not terminal.
      }
      let list = attempts.get(id);
      if (!list) attempts.set(id, (list = []));
      const fail = failFirstEvery > 0 && list.length === 0 && attempts.size % failFirstEvery === 0;
      if (fail) failedOnce.add(id);
      const answered = fail ? 500 : 200;
      list.push({ answered, status, authorized: req.headers.authorization === `Bearer ${token}` });
      res.writeHead(answered, { "content-type": "text/plain" }).end(fail ? "try again" : "ok");
    });
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  const port = (server.address() as { port: number }).port;
  const ok = (a: ReceivedAttempt) => a.answered >= 200 && a.answered < 300;
  return {
    url: `http://127.0.0.1:${port}/hook`,
    token,
    attempts,
    failedOnce,
    requests: () => total,
    duplicates: () => {
      let n = 0;
      for (const list of attempts.values()) n += Math.max(0, list.filter(ok).length - 1);
      return n;
    },
    delivered: (id) => attempts.get(id)?.find(ok),
    close: () =>
      new Promise<void>((r) => {
        server.closeAllConnections();
        server.close(() => r());
      }),
  };
}
