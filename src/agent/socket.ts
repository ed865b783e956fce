/*
 * The agent's management WebSocket: one connection at a time, reconnecting with backoff, a
 * watchdog for half-open connections, and an outbox for results made while disconnected.
 */
import WebSocket from "ws";
import type { DeviceMessage } from "../protocol/labgate/device.ts";
import type { Logger } from "../util/log.ts";
import { after, every, type Clock } from "../util/time.ts";
import type { ServerTransport } from "./transport.ts";

/** A socket that saw nothing from the server (not even a ping) for this long is dead (half-open). */
const SILENCE_LIMIT_MS = 120_000;
/** Messages kept for the next connection at most (the server sends unanswered executions again anyway). */
const OUTBOX_LIMIT = 500;

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
  private readonly url: string;
  private readonly transport: ServerTransport;
  private readonly log: Logger;
  private readonly minDelay: number;
  private readonly hooks: SocketHooks;

  /** `minDelay`: the first backoff (seconds) after a lost or refused connection. */
  constructor(url: string, transport: ServerTransport, log: Logger, minDelay: number, hooks: SocketHooks) {
    this.url = url;
    this.transport = transport;
    this.log = log;
    this.minDelay = minDelay;
    this.hooks = hooks;
  }

  get connected(): boolean {
    return this.socket?.readyState === WebSocket.OPEN;
  }

  /** Connects, and again after every disconnection, until the agent stops. */
  async run(): Promise<void> {
    let delay = this.minDelay;
    while (!this.hooks.stopped()) {
      const token = await this.hooks.token();
      if (token && !this.hooks.stopped()) {
        const { opened, status } = await this.connect(token);
        if (opened) delay = this.minDelay;
        // The token was refused (e.g. the device was deleted and must register again).
        if (status === 401) this.hooks.refused();
      }
      if (this.hooks.stopped()) return;
      await this.hooks.sleep(delay);
      delay = this.hooks.nextDelay(delay);
    }
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

  /** One connection, until it closes. */
  private connect(token: string): Promise<{ opened: boolean; status?: number }> {
    return new Promise((resolve) => {
      const socket = new WebSocket(this.url, { headers: { authorization: `Bearer token=${token}` }, handshakeTimeout: 10_000, ...this.transport.ws });
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
        this.log.info(`agent: connected to ${this.url}`);
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
      socket.on("error", (error) => this.log.debug(`agent: socket error: ${error.message}`));
      socket.on("close", (code, reason) => {
        stopWatchdog();
        if (this.socket === socket) this.socket = undefined;
        if (opened) {
          this.log.info(`agent: disconnected (${code} ${reason.toString()})`);
          this.hooks.disconnected?.();
        }
        resolve({ opened, status });
      });
    });
  }
}
