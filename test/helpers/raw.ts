import { readdirSync, readlinkSync } from "node:fs";
import { connect } from "node:net";

/**
 * Sends `request` (raw bytes: a request line, headers and maybe a body) on a fresh TCP connection
 * to `url` and resolves with everything the server wrote before it closed the connection, or
 * what came within `idleMs` of silence (then the client closes: `closedByServer` is false). The
 * default waits as long as a loaded machine may take to answer a whole request; a caller that
 * expects silence (a request the server must wait on) names its own shorter wait.
 */
export function rawRequest(url: string, request: string | Buffer, idleMs = 30_000): Promise<{ text: string; closedByServer: boolean }> {
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

/** What each open descriptor of a process is (a file's path, `socket:[inode]`), for a failure's message. */
export const openFdTargets = (pid: number | "self" = "self"): string[] =>
  readdirSync(`/proc/${pid}/fd`).map((fd) => {
    try {
      return readlinkSync(`/proc/${pid}/fd/${fd}`);
    } catch {
      return "(closed meanwhile)";
    }
  });

/** A WebSocket frame from the server: text, binary, or its close (code and reason). */
export type RawFrame = { kind: "text" | "binary"; data: Buffer } | { kind: "close"; code: number; reason: string };

/**
 * A WebSocket client that reads the handshake answer as some clients do (python's
 * simple_websocket through wsproto): it reads until the end of the head and takes no bytes that
 * came after the head in that same read, so it sees only frames the server wrote after its 101
 * reached the client. Resolves once upgraded (rejects with the status line otherwise); `next()`
 * gives the frames in order, undefined once the socket closed without one. A close frame is
 * answered and the socket ended.
 */
export function headFirstWebSocket(url: string, path: string, headers: Record<string, string> = {}): Promise<{ next(ms?: number): Promise<RawFrame | undefined>; send(text: string): void; end(): void }> {
  const { hostname, port } = new URL(url);
  const socket = connect(Number(port), hostname);
  socket.on("error", () => {});
  const frames: RawFrame[] = [];
  const waiting: Array<(frame: RawFrame | undefined) => void> = [];
  let closed = false;
  const deliver = (frame: RawFrame) => (waiting.length > 0 ? waiting.shift()!(frame) : frames.push(frame));
  const frame = (opcode: number, payload: Buffer) => {
    // Client frames are masked (RFC 6455 5.3); payloads here stay under 64 KiB.
    const mask = Buffer.from([0x12, 0x34, 0x56, 0x78]);
    const masked = Buffer.from(payload.map((byte, i) => byte ^ mask[i % 4]));
    const length = payload.length < 126 ? Buffer.from([0x80 | payload.length]) : Buffer.from([0x80 | 126, payload.length >> 8, payload.length & 0xff]);
    return Buffer.concat([Buffer.from([0x80 | opcode]), length, mask, masked]);
  };
  let buffer = Buffer.alloc(0);
  const parse = () => {
    for (;;) {
      if (buffer.length < 2) return;
      const opcode = buffer[0] & 0x0f;
      let length = buffer[1] & 0x7f;
      let offset = 2;
      if (length === 126) {
        if (buffer.length < 4) return;
        length = buffer.readUInt16BE(2);
        offset = 4;
      } else if (length === 127) {
        if (buffer.length < 10) return;
        length = Number(buffer.readBigUInt64BE(2));
        offset = 10;
      }
      if (buffer.length < offset + length) return;
      const payload = buffer.subarray(offset, offset + length);
      buffer = buffer.subarray(offset + length);
      if (opcode === 1 || opcode === 2) deliver({ kind: opcode === 1 ? "text" : "binary", data: Buffer.from(payload) });
      else if (opcode === 8) {
        deliver({ kind: "close", code: payload.length >= 2 ? payload.readUInt16BE(0) : 1005, reason: payload.subarray(2).toString() });
        socket.end(frame(8, payload.subarray(0, 2)));
      } else if (opcode === 9) socket.write(frame(10, Buffer.from(payload)));
    }
  };
  return new Promise((resolve, reject) => {
    let head = "";
    const onHead = (chunk: Buffer) => {
      head += chunk.toString("latin1");
      const end = head.indexOf("\r\n\r\n");
      if (end === -1) return;
      socket.off("data", onHead);
      // What came after the head in this read is dropped, as such a client drops it.
      const status = head.slice(0, head.indexOf("\r\n"));
      if (!status.startsWith("HTTP/1.1 101 ")) {
        socket.destroy();
        return reject(new Error(`not upgraded: ${status}`));
      }
      socket.on("data", (data: Buffer) => {
        buffer = Buffer.concat([buffer, data]);
        parse();
      });
      resolve({
        next: (ms = 5000) =>
          frames.length > 0
            ? Promise.resolve(frames.shift())
            : closed
              ? Promise.resolve(undefined)
              : new Promise((resolveFrame, rejectFrame) => {
                  const wake = (f: RawFrame | undefined) => (clearTimeout(timer), resolveFrame(f));
                  const timer = setTimeout(() => {
                    waiting.splice(waiting.indexOf(wake), 1);
                    rejectFrame(new Error(`no frame within ${ms} ms`));
                  }, ms);
                  waiting.push(wake);
                }),
        send: (text) => socket.write(frame(1, Buffer.from(text))),
        end: () => socket.end(frame(8, Buffer.from([0x03, 0xe8]))),
      });
    };
    socket.on("data", onHead);
    socket.on("close", () => {
      closed = true;
      for (const wake of waiting.splice(0)) wake(undefined);
      reject(new Error("closed before the handshake answer"));
    });
    const lines = [`GET ${path} HTTP/1.1`, `Host: ${hostname}:${port}`, "Upgrade: websocket", "Connection: Upgrade", "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==", "Sec-WebSocket-Version: 13"];
    for (const [name, value] of Object.entries(headers)) lines.push(`${name}: ${value}`);
    socket.write(`${lines.join("\r\n")}\r\n\r\n`);
  });
}
