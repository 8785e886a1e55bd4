/**
 * What a REST route row says about itself for the OpenAPI document (issue 13, item 1): the zod
 * schemas the services validate the request with, and the answer's shape when one is written down
 * (`openapi-shapes.ts`). `openapi.ts` reads these from the two route tables; a row without them is
 * still documented (a generic object), so the document never lacks a served path.
 */
import type { z } from "zod";

export interface RouteDoc {
  /** One line for the reference page. */
  summary: string;
  /** Longer text (Markdown), when the summary is not enough. */
  description?: string;
  /** The JSON body's schema: the one the service parses it with. */
  body?: z.ZodType;
  /** A body of another media type (batches take JSON or JSON lines): described, not schema'd. */
  bodyMediaTypes?: string[];
  /** The query schema (a `z.object`): each property becomes a query parameter. */
  query?: z.ZodObject;
  /** The success answer's schema; absent = a generic JSON object. */
  response?: z.ZodType;
  /** The success answer's media type when it is not JSON (`application/x-ndjson`). */
  responseMediaType?: string;
  /** The success status when it is not the row's own (data-plane rows have none: 200). */
  status?: 200 | 201 | 204;
  /** `stream: true` answers Server-Sent Events instead (`text/event-stream`). */
  sse?: boolean;
  /**
   * `access-token`: only a signed-in session's access token is accepted; an API key gets 403
   * (issue 28, item 5: the document listed API keys for linking an OAuth account).
   */
  credentials?: "access-token";
}
