/*
 * A device socket driven by hand (`/api/v1/devices/ws` with a device token): the messages the
 * gateway sends wait in an inbox until a test asks for the next one of a method.
 */
import WebSocket from "ws";

export type DeviceMessage = Record<string, unknown>;

export interface DeviceSocket {
  ws: WebSocket;
  /** Messages no `next` has taken yet, in arrival order. */
  messages: DeviceMessage[];
  /** The next message of `method`, the first waiting one or the next to arrive (rejects after `timeoutMs`). */
  next(method: string, timeoutMs?: number): Promise<DeviceMessage>;
  send(message: DeviceMessage): void;
}

/** Opens the device socket of the server at `url` with `token` and resolves once it is open. */
export async function openDeviceSocket(url: string, token: string, name = "device"): Promise<DeviceSocket> {
  const ws = new WebSocket(`${url.replace(/^http/, "ws")}/api/v1/devices/ws`, { headers: { authorization: `Bearer token=${token}` } });
  const messages: DeviceMessage[] = [];
  const waiting: Array<{ method: string; resolve: (m: DeviceMessage) => void }> = [];
  ws.on("message", (data) => {
    const message = JSON.parse(data.toString()) as DeviceMessage;
    const i = waiting.findIndex((w) => w.method === message.method);
    if (i >= 0) waiting.splice(i, 1)[0].resolve(message);
    else messages.push(message);
  });
  await new Promise((resolve, reject) => {
    ws.once("open", resolve);
    ws.once("error", reject);
  });
  return {
    ws,
    messages,
    next: (method, timeoutMs = 10_000) =>
      new Promise((resolve, reject) => {
        const i = messages.findIndex((m) => m.method === method);
        if (i >= 0) return resolve(messages.splice(i, 1)[0]);
        const timer = setTimeout(() => reject(new Error(`${name}: no ${method} within ${timeoutMs} ms`)), timeoutMs);
        waiting.push({ method, resolve: (m) => (clearTimeout(timer), resolve(m)) });
      }),
    send: (message) => ws.send(JSON.stringify(message)),
  };
}
