/*
 * Answers sent before their request's body has all arrived (a 413 on the declared length, a limit
 * met half-way, a 401 before an upload is read). Such an answer says `Connection: close`, and the
 * connection closes once it is written: keeping it would mean reading a remainder of unknown size
 * first, and a client told nothing would send its next request into the body's rest. After the
 * answer the server ends its side and goes on reading, and dropping, what the client still sends,
 * until the client closes or LINGER_MS pass: a socket closed with unread bytes is a reset, which
 * can cost the client the answer. Both classes are the server's (serverOptions), for every route.
 */
import { IncomingMessage, ServerResponse } from "node:http";
import type { Socket } from "node:net";

/** How long (ms) a connection closing after an early answer drops what its client still sends. */
export const LINGER_MS = 2000;

/** Connections closing after an early answer: no further request on them is served (RFC 9112 9.6). */
const closing = new WeakSet<Socket>();

type Dumpable = IncomingMessage & { _dump(): void };

/** A request whose body a handler stops reading (destroys) keeps its connection for the answer. */
export class EarlyAnswerRequest extends IncomingMessage {
  override _destroy(error: Error | null, callback: (error?: Error | null) => void): void {
    // Node's own destroys the socket with an unfinished body, and the answer with it.
    if (this.complete || !this.socket || this.socket.destroyed) return super._destroy(error, callback);
    // The rest of the body is dropped as it comes (a destroyed stream takes no more).
    (this as unknown as Dumpable)._dump();
    process.nextTick(() => callback(this.listenerCount("error") > 0 ? error : null));
  }
}

/** A response that says `Connection: close` when its head goes out before the request's body is in. */
export class EarlyAnswerResponse<Request extends IncomingMessage = IncomingMessage> extends ServerResponse<Request> {
  override writeHead(statusCode: number, ...rest: unknown[]): this {
    // No socket: the client is gone, and with it the connection.
    const socket = this.socket;
    if (socket && !this.req.complete && !closing.has(socket)) {
      this.setHeader("Connection", "close");
      lingerOnClose(socket, this.req);
    }
    return Reflect.apply(ServerResponse.prototype.writeHead, this, [statusCode, ...rest]) as this;
  }
}

/** Whether `request` came on a connection that closes after an earlier answer (it is not served). */
export const onClosingConnection = (request: IncomingMessage): boolean => request.socket !== null && closing.has(request.socket);

/**
 * Node closes a `Connection: close` connection with destroySoon() once the answer is written, which
 * destroys the socket with whatever the client sent since unread: here it ends the server's side
 * and reads (dropping the request's body) until the client's end, or LINGER_MS.
 */
function lingerOnClose(socket: Socket, request: IncomingMessage): void {
  closing.add(socket);
  let lingering = false;
  socket.destroySoon = () => {
    if (lingering || socket.destroyed) return;
    lingering = true;
    socket.end();
    (request as Dumpable)._dump();
    socket.resume();
    const timer = setTimeout(() => socket.destroy(), LINGER_MS).unref();
    socket.once("close", () => clearTimeout(timer));
  };
}
