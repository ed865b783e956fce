import type { Cluster } from "../../cluster/cluster.ts";
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

  private readonly cluster: Pick<Cluster, "runs" | "publish" | "on" | "onTaken">;

  /** In a cluster one node executes the queue (the holder of `test_runs`); the others hand it their runs. */
  constructor(store: RunStore, execute: ExecuteRun, log: Logger, clock: Clock, cluster: Pick<Cluster, "runs" | "publish" | "on" | "onTaken">) {
    this.store = store;
    this.execute = execute;
    this.log = log;
    this.clock = clock;
    this.cluster = cluster;
    cluster.on("test_run_queued", (data) => {
      const id = (data as { id?: unknown } | undefined)?.id;
      if (typeof id === "string" && this.mine && !this.waiting.includes(id)) this.enqueue(id);
    });
    cluster.onTaken("test_runs", () => void this.takeOver().catch((e) => this.log.error(`testrun: taking the queue over: ${(e as Error).message}`)));
  }

  private get mine(): boolean {
    return this.cluster.runs("test_runs");
  }

  /**
   * This node took the queue from one that went: the gateway runs it was executing end aborted
   * (their processes went with it), the pending ones are queued here in their order.
   */
  private async takeOver(): Promise<void> {
    for (const run of await this.store.runsWithStatus("running")) {
      if (run.devices === null && run.id !== this.active?.id) await this.store.finishRun(run.id, { status: "aborted", at: this.clock.now(), error: "the node running it went away" }, ["running"]);
    }
    for (const run of await this.store.runsWithStatus("pending")) {
      if (run.devices === null && run.id !== this.active?.id && !this.waiting.includes(run.id)) this.waiting.push(run.id);
    }
    this.pump();
  }

  /** True once shutdown began: nothing more is taken. */
  get stopping(): boolean {
    return this.stopped;
  }

  enqueue(id: string): void {
    if (!this.mine) return this.cluster.publish("test_run_queued", { id });
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
    if (this.active || this.stopped || this.waiting.length === 0 || !this.mine) return;
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
