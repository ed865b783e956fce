/**
 * The one error the domain throws when an operation cannot be done as asked. It names what kind
 * of failure it is (`code`), says why in words a client may read (`message`), and may carry
 * fields for the error body (`details`, e.g. the file and line of a config problem). It knows no
 * HTTP: the HTTP edge turns a code into a status in one table (src/http/errors.ts, STATUS_OF).
 *
 *   throw new LabgateError("not_found", "device does not exist");
 */
export type ErrorCode =
  /** The request is malformed or names something that cannot be. */
  | "invalid"
  /** No valid credentials: no token, a bad or expired one, a revoked session. */
  | "unauthenticated"
  /** Authenticated, but not allowed to do this. */
  | "forbidden"
  /** The thing named does not exist, or is hidden from the caller. */
  | "not_found"
  /** The route exists, but not for this method (a HEAD on a route that acts). */
  | "method_not_allowed"
  /** The current state forbids it: in use, already there, changed meanwhile. */
  | "conflict"
  /** The input is larger than accepted. */
  | "too_large"
  /** The body is not of the media type the route reads (a JSON route without a JSON Content-Type). */
  | "unsupported_media"
  /** The requested byte range lies outside the object. */
  | "bad_range"
  /** Well-formed, but its content is not acceptable (an invalid config, a permission that cannot apply). */
  | "unprocessable"
  /** The path must be reached through a protocol upgrade (WebSocket). */
  | "upgrade_required"
  /** Too many of something pending already (registrations). */
  | "too_many"
  /** The operation failed on this side for a reason worth telling (an I/O error, a node that cannot be used). */
  | "internal"
  /** A device or node answered wrongly or could not be reached. */
  | "upstream"
  /** The service cannot do it now (the database's write path is down). */
  | "unavailable"
  /** A device did not answer in time, or went away before answering. */
  | "timeout"
  /** No space left to store it. */
  | "no_space";

/** Fields an error body may carry besides `error` (e.g. where in a config file the problem is). */
export type ErrorDetails = Record<string, string | number>;

export class LabgateError extends Error {
  readonly code: ErrorCode;
  readonly details: ErrorDetails | undefined;
  /**
   * A status another server chose, passed on as it was instead of the code's: set only for a
   * refusal relayed from a lab node (NodeRefusal in src/testrun/runs/nodes.ts), whose 4xx labgate
   * may have no code for (a 410).
   */
  readonly relayedStatus: number | undefined;
  constructor(code: ErrorCode, message: string, details?: ErrorDetails, relayedStatus?: number) {
    super(message);
    this.code = code;
    this.details = details;
    this.relayedStatus = relayedStatus;
  }
}

/**
 * What a client is told of an error met while reading its input (a multipart parser's, a body
 * stream's): the parser's own words ("Unexpected end of form"), never a runtime's internal message
 * (those carry a code, ERR_INVALID_ARG_TYPE or ECONNRESET, or are a TypeError or RangeError).
 */
export function inputProblem(error: unknown, otherwise = "the request body could not be read"): string {
  if (error instanceof LabgateError) return error.message;
  if (!(error instanceof Error) || error instanceof TypeError || error instanceof RangeError) return otherwise;
  if (typeof (error as { code?: unknown }).code === "string" || error.message === "") return otherwise;
  return error.message.length > 200 ? `${error.message.slice(0, 200)}...` : error.message;
}
