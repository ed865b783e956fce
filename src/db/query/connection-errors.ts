/**
 * Which of pg's errors mean that PostgreSQL cannot be reached (rather than that a statement was
 * wrong): the server is down or restarting, the network or the connection is gone. Those become
 * 503s while the server runs and an exit 2 naming `database.url` at start.
 */

/** Node's socket errors on the way to the server. */
const SOCKET = new Set(["ECONNREFUSED", "ECONNRESET", "EPIPE", "ETIMEDOUT", "EHOSTUNREACH", "ENETUNREACH", "ENOTFOUND", "EAI_AGAIN"]);
/** PostgreSQL's: shutting down or restarting (57P01-57P03), too many connections (53300). */
const SERVER = new Set(["57P01", "57P02", "57P03", "53300"]);

export function unreachable(error: unknown): boolean {
  const code = String((error as { code?: unknown } | null)?.code ?? "");
  // Class 08: connection exceptions.
  if (SOCKET.has(code) || SERVER.has(code) || code.startsWith("08")) return true;
  const message = error instanceof Error ? error.message : "";
  return /Connection terminated|connection timeout|timeout exceeded when trying to connect|Client has encountered a connection error|not queryable/i.test(message);
}

/** Refusals of the credentials or the database named: the URL is wrong, not the network. */
export function refused(error: unknown): boolean {
  const code = String((error as { code?: unknown } | null)?.code ?? "");
  // 28xxx: invalid authorization; 3D000: no such database.
  return code.startsWith("28") || code === "3D000";
}
