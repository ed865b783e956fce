import type { Socket } from "node:net";
import type { Server } from "node:http";

/** Node's HTTP server keeps the response a connection is answering on its socket, until that response has finished. */
type HttpSocket = Socket & { _httpMessage?: unknown };

/**
 * The server's connections. At shutdown the requests finish, but a connection without one is
 * closed at once: Node's closeIdleConnections() spares a connection that has not sent its first
 * request yet (a browser's preconnect, a client's spare socket), and server.close() would wait
 * for it until the grace period ends.
 *
 * Whether a connection carries a request is asked of its socket at shutdown (the response Node
 * assigns to it, which closeIdleConnections() reads too), not tracked per request: a listener on
 * every response whose closure held the socket kept each request's objects alive past two
 * young-generation collections under load, so V8 copied and promoted them all (docs/performance.md,
 * "The figures behind the code").
 */
export class ConnectionTracker {
  private readonly open = new Set<HttpSocket>();

  constructor(server: Server, secure: boolean) {
    // Over TLS the request's socket is the TLS one; a connection still in its handshake is left to the grace period.
    server.on(secure ? "secureConnection" : "connection", (socket: Socket) => {
      this.open.add(socket);
      socket.once("close", () => this.open.delete(socket));
    });
  }

  /** Closes every connection that carries no request now. */
  closeWithoutRequest(): void {
    for (const socket of this.open) if (socket._httpMessage == null) socket.destroy();
  }
}
