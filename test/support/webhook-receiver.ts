/**
 * A real webhook receiver for tests: an HTTP server on loopback that records every request and
 * answers as each path's script says (a list of answers used in turn, the last one repeating).
 */
import http from "node:http";
import type { AddressInfo } from "node:net";

/** One answer: a status (with headers), or `hang` (never answers). */
export type ReceiverAnswer = { status: number; headers?: Record<string, string> } | "hang";

export interface ReceivedRequest {
  path: string;
  method: string;
  headers: http.IncomingHttpHeaders;
  body: string;
  /** When the request's body had arrived (`Date.now()`, ms). */
  at: number;
  /** When the sender closed the connection of a request left hanging (`Date.now()`, ms). */
  closedAt?: number;
}

export interface WebhookReceiver {
  /** `http://127.0.0.1:<port>` */
  url: string;
  received: ReceivedRequest[];
  /** Requests that reached `path`. */
  on(path: string): ReceivedRequest[];
  /** Sets the answers for `path` (default: 200). */
  script(path: string, answers: ReceiverAnswer[]): void;
  close(): Promise<void>;
}

/** Starts a receiver on 127.0.0.1 and a free port. */
export async function startWebhookReceiver(): Promise<WebhookReceiver> {
  const received: ReceivedRequest[] = [];
  const scripts = new Map<string, ReceiverAnswer[]>();
  const hanging = new Set<http.ServerResponse>();
  const server = http.createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on("data", (c: Buffer) => chunks.push(c));
    req.on("end", () => {
      const path = req.url ?? "/";
      const n = received.filter((r) => r.path === path).length;
      const entry: ReceivedRequest = {
        path,
        method: req.method ?? "",
        headers: req.headers,
        body: Buffer.concat(chunks).toString(),
        at: Date.now(),
      };
      received.push(entry);
      const answers = scripts.get(path) ?? [{ status: 200 }];
      const answer = answers[Math.min(n, answers.length - 1)];
      if (answer === "hang") {
        hanging.add(res);
        res.on("close", () => (entry.closedAt ??= Date.now()));
        return;
      }
      res.writeHead(answer.status, answer.headers ?? {});
      res.end("ok");
    });
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const port = (server.address() as AddressInfo).port;
  return {
    url: `http://127.0.0.1:${port}`,
    received,
    on: (path) => received.filter((r) => r.path === path),
    script: (path, answers) => void scripts.set(path, answers),
    close: async () => {
      for (const res of hanging) res.destroy();
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}

/** A loopback port nothing listens on (bound, then released). */
export async function closedPort(): Promise<number> {
  const server = http.createServer();
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const port = (server.address() as AddressInfo).port;
  await new Promise<void>((resolve) => server.close(() => resolve()));
  return port;
}
