/*
 * The device WebSocket hub: one connection per device, keyed by MAC, the
 * `connected` flag, pings, capabilities, and bounded waits for device replies. Every frame is
 * parsed here, once, against its method's schema (src/protocol/labgate/device.ts); domains
 * (actions, file downloads, progress, deployments, test runs) register handlers for the device
 * messages they own and get them typed. A frame that does not parse is dropped and counted.
 */
import type { WebSocket } from "ws";
import type { AppContext } from "../../app/context.ts";
import { after, type Clock } from "../../util/time.ts";
import { PingTimer, pingOrTerminate } from "./keepalive.ts";
import type { ActionEntry, DeviceMessageOf, DeviceMethod, ServerMessage } from "../../protocol/labgate/device.ts";
import { readDeviceMessage } from "../../protocol/labgate/wire.ts";
import { setDeviceCapabilities } from "../devices/devices.ts";

/** What another node of the cluster asks of a device whose socket is here: a message, or the socket's end. */
interface DeviceControl {
  mac: string;
  message?: ServerMessage;
  deviceId?: number;
  close?: { code: number; reason: string };
}

/** A device did not answer in time: the HTTP side answers 504. */
export class DeviceTimeoutError extends Error {}
/** The device went away while a request waited on it. */
export class DeviceGoneError extends Error {}

export const CLOSE_NORMAL = 1000;
export const CLOSE_UNSUPPORTED = 1003;
export const CLOSE_UNAUTHORIZED = 4000;
export const CLOSE_DUPLICATE = 4002;

const noop = () => {};

/** What the hub needs of a device's socket (the route adapts its server's socket to it). */
export interface DeviceSocket {
  send(text: string): void;
  close(code: number, reason: string): void;
  /** The `ws` socket underneath: pings, pongs, terminate. */
  readonly raw?: unknown;
}

/** One wait for a device's reply: settled by the reply, its deadline or the socket's end. */
interface Waiter {
  resolve(value: unknown): void;
  reject(error: Error): void;
  cancel: () => void;
}

/** One open device socket. */
export class DeviceConnection {
  readonly mac: string;
  readonly deviceId: number;
  /** The last capability report (undefined until the device sends one). */
  capabilities: Record<string, unknown> | undefined;
  /** Cached action list as the device reported it: first query, or any unsolicited update (src/update/actions reads it). */
  actions: ActionEntry[] | undefined;
  open = true;
  alive = true;
  private readonly ws: DeviceSocket;
  private readonly clock: Clock;
  /**
   * Per key its waiters (usually one: an execution's own reply). Only while some wait: most
   * sockets sit idle, and 10,000 maps left behind by a fan-out would stay scattered in the heap.
   */
  private waiters: Map<string, Waiter[]> | undefined;
  /** The handling of the messages received so far (undefined once it is done). */
  private handling: Promise<void> | undefined;

  constructor(mac: string, deviceId: number, ws: DeviceSocket, clock: Clock) {
    this.mac = mac;
    this.deviceId = deviceId;
    this.ws = ws;
    this.clock = clock;
  }

  /**
   * Runs `fn` once the messages this device sent before are handled: its reports take effect in
   * the order it sent them on either engine (PostgreSQL runs concurrent handlers side by side),
   * and a flood from one device waits in line instead of taking every database connection.
   */
  inOrder(fn: () => unknown): Promise<void> {
    const run = (this.handling ?? Promise.resolve()).then(async () => void (await fn()));
    const settled = run.catch(() => {});
    this.handling = settled;
    void settled.then(() => {
      if (this.handling === settled) this.handling = undefined;
    });
    return run;
  }

  get raw(): WebSocket {
    return this.ws.raw as WebSocket;
  }

  send(message: ServerMessage): void {
    if (!this.open) throw new DeviceGoneError(`device ${this.mac} is not connected`);
    this.ws.send(JSON.stringify(message));
  }

  close(code: number, reason: string): void {
    this.ws.close(code, reason);
  }

  /**
   * Waits for `settle(key, value)` for at most `seconds`; DeviceTimeoutError after that,
   * DeviceGoneError when the socket closes first. Several waiters on one key all get the value.
   */
  wait<T>(key: string, seconds: number): Promise<T> {
    if (!this.open) return Promise.reject(new DeviceGoneError(`device ${this.mac} is not connected`));
    return new Promise<T>((resolve, reject) => {
      const waiter: Waiter = { resolve: resolve as (value: unknown) => void, reject, cancel: noop };
      const all = (this.waiters ??= new Map());
      const list = all.get(key);
      if (list) list.push(waiter);
      else all.set(key, [waiter]);
      waiter.cancel = after(this.clock, seconds * 1000, () => {
        const rest = this.waiters?.get(key)?.filter((w) => w !== waiter);
        if (rest?.length) this.waiters!.set(key, rest);
        else this.forget(key);
        reject(new DeviceTimeoutError(`device ${this.mac} did not answer within ${seconds} s`));
      });
    });
  }

  /** Hands `value` to the waiters of `key`; false when nobody waits. */
  settle(key: string, value: unknown): boolean {
    const list = this.waiters?.get(key);
    if (!list) return false;
    this.forget(key);
    for (const waiter of list) {
      waiter.cancel();
      waiter.resolve(value);
    }
    return true;
  }

  private forget(key: string): void {
    this.waiters?.delete(key);
    if (this.waiters?.size === 0) this.waiters = undefined;
  }

  /** The capability report, waiting up to `seconds` for the first one. */
  async waitCapabilities(seconds: number): Promise<Record<string, unknown>> {
    if (this.capabilities) return this.capabilities;
    return this.wait<Record<string, unknown>>("capabilities", seconds);
  }

  /** The action list, asking the device when it is not cached. */
  async actionList(seconds: number): Promise<ActionEntry[]> {
    if (this.actions) return this.actions;
    const reply = this.wait<ActionEntry[]>("action_list", seconds);
    this.send({ method: "action_list_query" });
    return reply;
  }

  /** The socket closed: every waiter fails at once. */
  dropped(): void {
    this.open = false;
    const all = this.waiters;
    this.waiters = undefined;
    for (const list of all?.values() ?? []) {
      for (const waiter of list) {
        waiter.cancel();
        waiter.reject(new DeviceGoneError(`device ${this.mac} disconnected`));
      }
    }
  }
}

/** One pong listener for every socket (not a closure each). */
const alive = new WeakMap<WebSocket, DeviceConnection>();
function markAlive(this: WebSocket): void {
  const conn = alive.get(this);
  if (conn) conn.alive = true;
}

/** The handler of one device -> server method, given the message as its schema parsed it. */
export type MessageHandler<M extends DeviceMethod> = (connection: DeviceConnection, message: DeviceMessageOf<M>) => void | Promise<void>;

export class ChannelHub {
  private readonly ctx: Pick<AppContext, "clock" | "config" | "log" | "store" | "cluster">;
  private readonly connections = new Map<string, DeviceConnection>();
  private readonly handlers = new Map<string, MessageHandler<DeviceMethod>>();
  private readonly connectHooks: Array<(connection: DeviceConnection) => void> = [];
  private readonly disconnectHooks: Array<(mac: string) => void> = [];
  private readonly pinger: PingTimer;
  /** Device frames dropped since the start: unparsable, an unknown method, or a field that does not fit its schema. */
  dropped = 0;

  constructor(ctx: Pick<AppContext, "clock" | "config" | "log" | "store" | "cluster">) {
    this.ctx = ctx;
    this.pinger = new PingTimer(ctx.clock, ctx.config.update_server.ws_ping_interval, (judge) => this.pingRound(judge));
    this.handle("capability_report", (conn, message) => this.capabilityReport(conn, message));
    this.handle("action_list_update", (conn, message) => {
      conn.actions = message.actions;
      conn.settle("action_list", message.actions);
    });
    // What another node asks of a device whose socket is here (src/cluster).
    ctx.cluster.on("device_control", (data) => this.controlled(data as DeviceControl));
    // The device's own alerts (e.g. "cannot handle request") are logged, never fatal.
    this.handle("alert", (conn, message) => this.ctx.log.info(`device ${conn.mac} alert: ${JSON.stringify(message.alert)}`));
  }

  /** Registers the handler of one device -> server method. */
  handle<M extends DeviceMethod>(method: M, handler: MessageHandler<M>): void {
    // Each method's own handler: message() hands it only messages of that method.
    this.handlers.set(method, handler as unknown as MessageHandler<DeviceMethod>);
  }

  /** Runs after a device connected (queued actions are dispatched from here). */
  onConnect(hook: (connection: DeviceConnection) => void): void {
    this.connectHooks.push(hook);
  }

  /** Runs after a device's socket closed (its shell sessions end from here). */
  onDisconnect(hook: (mac: string) => void): void {
    this.disconnectHooks.push(hook);
  }

  get(mac: string): DeviceConnection | undefined {
    return this.connections.get(mac);
  }

  get size(): number {
    return this.connections.size;
  }

  /** A new socket of an authenticated device. Returns the connection, or undefined if refused. */
  opened(mac: string, deviceId: number, ws: DeviceSocket): DeviceConnection | undefined {
    if (this.connections.has(mac)) {
      // One connection per device: the second one goes, the first one stays untouched.
      ws.close(CLOSE_DUPLICATE, "duplicate connections not allowed");
      return undefined;
    }
    const conn = new DeviceConnection(mac, deviceId, ws, this.ctx.clock);
    this.connections.set(mac, conn);
    alive.set(conn.raw, conn);
    conn.raw.on("pong", markAlive);
    this.pinger.start();
    this.ctx.log.info(`device ${mac} connected`);
    conn.send({ method: "alert", alert: { message: "connected" } });
    for (const hook of this.connectHooks) {
      try {
        hook(conn);
      } catch (error) {
        this.ctx.log.error(`device ${mac}: connect hook failed: ${(error as Error).message}`);
      }
    }
    return conn;
  }

  /** A text or binary frame from a device. */
  message(conn: DeviceConnection, data: unknown): void {
    if (typeof data !== "string") {
      conn.close(CLOSE_UNSUPPORTED, "device socket requires text-mode encoding");
      return;
    }
    const read = readDeviceMessage(data);
    if (!("message" in read)) {
      this.dropped += 1;
      if (read.dropped === "unparsable") return this.ctx.log.warn(`device ${conn.mac}: unparsable message ignored (${data.slice(0, 200)})`);
      const method = JSON.stringify(read.method.slice(0, 64));
      if (read.dropped === "unknown") return this.ctx.log.warn(`device ${conn.mac}: unknown method ${method} ignored`);
      return this.ctx.log.warn(`device ${conn.mac}: malformed ${method} ignored (${read.problem.slice(0, 200)})`);
    }
    const { message } = read;
    const handler = this.handlers.get(message.method);
    if (!handler) {
      this.dropped += 1;
      return this.ctx.log.warn(`device ${conn.mac}: ${message.method} has no handler here; ignored`);
    }
    conn.inOrder(() => handler(conn, message)).catch((error: unknown) => this.ctx.log.error(`device ${conn.mac}: ${message.method}: ${(error as Error).message}`));
  }

  /** The socket closed, for whatever reason. */
  closed(conn: DeviceConnection): void {
    if (this.connections.get(conn.mac) !== conn) return;
    this.connections.delete(conn.mac);
    conn.dropped();
    this.ctx.log.info(`device ${conn.mac} disconnected`);
    for (const hook of this.disconnectHooks) {
      try {
        hook(conn.mac);
      } catch (error) {
        this.ctx.log.error(`device ${conn.mac}: disconnect hook failed: ${(error as Error).message}`);
      }
    }
    if (this.connections.size === 0) this.pinger.stop();
  }

  /** Closes the socket of a device (e.g. it was deleted). */
  disconnect(mac: string, code: number, reason: string): void {
    const conn = this.connections.get(mac);
    if (!conn) return;
    conn.close(code, reason);
    this.closed(conn);
  }

  /** Whether the device holds an open management socket, here or on another node (the devices' `connected` field). */
  isConnected(mac: string): boolean {
    return this.connections.has(mac) || this.ctx.cluster.locate(mac) !== undefined;
  }

  /**
   * Sends `message` to the device wherever its socket is (on another node through the cluster's
   * messages, without an answer); false when it is connected nowhere.
   */
  sendAnywhere(mac: string, message: ServerMessage): boolean {
    const conn = this.connections.get(mac);
    if (conn) {
      try {
        conn.send(message);
        return true;
      } catch {
        return false;
      }
    }
    if (!this.ctx.cluster.locate(mac)) return false;
    this.ctx.cluster.publish("device_control", { mac, message } satisfies DeviceControl);
    return true;
  }

  /** Closes the socket the device `deviceId` opened, wherever it is (a deletion, a key change). */
  disconnectAnywhere(mac: string, deviceId: number, code: number, reason: string): void {
    const conn = this.connections.get(mac);
    if (conn) {
      if (conn.deviceId === deviceId) this.disconnect(mac, code, reason);
      return;
    }
    if (this.ctx.cluster.locate(mac)) this.ctx.cluster.publish("device_control", { mac, deviceId, close: { code, reason } } satisfies DeviceControl);
  }

  /** Another node's message for a device: done when its socket is here. */
  private controlled(control: DeviceControl): void {
    if (typeof control?.mac !== "string") return;
    const conn = this.connections.get(control.mac);
    if (!conn) return;
    if (control.close) {
      if (conn.deviceId === control.deviceId) this.disconnect(control.mac, control.close.code, String(control.close.reason));
    } else if (control.message) {
      try {
        conn.send(control.message);
      } catch {
        // Gone meanwhile: as when it is sent here.
      }
    }
  }

  /** Server shutdown: every device socket goes (they reconnect to the next server). */
  closeAll(): void {
    this.pinger.stop();
    for (const conn of [...this.connections.values()]) {
      conn.raw.terminate();
      this.closed(conn);
    }
  }

  private capabilityReport(conn: DeviceConnection, message: DeviceMessageOf<"capability_report">): void {
    const caps = message.capabilities;
    conn.capabilities = caps;
    conn.settle("capabilities", conn.capabilities);
    const text = JSON.stringify(caps);
    // Stored on the device and kept after disconnect.
    setDeviceCapabilities(this.ctx.store.query, conn.deviceId, text).catch((error) => this.ctx.log.error(`device ${conn.mac}: capabilities not stored: ${(error as Error).message}`));
  }

  /** A device that did not answer the last ping is dropped. */
  private pingRound(judge: boolean): void {
    for (const conn of [...this.connections.values()]) {
      if (pingOrTerminate(conn, conn.raw, judge)) continue;
      this.ctx.log.info(`device ${conn.mac} did not answer the ping: dropped`);
      this.closed(conn);
    }
  }
}
