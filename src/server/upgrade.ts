import type { IncomingMessage } from "node:http";
import type { Duplex } from "node:stream";
import type { ServerType } from "@hono/node-server";
import { WebSocketServer, type WebSocket } from "ws";

/**
 * The paths that are WebSockets, as Hono patterns (`:name` is one segment). Only these reach the
 * app on an upgrade request; every other upgrade is refused before any handler runs (a handler run on an upgrade had its
 * response body, an open file or an event subscription, never read nor released).
 */
export const WEBSOCKET_ROUTES = ["/api/v1/devices/ws", "/api/v1/devices/:mac/shell", "/api/v1/devices/:mac/shell/attach/:uuid", "/api/v2/devices/:id/console/ws"];

/** A matcher for WEBSOCKET_ROUTES: one segment per `:name`, no backtracking beyond a segment. */
export function webSocketPathMatcher(routes: string[] = WEBSOCKET_ROUTES): (path: string) => boolean {
  const patterns = routes.map((route) => new RegExp(`^${route.split("/").map((s) => (s.startsWith(":") ? "[^/]+" : s.replace(/[.*+?^${}()|[\]\\]/g, "\\$&"))).join("/")}$`));
  return (path) => patterns.some((pattern) => pattern.test(path));
}

/** The path of a request target, repeated slashes as one (as normalizeRequest serves them); undefined when it is no path. */
function pathOf(target: string | undefined): string | undefined {
  if (!target || target[0] !== "/") return undefined;
  const end = target.indexOf("?");
  return (end === -1 ? target : target.slice(0, end)).replace(/\/{2,}/g, "/");
}

/** Answers an upgrade request on its raw socket with a JSON error and closes it. */
function refuse(socket: Duplex, status: 400 | 404, message: string): void {
  if (socket.destroyed) return;
  const body = JSON.stringify({ error: message }) + "\n";
  const head = [
    `HTTP/1.1 ${status} ${status === 400 ? "Bad Request" : "Not Found"}`,
    "Content-Type: application/json",
    `Content-Length: ${Buffer.byteLength(body)}`,
    "Connection: close",
  ];
  // Destroyed once written: a client that never closes its end must not keep the socket.
  socket.end(`${head.join("\r\n")}\r\n\r\n${body}`, () => socket.destroy());
}

/**
 * Puts a filter in front of the server's upgrade handling (@hono/node-server's, which runs the
 * app for any `Upgrade: websocket`): WebSocket upgrades of the WebSocket routes go on, every
 * other upgrade request is a 4xx JSON answer and a closed socket. Node hands an upgrade request's
 * socket over without an error listener: one is added first, so a reset peer is no uncaught error.
 */
export function acceptUpgradesOnlyOn(server: ServerType, isWebSocketPath: (path: string) => boolean = webSocketPathMatcher()): void {
  const handlers = server.listeners("upgrade") as Array<(request: IncomingMessage, socket: Duplex, head: Buffer) => void>;
  server.removeAllListeners("upgrade");
  server.on("upgrade", (request: IncomingMessage, socket: Duplex, head: Buffer) => {
    socket.on("error", () => socket.destroy());
    const path = pathOf(request.url);
    if (request.headers.upgrade?.toLowerCase() !== "websocket") return refuse(socket, 400, "unsupported upgrade: only WebSocket routes upgrade");
    if (request.method !== "GET" || path === undefined || !isWebSocketPath(path)) {
      return refuse(socket, 400, "this route is not a WebSocket: send the request without Upgrade");
    }
    for (const handler of handlers) handler.call(server, request, socket, head);
  });
}

/**
 * The app's answer to a WebSocket upgrade request that it did not upgrade (e.g. a 401): only its
 * status and headers go out (@hono/node-server writes no body there), so the body is released now.
 */
export function releaseUpgradeBody(response: Response | Promise<Response>): Promise<Response> {
  return Promise.resolve(response).then((res) => {
    if (res.body && !res.bodyUsed) res.body.cancel().catch(() => {});
    return res;
  });
}

/**
 * How long (ms) the frames a new socket is sent wait after its 101 answer. Some clients take the
 * answer from a read of its own and look at nothing else that read returned (python's
 * simple_websocket, through wsproto, until more bytes come): a frame that arrived with the 101 is
 * not seen, and this is the time such a client, in another process, may take to come to that read.
 */
export const FIRST_FRAMES_AFTER_MS = 20;

/**
 * The server of the WebSocket routes: as `ws`'s, except that whatever a socket is sent as it opens
 * (a refused shell's close, a device's first message, a ping) leaves in a later write than the
 * 101 answer: once the client sends its first bytes (a client sends only after it has read the 101,
 * RFC 6455 4.1, so its next read starts after it), or else `firstFramesAfterMs` later and after the
 * next poll for I/O (in which a client in this process reads the 101 alone, however long the event
 * loop was held). Incoming frames are read at once, as before.
 */
export class HandshakeFirstServer extends WebSocketServer {
  private readonly firstFramesAfterMs: number;

  constructor(options: ConstructorParameters<typeof WebSocketServer>[0] & { firstFramesAfterMs?: number } = {}) {
    const { firstFramesAfterMs = FIRST_FRAMES_AFTER_MS, ...rest } = options;
    super(rest);
    this.firstFramesAfterMs = firstFramesAfterMs;
  }

  override handleUpgrade(request: IncomingMessage, socket: Duplex, head: Buffer, callback: (client: WebSocket, request: IncomingMessage) => void): void {
    super.handleUpgrade(request, socket, head, (client, req) => {
      // The 101 is written; what follows waits in the socket (end() and destroy() still work at once).
      socket.cork();
      let held = true;
      const release = (): void => {
        if (!held) return;
        held = false;
        clearTimeout(timer);
        socket.off("data", release);
        socket.uncork();
      };
      const timer = setTimeout(() => setImmediate(release), this.firstFramesAfterMs).unref();
      // Bytes sent with the upgrade request itself came before the client could read the 101.
      if (head.length === 0) socket.once("data", release);
      callback(client, req);
    });
  }
}
