import type { Context } from "hono";
import type { ContentfulStatusCode } from "hono/utils/http-status";

/** Any failure a handler wants to answer: becomes `{"error": message}` with `status`. */
export class HttpError extends Error {
  readonly status: ContentfulStatusCode;
  constructor(status: ContentfulStatusCode, message: string) {
    super(message);
    this.status = status;
  }
}

/** The one way to fail a request: `throw httpError(404, "device not found")`. */
export const httpError = (status: ContentfulStatusCode, message: string): HttpError => new HttpError(status, message);

/** The one error body shape. */
export const errorResponse = (c: Context, status: ContentfulStatusCode, message: string): Response => c.json({ error: message }, status);
