/*
 * Pings for the device channel and the shell relay: a socket that has not
 * answered the previous ping by the next one is half-open and is dropped.
 */
import type { WebSocket } from "ws";
import { every, type Clock } from "../../util/time.ts";

/**
 * One ping round for a socket whose pongs set `peer.alive`. False when it missed the previous
 * ping (it is terminated then); else it is pinged and waits for its pong. A round that may not
 * `judge` pings again without terminating anyone.
 */
export function pingOrTerminate(peer: { alive: boolean }, ws: WebSocket, judge: boolean): boolean {
  if (!peer.alive && judge) {
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

/**
 * One ping round every interval (of the injected clock) for all sockets of a service, running only
 * while there are sockets. A missed pong is judged only once the server has read what arrived: the
 * round runs after the event loop's poll phase (setImmediate, an ordering, not a timer), and a round
 * that comes more than half an interval late judges nobody. A server whose loop was held (a long
 * synchronous task, a starved process) has not read the pongs waiting in its sockets, and a device
 * it pinged just before may not have had the turn to answer; dropping them would disconnect
 * healthy devices all at once.
 */
export class PingTimer {
  private readonly clock: Clock;
  private readonly intervalMs: number;
  private readonly round: (judge: boolean) => void;
  private stopRounds: (() => void) | undefined;

  constructor(clock: Clock, intervalSeconds: number, round: (judge: boolean) => void) {
    this.clock = clock;
    this.intervalMs = intervalSeconds * 1000;
    this.round = round;
  }

  start(): void {
    if (this.stopRounds) return;
    let due = this.clock.now() + this.intervalMs;
    const stop = every(this.clock, this.intervalMs, () => {
      const judge = this.clock.now() - due <= this.intervalMs / 2;
      due = this.clock.now() + this.intervalMs;
      setImmediate(() => {
        if (this.stopRounds === stop) this.round(judge);
      });
    });
    this.stopRounds = stop;
  }

  stop(): void {
    this.stopRounds?.();
    this.stopRounds = undefined;
  }
}
