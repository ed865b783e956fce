import type { Logger } from "../../util/log.ts";
import { after, type Clock } from "../../util/time.ts";
import { FINAL_STATUSES, type RunRecord, type RunStore } from "./store.ts";

interface ActiveRun {
  id: string;
  controller: AbortController;
  done: Promise<void>;
}

/** Executes one run to its final state; `signal` aborts it (its `reason`, a string, is the run's error). */
export type ExecuteRun = (run: RunRecord, signal: AbortSignal) => Promise<void>;

/**
 * The run queue: one FIFO, one run executing at a time. A run is taken
 * only while it is still `pending` (one aborted while waiting is skipped; `execute` takes it for
 * good with RunStore.markRunning); waiters hear when a run ends. TestRunService decides what goes
 * in and what executing a run means.
 */
export class RunQueue {
  private readonly waiting: string[] = [];
  private active: ActiveRun | undefined;
  private readonly endWaiters = new Map<string, Array<() => void>>();
  private stopped = false;
  private readonly store: RunStore;
  private readonly execute: ExecuteRun;
  private readonly log: Logger;
  private readonly clock: Clock;

  constructor(store: RunStore, execute: ExecuteRun, log: Logger, clock: Clock) {
    this.store = store;
    this.execute = execute;
    this.log = log;
    this.clock = clock;
  }

  /** True once shutdown began: nothing more is taken. */
  get stopping(): boolean {
    return this.stopped;
  }

  enqueue(id: string): void {
    this.waiting.push(id);
    this.pump();
  }

  /** Aborts the run `id` if it is the one executing (its processes get SIGTERM, then SIGKILL). */
  signal(id: string, reason?: string): void {
    if (this.active?.id === id) this.active.controller.abort(reason);
  }

  /** Tells whoever waits for `id` that it ended (a pending run aborted before it was taken). */
  ended(id: string): void {
    const waiters = this.endWaiters.get(id);
    this.endWaiters.delete(id);
    waiters?.forEach((w) => w());
  }

  /** Resolves when the run is in a final state, or after `timeoutMs`. */
  async waitForEnd(id: string, timeoutMs: number): Promise<void> {
    const run = await this.store.getRun(id);
    if (!run || FINAL_STATUSES.has(run.status)) return;
    return new Promise((resolve) => {
      const cancel = after(this.clock, timeoutMs, resolve);
      const list = this.endWaiters.get(id) ?? [];
      list.push(() => {
        cancel();
        resolve();
      });
      this.endWaiters.set(id, list);
    });
  }

  /** Shutdown, first step: nothing more is taken. */
  stop(): void {
    this.stopped = true;
  }

  /** Shutdown, second step: pending runs end aborted with `reason`; the executing one is aborted and awaited. */
  async drain(reason: string): Promise<void> {
    for (const run of await this.store.runsWithStatus("pending")) {
      await this.store.finishRun(run.id, { status: "aborted", at: this.clock.now(), error: reason }).catch(() => {});
    }
    const active = this.active;
    if (active) {
      await this.store.setAbortRequested(active.id).catch(() => {});
      active.controller.abort(reason);
      await active.done;
    }
  }

  private pump(): void {
    if (this.active || this.stopped || this.waiting.length === 0) return;
    const id = this.waiting.shift()!;
    const controller = new AbortController();
    const done = this.take(id, controller.signal)
      .catch((e) => this.log.error(`testrun: run ${id} could not be finished: ${(e as Error).stack ?? e}`))
      .finally(() => {
        this.active = undefined;
        this.ended(id);
        this.pump();
      });
    this.active = { id, controller, done };
  }

  /** Executes the run `id` if it is still pending. */
  private async take(id: string, signal: AbortSignal): Promise<void> {
    const run: RunRecord | undefined = await this.store.getRun(id);
    if (run?.status === "pending") await this.execute(run, signal);
  }
}
