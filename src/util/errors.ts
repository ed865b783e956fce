/**
 * The one error the domain throws when an operation cannot be done as asked. It names what kind
 * of failure it is (`code`), says why in words a client may read (`message`), and may carry
 * fields for the error body (`details`, e.g. the file and line of a config problem). It knows no
 * HTTP: the HTTP edge turns a code into a status in one table (src/http/errors.ts, STATUS_OF).
 *
 *   throw new LabgateError("not_found", "device does not exist");
 */
export type ErrorCode =
  /** The request is malformed or names something that cannot be (400). */
  | "invalid"
  /** No valid credentials: no token, a bad or expired one, a revoked session (401). */
  | "unauthenticated"
  /** Authenticated, but not allowed to do this (403). */
  | "forbidden"
  /** The thing named does not exist, or is hidden from the caller (404). */
  | "not_found"
  /** The route exists, but not for this method (a HEAD on a route that acts) (405). */
  | "method_not_allowed"
  /** The current state forbids it: in use, already there, changed meanwhile (409). */
  | "conflict"
  /** The input is larger than accepted (413). */
  | "too_large"
  /** The body is not of the media type the route reads (a JSON route without a JSON Content-Type) (415). */
  | "unsupported_media"
  /** The requested byte range lies outside the object (416). */
  | "bad_range"
  /** Well-formed, but its content is not acceptable (an invalid config, a permission that cannot apply) (422). */
  | "unprocessable"
  /** The path must be reached through a protocol upgrade (WebSocket) (426). */
  | "upgrade_required"
  /** Too many of something pending already (registrations) (429). */
  | "too_many"
  /** The operation failed on this side for a reason worth telling (an I/O error, a node that cannot be used) (500). */
  | "internal"
  /** A device or node answered wrongly or could not be reached (502). */
  | "upstream"
  /** The service cannot do it now (the database's write path is down) (503). */
  | "unavailable"
  /** A device did not answer in time, or went away before answering (504). */
  | "timeout"
  /** No space left to store it (507). */
  | "no_space";

/** Fields an error body may carry besides `error` (e.g. where in a config file the problem is). */
export type ErrorDetails = Record<string, string | number>;

export class LabgateError extends Error {
  readonly code: ErrorCode;
  readonly details: ErrorDetails | undefined;
  constructor(code: ErrorCode, message: string, details?: ErrorDetails) {
    super(message);
    this.code = code;
    this.details = details;
  }
}
