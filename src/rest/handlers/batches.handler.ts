/**
 * Batches endpoints (issue 7; DESIGN §3 Batches): thin calls into `BatchesService`. The create
 * route reads its own body (up to `batchMaxBytes`, 413 above; the JSON parser of other routes is
 * skipped for it) and the results routes stream what the service writes, with backpressure.
 */
import type { Request, Response } from "express";
import { AppError, ErrorCode } from "../../shared/errors.js";
import { assertJsonMediaType, assertUtf8 } from "../json-body.js";
import type { DataPlaneHandler } from "./deps.js";

/** Bytes copied between yields to the event loop while a chunked body is joined. */
const JOIN_STEP_BYTES = 4 * 1024 * 1024;

/**
 * Reads a request body into one buffer, refusing more than `maxBytes` (by `Content-Length` before
 * reading, else as it arrives), without holding the event loop (issue 7, item 1): a declared body
 * is copied into its buffer chunk by chunk as it arrives, and a chunked one is joined a few MB at
 * a time. (One `Buffer.concat` of a 200 MB body held every other request for 0.9–2 s here, most of
 * it the kernel backing the new buffer's pages on first touch.)
 * @throws AppError 413 above the limit (the connection then closes: the rest is not read); 415 for a
 *   compressed body.
 */
export async function readRawBody(req: Request, res: Response, maxBytes: number): Promise<Buffer> {
  const tooLarge = () => {
    res.setHeader("connection", "close");
    return new AppError(ErrorCode.PayloadTooLarge, `A batch body is at most ${maxBytes} bytes`, {
      field: "body",
      code: "payload_too_large",
    });
  };
  const encoding = (req.get("content-encoding") ?? "identity").toLowerCase();
  if (encoding !== "identity") {
    // The envelope's 415, as body-parser reports an encoding it cannot read.
    throw Object.assign(new Error(`Content-Encoding ${encoding} is not accepted here`), {
      status: 415,
      type: "encoding.unsupported",
    });
  }
  const declared = Number(req.get("content-length") ?? NaN);
  if (declared > maxBytes) throw tooLarge();
  if (Number.isSafeInteger(declared) && declared >= 0) {
    // Node's parser delivers exactly the declared length (or fails the stream when it is cut short).
    const body = Buffer.allocUnsafe(declared);
    let size = 0;
    for await (const chunk of req as AsyncIterable<Buffer>) {
      if (size + chunk.length > declared) throw tooLarge();
      chunk.copy(body, size);
      size += chunk.length;
    }
    return size === declared ? body : body.subarray(0, size);
  }
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of req as AsyncIterable<Buffer>) {
    size += chunk.length;
    if (size > maxBytes) throw tooLarge();
    chunks.push(chunk);
  }
  return joinChunks(chunks, size, JOIN_STEP_BYTES);
}

/**
 * Joins `chunks` (`size` bytes in all) into one buffer, yielding to the event loop after each
 * `stepBytes` copied; each chunk is let go once copied.
 */
export async function joinChunks(chunks: Buffer[], size: number, stepBytes: number): Promise<Buffer> {
  const body = Buffer.allocUnsafe(size);
  let at = 0;
  let sinceYield = 0;
  for (let i = 0; i < chunks.length; i++) {
    const chunk = chunks[i];
    chunk.copy(body, at);
    at += chunk.length;
    sinceYield += chunk.length;
    chunks[i] = EMPTY;
    if (sinceYield >= stepBytes && i < chunks.length - 1) {
      sinceYield = 0;
      await new Promise((resolve) => setImmediate(resolve));
    }
  }
  return body;
}

const EMPTY = Buffer.alloc(0);

/** Writes to the answer, waiting when the socket's buffer is full; throws when the client left. */
function writer(res: Response): (chunk: string) => Promise<void> {
  return async (chunk) => {
    if (res.destroyed) throw new AppError(ErrorCode.ClientClosed, "The client closed the connection");
    if (res.write(chunk)) return;
    // Waits for whichever comes first and removes both listeners (racing two `once` promises left
    // the loser's listener behind at every wait: MaxListenersExceededWarning on large results).
    await new Promise<void>((resolve) => {
      const done = () => {
        res.off("drain", done);
        res.off("close", done);
        resolve();
      };
      res.on("drain", done);
      res.on("close", done);
    });
  };
}

/**
 * `POST /v1/batches` → 201 the batch (`pending`). Errors: 400 (bad items, each named with its
 * `custom_id`; bad `window`; a body that is not UTF-8), 401, 402, 413 (body over the limit, too
 * many items), 415 (a body that does not say it is JSON).
 */
export const createBatch: DataPlaneHandler = async (deps, req, res, ctx) => {
  // A JSON body like every other route's (issue 28, item 4): 415 unless it says so, 400 unless UTF-8.
  assertJsonMediaType(req);
  await deps.batches.admit(ctx);
  const body = await readRawBody(req, res, deps.batchMaxBytes);
  assertUtf8(body);
  res.status(201).json(await deps.batches.create(ctx, body));
};

/** `GET /v1/batches` → `{items, has_more}`, newest first. Errors: 400 (`limit`, `after`), 401. */
export const listBatches: DataPlaneHandler = async (deps, req, res, ctx) => {
  res.json(await deps.batches.list(ctx, req.query));
};

/** `GET /v1/batches/{id}` → the batch with progress and totals. Errors: 400 bad id, 401, 404. */
export const getBatch: DataPlaneHandler = async (deps, req, res, ctx) => {
  res.json(await deps.batches.get(ctx, req.params.batch_id));
};

/** `POST /v1/batches/{id}/cancel` → the batch, `cancelled` unless it had ended. Errors: 400 bad id, 401, 404. */
export const cancelBatch: DataPlaneHandler = async (deps, req, res, ctx) => {
  res.json(await deps.batches.cancel(ctx, req.params.batch_id));
};

/**
 * `GET /v1/batches/{id}/results` → `{batch_id, status, output_url, completed_at, results}`
 * (`results` null until terminal), streamed. Errors: 400 bad id, 401, 404.
 */
export const getBatchResults: DataPlaneHandler = async (deps, req, res, ctx) => {
  await streamed(res, "application/json; charset=utf-8", (write) =>
    deps.batches.writeResults(ctx, req.params.batch_id, write),
  );
};

/** `GET /v1/batches/{id}/results.jsonl` → NDJSON, one line per item in input order. Errors: 400, 401, 404. */
export const getBatchResultsJsonl: DataPlaneHandler = async (deps, req, res, ctx) => {
  await streamed(res, "application/x-ndjson; charset=utf-8", (write) =>
    deps.batches.writeResultsJsonl(ctx, req.params.batch_id, write),
  );
};

/**
 * Sends what `produce` writes as a 200 with `contentType`. The status goes out with the first
 * chunk, so a 404 thrown before any write still becomes the error envelope; a failure after it
 * ends the connection (the body is incomplete, which the client sees).
 */
async function streamed(
  res: Response,
  contentType: string,
  produce: (write: (chunk: string) => Promise<void>) => Promise<void>,
): Promise<void> {
  const write = writer(res);
  let started = false;
  try {
    await produce(async (chunk) => {
      if (!started) {
        started = true;
        res.status(200).setHeader("content-type", contentType);
      }
      await write(chunk);
    });
  } catch (err) {
    if (!started) throw err;
    res.destroy();
    return;
  }
  if (!started) res.status(200).setHeader("content-type", contentType);
  res.end();
}
