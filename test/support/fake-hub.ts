/**
 * A loopback HTTP server standing in for the model hub (issue 17; `HF_ENDPOINT` points at it):
 * serves files under hub paths (`/{owner}/{repo}/resolve/{revision}/{path}`), honours
 * `Range: bytes=N-` (206 with `Content-Range`), and can misbehave on purpose: cut the connection
 * after some bytes, hold the body mid-file until released, or require a bearer token. Every
 * request is recorded (path, range, authorization).
 */
import { readFileSync } from "node:fs";
import http from "node:http";
import type { AddressInfo, Socket } from "node:net";

export interface HubRequest {
  path: string;
  range: string | undefined;
  authorization: string | undefined;
  status: number;
}

export interface FakeHub {
  /** Base URL (what `HF_ENDPOINT` is set to). */
  url: string;
  requests: HubRequest[];
  /** Serve `content` (bytes, or a file's path) at hub path `path` (leading slash). */
  serve(path: string, content: Buffer | string, opts?: { token?: string }): void;
  /** The next GET of a served file sends this many body bytes, then destroys the socket. */
  cutNextAfter(bytes: number): void;
  /**
   * The next GET of a served file sends this many body bytes, then waits for `release()` before
   * sending the rest. @returns a promise resolved once those bytes were sent.
   */
  holdNextAfter(bytes: number): { sent: Promise<void>; release: () => void };
  close(): Promise<void>;
}

/** Starts a fake hub on a free loopback port. */
export async function startFakeHub(): Promise<FakeHub> {
  const files = new Map<string, { body: Buffer; token?: string }>();
  const requests: HubRequest[] = [];
  let cut: number | undefined;
  let hold: { bytes: number; sent: () => void; gate: Promise<void> } | undefined;
  const sockets = new Set<Socket>();

  const server = http.createServer((req, res) => {
    const pathName = new URL(req.url ?? "/", "http://hub").pathname;
    const file = files.get(pathName);
    const record = (status: number) =>
      requests.push({
        path: pathName,
        range: req.headers.range,
        authorization: req.headers.authorization,
        status,
      });
    if (!file) {
      record(404);
      res.writeHead(404, { "content-type": "text/plain" }).end("Entry not found");
      return;
    }
    if (file.token && req.headers.authorization !== `Bearer ${file.token}`) {
      record(401);
      res.writeHead(401, { "content-type": "text/plain" }).end("Invalid credentials");
      return;
    }
    const size = file.body.length;
    const range = /^bytes=(\d+)-$/.exec(req.headers.range ?? "");
    const start = range ? Number(range[1]) : 0;
    if (range && start >= size) {
      record(416);
      res.writeHead(416, { "content-range": `bytes */${size}` }).end();
      return;
    }
    const body = file.body.subarray(start);
    const status = range ? 206 : 200;
    record(status);
    res.writeHead(status, {
      "content-type": "application/octet-stream",
      "content-length": String(body.length),
      "accept-ranges": "bytes",
      ...(range ? { "content-range": `bytes ${start}-${size - 1}/${size}` } : {}),
    });
    if (cut !== undefined) {
      const n = cut;
      cut = undefined;
      res.write(body.subarray(0, n), () => setTimeout(() => req.socket.destroy(), 50));
      return;
    }
    if (hold) {
      const h = hold;
      hold = undefined;
      res.write(body.subarray(0, h.bytes), () => {
        h.sent();
        void h.gate.then(() => res.end(body.subarray(h.bytes)));
      });
      return;
    }
    res.end(body);
  });
  server.on("connection", (s) => {
    sockets.add(s);
    s.on("close", () => sockets.delete(s));
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const port = (server.address() as AddressInfo).port;
  return {
    url: `http://127.0.0.1:${port}`,
    requests,
    serve(path, content, opts = {}) {
      files.set(path, { body: typeof content === "string" ? readFileSync(content) : content, token: opts.token });
    },
    cutNextAfter(bytes) {
      cut = bytes;
    },
    holdNextAfter(bytes) {
      let sent!: () => void;
      const sentPromise = new Promise<void>((r) => (sent = r));
      let release!: () => void;
      const gate = new Promise<void>((r) => (release = r));
      hold = { bytes, sent, gate };
      return { sent: sentPromise, release };
    },
    async close() {
      for (const s of sockets) s.destroy();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}
