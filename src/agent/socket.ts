/*
 * The agent's management WebSocket: one connection at a time, reconnecting with backoff, a
 * watchdog for half-open connections, and an outbox for results made while disconnected.
 */
import WebSocket from "ws";
import type { DeviceMessage } from "../protocol/labgate/device.ts";
import type { Logger } from "../util/log.ts";
import type { ServerList } from "./servers.ts";
import { after, every, type Clock } from "../util/time.ts";
import type { ServerTransport } from "./transport.ts";

/** A socket that saw nothing from the server (not even a ping) for this long is dead (half-open). */
const SILENCE_LIMIT_MS = 120_000;
/** Messages kept for the next connection at most (the server sends unanswered executions again anyway). */
const OUTBOX_LIMIT = 500;
/** Close codes of a server going away or failing (1006: the connection broke), as opposed to one that ended this device's socket on purpose. */
const SERVER_GONE = [1001, 1006, 1011, 1012, 1013, 1014];

export interface SocketHooks {
  /** A fresh token, or undefined when authorization failed (logged by the caller). */
  token(): Promise<string | undefined>;
  /** The server refused the token: the device must authorize again. */
  refused(): void;
  /** Sent first on every connection (the capability report). */
  greeting(): DeviceMessage;
  /** Runs on every connection, after the greeting and the outbox. */
  connected?(): void;
  /** Runs when a connection that was open closes. */
  disconnected?(): void;
  onMessage(text: string): void;
  /** Waits `seconds` of backoff, or less once the agent stops. */
  sleep(seconds: number): Promise<void>;
  nextDelay(previous: number): number;
  stopped(): boolean;
  /** The device's clock, for the watchdog and the close. */
  clock: Clock;
}

export class ManagementSocket {
  private socket: WebSocket | undefined;
  private outbox: DeviceMessage[] = [];
  /** Connection count, for tests and logs. */
  connections = 0;
  private readonly servers: ServerList;
  private readonly path: string;
  /** The server (base URL) of the open connection. */
  private openOn: string | undefined;
  /** Set while this side closes the connection on purpose (not a failure of the server). */
  private leaving = false;
  private readonly transport: ServerTransport;
  private readonly log: Logger;
  private readonly minDelay: number;
  private readonly hooks: SocketHooks;

  /** `path`: the socket's route on each of `servers`; `minDelay`: the first backoff (seconds) after a lost or refused connection. */
  constructor(servers: ServerList, path: string, transport: ServerTransport, log: Logger, minDelay: number, hooks: SocketHooks) {
    this.servers = servers;
    this.path = path;
    this.transport = transport;
    this.log = log;
    this.minDelay = minDelay;
    this.hooks = hooks;
  }

  get connected(): boolean {
    return this.socket?.readyState === WebSocket.OPEN;
  }

  /** The server (base URL) the socket is open to, if it is. */
  get server(): string | undefined {
    return this.connected ? this.openOn : undefined;
  }

  /** Connects, and again after every disconnection, until the agent stops. */
  async run(): Promise<void> {
    let delay = this.minDelay;
    while (!this.hooks.stopped()) {
      const token = await this.hooks.token();
      let moved = false;
      if (token && !this.hooks.stopped()) {
        const server = this.servers.current();
        const { opened, status, failure } = await this.connect(server, token);
        if (opened) delay = this.minDelay;
        // The token was refused (e.g. the device was deleted and must register again).
        if (status === 401) this.hooks.refused();
        if (failure && !this.hooks.stopped()) this.servers.failed(server, failure);
        moved = this.servers.current() !== server;
      }
      if (this.hooks.stopped()) return;
      // Another server is not backed off from: the first wait only.
      if (moved) delay = this.minDelay;
      await this.hooks.sleep(delay);
      delay = this.hooks.nextDelay(delay);
    }
  }

  /** Closes the connection so that the next one goes to the server now in use (not a failure). */
  reconnect(reason: string): void {
    const socket = this.socket;
    if (!socket || socket.readyState !== WebSocket.OPEN) return;
    this.leaving = true;
    socket.close(1000, reason);
  }

  /** Closes the connection (waiting a second at most). */
  async close(): Promise<void> {
    const socket = this.socket;
    if (!socket || socket.readyState === WebSocket.CLOSED) return;
    await new Promise<void>((resolve) => {
      socket.once("close", () => resolve());
      socket.close(1000, "agent stopping");
      const cancel = after(this.hooks.clock, 1000, () => (socket.terminate(), resolve()));
      socket.once("close", cancel);
    });
  }

  send(message: DeviceMessage): boolean {
    const socket = this.socket;
    if (!socket || socket.readyState !== WebSocket.OPEN) return false;
    socket.send(JSON.stringify(message));
    return true;
  }

  /** Sends now, or on the next connection. */
  deliver(message: DeviceMessage): void {
    if (this.send(message)) return;
    this.outbox.push(message);
    // Long offline: the oldest go.
    if (this.outbox.length > OUTBOX_LIMIT) this.outbox.shift();
  }

  /**
   * One connection to `server`, until it closes. `failure`: why the server counts as failed (it
   * could not be reached, answered 5xx, or closed an open socket); none when the close was ours.
   */
  private connect(server: string, token: string): Promise<{ opened: boolean; status?: number; failure?: string }> {
    const url = `${server.replace(/^http/, "ws")}${this.path}`;
    this.leaving = false;
    return new Promise((resolve) => {
      const socket = new WebSocket(url, { headers: { authorization: `Bearer token=${token}` }, handshakeTimeout: 10_000, ...this.transport.ws });
      this.socket = socket;
      let opened = false;
      let status: number | undefined;
      const clock = this.hooks.clock;
      let heard = clock.now();
      const stopWatchdog = every(clock, 10_000, () => {
        if (clock.now() - heard > SILENCE_LIMIT_MS) socket.terminate();
      });
      socket.on("ping", () => (heard = clock.now()));
      socket.on("unexpected-response", (_request, response) => {
        status = response.statusCode;
        response.resume();
        socket.terminate();
      });
      socket.on("open", () => {
        opened = true;
        this.connections++;
        this.openOn = server;
        this.log.info(`agent: connected to ${url}`);
        this.send(this.hooks.greeting());
        const pending = this.outbox;
        this.outbox = [];
        for (const message of pending) this.send(message);
        this.hooks.connected?.();
      });
      socket.on("message", (data, isBinary) => {
        heard = clock.now();
        if (isBinary) return;
        this.hooks.onMessage(data.toString());
      });
      let error: string | undefined;
      socket.on("error", (cause) => {
        error = cause.message || (cause as NodeJS.ErrnoException).code || "socket error";
        this.log.debug(`agent: socket error: ${error}`);
      });
      socket.on("close", (code, reason) => {
        stopWatchdog();
        if (this.socket === socket) this.socket = undefined;
        if (opened) {
          this.log.info(`agent: disconnected (${code} ${reason.toString()})`);
          this.hooks.disconnected?.();
        }
        const ours = this.leaving || this.hooks.stopped();
        const failure = ours ? undefined : opened ? (SERVER_GONE.includes(code) ? `socket closed (${code})` : undefined) : status === undefined ? (error ?? "no connection") : status >= 500 ? `answered ${status}` : undefined;
        resolve({ opened, status, failure });
      });
    });
  }
}
