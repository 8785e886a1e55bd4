/**
 * The `Host` rule of RFC 9112 §3.2 (issue 28, item 4): a server MUST answer 400 to an HTTP/1.1
 * request without a `Host` header, to any request with more than one, and to one whose value is
 * not a valid host (`uri-host [":" port]`, RFC 3986 §3.2.2). Node keeps only the first of
 * repeated `Host` headers and answers a missing one with a bare 400 of its own; the server turns
 * that check off (`requireHostHeader: false`, `app/http.ts`) and this middleware answers all three
 * with the error envelope instead, and closes the connection. HTTP/1.0 may leave `Host` out.
 */
import type { RequestHandler } from "express";
import { AppError } from "../shared/errors.js";

/**
 * A `Host` value: an IP literal in brackets, or a registered name / IPv4 address (possibly empty),
 * then an optional port.
 */
const HOST_VALUE = /^(?:\[[0-9A-Fa-f:.]+(?:%25[A-Za-z0-9._~-]+)?\]|[A-Za-z0-9._~!$&'()*+,;=%-]*)(?::[0-9]*)?$/;

/**
 * Why a request's `Host` headers break the rule, or undefined when they keep it.
 * @param rawHeaders Node's `rawHeaders` (name, value, name, value, …), every repeat kept.
 */
export function hostProblem(rawHeaders: readonly string[], httpVersion: string): string | undefined {
  let count = 0;
  let value = "";
  for (let i = 0; i < rawHeaders.length; i += 2) {
    const name = rawHeaders[i];
    if (name.length === 4 && name.toLowerCase() === "host") {
      count++;
      value = rawHeaders[i + 1] ?? "";
    }
  }
  if (count > 1) return "must be sent exactly once";
  if (count === 0) return httpVersion === "1.0" ? undefined : "is required in HTTP/1.1";
  return HOST_VALUE.test(value) ? undefined : "must be a host name or address, with an optional port";
}

/** Middleware: 400 (the envelope naming `host`) for a request that breaks the `Host` rule. */
export const hostHeaderRule: RequestHandler = (req, res, next) => {
  const problem = hostProblem(req.rawHeaders, req.httpVersion);
  if (problem === undefined) return next();
  // Where a request's Host is in doubt, so is what else on the connection belongs to it.
  res.setHeader("Connection", "close");
  next(AppError.invalid(`The Host header ${problem}`, [{ field: "host", message: problem }]));
};
