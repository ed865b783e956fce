/*
 * Pings for the device channel and the shell relay (update-server.md 13.1): a socket that has not
 * answered the previous ping by the next one is half-open and is dropped.
 */
import type { WebSocket } from "ws";

/**
 * One ping round for a socket whose pongs set `peer.alive`. False when it missed the previous
 * ping (it is terminated then); else it is pinged and waits for its pong.
 */
export function pingOrTerminate(peer: { alive: boolean }, ws: WebSocket): boolean {
  if (!peer.alive) {
    ws.terminate();
    return false;
  }
  peer.alive = false;
  try {
    ws.ping();
  } catch {
    // A socket that is closing answers its close event soon.
  }
  return true;
}

/** One interval timer for all sockets of a service, running only while there are sockets. */
export class PingTimer {
  private readonly intervalMs: number;
  private readonly round: () => void;
  private timer: NodeJS.Timeout | undefined;

  constructor(intervalSeconds: number, round: () => void) {
    this.intervalMs = intervalSeconds * 1000;
    this.round = round;
  }

  start(): void {
    if (this.timer) return;
    this.timer = setInterval(this.round, this.intervalMs);
    this.timer.unref();
  }

  stop(): void {
    if (this.timer) clearInterval(this.timer);
    this.timer = undefined;
  }
}
