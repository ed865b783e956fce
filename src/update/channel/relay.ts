/*
 * A manager's shell socket on this node for a device whose socket is on another node: the bytes go
 * on to that node's shell route over a WebSocket of their own (node to node at its advertise_url),
 * with the manager's own credentials, so that node checks and audits the manager as if asked itself.
 */
import WebSocket from "ws";
import type { Logger } from "../../util/log.ts";

/** Frames a manager may send before the other node has answered, in bytes. */
const MAX_EARLY_BYTES = 1024 * 1024;
/** A close reason's bound (123 bytes; names and messages here are ASCII). */
const MAX_REASON = 123;
/** Close codes a socket may be closed with (1005, 1006 and 1015 only say what happened). */
const sendable = (code: number) => (code >= 3000 && code <= 4999) || [1000, 1001, 1002, 1003, 1007, 1008, 1009, 1010, 1011].includes(code);

export interface ShellRelay {
  fromManager(frame: string | ArrayBuffer): void;
  closed(code: number, reason: string): void;
}

/** Opens `url` (the other node's shell route) with `headers`; its frames and its close go to `manager`. */
export function relayShell(manager: WebSocket, url: string, headers: Record<string, string>, log: Logger, nodeName: string): ShellRelay {
  const upstream = new WebSocket(url, { headers, maxPayload: 16 * 1024 * 1024 });
  let early: Array<string | ArrayBuffer> | undefined = [];
  let earlyBytes = 0;
  upstream.on("open", () => {
    for (const frame of early ?? []) upstream.send(frame, { binary: typeof frame !== "string" });
    early = undefined;
  });
  upstream.on("message", (data, binary) => {
    if (manager.readyState === WebSocket.OPEN) manager.send(binary ? (data as Buffer) : data.toString(), { binary });
  });
  upstream.on("close", (code, reason) => {
    if (manager.readyState === WebSocket.OPEN) manager.close(sendable(code) ? code : 1011, sendable(code) ? reason.toString() : `node ${nodeName}, which held the device's socket, went away (${code})`.slice(0, MAX_REASON));
  });
  upstream.on("unexpected-response", (_request, response) => {
    if (manager.readyState === WebSocket.OPEN) manager.close(1011, `node ${nodeName} refused the session (${response.statusCode})`);
    upstream.terminate();
  });
  upstream.on("error", (error) => {
    log.warn(`shell relay to node ${nodeName}: ${error.message}`);
    const gone = early === undefined ? `went away (${error.message})` : "cannot be reached";
    if (manager.readyState === WebSocket.OPEN) manager.close(1011, `node ${nodeName}, which holds the device's socket, ${gone}`.slice(0, MAX_REASON));
  });
  return {
    fromManager(frame) {
      if (upstream.readyState === WebSocket.OPEN) return upstream.send(frame, { binary: typeof frame !== "string" });
      if (!early) return;
      earlyBytes += typeof frame === "string" ? Buffer.byteLength(frame) : frame.byteLength;
      if (earlyBytes <= MAX_EARLY_BYTES) early.push(frame);
      else manager.close(1008, "too much input before the device attached");
    },
    closed(code, reason) {
      early = undefined;
      if (upstream.readyState === WebSocket.OPEN) upstream.close(sendable(code) ? code : 1000, reason);
      else if (upstream.readyState === WebSocket.CONNECTING) upstream.terminate();
    },
  };
}
