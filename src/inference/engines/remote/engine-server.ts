/**
 * The engine process's side of the internal engine protocol (issue 31, item 2; the protocol is
 * described in `wire.ts`): a loopback HTTP server hosting one local engine (the embedded
 * llama.cpp engine) for every API process and worker of the machine, so each model is loaded once
 * per machine. Each call runs the local engine exactly as an in-process caller would, its
 * callbacks (`admit`, `onStart`, `onText`) turned into stream events and its signal aborted by
 * `POST /engine/cancel/{id}` or by the caller's connection closing.
 */
import { createHash, timingSafeEqual } from "node:crypto";
import http from "node:http";
import type { AddressInfo } from "node:net";
import type { Logger } from "pino";
import { AppError, ErrorCode } from "../../../shared/errors.js";
import type { InferenceEngine } from "../../engine.js";
import type { EngineTuning } from "../../tuning.js";
import {
  ENGINE_OPS,
  type EngineCall,
  type EngineEvent,
  type EngineOp,
  PING_MS,
  TOKEN_HEADER,
  type WireError,
  type WireModel,
  fromWireError,
  fromWireModel,
  toWireError,
} from "./wire.js";

/** The local engine a server hosts: the interface, plus what the start banner asks of it. */
export type HostedEngine = InferenceEngine & {
  /** The first generation model's threads and sequences (see `LlamaCppEngine.chosenTuning`). */
  chosenTuning?(): EngineTuning | undefined;
  /** What the engine computes on (`cpu`, `cuda`, …). */
  backend?(): Promise<string>;
};

export interface EngineServerOptions {
  engine: HostedEngine;
  /** The shared secret every request must carry in `x-switchyard-engine-token`. */
  token: string;
  /** Interface to bind (default 127.0.0.1). */
  host?: string;
  /** Port (default 0: a free one). */
  port?: number;
  /**
   * Listen on a socket of this process's own even in a node:cluster child (whose listens are
   * otherwise shared through the supervisor). Default true.
   */
  exclusive?: boolean;
  logger: Logger;
}

/** A listening engine server. */
export interface EngineServer {
  /** Base URL, e.g. `http://127.0.0.1:40123`. */
  url: string;
  port: number;
  /** Calls being served right now. */
  inFlight(): number;
  /**
   * Stops accepting, waits up to `graceMs` (default 30 s) for the calls in flight, then closes
   * every connection (their callers' engines answer EngineUnavailable).
   */
  close(graceMs?: number): Promise<void>;
}

/** A call being served: its abort controller and the admission it waits for, if any. */
interface Call {
  controller: AbortController;
  admission?: { resolve: () => void; reject: (err: unknown) => void };
}

/** Cancels that arrived before their call (another connection can be faster): kept this long, ms. */
const EARLY_CANCEL_MS = 60_000;

/**
 * Starts the engine server on `host:port`.
 * @throws the listen error (EADDRINUSE, …).
 */
export async function startEngineServer(opts: EngineServerOptions): Promise<EngineServer> {
  const { engine, logger } = opts;
  const calls = new Map<string, Call>();
  const earlyCancels = new Map<string, WireError>();
  const tokenDigest = digest(opts.token);
  const idle: Array<() => void> = [];

  const authorized = (req: http.IncomingMessage) => {
    const given = req.headers[TOKEN_HEADER];
    return typeof given === "string" && timingSafeEqual(digest(given), tokenDigest);
  };

  const serveCall = async (op: EngineOp, req: http.IncomingMessage, res: http.ServerResponse) => {
    res.writeHead(200, { "content-type": "application/x-ndjson", "cache-control": "no-store" });
    res.flushHeaders();
    const send = (event: EngineEvent) => {
      if (!res.writableEnded && !res.destroyed) res.write(JSON.stringify(event) + "\n");
    };
    const ping = setInterval(() => send({ event: "ping" }), PING_MS);
    let id: string | undefined;
    const call: Call = { controller: new AbortController() };
    // The caller's connection closed before the answer: its process went away (or gave up).
    const onClose = () => {
      if (res.writableFinished) return;
      const gone = new AppError(ErrorCode.ClientClosed, "The calling process closed the connection");
      call.controller.abort(gone);
      call.admission?.reject(gone);
    };
    res.on("close", onClose);
    try {
      const body = JSON.parse(await readBody(req)) as EngineCall;
      id = body.id;
      calls.set(id, call);
      const early = earlyCancels.get(id) ?? body.cancelled;
      earlyCancels.delete(id);
      if (early) call.controller.abort(fromWireError(early));
      const result = await run(op, body, call, send);
      send({ event: "result", result: result ?? null });
    } catch (err) {
      if (!(err instanceof AppError)) logger.warn({ err, op }, "engine call failed");
      send({ event: "error", error: toWireError(err) });
    } finally {
      clearInterval(ping);
      if (id !== undefined) calls.delete(id);
      res.off("close", onClose);
      res.end();
      if (calls.size === 0) for (const wake of idle.splice(0)) wake();
    }
  };

  /** Runs `op` on the local engine with the call's callbacks as events. */
  const run = async (op: EngineOp, body: EngineCall, call: Call, send: (e: EngineEvent) => void) => {
    const signal = call.controller.signal;
    const admit = (promptTokens: number, maxCompletionTokens?: number) =>
      new Promise<void>((resolve, reject) => {
        if (signal.aborted) return reject(signal.reason);
        call.admission = { resolve, reject };
        send({ event: "admit", promptTokens, ...(maxCompletionTokens !== undefined ? { maxCompletionTokens } : {}) });
      }).finally(() => (call.admission = undefined));
    const r = body.request as Record<string, unknown> & { model: WireModel };
    const model = fromWireModel(r.model);
    switch (op) {
      case "generate":
        return engine.generate({
          ...(r as object as Parameters<InferenceEngine["generate"]>[0]),
          model,
          signal,
          admit: body.admit ? admit : undefined,
          onStart: (start) => send({ event: "start", start }),
          onText: body.stream ? (delta) => send({ event: "text", delta }) : undefined,
        });
      case "embed":
        return engine.embed({
          ...(r as object as Parameters<InferenceEngine["embed"]>[0]),
          model,
          signal,
          admit: body.admit ? (tokens) => admit(tokens) : undefined,
        });
      case "score":
        if (!engine.scoreContinuations) throw AppError.invalid(`Model '${model.id}' cannot score answers`);
        return engine.scoreContinuations({
          ...(r as object as Parameters<NonNullable<InferenceEngine["scoreContinuations"]>>[0]),
          model,
          signal,
          admit: body.admit ? (tokens) => admit(tokens) : undefined,
          onStart: () => send({ event: "start" }),
        });
      case "count-tokens":
        return engine.countTokens(model, r.text as string);
      case "load":
        await engine.load(model);
        return { tuning: engine.chosenTuning?.() ?? null };
      case "unload":
        await engine.unload?.(model);
        return null;
      case "info":
        return { backend: (await engine.backend?.()) ?? "unknown", tuning: engine.chosenTuning?.() ?? null };
    }
  };

  /** `POST /engine/admit/{id}` and `POST /engine/cancel/{id}`: answers to a call in flight. */
  const serveAnswer = async (kind: string, id: string, req: http.IncomingMessage, res: http.ServerResponse) => {
    const body = JSON.parse(await readBody(req)) as { ok?: boolean; error?: WireError; reason?: WireError };
    const call = calls.get(id);
    if (kind === "cancel") {
      const reason = body.reason ?? toWireError(new AppError(ErrorCode.ClientClosed, "The client went away"));
      if (call) call.controller.abort(fromWireError(reason));
      else {
        earlyCancels.set(id, reason);
        setTimeout(() => earlyCancels.delete(id), EARLY_CANCEL_MS).unref();
      }
    } else if (call?.admission) {
      if (body.ok) call.admission.resolve();
      else call.admission.reject(fromWireError(body.error ?? toWireError(new Error("admission refused"))));
    } else {
      res.writeHead(404).end();
      return;
    }
    res.writeHead(204).end();
  };

  const server = http.createServer({ noDelay: true }, (req, res) => {
    const match = /^\/engine\/(?:(admit|cancel)\/([^/?]+)|([a-z-]+))$/.exec(req.url ?? "");
    if (!authorized(req)) {
      res.writeHead(401).end();
      return void req.resume();
    }
    if (req.method !== "POST" || !match) {
      res.writeHead(404).end();
      return void req.resume();
    }
    const [, answer, id, op] = match;
    if (answer) {
      serveAnswer(answer, decodeURIComponent(id), req, res).catch(() => {
        if (!res.headersSent) res.writeHead(400).end();
      });
    } else if ((ENGINE_OPS as readonly string[]).includes(op)) {
      void serveCall(op as EngineOp, req, res);
    } else {
      res.writeHead(404).end();
      req.resume();
    }
  });
  // Streams stay open as long as generation runs; pings keep them busy.
  server.requestTimeout = 0;
  server.keepAliveTimeout = 65_000;
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen({ host: opts.host ?? "127.0.0.1", port: opts.port ?? 0, exclusive: opts.exclusive ?? true }, () => {
      server.off("error", reject);
      resolve();
    });
  });
  const { port, address } = server.address() as AddressInfo;
  const host = address.includes(":") ? `[${address}]` : address;
  return {
    url: `http://${host}:${port}`,
    port,
    inFlight: () => calls.size,
    close: async (graceMs = 30_000) => {
      const closed = new Promise<void>((resolve) => server.close(() => resolve()));
      server.closeIdleConnections();
      if (calls.size > 0) {
        await Promise.race([
          new Promise<void>((resolve) => idle.push(resolve)),
          new Promise<void>((resolve) => setTimeout(resolve, graceMs).unref()),
        ]);
      }
      server.closeAllConnections();
      await closed;
    },
  };
}

/** SHA-256 of `text`: equal-length inputs for `timingSafeEqual`. */
function digest(text: string): Buffer {
  return createHash("sha256").update(text).digest();
}

/** The request body as text. */
async function readBody(req: http.IncomingMessage): Promise<string> {
  const chunks: Buffer[] = [];
  for await (const chunk of req) chunks.push(chunk as Buffer);
  return Buffer.concat(chunks).toString("utf8");
}
