import type { Socket } from "node:net";
import type { Server } from "node:http";

/**
 * The server's connections and which of them carry a request. At shutdown the requests finish,
 * but a connection without one is closed at once: Node's closeIdleConnections() spares a
 * connection that has not sent its first request yet (a browser's preconnect, a client's spare
 * socket), and server.close() would wait for it until the grace period ends.
 */
export class ConnectionTracker {
  private readonly open = new Set<Socket>();
  private readonly busy = new Map<Socket, number>();

  constructor(server: Server, secure: boolean) {
    // Over TLS the request's socket is the TLS one; a connection still in its handshake is left to the grace period.
    server.on(secure ? "secureConnection" : "connection", (socket: Socket) => {
      this.open.add(socket);
      socket.once("close", () => this.open.delete(socket));
    });
    server.on("request", (request, response) => {
      const socket = request.socket;
      this.busy.set(socket, (this.busy.get(socket) ?? 0) + 1);
      response.once("close", () => {
        const left = (this.busy.get(socket) ?? 1) - 1;
        if (left > 0) this.busy.set(socket, left);
        else this.busy.delete(socket);
      });
    });
  }

  /** Closes every connection that carries no request now. */
  closeWithoutRequest(): void {
    for (const socket of this.open) if (!this.busy.has(socket)) socket.destroy();
  }
}
