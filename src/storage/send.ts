import { ServerResponse } from "node:http";
import { open } from "node:fs/promises";

const CHUNK = 256 * 1024;
/** Chunks read ahead of the socket at most: 1 MiB per download. */
const POOL = 4;

/**
 * @hono/node-server's marker (its X_ALREADY_SENT) for a response the handler wrote itself; the
 * Response carrying it keeps the real status for the request log.
 */
const ALREADY_SENT = "x-hono-already-sent";

/**
 * The platform's Response class. @hono/node-server replaces the global one with a lighter class
 * (whose prototype is the original) and answers its body-less instances from a cache without
 * looking at the marker, which would write the head a second time.
 */
function platformResponse(): typeof Response {
  const parent: unknown = Object.getPrototypeOf(Response);
  return typeof parent === "function" && parent !== Function.prototype ? (parent as typeof Response) : Response;
}

/** The Node response under a request served by @hono/node-server, when there is one. */
export function nodeResponse(env: unknown): ServerResponse | undefined {
  const outgoing = (env as { outgoing?: unknown } | undefined)?.outgoing;
  return outgoing instanceof ServerResponse ? outgoing : undefined;
}

/**
 * Sends bytes `start..end` (inclusive) of a file as the body of `res`, whose status and headers
 * are given here. A stream would read each chunk into a fresh buffer, and a 1 GiB download left
 * thousands of 256 KiB buffers for the garbage collector (about +35 MB of RSS at its peak); here
 * POOL buffers go round: one is read into again only once the socket has taken its bytes.
 * Returns the Response to hand back to @hono/node-server (which then writes nothing).
 */
export function sendFile(res: ServerResponse, status: number, headers: Record<string, string>, path: string, start: number, end: number): Response {
  res.writeHead(status, headers);
  void pump(res, path, start, end);
  const PlatformResponse = platformResponse();
  return new PlatformResponse(null, { status, headers: { [ALREADY_SENT]: "true" } });
}

async function pump(res: ServerResponse, path: string, start: number, end: number): Promise<void> {
  const free = Array.from({ length: POOL }, () => Buffer.allocUnsafeSlow(CHUNK));
  let wake: (() => void) | undefined;
  let closed = false;
  const onClose = () => {
    closed = true;
    wake?.();
  };
  res.once("close", onClose);
  let file: Awaited<ReturnType<typeof open>> | undefined;
  try {
    file = await open(path, "r");
    for (let position = start; position <= end && !closed; ) {
      const buf = free.pop();
      if (!buf) {
        await new Promise<void>((resolve) => (wake = resolve));
        wake = undefined;
        continue;
      }
      const { bytesRead } = await file.read(buf, 0, Math.min(CHUNK, end - position + 1), position);
      if (bytesRead === 0) throw new Error(`${path} ended early`);
      position += bytesRead;
      res.write(bytesRead === CHUNK ? buf : buf.subarray(0, bytesRead), () => {
        free.push(buf);
        wake?.();
      });
    }
    if (!closed) res.end();
  } catch (error) {
    // Headers are out: the only way to tell the client is to cut the connection (as a failing stream did).
    res.destroy(error as Error);
  } finally {
    res.off("close", onClose);
    await file?.close().catch(() => {});
  }
}
