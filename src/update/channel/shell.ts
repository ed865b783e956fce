/*
 * Shell sessions (docs/device-protocol.md, "Shell sessions"): a manager's WebSocket is paired with
 * the socket the device opens for that session (`shell_attach`); frames are relayed unchanged in
 * both directions (text stays text, binary stays binary) until one side closes, then both close.
 * Bounded: the device must attach within `shell_attach_timeout`, input before that is capped, a
 * slow reader pauses its writer, both sockets are pinged, and a device that disconnects from the
 * management socket (or is deleted) loses its sessions.
 */
import { randomUUID } from "node:crypto";
import type { WebSocket } from "ws";
import type { AppContext } from "../../app/context.ts";
import { recordAudit, type Actor } from "../../audit/audit.ts";
import { CLOSE_NORMAL, type ChannelHub } from "./hub.ts";
import { after, dateOf } from "../../util/time.ts";
import { PingTimer, pingOrTerminate } from "./keepalive.ts";
import { hasCapability } from "../../protocol/labgate/device.ts";
import { closeReason } from "../../protocol/labgate/wire.ts";

export const CLOSE_INVALID = 4001;
/** The reference's close reason for a device without a management socket (and for an unknown one). */
export const notConnected = (mac: string): string => `device ${mac} not connected to the management WS`;
export const CLOSE_CAPABILITY = 4003;
/** Sessions one device may have open at once (each is a process on the device). */
export const MAX_SESSIONS_PER_DEVICE = 8;
/** Manager input held while the device attaches (bytes, whatever the frames). */
export const MAX_EARLY_BYTES = 64 * 1024;
/** A relay pauses its source when this much waits for the other side, and resumes below LOW. */
const HIGH_WATER = 4 * 1024 * 1024;
const LOW_WATER = 1024 * 1024;

type Frame = string | ArrayBuffer;

interface Side {
  ws: WebSocket;
  alive: boolean;
}

class ShellSession {
  readonly mac: string;
  readonly deviceId: number;
  readonly uuid: string;
  readonly manager: Side;
  /** Who opened it (the audit log's shell.open and shell.close), and when (clock ms). */
  readonly actor: Actor;
  readonly opened: number;
  device: Side | undefined;
  early: Frame[] = [];
  earlyBytes = 0;
  /** Bytes relayed to the device (input) and to the manager (output), for shell.close. */
  bytesIn = 0;
  bytesOut = 0;
  /** Cancels the attach deadline. */
  cancelAttach: (() => void) | undefined;
  over = false;

  constructor(mac: string, deviceId: number, uuid: string, manager: WebSocket, actor: Actor, opened: number) {
    this.mac = mac;
    this.deviceId = deviceId;
    this.uuid = uuid;
    this.manager = { ws: manager, alive: true };
    this.actor = actor;
    this.opened = opened;
  }
}

export const size = (frame: Frame): number => (typeof frame === "string" ? Buffer.byteLength(frame) : frame.byteLength);
/** Close codes that may be sent on (1005/1006 and the like are only ever received). */
const sendable = (code: number): boolean => code === CLOSE_NORMAL || (code >= 3000 && code <= 4999);

export class ShellService {
  private readonly ctx: Pick<AppContext, "clock" | "config" | "db" | "log" | "store">;
  private readonly hub: ChannelHub;
  private readonly sessions = new Map<string, ShellSession>();
  private readonly pinger: PingTimer;

  constructor(ctx: Pick<AppContext, "clock" | "config" | "db" | "log" | "store">, hub: ChannelHub) {
    this.ctx = ctx;
    this.hub = hub;
    this.pinger = new PingTimer(ctx.clock, ctx.config.update_server.ws_ping_interval, (judge) => this.pingRound(judge));
  }

  /** The device's management socket went (disconnect, deletion): so do its shells. */
  deviceGone(mac: string): void {
    for (const session of [...this.sessions.values()]) if (session.mac === mac) this.end(session, CLOSE_INVALID, `device ${mac} disconnected`);
  }

  /** Server shutdown: every session ends. */
  endAll(): void {
    for (const session of [...this.sessions.values()]) this.end(session, 1001, "server shutting down");
  }

  private key(mac: string, uuid: string): string {
    return `${mac.toLowerCase()} ${uuid}`;
  }

  get count(): number {
    return this.sessions.size;
  }

  /**
   * A manager's socket for device `mac` (already authorized): records `shell.open` (on disk
   * before the device is asked: no session runs unrecorded), then asks the device to attach.
   */
  async open(mac: string, deviceId: number, manager: WebSocket, actor: Actor): Promise<ShellSession | undefined> {
    const conn = this.hub.get(mac);
    if (!conn || conn.deviceId !== deviceId) {
      manager.close(CLOSE_INVALID, closeReason(notConnected(mac)));
      return undefined;
    }
    const seconds = this.ctx.config.update_server.shell_attach_timeout;
    const caps = await conn.waitCapabilities(seconds).catch(() => undefined);
    if (manager.readyState !== manager.OPEN) return undefined;
    if (!hasCapability(caps, "shell")) {
      manager.close(CLOSE_CAPABILITY, "shell attach request failed: device does not support the required method: shell_attach");
      return undefined;
    }
    if ([...this.sessions.values()].filter((s) => s.mac === mac).length >= MAX_SESSIONS_PER_DEVICE) {
      manager.close(CLOSE_INVALID, `device ${mac} has ${MAX_SESSIONS_PER_DEVICE} shell sessions open already`);
      return undefined;
    }
    const session = new ShellSession(mac, deviceId, randomUUID(), manager, actor, this.ctx.clock.now());
    this.sessions.set(this.key(mac, session.uuid), session);
    session.cancelAttach = after(this.ctx.clock, seconds * 1000, () => this.end(session, CLOSE_INVALID, `device did not connect within ${seconds}s`));
    try {
      await recordAudit(this.ctx.store.query, { ...actor, at: dateOf(this.ctx.clock) }, "shell.open", `device:${deviceId}`, { mac, session: session.uuid });
    } catch (error) {
      this.ctx.log.error(`shell session for ${mac} not opened: audit entry not saved: ${(error as Error).message}`);
      this.end(session, 1011, "shell session failed");
      return undefined;
    }
    if (session.over) return undefined;
    if (manager.readyState !== manager.OPEN) {
      this.end(session, CLOSE_NORMAL, "the manager went away");
      return undefined;
    }
    this.pinger.start();
    manager.on("pong", () => (session.manager.alive = true));
    try {
      conn.send({ method: "shell_attach", mac_addr: mac, uuid: session.uuid });
    } catch {
      this.end(session, CLOSE_INVALID, notConnected(mac));
      return undefined;
    }
    this.ctx.log.info(`shell session ${session.uuid} for device ${mac} requested`);
    return session;
  }

  /** The device's socket for session `uuid` (its token's MAC already matched `mac`). */
  attach(mac: string, uuid: string, device: WebSocket): ShellSession | undefined {
    const session = this.sessions.get(this.key(mac, uuid));
    if (!session || session.device || session.over) {
      device.close(CLOSE_INVALID, "invalid shell session identifier");
      return undefined;
    }
    session.cancelAttach?.();
    session.device = { ws: device, alive: true };
    device.on("pong", () => session.device && (session.device.alive = true));
    for (const frame of session.early) this.relay(session.manager.ws, device, frame);
    session.bytesIn += session.earlyBytes;
    session.early = [];
    this.ctx.log.info(`shell session ${uuid} of device ${mac} attached`);
    return session;
  }

  fromManager(session: ShellSession, frame: Frame): void {
    if (session.over) return;
    if (session.device) {
      session.bytesIn += size(frame);
      return this.relay(session.manager.ws, session.device.ws, frame);
    }
    session.earlyBytes += size(frame);
    if (session.earlyBytes > MAX_EARLY_BYTES) return this.end(session, CLOSE_INVALID, "too much input before the device attached");
    session.early.push(frame);
  }

  fromDevice(session: ShellSession, frame: Frame): void {
    if (session.over) return;
    session.bytesOut += size(frame);
    this.relay(session.device!.ws, session.manager.ws, frame);
  }

  /** One side closed: the other follows with the same code and reason when they can be sent on. */
  closed(session: ShellSession, code: number, reason: string): void {
    if (sendable(code)) this.end(session, code, reason);
    else this.end(session, CLOSE_NORMAL, "the other side went away");
  }

  private relay(from: WebSocket, to: WebSocket, frame: Frame): void {
    if (to.readyState !== to.OPEN) return;
    to.send(typeof frame === "string" ? frame : Buffer.from(frame), { binary: typeof frame !== "string" }, () => {
      if (to.bufferedAmount < LOW_WATER && from.isPaused) from.resume();
    });
    // A slow reader pauses the writer rather than letting its frames pile up here.
    if (to.bufferedAmount > HIGH_WATER && !from.isPaused) from.pause();
  }

  private end(session: ShellSession, code: number, reason: string): void {
    if (session.over) return;
    session.over = true;
    session.cancelAttach?.();
    this.sessions.delete(this.key(session.mac, session.uuid));
    for (const side of [session.manager, session.device]) {
      if (!side) continue;
      if (side.ws.isPaused) side.ws.resume();
      if (side.ws.readyState === side.ws.OPEN || side.ws.readyState === side.ws.CONNECTING) side.ws.close(code, closeReason(reason));
    }
    this.ctx.log.info(`shell session ${session.uuid} of device ${session.mac} ended (${code} ${reason})`);
    const detail = {
      mac: session.mac,
      session: session.uuid,
      seconds: Math.round((this.ctx.clock.now() - session.opened) / 100) / 10,
      bytes_in: session.bytesIn,
      bytes_out: session.bytesOut,
      code,
      reason,
    };
    // Not awaited (a close cannot wait): in the database as soon as it is free, on disk a moment later.
    void recordAudit(this.ctx.store.query, { ...session.actor, at: dateOf(this.ctx.clock) }, "shell.close", `device:${session.deviceId}`, detail)
      .catch((error: Error) => this.ctx.log.warn(`audit: shell.close of ${session.uuid} not saved: ${error.message}`));
    if (this.sessions.size === 0) this.pinger.stop();
  }

  /** A side that did not answer the last ping is gone (half-open): the session ends. */
  private pingRound(judge: boolean): void {
    for (const session of [...this.sessions.values()]) {
      for (const side of [session.manager, session.device]) {
        if (!side || pingOrTerminate(side, side.ws, judge)) continue;
        this.end(session, CLOSE_NORMAL, "the other side went away");
        break;
      }
    }
  }
}

export type { ShellSession };
