import type { Context } from "hono";
import type { ContentfulStatusCode } from "hono/utils/http-status";
import type { AppEnv } from "../app/context.ts";
import { LabgateError, type ErrorCode, type ErrorDetails } from "../util/errors.ts";

export { inputProblem } from "../util/errors.ts";
import type { Logger, RequestFields } from "../util/log.ts";

/**
 * Where every error gets its status: the domain throws LabgateError with a code, and this table
 * is the one place a code becomes an HTTP status (see `errorAnswer`).
 */
export const STATUS_OF: Record<ErrorCode, ContentfulStatusCode> = {
  invalid: 400,
  unauthenticated: 401,
  forbidden: 403,
  not_found: 404,
  method_not_allowed: 405,
  conflict: 409,
  too_large: 413,
  unsupported_media: 415,
  bad_range: 416,
  unprocessable: 422,
  upgrade_required: 426,
  too_many: 429,
  internal: 500,
  upstream: 502,
  unavailable: 503,
  timeout: 504,
  no_space: 507,
};

/** What a failed request is answered: status, the `error` text and any further body fields. */
export interface ErrorAnswer {
  status: ContentfulStatusCode;
  message: string;
  details?: ErrorDetails;
}

/**
 * The answer to any error a handler threw: a LabgateError by its code (or the status it relays,
 * see `relayedStatus`); a full disk (ENOSPC, EDQUOT from any write) a 507. Anything else is a bug
 * or an unexpected failure, a 500 "internal error" (undefined here: the caller logs it); an error
 * that should reach the client is thrown as a LabgateError where it arises.
 */
export function errorAnswer(error: unknown): ErrorAnswer | undefined {
  if (error instanceof LabgateError) return { status: (error.relayedStatus ?? STATUS_OF[error.code]) as ContentfulStatusCode, message: error.message, details: error.details };
  // A write that met a full disk, wherever it was: the client may retry once space is freed.
  const code = (error as { code?: unknown } | null)?.code;
  if (code === "ENOSPC" || code === "EDQUOT") return { status: STATUS_OF.no_space, message: "no space left in the data dir" };
  return undefined;
}

/** The one error body shape. */
export const errorResponse = (c: Context, status: ContentfulStatusCode, message: string, details?: ErrorDetails): Response =>
  c.json({ error: message, ...details }, status);

/**
 * errorAnswer's answer, or for an error it does not know (a bug, an unexpected failure) a 500
 * "internal error" that tells the client nothing more; that error is logged as `what` failed.
 */
export function answerOrInternal(error: unknown, log: Logger, what: string, request?: RequestFields): ErrorAnswer {
  const answer = errorAnswer(error);
  if (answer) return answer;
  log.error(`${what}: ${(error as Error | undefined)?.stack ?? String(error)}`, request && { ...request, status: STATUS_OF.internal });
  return { status: STATUS_OF.internal, message: "internal error" };
}

/** The one way a failed request is answered (the app's error and not-found handlers). */
export function answerError(c: Context<AppEnv>, error: unknown, log: Logger): Response {
  const { method, path } = c.req;
  const answer = answerOrInternal(error, log, `${method} ${path}`, { request_id: c.get("requestId"), method, path });
  return errorResponse(c, answer.status, answer.message, answer.details);
}

