import { readdirSync } from "node:fs";
import { connect } from "node:net";

/**
 * Sends `request` (raw bytes: a request line, headers and maybe a body) on a fresh TCP connection
 * to `url` and resolves with everything the server wrote before it closed the connection, or
 * what came within `idleMs` of silence (then the client closes: `closedByServer` is false).
 */
export function rawRequest(url: string, request: string | Buffer, idleMs = 2000): Promise<{ text: string; closedByServer: boolean }> {
  const { hostname, port } = new URL(url);
  return new Promise((resolve, reject) => {
    const socket = connect(Number(port), hostname);
    const chunks: Buffer[] = [];
    let closedByServer = true;
    socket.setTimeout(idleMs, () => {
      closedByServer = false;
      socket.destroy();
    });
    socket.on("data", (chunk: Buffer) => chunks.push(chunk));
    socket.on("error", (error: NodeJS.ErrnoException) => {
      // A reset after the answer is a close too.
      if (error.code !== "ECONNRESET" && error.code !== "EPIPE") reject(error);
    });
    socket.on("close", () => resolve({ text: Buffer.concat(chunks).toString("latin1"), closedByServer }));
    socket.write(request);
  });
}

/** The status and the JSON body of a raw HTTP/1.1 answer (undefined when it has none). */
export function parseRaw(text: string): { status: number; json: unknown } {
  const status = Number(/^HTTP\/1\.1 (\d{3})/.exec(text)?.[1] ?? 0);
  const body = text.slice(text.indexOf("\r\n\r\n") + 4);
  let json: unknown;
  try {
    json = JSON.parse(body);
  } catch {
    json = undefined;
  }
  return { status, json };
}

/** Open file descriptors of a process (this one by default), from /proc. */
export const openFds = (pid: number | "self" = "self"): number => readdirSync(`/proc/${pid}/fd`).length;
