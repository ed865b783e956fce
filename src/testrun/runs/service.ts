import { randomUUID } from "node:crypto";
import { mkdirSync } from "node:fs";
import { rm } from "node:fs/promises";
import type { Readable } from "node:stream";
import type { AppContext, Identity } from "../../app/context.ts";
import type { ChannelHub } from "../../update/channel/hub.ts";
import { LabgateError } from "../../util/errors.ts";
import { patternError } from "../engine/pattern.ts";
import { resolveEntry, type ModuleLookup } from "../modules/registry.ts";
import { isDeviceTarget } from "../devices/names.ts";
import { buildPlan, snapshotSource } from "../config/plan-builder.ts";
import { planMachines, type ConfigSource, type DeviceShare, type PinnedConfig, type TestPlan } from "../plan.ts";
import { DeviceRuns, type BoardPower, type BoardReservations, type ConsoleSpans } from "../devices/runs.ts";
import { deviceShares, deviceTargetsOf, expectedCases, scriptModules, shareModules } from "../devices/shares.ts";
import { resolveTargets, type TargetDevice } from "../devices/targets.ts";
import { refuseReserved } from "../../lab/reservations.ts";
import { aggregateResults } from "./aggregate.ts";
import { Orchestrator, type LocalRuns } from "./dispatch.ts";
import { openReportCsv, openReportDetails, type ReportSource } from "../engine/report.ts";
import { artifactsDir, reportDetailsPath, reportIndexPath, reportPath, testrunDirs, type TestrunDirs } from "../paths.ts";
import { DeviceSight, seenRun, type SeenRun } from "./sight.ts";
import { RunQueue } from "./queue.ts";
import { listArtifacts } from "./artifacts.ts";
import { fetchReport, publishRun, removeRunObjects, sharedArtifacts, sharedStore } from "./shared.ts";
import type { Artifact, PeerShareMessages, PeerShareStart, PeerShareStarted } from "../schema.ts";
import { executeRun } from "./runner.ts";
import type { TestRunAs } from "../engine/identity.ts";
import { LOCAL_DEVICE } from "./nodes.ts";
import type { TriggerRequest } from "./trigger.ts";
import { FINAL_STATUSES, type HistoryRow, type RunStore, type RunRecord, type TriggerRecord, type TriggerStatus } from "./store.ts";

export const RESTART_ERROR = "interrupted by server restart";
export const SHUTDOWN_ERROR = "server shutdown";

export type TriggerResult = { kind: "run"; run: RunRecord } | { kind: "dispatch"; triggerId: string };

/** How a trigger came: through which API variant, and who asks (device targets check their permissions). */
export interface TriggerOptions {
  dispatch: boolean;
  identity?: Identity;
}

const TRIGGER_ID = /^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$/;

/**
 * Runs: creation (with the plan as trigger-time snapshot), execution of one run (the queue,
 * queue.ts, takes one at a time), abort, restart recovery and shutdown.
 * Orchestration of multi-node selections lives in dispatch.ts and never holds the queue.
 */
export class TestRunService implements LocalRuns {
  readonly store: RunStore;
  readonly ctx: Pick<AppContext, "clock" | "config" | "dataDir" | "log" | "store" | "objects" | "cluster">;
  readonly source: ConfigSource;
  readonly orchestrator: Orchestrator;
  readonly dirs: TestrunDirs;
  private readonly queue: RunQueue;
  /** Runs on managed devices; undefined when this server manages no devices (no device socket hub). */
  private readonly devices: DeviceRuns | undefined;
  /** `test_server.run_as`: who runs the tests, where their working directories are made, what holds a run's processes. */
  private readonly runAs: TestRunAs;
  /** Resolves once the runs the last process left unfinished are aborted (recoverFromRestart). */
  private recovered: Promise<void> = Promise.resolve();

  constructor(ctx: Pick<AppContext, "clock" | "config" | "dataDir" | "log" | "store" | "objects" | "cluster">, source: ConfigSource, store: RunStore, hub?: ChannelHub, runAs: TestRunAs = {}) {
    this.ctx = ctx;
    this.source = source;
    this.store = store;
    this.orchestrator = new Orchestrator(this);
    this.queue = new RunQueue(store, (run, signal) => this.execute(run, signal), ctx.log, ctx.clock, ctx.cluster);
    this.dirs = testrunDirs(ctx.config);
    this.devices = hub && new DeviceRuns({ ctx, store, dirs: this.dirs, lookup: this.lookup, ended: (id) => this.endedOnDevices(id) }, hub);
    for (const dir of [this.dirs.reports, this.dirs.artifacts, this.dirs.results]) mkdirSync(dir, { recursive: true });
    this.runAs = runAs;
  }

  /**
   * Runs on boards with a console port (src/lab/console.ts) leave the span they ran in as each
   * device's `console.log`; the `power` module switches boards (src/lab/power.ts); a validation
   * run waits for its board's reservation to end (src/lab/reservations.ts).
   */
  attachLab(lab: { consoles: ConsoleSpans; power: BoardPower; reservations: BoardReservations }): void {
    this.devices?.attachConsoles(lab.consoles);
    this.devices?.attachPower(lab.power);
    this.devices?.attachReservations(lab.reservations);
  }

  /**
   * At start: runs and orchestrations the last process left unfinished become aborted; nothing is
   * re-queued. Runs are created only once this is done (`recovered`), so none of them is taken for the last process's.
   */
  recoverFromRestart(): void {
    // Another node runs the queue: the runs are its own (it takes over what a node that went left).
    if (!this.ctx.cluster.runs("test_runs")) return;
    this.recovered = this.recover().catch((e) => this.ctx.log.error(`testrun: marking unfinished runs aborted failed: ${e}`));
  }

  /** Resolves once the runs the last process left unfinished are aborted and what they started is gone (the server's start waits for it). */
  get recoveredFromRestart(): Promise<void> {
    return this.recovered;
  }

  private async recover(): Promise<void> {
    // What the runs it interrupted started dies before anything runs here (a service manager would have killed it with the process).
    const interrupted = (await this.store.runsWithStatus("running")).map((run) => run.id);
    if (interrupted.length > 0) await this.runAs.containment?.recover(interrupted);
    await this.store.abortUnfinished(this.ctx.clock.now(), RESTART_ERROR);
  }

  get lookup(): ModuleLookup {
    return { compat: this.ctx.config.test_server.compat_modules, dataDir: this.ctx.dataDir };
  }

  /** Checks every entry this node will run (module known, params valid): a 422 naming the entry. */
  validateLocalEntries(plan: TestPlan, localOnly: boolean): string[] {
    const warnings: string[] = [];
    for (const entry of plan.entries) {
      if (localOnly && entry.machines.length > 0) continue;
      const resolved = resolveEntry(entry.where, entry.module, entry.params, this.lookup);
      if ("error" in resolved) throw new LabgateError("unprocessable", resolved.error);
      warnings.push(...resolved.warnings);
    }
    return warnings;
  }

  static checkPattern(pattern: string): void {
    const problem = patternError(pattern);
    if (problem) throw new LabgateError("invalid", `invalid pattern: ${problem}`);
  }

  /**
   * The plan of a run on managed devices, when the trigger names devices (docs/device-tests.md):
   * targets resolved now with the caller's permissions, each device's share, the script modules
   * they use. Undefined when it names none. Throws 4xx for unknown targets, 403 without `test`,
   * 409 for a device someone else has reserved.
   */
  private async onDevices(plan: TestPlan, request: TriggerRequest, identity: Identity | undefined): Promise<{ plan: TestPlan; warnings: string[] } | undefined> {
    const targets = deviceTargetsOf(plan, request.machineTarget);
    if (!targets) return undefined;
    if (!this.devices) throw new LabgateError("invalid", "this server manages no devices");
    if ((request.nodes ?? []).length > 0) throw new LabgateError("invalid", "give either nodes or device targets, not both");
    const resolved = await resolveTargets(this.ctx.store, identity, targets.targets, this.ctx.config.prefix);
    // A board someone else holds runs none of this caller's tests (src/lab/reservations.ts).
    await refuseReserved(this.ctx.store.query, identity!, [...resolved.values()].flat(), this.ctx.clock.now());
    const shares = deviceShares(targets.entries, resolved);
    if (shares.length === 0) throw new LabgateError("unprocessable", `no entry of the selection runs on ${targets.targets.join(", ")}`);
    const warnings = this.checkShares(shares, plan.warnings);
    const caller = identity?.kind === "mgmt" ? { user: identity.user, scopes: [...identity.scopes] } : undefined;
    return { plan: { ...plan, machineTarget: request.machineTarget, devices: shares, modules: shareModules(shares, this.ctx.dataDir), ...(caller ? { caller } : {}) }, warnings };
  }

  /**
   * A copy of `configName` (and `suite`) as it is now, for runs on one managed device later
   * (runOnDevice): its files and the script modules its entries use. Throws 4xx unless it could
   * run on a device (the config loads and has entries for one).
   */
  pinOnDevice(configName: string, suite: string): PinnedConfig {
    const { plan } = this.oneDevice(configName, suite, { id: 0, mac: "00:00:00:00:00:00", name: "check" }, this.source, this.lookup);
    return { config: configName, suite, files: plan.files, modules: scriptModules(plan.entries, this.ctx.dataDir) };
  }

  /**
   * Runs a pinned config on one managed device for the gateway itself, e.g. to validate an
   * update the device just installed (`validates`: that deployment's id): the copy runs, whatever
   * the store holds now, and no caller's permissions are checked here (the caller checked them
   * when it was set up). The run's `machine_target` is `device:<mac>`.
   */
  async runOnDevice(pinned: PinnedConfig, device: TargetDevice, validates: number): Promise<RunRecord> {
    const { request, plan, shares, warnings } = this.oneDevice(pinned.config, pinned.suite, device, snapshotSource(pinned.files), { ...this.lookup, scripts: pinned.modules });
    return this.createRun({ ...plan, machineTarget: request.machineTarget, devices: shares, modules: pinned.modules, validates }, request, warnings, null);
  }

  /** The plan of `configName` on `device` alone: the entries without machines (as machine_target device:<mac> selects them). */
  private oneDevice(configName: string, suite: string, device: TargetDevice, source: ConfigSource, lookup: ModuleLookup) {
    if (!this.devices) throw new LabgateError("invalid", "this server manages no devices");
    const request: TriggerRequest = { configName, suite, machineTarget: `device:${device.mac}`, overrides: null, pattern: "" };
    const plan = this.planOf(request, source);
    const targets = deviceTargetsOf(plan, request.machineTarget)!;
    const shares = deviceShares(targets.entries, new Map([[request.machineTarget!, [device]]]));
    if (shares.length === 0) throw new LabgateError("unprocessable", `no entry of ${configName}${suite ? ` (${suite})` : ""} runs on a device (entries naming machines are left out)`);
    return { request, plan, shares, warnings: this.checkShares(shares, plan.warnings, lookup) };
  }

  /** Resolves when the run is final (however long it takes); its final record. */
  async finalRun(id: string): Promise<RunRecord | undefined> {
    for (;;) {
      const run = await this.store.getRun(id);
      if (!run || FINAL_STATUSES.has(run.status)) return run;
      await this.queue.waitForEnd(id, 60_000);
    }
  }

  /** Every entry of the shares checked (module known, params valid: 422 naming it); the run's warnings. */
  private checkShares(shares: DeviceShare[], planWarnings: string[], lookup = this.lookup): string[] {
    const warnings = [...planWarnings];
    for (const entry of shares.flatMap((s) => s.entries)) {
      const resolved = resolveEntry(entry.where, entry.module, entry.params, lookup);
      if ("error" in resolved) throw new LabgateError("unprocessable", resolved.error);
      for (const w of resolved.warnings) if (!warnings.includes(w)) warnings.push(w);
    }
    return warnings;
  }

  /** The request's plan; a `machine_target` naming devices selects like none (deviceTargetsOf picks the entries). */
  private planOf(request: TriggerRequest, source = this.source): TestPlan {
    const machineTarget = request.machineTarget !== null && isDeviceTarget(request.machineTarget) ? null : request.machineTarget;
    return buildPlan(source, { configName: request.configName, suite: request.suite, overrides: request.overrides, machineTarget });
  }

  /** POST /test-runs: a local run, a node-role run, a run on managed devices, or a multi-node dispatch. */
  async trigger(request: TriggerRequest, options: TriggerOptions = { dispatch: true }): Promise<TriggerResult> {
    TestRunService.checkPattern(request.pattern);
    if (request.triggerId !== undefined && !TRIGGER_ID.test(request.triggerId)) throw new LabgateError("invalid", "invalid trigger_id");
    const plan = this.planOf(request);
    const onDevices = await this.onDevices(plan, request, options.identity);
    if (onDevices) {
      if (!options.dispatch) throw new LabgateError("invalid", "device targets cannot be run through this API variant");
      return { kind: "run", run: await this.createRun(onDevices.plan, request, onDevices.warnings, null) };
    }
    const nodes = [...new Set(request.nodes ?? [])];
    if (nodes.length > 0) {
      if (!options.dispatch) throw new LabgateError("invalid", "nodes cannot be given through this API variant");
      if (request.machineTarget !== null) throw new LabgateError("invalid", "give either nodes or machine_target, not both");
      const unknown = nodes.find((n) => n !== LOCAL_DEVICE && !Object.hasOwn(this.ctx.config.test_server.nodes, n));
      if (unknown !== undefined) throw new LabgateError("invalid", `unknown node '${unknown}' (the nodes are test_server.nodes and '${LOCAL_DEVICE}')`);
      if (planMachines(plan).length > 0) throw new LabgateError("invalid", "this config assigns its entries to machines itself (machines:): trigger it without nodes");
    }
    if (nodes.length > 1 || (nodes.length === 1 && nodes[0] !== LOCAL_DEVICE)) {
      if (nodes.includes(LOCAL_DEVICE)) this.validateLocalEntries(plan, false);
      return { kind: "dispatch", triggerId: await this.orchestrator.start(plan, request, nodes) };
    }
    if (request.machineTarget === null && planMachines(plan).length > 0) {
      if (!options.dispatch) throw new LabgateError("invalid", "entries with machines cannot be run through this API variant");
      this.validateLocalEntries(plan, true);
      return { kind: "dispatch", triggerId: await this.orchestrator.start(plan, request) };
    }
    const warnings = [...plan.warnings, ...this.validateLocalEntries(plan, false)];
    const run = await this.createRun(plan, request, warnings, null);
    return { kind: "run", run };
  }

  /** Creates a tracked run (pending, or born aborted in an aborted trigger) and queues it. */
  async createRun(plan: TestPlan, request: TriggerRequest, warnings: string[], repeatOf: string | null): Promise<RunRecord> {
    await this.recovered;
    const now = this.ctx.clock.now();
    const triggerId = request.triggerId ?? randomUUID();
    const trigger = await this.store.getTrigger(triggerId);
    const bornAborted = trigger?.isAborted === true;
    const run = await this.store.createRun(
      {
        id: randomUUID(),
        triggerId,
        configName: request.configName,
        suite: request.suite,
        machineTarget: request.machineTarget,
        overrides: plan.overrides,
        pattern: request.pattern,
        repeatOf,
        createdAt: now,
        warnings,
        plan,
        ...(bornAborted ? { status: "aborted" as const } : {}),
        ...(plan.devices ? { devices: plan.devices.map((d) => ({ name: d.name, mac: d.mac, dir: d.dir, status: "waiting" as const, passed: 0, failed: 0, skipped: 0, error: null })) } : {}),
      },
      { createdAt: now, configName: request.configName, suite: request.suite, orchestrated: false },
    );
    if (bornAborted) return run;
    if (plan.devices) this.devices!.start(run, plan);
    else this.queue.enqueue(run.id);
    return run;
  }

  /**
   * POST /test-runs/{id}/repeat: the current config, same suite/overrides/target, a new
   * trigger. A run on devices runs again on the devices its targets name now.
   */
  async repeat(id: string, pattern: string | null, identity?: Identity): Promise<RunRecord> {
    const original = await this.store.getRun(id);
    if (!original) throw new LabgateError("not_found", `Run not found: ${id}`);
    const effective = pattern === null || pattern === "" ? original.pattern : pattern;
    TestRunService.checkPattern(effective);
    const overrides = Array.isArray(original.overrides) ? original.overrides.join("\n") : original.overrides;
    const request: TriggerRequest = { configName: original.configName, suite: original.suite, machineTarget: original.machineTarget, overrides, pattern: effective };
    const plan = this.planOf(request);
    const onDevices = await this.onDevices(plan, request, identity);
    if (onDevices) return this.createRun(onDevices.plan, request, onDevices.warnings, original.id);
    const warnings = [...plan.warnings, ...this.validateLocalEntries(plan, false)];
    // Orchestration is never repeated: a dispatched run's local share runs again here only.
    return this.createRun(plan, request, warnings, original.id);
  }

  /** Executes one run the queue took: running, the runner, its combined results, its final state. */
  private async execute(run: RunRecord, signal: AbortSignal): Promise<void> {
    // The artifact directory exists from the moment the run is `running`.
    try {
      mkdirSync(artifactsDir(this.dirs, run.id), { recursive: true });
    } catch {
      /* the runner reports it */
    }
    // Aborted since the queue took it: it never starts.
    if (!(await this.store.markRunning(run.id, this.ctx.clock.now()))) return;
    const plan = (await this.store.planOf(run.id))!;
    let result;
    try {
      const ts = this.ctx.config.test_server;
      const env = {
        ...this.lookup,
        dirs: this.dirs,
        clock: this.ctx.clock,
        reportColumns: ts.report_columns,
        metadataTimeoutMs: ts.metadata_timeout * 1000,
        roots: { sys: ts.sys_root, dev: ts.dev_root, firmware: ts.firmware_root },
        ...this.runAs,
      };
      this.ctx.log.info(`testrun: run ${run.id} started (${run.configName}${run.suite ? `, ${run.suite}` : ""})`);
      result = await executeRun({ id: run.id, plan, pattern: run.pattern, machineTarget: run.machineTarget }, env, signal);
    } catch (e) {
      result = { status: "failed" as const, error: `runner error: ${(e as Error).message}`, metadata: {}, warnings: [] };
    }
    this.ctx.log.info(`testrun: run ${run.id} ${result.status}${result.error ? `: ${result.error}` : ""}`);
    // A local-only run is its own trigger: its combined results are collected here.
    const trigger = await this.store.getTrigger(run.triggerId);
    if (plan.aggregateResults && run.machineTarget === null && trigger && !trigger.orchestrated && !this.queue.stopping) {
      await this.store.updateTrigger(trigger.id, { resultsDir: await this.aggregate(trigger, plan.combinedResultsDirPrefix) });
    }
    const reason = signal.aborted && typeof signal.reason === "string" ? signal.reason : undefined;
    // On a shared store the files are there before anyone sees the run finished.
    await this.publish(run.id);
    await this.store.finishRun(run.id, {
      status: result.status,
      at: this.ctx.clock.now(),
      error: reason ?? result.error,
      metadata: result.metadata,
      warnings: [...run.warnings, ...result.warnings],
      ...(result.counts ? { counts: result.counts } : {}),
    });
  }

  /** A run on devices ended (its report is complete): its files go to the shared store. */
  private endedOnDevices(id: string): void {
    this.queue.ended(id);
    void this.publish(id);
  }

  /** Copies a run's report and artifacts to the shared store, if there is one; a failure is logged (the files stay on this node). */
  private async publish(id: string): Promise<void> {
    const shared = sharedStore(this.ctx.objects);
    if (!shared) return;
    await publishRun(shared, this.dirs, id).catch((error: Error) => this.ctx.log.warn(`testrun: run ${id}: its files are not on the shared store: ${error.message}`));
  }

  /** Makes sure this node has the run's report files (fetched from the shared store when another node ran it). */
  async localReport(id: string): Promise<void> {
    const shared = sharedStore(this.ctx.objects);
    if (shared) await fetchReport(shared, this.dirs, id);
  }

  /** A run's artifacts: this node's files, or the shared store's when another node ran it. */
  async artifactsOf(id: string): Promise<Artifact[]> {
    const shared = sharedStore(this.ctx.objects);
    const local = await listArtifacts(artifactsDir(this.dirs, id));
    return local.length > 0 || !shared ? local : sharedArtifacts(shared, id);
  }

  /** Builds a trigger's combined results directory; returns its name, or null when that failed. */
  async aggregate(trigger: TriggerRecord, prefix: string): Promise<string | null> {
    const warn = (message: string) => this.ctx.log.warn(`testrun: trigger ${trigger.id}: ${message}`);
    try {
      return await aggregateResults(this.dirs, this.store, trigger, prefix, this.ctx.config.test_server.nodes, this.ctx.clock, warn);
    } catch (error) {
      warn(`collecting results failed: ${(error as Error).message}`);
      return null;
    }
  }

  /** An artifact upload of a device for its share of a run (DeviceRuns.writeArtifact); the artifact's new size. */
  /** `POST /api/v1/devices/test-runs/{id}/power` from the device `mac`: its share's `power` module. */
  devicePower(runId: string, mac: string, action: "on" | "off" | "cycle", client: string, fromDevice = true): Promise<void> {
    if (!this.devices) throw new LabgateError("not_found", "no running test run of this device");
    return this.devices.power(runId, mac, action, client, fromDevice);
  }

  deviceArtifact(runId: string, mac: string, name: string, offset: number, body: Readable, fromDevice = true): Promise<number> {
    if (!this.devices) throw new LabgateError("not_found", "no running test run of this device");
    return this.devices.writeArtifact(runId, mac, name, offset, body, fromDevice);
  }

  /** Another node's share on a device whose socket is here (DeviceRuns.startRelayed). */
  startRelayedShare(request: PeerShareStart): Promise<PeerShareStarted> {
    if (!this.devices) throw new LabgateError("not_found", "this server manages no devices");
    return this.devices.startRelayed(request);
  }

  /** What the node holding a share's device relayed (DeviceRuns.relayed). */
  relayedShareMessages(request: PeerShareMessages): void {
    if (!this.devices) throw new LabgateError("not_found", "no running test run of this device");
    this.devices.relayed(request);
  }

  /** The devices `identity` may see of runs (sight.ts): every view of a run is made through it. */
  sight(identity: Identity | undefined): Promise<DeviceSight> {
    return DeviceSight.of(this.ctx.store.query, identity);
  }

  /** The run `id` as `sight` sees it, or undefined when there is none. */
  async seen(id: string, sight: DeviceSight): Promise<SeenRun | undefined> {
    const run = await this.store.getRun(id);
    return run && seenRun(run, sight);
  }

  /**
   * A config's history (store.deviceHistory) with each row's entry name: its `name:` in the
   * newest of those runs that ran the test on that device ("" without one).
   */
  async deviceHistory(
    configName: string,
    runs: number,
    page: { limit: number; offset: number },
    macs?: ReadonlySet<string>,
  ): Promise<{ runs: RunRecord[]; total: number; rows: Array<HistoryRow & { name: string }> }> {
    const history = await this.store.deviceHistory(configName, runs, page, macs);
    const wanted = new Set(history.rows.map((r) => r.mac));
    const names = new Map<string, Map<string, string>>();
    for (const run of history.runs) {
      const plan = await this.store.planOf(run.id);
      const lookup = { ...this.lookup, scripts: plan?.modules ?? {} };
      // Devices of one group have the same entries: their names are worked out once per run.
      const byEntries = new Map<string, Map<string, string>>();
      for (const share of plan?.devices ?? []) {
        if (!wanted.has(share.mac)) continue;
        const key = JSON.stringify(share.entries);
        let cases = byEntries.get(key);
        if (!cases) byEntries.set(key, (cases = new Map(expectedCases(share.entries, "", lookup).map((c) => [c.testName, c.name]))));
        const known = names.get(share.mac) ?? new Map<string, string>();
        for (const [test, name] of cases) if (!known.has(test)) known.set(test, name);
        names.set(share.mac, known);
      }
    }
    return { ...history, rows: history.rows.map((r) => ({ ...r, name: names.get(r.mac)?.get(r.testName) ?? "" })) };
  }

  /** The report of a seen run: as stored, or without the rows of the devices left out. */
  reportSource(seen: SeenRun): ReportSource {
    const path = reportPath(this.dirs, seen.run.id);
    const keep = seen.whole ? undefined : seen.keepsRow;
    const details = reportDetailsPath(this.dirs, seen.run.id);
    return Object.assign(() => openReportCsv(path, keep && { index: reportIndexPath(this.dirs, seen.run.id), keep }), { details: () => openReportDetails(details, keep) });
  }

  /** Resolves when the run is in a final state, or after `timeoutMs`. */
  waitForEnd(id: string, timeoutMs: number): Promise<void> {
    return this.queue.waitForEnd(id, timeoutMs);
  }

  /**
   * DELETE /test-runs/{id}: a pending run is aborted at once; a running one is signalled
   * (its processes get SIGTERM, then SIGKILL). Throws 400 for a run in a final state.
   */
  async abort(id: string, reason?: string, propagate = true): Promise<RunRecord> {
    const run = await this.store.getRun(id);
    if (!run) throw new LabgateError("not_found", "Test run not found");
    if (FINAL_STATUSES.has(run.status)) throw new LabgateError("invalid", "Test run not pending or running");
    // A pending run ends at once, unless it was taken meanwhile: then it is signalled as a running one.
    if (run.status === "pending" && (await this.store.finishRun(id, { status: "aborted", at: this.ctx.clock.now(), ...(reason ? { error: reason } : {}) }, ["pending"]))) {
      this.queue.ended(id);
    } else {
      await this.store.setAbortRequested(id);
      this.queue.signal(id, reason);
      this.devices?.abort(id, reason);
    }
    // Aborting the local share of a multi-node trigger aborts the trigger.
    const trigger = await this.store.getTrigger(run.triggerId);
    if (propagate && trigger?.orchestrated && !trigger.isAborted) await this.abortTrigger(trigger.id);
    return (await this.store.getRun(id))!;
  }

  /** DELETE /test-runs/trigger/{id}: aborts its pending/running runs and stops its dispatch. */
  async abortTrigger(id: string): Promise<TriggerRecord> {
    const trigger = await this.store.getTrigger(id);
    if (!trigger) throw new LabgateError("not_found", "Trigger not found");
    if ((await this.triggerStatus(trigger)) !== "running") throw new LabgateError("invalid", "There is no pending or running suite in specified trigger");
    await this.store.updateTrigger(id, { isAborted: true });
    for (const run of await this.store.runsOfTrigger(id)) {
      if (!FINAL_STATUSES.has(run.status)) await this.abort(run.id, undefined, false).catch(() => {});
    }
    // Stopping the dispatch and telling the nodes may take up to a node's request timeout: the
    // caller gets its answer at once (the trigger turns `aborted` when the orchestration ends).
    if (trigger.orchestrated) void this.orchestrator.abort(id);
    return (await this.store.getTrigger(id))!;
  }

  /** A trigger's status (triggerStatusOf). */
  async triggerStatus(trigger: TriggerRecord): Promise<TriggerStatus> {
    return triggerStatusOf(trigger, trigger.orchestrated ? [] : await this.store.runsOfTrigger(trigger.id));
  }

  /** Deletes a run in a final state with its report and artifacts (409 while it is pending or running). */
  async deleteRun(id: string): Promise<void> {
    const run = await this.store.getRun(id);
    if (!run) throw new LabgateError("not_found", `Run not found: ${id}`);
    if (!FINAL_STATUSES.has(run.status)) throw new LabgateError("conflict", "Test run is pending or running: abort it first");
    // The record goes first: a failure after it leaves unreferenced files, never a run without them.
    if (!(await this.store.deleteRun(id))) throw new LabgateError("conflict", "Test run is pending or running: abort it first");
    await rm(reportPath(this.dirs, id), { force: true });
    await rm(reportIndexPath(this.dirs, id), { force: true });
    await rm(reportDetailsPath(this.dirs, id), { force: true });
    await rm(artifactsDir(this.dirs, id), { recursive: true, force: true });
    const shared = sharedStore(this.ctx.objects);
    if (shared) await removeRunObjects(shared, id).catch((error: Error) => this.ctx.log.warn(`testrun: run ${id}: its files on the shared store are not removed: ${error.message}`));
  }

  /** Graceful shutdown (docs/test-run-server.md, "Runs"): pending and running runs end `aborted` with `server shutdown`. */
  async shutdown(): Promise<void> {
    this.queue.stop();
    this.orchestrator.signalAll(SHUTDOWN_ERROR);
    await this.devices?.shutdown(SHUTDOWN_ERROR);
    await this.queue.drain(SHUTDOWN_ERROR);
    await this.orchestrator.shutdown(SHUTDOWN_ERROR);
  }
}

/** A trigger's status: stored for orchestrations, derived from its runs (`runs`) otherwise. */
export function triggerStatusOf(trigger: TriggerRecord, runs: RunRecord[]): TriggerStatus {
  if (trigger.orchestrated) return trigger.status;
  if (runs.some((r) => !FINAL_STATUSES.has(r.status))) return "running";
  if (trigger.isAborted || runs.some((r) => r.status === "aborted")) return "aborted";
  return runs.some((r) => r.status === "failed") ? "failed" : "finished";
}
