/*
 * Devices taken by runs: a device runs one share at a time (its agent refuses a second), so a
 * run on devices takes each of its devices for its share, and a share whose device another run
 * holds waits behind it in arrival order. In memory: runs on devices do not outlive the process.
 */

interface Holding {
  holder: string;
  waiting: Array<{ run: string; wake: () => void }>;
}

export class DeviceQueue {
  private readonly held = new Map<string, Holding>();

  /** The run holding the device `mac` now. */
  holder(mac: string): string | undefined {
    return this.held.get(mac)?.holder;
  }

  /**
   * Takes `mac` for `run`: at once when it is free, else once each run before it released it.
   * False when `signal` ended the wait first (the run is then out of the queue).
   */
  async take(mac: string, run: string, signal: AbortSignal): Promise<boolean> {
    const holding = this.held.get(mac);
    if (!holding) {
      this.held.set(mac, { holder: run, waiting: [] });
      return true;
    }
    if (holding.holder === run) return true;
    if (signal.aborted) return false;
    const waiter = { run, wake: () => {} };
    await new Promise<void>((resolve) => {
      waiter.wake = resolve;
      holding.waiting.push(waiter);
      signal.addEventListener("abort", () => resolve(), { once: true });
    });
    if (holding.holder === run) return true;
    const at = holding.waiting.indexOf(waiter);
    if (at >= 0) holding.waiting.splice(at, 1);
    return false;
  }

  /** `run` is done with `mac`: the next run waiting for it takes it. */
  release(mac: string, run: string): void {
    const holding = this.held.get(mac);
    if (!holding || holding.holder !== run) return;
    const next = holding.waiting.shift();
    if (!next) return void this.held.delete(mac);
    holding.holder = next.run;
    next.wake();
  }
}
