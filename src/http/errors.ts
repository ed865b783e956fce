import type { Context } from "hono";
import type { ContentfulStatusCode } from "hono/utils/http-status";

/** Fields an error body may carry besides `error` (e.g. where in a config file the problem is). */
export type ErrorDetails = Record<string, string | number>;

/** Any failure a handler wants to answer: becomes `{"error": message, ...details}` with `status`. */
export class HttpError extends Error {
  readonly status: ContentfulStatusCode;
  readonly details: ErrorDetails | undefined;
  constructor(status: ContentfulStatusCode, message: string, details?: ErrorDetails) {
    super(message);
    this.status = status;
    this.details = details;
  }
}

/** The one way to fail a request: `throw httpError(404, "device not found")`. */
export const httpError = (status: ContentfulStatusCode, message: string, details?: ErrorDetails): HttpError => new HttpError(status, message, details);

/** The one error body shape. */
export const errorResponse = (c: Context, status: ContentfulStatusCode, message: string, details?: ErrorDetails): Response =>
  c.json({ error: message, ...details }, status);

/**
 * What a client is told of an error met while reading its input (a multipart parser's, a body
 * stream's): the parser's own words ("Unexpected end of form"), never a runtime's internal message
 * (those carry a code, ERR_INVALID_ARG_TYPE or ECONNRESET, or are a TypeError or RangeError).
 */
export function inputProblem(error: unknown, otherwise = "the request body could not be read"): string {
  if (!(error instanceof Error) || error instanceof TypeError || error instanceof RangeError) return otherwise;
  if (typeof (error as { code?: unknown }).code === "string" || error.message === "") return otherwise;
  return error.message.length > 200 ? `${error.message.slice(0, 200)}...` : error.message;
}
