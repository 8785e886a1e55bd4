/**
 * Raw HTTP/1.1 over node:net for tests that send what a client library would refuse to (malformed
 * requests, odd Host headers, HEAD answers read byte for byte): a connection that reads answers
 * one at a time, and the assertion that an answer written outside Express carries the envelope.
 */
import net from "node:net";
import { expectEnvelope } from "./harness.js";

export interface RawAnswer {
  status: number;
  headers: Record<string, string>;
  text: string;
  body: any;
}

/**
 * Parses one HTTP/1.1 answer from the front of `buf`; undefined while incomplete. An answer to
 * `HEAD` (`head`) ends with its headers whatever its `Content-Length` says (RFC 9110 §9.3.2).
 */
export function parseAnswer(
  buf: Buffer,
  closed: boolean,
  head = false,
): { answer: RawAnswer; rest: Buffer } | undefined {
  const end = buf.indexOf("\r\n\r\n");
  if (end < 0) return undefined;
  const [statusLine, ...lines] = buf.subarray(0, end).toString("latin1").split("\r\n");
  const headers: Record<string, string> = {};
  for (const line of lines) {
    const i = line.indexOf(":");
    headers[line.slice(0, i).trim().toLowerCase()] = line.slice(i + 1).trim();
  }
  const length = head ? 0 : headers["content-length"] !== undefined ? Number(headers["content-length"]) : undefined;
  const bodyEnd = length === undefined ? (closed ? buf.length : -1) : end + 4 + length;
  if (bodyEnd < 0 || buf.length < bodyEnd) return undefined;
  const text = buf.subarray(end + 4, bodyEnd).toString("utf8");
  let body: unknown = text;
  try {
    body = JSON.parse(text);
  } catch {
    /* not JSON */
  }
  return { answer: { status: Number(statusLine.split(" ")[1]), headers, text, body }, rest: buf.subarray(bodyEnd) };
}

/** A raw TCP connection to a test server, reading HTTP answers one at a time. */
export class RawConnection {
  private buf: Buffer = Buffer.alloc(0);
  private waiters: Array<() => void> = [];
  readonly socket: net.Socket;
  closed = false;
  readonly connected: Promise<void>;

  constructor(base: string) {
    const url = new URL(base);
    this.socket = net.connect(Number(url.port), url.hostname);
    this.connected = new Promise((resolve) => this.socket.once("connect", () => resolve()));
    this.socket.on("data", (chunk) => {
      this.buf = Buffer.concat([this.buf, chunk]);
      this.wake();
    });
    this.socket.on("error", () => undefined);
    this.socket.on("close", () => {
      this.closed = true;
      this.wake();
    });
  }

  private wake() {
    for (const w of this.waiters.splice(0)) w();
  }

  write(data: string | Buffer): void {
    this.socket.write(data);
  }

  /**
   * The next complete answer, or undefined if the connection closed without one; `head`: the
   * answer to a HEAD request (its headers only: any bytes after them stay in `unread`).
   */
  async answer(head = false): Promise<RawAnswer | undefined> {
    for (;;) {
      const parsed = parseAnswer(this.buf, this.closed, head);
      if (parsed) {
        this.buf = parsed.rest;
        return parsed.answer;
      }
      if (this.closed) return undefined;
      await new Promise<void>((resolve) => this.waiters.push(resolve));
    }
  }

  /** Bytes received and not yet read as part of an answer. */
  unread(): Buffer {
    return this.buf;
  }

  /** Resolves once the server has closed the connection. */
  async whenClosed(): Promise<void> {
    while (!this.closed) await new Promise<void>((resolve) => this.waiters.push(resolve));
  }

  destroy(): void {
    this.socket.destroy();
  }
}

/** Sends `data` on a fresh connection and returns the first answer. */
export async function exchange(base: string, data: string | Buffer): Promise<RawAnswer> {
  const conn = new RawConnection(base);
  try {
    await conn.connected;
    conn.write(data);
    const answer = await conn.answer();
    if (!answer) throw new Error("connection closed without an answer");
    return answer;
  } finally {
    conn.destroy();
  }
}

/** Asserts an answer written outside Express still carries the envelope and the common headers. */
export function expectRawEnvelope(answer: RawAnswer, status: number): void {
  expectEnvelope(answer, status);
  expect(answer.headers["content-type"]).toMatch(/^application\/json/);
  expect(answer.headers["cache-control"]).toBe("no-store");
  expect(answer.headers["x-content-type-options"]).toBe("nosniff");
}
