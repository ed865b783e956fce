/*
 * Pings for the device channel and the shell relay: a socket that has not
 * answered the previous ping by the next one is half-open and is dropped.
 */
import type { WebSocket } from "ws";
import { every, type Clock } from "../../util/time.ts";

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

/** One ping round every interval (of the injected clock) for all sockets of a service, running only while there are sockets. */
export class PingTimer {
  private readonly clock: Clock;
  private readonly intervalMs: number;
  private readonly round: () => void;
  private stopRounds: (() => void) | undefined;

  constructor(clock: Clock, intervalSeconds: number, round: () => void) {
    this.clock = clock;
    this.intervalMs = intervalSeconds * 1000;
    this.round = round;
  }

  start(): void {
    this.stopRounds ??= every(this.clock, this.intervalMs, this.round);
  }

  stop(): void {
    this.stopRounds?.();
    this.stopRounds = undefined;
  }
}
