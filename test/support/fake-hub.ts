/**
 * A loopback HTTP server standing in for the model hub (issue 17; `HF_ENDPOINT` points at it):
 * serves files under hub paths (`/{owner}/{repo}/resolve/{revision}/{path}`), honours
 * `Range: bytes=N-` (206 with `Content-Range`), and can misbehave on purpose: cut the connection
 * after some bytes, hold the body mid-file until released, or require a bearer token. Each file
 * has a strong `ETag` (its SHA-256) and `If-Range` is honoured (a stale validator gets the whole
 * file) unless told otherwise; a file can be sent chunked (no `Content-Length`) or endlessly, and
 * a path can redirect elsewhere (with an `X-Linked-Etag`, as the Hugging Face hub does). Every
 * request is recorded (path, range, if-range, authorization).
 */
import { createHash } from "node:crypto";
import { readFileSync } from "node:fs";
import http from "node:http";
import type { AddressInfo, Socket } from "node:net";

export interface HubRequest {
  path: string;
  range: string | undefined;
  ifRange: string | undefined;
  authorization: string | undefined;
  status: number;
}

/** How a served file misbehaves (review of issue 17). */
export interface ServeOptions {
  /** Answer 401 unless `Authorization: Bearer <token>`. */
  token?: string;
  /** No `Content-Length` (chunked transfer encoding). */
  chunked?: boolean;
  /** After the file, keep sending zero bytes until the client goes away (chunked). */
  endless?: boolean;
  /** Serve the range even when `If-Range` names another version. */
  ignoreIfRange?: boolean;
}

export interface FakeHub {
  /** Base URL (what `HF_ENDPOINT` is set to). */
  url: string;
  requests: HubRequest[];
  /** Serve `content` (bytes, or a file's path) at hub path `path` (leading slash). */
  serve(path: string, content: Buffer | string, opts?: ServeOptions): void;
  /** GET `path` answers 302 to `location` (with `X-Linked-Etag` when given). */
  redirect(path: string, location: string, linkedEtag?: string): void;
  /** The strong ETag the hub sends for `content`. */
  etagOf(content: Buffer): string;
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
  const files = new Map<string, { body: Buffer; etag: string } & ServeOptions>();
  const redirects = new Map<string, { location: string; linkedEtag?: string }>();
  const etagOf = (body: Buffer) => `"${createHash("sha256").update(body).digest("hex")}"`;
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
        ifRange: req.headers["if-range"] as string | undefined,
        authorization: req.headers.authorization,
        status,
      });
    const moved = redirects.get(pathName);
    if (moved) {
      record(302);
      res
        .writeHead(302, {
          location: moved.location,
          ...(moved.linkedEtag ? { "x-linked-etag": moved.linkedEtag } : {}),
        })
        .end();
      return;
    }
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
    const ifRange = req.headers["if-range"];
    const rangeApplies = !ifRange || ifRange === file.etag || file.ignoreIfRange;
    const range = rangeApplies ? /^bytes=(\d+)-$/.exec(req.headers.range ?? "") : null;
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
      ...(file.chunked || file.endless ? {} : { "content-length": String(body.length) }),
      "accept-ranges": "bytes",
      etag: file.etag,
      ...(range ? { "content-range": `bytes ${start}-${size - 1}/${size}` } : {}),
    });
    if (file.endless) {
      const zeros = Buffer.alloc(64 * 1024);
      const pump = () => {
        while (!res.destroyed && res.write(zeros));
        if (!res.destroyed) res.once("drain", pump);
      };
      res.write(body, pump);
      return;
    }
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
      const body = typeof content === "string" ? readFileSync(content) : content;
      files.set(path, { body, etag: etagOf(body), ...opts });
    },
    redirect(path, location, linkedEtag) {
      redirects.set(path, { location, linkedEtag });
    },
    etagOf,
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
