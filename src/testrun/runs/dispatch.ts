import { randomUUID } from "node:crypto";
import type { NodeTarget } from "../../config/config.ts";
import { LabgateError } from "../../util/errors.ts";
import { buildPlan, snapshotSource } from "../config/plan-builder.ts";
import { planForMachine, planMachines, type TestPlan } from "../plan.ts";
import type { AppContext } from "../../app/context.ts";
import type { RemoteRun, RunRecord, RunStore, TriggerRecord } from "./store.ts";
import { FINAL_STATUSES, isFinalStatus, type RunStatus } from "./status.ts";
import { nodeJson } from "./node-client.ts";
import { LOCAL_DEVICE } from "./nodes.ts";
import type { TriggerRequest } from "./trigger.ts";

const POLL_MS = 500;
/** Consecutive failed polls after which a remote run counts as ended (the reference: one). */
const POLL_FAILURES = 10;
/** Names that never refer to a configured node. */
const RESERVED = new Set(["localhost", LOCAL_DEVICE]);

/** What an orchestration has done so far. */
interface Progress {
  contacted: Record<string, string>;
  remoteRuns: RemoteRun[];
  errors: string[];
  statuses: string[];
  /** The `machine_target` sent to every node; undefined: each node's own name (the config's `machines:`). */
  role?: string;
}

interface Orchestration {
  controller: AbortController;
  done: Promise<void>;
}

/**
 * Multi-node triggers: checks machines and nodes before answering, then runs the
 * selection group by group in lockstep: each machine's share is a node-role POST (same
 * protocol as protoplaster nodes), the local share a tracked run here. Outside the run queue.
 */
/** What the orchestrator needs of the local run queue (TestRunService). */
export interface LocalRuns {
  readonly ctx: Pick<AppContext, "clock" | "config" | "log">;
  readonly store: RunStore;
  createRun(plan: TestPlan, request: TriggerRequest, warnings: string[], repeatOf: string | null): Promise<RunRecord>;
  aggregate(trigger: TriggerRecord, prefix: string): Promise<string | null>;
  waitForEnd(id: string, timeoutMs: number): Promise<void>;
  abort(id: string, reason?: string, propagate?: boolean): Promise<RunRecord>;
}

export class Orchestrator {
  private readonly service: LocalRuns;
  private readonly active = new Map<string, Orchestration>();

  constructor(service: LocalRuns) {
    this.service = service;
  }

  private get nodes(): Record<string, NodeTarget> {
    return this.service.ctx.config.test_server.nodes;
  }

  private call(node: NodeTarget, method: string, path: string, body?: unknown, signal?: AbortSignal): Promise<{ status: number; json: unknown }> {
    return nodeJson(this.service.ctx.clock, node, method, path, { ...(body !== undefined ? { body } : {}), ...(signal ? { signal } : {}) });
  }

  private static errorText(json: unknown, status: number): string {
    const message = json && typeof json === "object" && "error" in json ? String((json as { error: unknown }).error) : "";
    return message ? `HTTP ${status}: ${message}` : `HTTP ${status}`;
  }

  /**
   * Validates every machine (500 before anything starts), creates the trigger and starts it.
   * With `onNodes`, the whole selection runs on each of those nodes at once (LOCAL_DEVICE: here)
   * instead of where the config's `machines:` say (the console's "several nodes" trigger).
   */
  async start(plan: TestPlan, request: TriggerRequest, onNodes?: string[]): Promise<string> {
    const machines = onNodes ? onNodes.filter((m) => m !== LOCAL_DEVICE) : planMachines(plan);
    for (const m of machines) {
      if (RESERVED.has(m) || !Object.hasOwn(this.nodes, m)) throw new LabgateError("internal", `Machine '${m}' not defined in devices list`);
    }
    const configPath = `/api/v1/configs/${encodeURIComponent(request.configName)}`;
    await Promise.all(
      machines.map(async (m) => {
        let answer: { status: number; json: unknown };
        try {
          answer = await this.call(this.nodes[m], "GET", configPath);
        } catch (error) {
          throw new LabgateError("internal", `Machine '${m}' unreachable: ${(error as Error).cause ?? (error as Error).message}`);
        }
        if (answer.status === 404) throw new LabgateError("internal", `Config '${request.configName}' not found on machine '${m}'`);
        if (answer.status !== 200) throw new LabgateError("internal", `Machine '${m}' unreachable: ${Orchestrator.errorText(answer.json, answer.status)}`);
      }),
    );
    const id = request.triggerId ?? randomUUID();
    const store = this.service.store;
    const created = await store.createTrigger({ id, createdAt: this.service.ctx.clock.now(), configName: request.configName, suite: request.suite, orchestrated: true });
    if (!created) throw new LabgateError("invalid", `trigger ${id} already exists`);
    const controller = new AbortController();
    const work = onNodes ? this.runOnNodes(id, plan, request, onNodes, controller.signal) : this.run(id, plan, request, controller.signal);
    const done = work.catch(async (error) => {
      this.service.ctx.log.error(`testrun: trigger ${id}: ${(error as Error).stack ?? error}`);
      await store.updateTrigger(id, { status: "failed", error: (error as Error).message, finishedAt: this.service.ctx.clock.now() }).catch(() => {});
    });
    this.active.set(id, { controller, done: done.finally(() => this.active.delete(id)) });
    return id;
  }

  /** Asks machine `m` for a node-role run of `suite` in trigger `id`; its wait, or undefined after noting the error. */
  private async dispatch(id: string, m: string, suite: string, request: TriggerRequest, progress: Progress, signal: AbortSignal): Promise<{ wait: Promise<string> } | undefined> {
    const node = this.nodes[m];
    progress.contacted[m] = node.url;
    const overrides = request.overrides;
    const body = {
      config_name: request.configName,
      trigger_id: id,
      test_suite_name: suite,
      machine_target: progress.role ?? m,
      ...(overrides !== null && overrides !== "" ? { overrides } : {}),
      ...(request.pattern ? { pattern: request.pattern } : {}),
    };
    try {
      const answer = await this.call(node, "POST", "/api/v1/test-runs", body, signal);
      const runId = answer.json && typeof answer.json === "object" ? (answer.json as { id?: unknown }).id : undefined;
      if (answer.status !== 200 || typeof runId !== "string" && typeof runId !== "number") throw new Error(Orchestrator.errorText(answer.json, answer.status));
      progress.remoteRuns.push({ machine: m, group: suite, runId: String(runId) });
      return { wait: this.pollRemote(m, String(runId), progress, signal) };
    } catch (error) {
      if (!signal.aborted) progress.errors.push(`dispatch of group '${suite}' to '${m}' failed: ${(error as Error).message}`);
      return undefined;
    }
  }

  private async run(id: string, plan: TestPlan, request: TriggerRequest, signal: AbortSignal): Promise<void> {
    const store = this.service.store;
    const progress: Progress = { contacted: {}, remoteRuns: [], errors: [], statuses: [] };
    const overrides = request.overrides;

    for (const group of plan.groups) {
      if (signal.aborted || (await store.getTrigger(id))?.isAborted) break;
      const entries = plan.entries.filter((e) => e.group === group);
      if (entries.length === 0) continue;
      const waits: Promise<string>[] = [];

      for (const m of [...new Set(entries.flatMap((e) => e.machines))]) {
        const dispatched = await this.dispatch(id, m, group, request, progress, signal);
        if (dispatched) waits.push(dispatched.wait);
        else if (signal.aborted) break;
      }
      await store.updateTrigger(id, { nodes: progress.contacted, remoteRuns: progress.remoteRuns });

      if (entries.some((e) => e.machines.length === 0) && !signal.aborted) {
        const local: TriggerRequest = { ...request, suite: group, machineTarget: "localhost", triggerId: id };
        const localPlan = buildPlan(snapshotSource(plan.files), {
          configName: request.configName,
          suite: group,
          overrides,
          machineTarget: "localhost",
        });
        const run = await this.service.createRun(localPlan, local, localPlan.warnings, null);
        waits.push(this.waitLocal(run.id, progress, signal));
      }
      progress.statuses.push(...(await Promise.all(waits)));
    }
    await this.finish(id, plan, progress, signal);
  }

  /** The whole selection on each of `nodes` at once (a config without `machines:`), each as a node-role run. */
  private async runOnNodes(id: string, plan: TestPlan, request: TriggerRequest, nodes: string[], signal: AbortSignal): Promise<void> {
    const progress: Progress = { contacted: {}, remoteRuns: [], errors: [], statuses: [], role: "localhost" };
    const started = await Promise.all(
      nodes.map(async (m) => {
        if (m !== LOCAL_DEVICE) return this.dispatch(id, m, request.suite, request, progress, signal);
        const local: TriggerRequest = { ...request, machineTarget: "localhost", triggerId: id };
        const run = await this.service.createRun(planForMachine(plan, "localhost"), local, plan.warnings, null);
        return { wait: this.waitLocal(run.id, progress, signal) };
      }),
    );
    await this.service.store.updateTrigger(id, { nodes: progress.contacted, remoteRuns: progress.remoteRuns });
    progress.statuses.push(...(await Promise.all(started.flatMap((s) => (s ? [s.wait] : [])))));
    await this.finish(id, plan, progress, signal);
  }

  /** The trigger's final state from what its runs ended as (and its combined results). */
  private async finish(id: string, plan: TestPlan, progress: Progress, signal: AbortSignal): Promise<void> {
    const store = this.service.store;
    const { errors, statuses } = progress;
    await store.updateTrigger(id, { nodes: progress.contacted, remoteRuns: progress.remoteRuns });
    const trigger = (await store.getTrigger(id))!;
    const aborted = signal.aborted || trigger.isAborted;
    const status = aborted ? "aborted" : errors.length > 0 || statuses.some((s) => s !== "finished") ? "failed" : "finished";
    // Collected before the trigger turns final, so that a client seeing the final state finds them.
    const resultsDir = plan.aggregateResults && !signal.aborted ? await this.service.aggregate(trigger, plan.combinedResultsDirPrefix) : null;
    await store.updateTrigger(id, {
      status,
      resultsDir,
      finishedAt: this.service.ctx.clock.now(),
      ...(errors.length > 0 ? { error: errors.join("; ") } : typeof signal.reason === "string" ? { error: signal.reason } : {}),
    });
  }

  /** Waits for the local share's run; a failed one is noted in the trigger's errors. */
  private async waitLocal(runId: string, progress: Progress, signal: AbortSignal): Promise<string> {
    for (;;) {
      await this.service.waitForEnd(runId, 1_000);
      const run = await this.service.store.getRun(runId);
      if (!run || FINAL_STATUSES.has(run.status)) {
        if (run?.status === "failed") progress.errors.push(`'${LOCAL_DEVICE}': run ${runId} failed${run.error ? `: ${run.error}` : ""}`);
        return run?.status ?? "failed";
      }
      // Stopped while the local share still waits in the queue: it must not start any more.
      if (signal.aborted && run.status === "pending") await this.service.abort(runId, typeof signal.reason === "string" ? signal.reason : undefined, false).catch(() => {});
    }
  }

  /**
   * Polls node `m`'s run until it is final; a run that never ends is aborted remotely. A
   * run that failed, a node that stopped answering and a run past `remote_run_timeout` are noted
   * in the trigger's errors, each naming the node and why.
   */
  private async pollRemote(m: string, runId: string, progress: Progress, signal: AbortSignal): Promise<RunStatus | "unknown"> {
    const node = this.nodes[m];
    const timeout = this.service.ctx.config.test_server.remote_run_timeout;
    // A node's run that never ends is aborted remotely.
    const deadline = this.service.ctx.clock.now() + timeout * 1000;
    let failures = 0;
    let problem = "";
    while (!signal.aborted) {
      await this.service.ctx.clock.sleep(POLL_MS, signal);
      if (signal.aborted) break;
      try {
        const answer = await this.call(node, "GET", `/api/v1/test-runs/${encodeURIComponent(runId)}`, undefined, signal);
        const json = answer.json && typeof answer.json === "object" ? (answer.json as { status?: unknown; error?: unknown }) : {};
        const status = String(json.status ?? "");
        if (answer.status === 200 && isFinalStatus(status)) {
          if (status === "failed") progress.errors.push(`node '${m}': run ${runId} failed${typeof json.error === "string" && json.error ? `: ${json.error}` : ""}`);
          return status;
        }
        failures = answer.status === 200 ? 0 : failures + 1;
        if (answer.status !== 200) problem = Orchestrator.errorText(answer.json, answer.status);
      } catch (error) {
        if (signal.aborted) break;
        failures++;
        problem = String((error as Error).cause ?? (error as Error).message);
      }
      if (failures >= POLL_FAILURES) {
        progress.errors.push(`node '${m}' stopped answering while its run ${runId} was polled (${problem})`);
        return "unknown";
      }
      if (this.service.ctx.clock.now() > deadline) {
        await this.call(node, "DELETE", `/api/v1/test-runs/${encodeURIComponent(runId)}`).catch(() => {});
        progress.errors.push(`node '${m}': run ${runId} did not end within remote_run_timeout (${timeout} s) and was aborted`);
        return "aborted";
      }
    }
    return "aborted";
  }

  /** Stops dispatching and tells every node already involved. */
  async abort(id: string, reason?: string): Promise<void> {
    const orchestration = this.active.get(id);
    orchestration?.controller.abort(reason);
    const trigger = await this.service.store.getTrigger(id);
    await Promise.all(
      Object.keys(trigger?.nodes ?? {}).map((m) => {
        const node = this.nodes[m];
        return node ? this.call(node, "DELETE", `/api/v1/test-runs/trigger/${encodeURIComponent(id)}`).catch(() => {}) : undefined;
      }),
    );
    await orchestration?.done;
  }

  /** First step of a shutdown: every orchestration stops dispatching (without waiting). */
  signalAll(reason: string): void {
    for (const o of this.active.values()) o.controller.abort(reason);
  }

  async shutdown(reason: string): Promise<void> {
    await Promise.all([...this.active.keys()].map((id) => this.abort(id, reason)));
  }
}
