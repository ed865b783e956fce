/*
 * Deployments (docs/update-server.md, "Deployments"): the state machine of a version rolled out to a group in
 * phases. Every transition is one durable write (the caller's answer waits for it); the active
 * deployments and their devices' states are kept in memory as well, so that an update check of a
 * device in a deployment costs a map lookup (and one write, the first time it is offered).
 *
 * Time decisions (start time, window, success wait, device timeout) read the injected clock; a
 * loop sleeping on it runs them (tests move a TestClock and the loop wakes).
 */
import type { Database, Tx } from "../../db/index.ts";
import { recordAudit, type Actor } from "../../audit/audit.ts";
import type { AppContext, Identity } from "../../app/context.ts";
import { LabgateError } from "../../util/errors.ts";
import type { ChannelHub, DeviceConnection } from "../channel/hub.ts";
import type { EventBroadcaster } from "../events/broadcaster.ts";
import { assignPackages, changed, getGroup, groupDeviceIds, groupPackageIds, type CatalogWatch } from "../groups/groups.ts";
import { checkKeys, type Steer, type Steering } from "../updatecheck/check.ts";
import {
  ACTIVE,
  emptyCounts,
  FINAL,
  gate,
  overErrorThreshold,
  phaseCounts,
  phaseOf,
  stableOrder,
  sumOf,
  totalOf,
  UNDERWAY,
  windowOpen,
} from "./model.ts";
import type { Counts, DeploymentValidation, DeviceState, MaintenanceWindow, PhaseSpec, Status } from "./schema.ts";
import {
  activeDeploymentOf,
  activeDeployments,
  addHistory,
  reportApplied,
  getDeployment,
  latestMembership,
  memberStates,
  parsePhases,
  parsePhaseStarted,
  parseWindow,
  storedCounts,
  updateMember,
  type DeploymentRow,
  type MemberChange,
} from "./store.ts";
import { isoTime } from "../../util/time.ts";

/** The install output a failure keeps: its last 4 KiB. */
export const OUTPUT_TAIL = 4096;
/** How often the time decisions run (on the injected clock). */
const TICK_MS = 1000;

export interface NewDeployment {
  groupId: number;
  version: string;
  /** Packages to add to the group's assignment first (in the same transaction). */
  packages: number[];
  phases: PhaseSpec[];
  successPercent: number | null;
  successWait: number | null;
  errorPercent: number | null;
  /** Minutes. */
  deviceTimeout: number;
  startAt: number | null;
  window: MaintenanceWindow | null;
  createdBy: string | null;
  /** A test config (and suite) each device runs once it installed; a failure fails the device (`validation`). */
  validation: DeploymentValidation | null;
  /** Who creates it (the audit log), and with what permissions (the package assignment). */
  actor: Actor;
  identity: Identity;
}

/** A deployment's `packages` join its group through the group's one assignment path: its checks, its audit. */
function assignFirst(tx: Tx, input: NewDeployment): number[] {
  try {
    return assignPackages(tx, input.identity, input.groupId, input.packages, "add", input.actor);
  } catch (error) {
    if (error instanceof LabgateError) throw new LabgateError(error.code, `field "packages": ${error.message}`, error.details);
    throw error;
  }
}

/**
 * The test-run server's part in validation (src/testrun/devices/validation.ts), installed by the
 * composition root: `pin` copies the config as it is now, which the deployment keeps and its
 * devices run (opaque here), or refuses a validation that cannot run (a 4xx naming why).
 */
export interface ValidationRunner {
  pin(validation: DeploymentValidation): string;
}

/** An active deployment in memory. */
interface Run {
  row: DeploymentRow;
  /** Cumulative device count at the end of each phase. */
  ends: number[];
  phaseStarted: number[];
  window: MaintenanceWindow | null;
  /** Device count per state, per phase. */
  counts: Counts[];
  /** When the window last opened (ms), for the timeout of devices never offered. */
  windowOpenedAt: number;
  windowCache: { minute: number; open: boolean };
}

interface Member {
  run: Run;
  phase: number;
  state: DeviceState;
  offeredAt: number | null;
}

/** An outcome the device reported (the `update_outcome` message, docs/device-channel.md). */
export interface Outcome {
  /** The report's `id`: a report sent again is recognised by it. */
  reportId?: string;
  state: "installing" | "installed" | "failed" | "aborted";
  version: string;
  fromVersion: string | null;
  reason: string | null;
  output: string | null;
}

/** Told once an `installed` transition is on disk (a deployment's validation starts here, docs/device-tests.md). */
export type InstalledHook = (event: { deploymentId: number; deviceId: number; version: string }) => void;

export class DeploymentService implements Steering {
  private readonly ctx: AppContext;
  private readonly db: Database;
  private readonly events: EventBroadcaster;
  private readonly hub: ChannelHub;
  private readonly catalog: CatalogWatch;
  private readonly runs = new Map<number, Run>();
  /** Device id -> its place in an active deployment (a device is in at most one: one per group, and the check uses its active group). */
  private readonly index = new Map<number, Member>();
  private readonly installedHooks: InstalledHook[] = [];
  /** Set when this server runs tests too: deployments may then name a `validation`. */
  validator: ValidationRunner | undefined;
  /** Deployment id -> devices whose installed update is being validated: meanwhile it neither advances nor completes. */
  private readonly validating = new Map<number, Set<number>>();
  private epoch = -1;
  private readonly stop = new AbortController();

  /** `catalog` is told of the group writes (a package assignment at creation, the policy at completion). */
  constructor(ctx: AppContext, catalog: CatalogWatch, events: EventBroadcaster, hub: ChannelHub) {
    this.ctx = ctx;
    this.db = ctx.db;
    this.catalog = catalog;
    this.events = events;
    this.hub = hub;
    this.load();
  }

  /** Starts the loop of time decisions; it ends with `close`. */
  start(): void {
    void (async () => {
      while (!this.stop.signal.aborted) {
        await this.ctx.clock.sleep(TICK_MS, this.stop.signal);
        if (this.stop.signal.aborted) return;
        await this.tick().catch((error) => this.ctx.log.warn(`deployments: ${(error as Error).message}`));
      }
    })();
  }

  close(): void {
    this.stop.abort();
  }

  /** Runs after a device's `installed` transition is durable. */
  onInstalled(hook: InstalledHook): void {
    this.installedHooks.push(hook);
  }

  /** Devices held in memory (the benchmark prints the memory per device state). */
  get trackedDevices(): number {
    return this.index.size;
  }

  // --- memory ------------------------------------------------------------------------------

  /** (Re)builds the memory from the database: at start, and after the database reloaded from disk. */
  private load(): void {
    this.runs.clear();
    this.index.clear();
    const now = this.ctx.clock.now();
    for (const row of activeDeployments(this.db)) {
      const run = this.runOf(row, now);
      for (const m of memberStates(this.db, row.id)) {
        this.index.set(m.device_id, { run, phase: m.phase, state: m.state, offeredAt: m.offered_at ? Date.parse(m.offered_at) : null });
        run.counts[m.phase][m.state] += 1;
      }
    }
    this.epoch = this.db.epoch;
  }

  private runOf(row: DeploymentRow, now: number): Run {
    const ends = parsePhases(row);
    const run: Run = {
      row,
      ends,
      phaseStarted: parsePhaseStarted(row).map((t) => Date.parse(t)),
      window: parseWindow(row),
      counts: ends.map(emptyCounts),
      windowOpenedAt: now,
      windowCache: { minute: -1, open: false },
    };
    this.runs.set(row.id, run);
    return run;
  }

  private fresh(): void {
    if (this.db.epoch !== this.epoch) this.load();
  }

  /** Is the window open (computed once a minute); notes when it opened, for the timeouts. */
  private windowOpenAt(run: Run, now: number): boolean {
    const minute = Math.floor(now / 60_000);
    if (run.windowCache.minute !== minute) {
      const open = windowOpen(run.window, now);
      if (open && !run.windowCache.open && run.windowCache.minute !== -1) run.windowOpenedAt = now;
      run.windowCache = { minute, open };
    }
    return run.windowCache.open;
  }

  /** New offers are made: running, a phase started, inside the window. */
  private offering(run: Run, now: number): boolean {
    return run.row.status === "running" && run.row.current_phase >= 0 && this.windowOpenAt(run, now);
  }

  /** Moves a device in memory and on disk (inside `tx`). */
  private move(tx: Tx, deviceId: number, member: Member, change: MemberChange): void {
    updateMember(tx, member.run.row.id, deviceId, change);
    const counts = member.run.counts[member.phase];
    counts[member.state] -= 1;
    counts[change.state] += 1;
    member.state = change.state;
    if (change.offeredAt !== undefined) member.offeredAt = change.offeredAt === null ? null : Date.parse(change.offeredAt);
    // Held in the same step as the move: another device's report that resumes first must not
    // find every device installed and complete the deployment before this one's validation.
    if (change.state === "installed" && member.run.row.validation) this.holdForValidation(member.run.row.id, deviceId);
  }

  /** Writes deployment fields (in `tx`) and keeps the in-memory row in step. */
  private setRow(tx: Tx, run: Run | undefined, id: number, fields: Partial<DeploymentRow>, at: string): void {
    const entries = Object.entries({ ...fields, updated: at });
    tx.run(`UPDATE deployments SET ${entries.map(([k]) => `${k} = ?`).join(", ")} WHERE id = ?`, [...entries.map(([, v]) => v as string | number | null), id]);
    if (run) Object.assign(run.row, fields, { updated: at });
  }

  /** Drops a deployment that ended from memory. */
  private forget(run: Run): void {
    this.runs.delete(run.row.id);
    for (const [deviceId, member] of this.index) if (member.run === run) this.index.delete(deviceId);
  }

  private publishRun(row: DeploymentRow): void {
    this.events.publishDeployment("deployment", { deployment: row.id, group: row.group_id, status: row.status, current_phase: row.current_phase, pause_reason: row.pause_reason });
  }

  private publishDevice(run: Run | DeploymentRow, mac: string, member: { phase: number; state: DeviceState }, extra: Record<string, unknown> = {}): void {
    const row = "row" in run ? run.row : run;
    this.events.publishDeployment("deployment_device", { deployment: row.id, group: row.group_id, device: mac, phase: member.phase, state: member.state, ...extra });
  }

  /** A deleted device leaves its deployment (its rows went with it): it no longer counts. */
  deviceDeleted(deviceId: number): void {
    const member = this.index.get(deviceId);
    if (!member) return;
    member.run.counts[member.phase][member.state] -= 1;
    this.index.delete(deviceId);
    void this.evaluate(member.run).catch((error) => this.ctx.log.warn(`deployment ${member.run.row.id}: ${(error as Error).message}`));
  }

  // --- creation and commands -----------------------------------------------------------------

  /** Creates a deployment (validated by the route: shapes; here: what needs the database). Returns its row. */
  async create(input: NewDeployment): Promise<DeploymentRow> {
    this.fresh();
    const now = this.ctx.clock.now();
    const at = isoTime(now);
    const versionKey = checkKeys(this.ctx.config.prefix).version;
    if (input.validation && !this.validator) throw new LabgateError("invalid", `field "validation": this server runs no tests`);
    // Its devices run the config as it is now: an upload under its name later changes nothing here.
    const validationCopy = input.validation ? this.validator!.pin(input.validation) : null;
    const row = await changed(this.catalog, this.db.write((tx) => {
      if (!getGroup(tx, input.groupId)) throw new LabgateError("invalid", `field "group": group ${input.groupId} does not exist`);
      const running = activeDeploymentOf(tx, input.groupId);
      if (running) throw new LabgateError("conflict", `field "group": group ${input.groupId} already has deployment ${running.id} (${running.status})`);
      const devices = groupDeviceIds(tx, input.groupId);
      if (devices.length === 0) throw new LabgateError("invalid", `field "group": group ${input.groupId} has no devices`);
      // A device follows one deployment at a time (the one of its active group).
      const busy = devices.find((id) => this.index.has(id));
      if (busy !== undefined) throw new LabgateError("conflict", `field "group": device ${busy} is in deployment ${this.index.get(busy)!.run.row.id} of group ${this.index.get(busy)!.run.row.group_id}`);
      const packageIds = input.packages.length > 0 ? assignFirst(tx, input) : groupPackageIds(tx, input.groupId);
      const hasVersion = packageIds.some((id) => {
        const pkg = tx.get<{ metadata: string }>("SELECT metadata FROM packages WHERE id = ?", [id]);
        return pkg !== undefined && String((JSON.parse(pkg.metadata) as Record<string, unknown>)[versionKey] ?? "") === input.version;
      });
      if (!hasVersion) throw new LabgateError("invalid", `field "version": no package of group ${input.groupId} (or in "packages") has version ${input.version}`);

      const starts = input.startAt === null || input.startAt <= now;
      const { lastInsertRowid: id } = tx.run(
        `INSERT INTO deployments (group_id, version, status, phases, current_phase, phase_started, success_percent, success_wait, error_percent,
           device_timeout, start_at, window, created, created_by, validation, validation_copy, started, updated)
         VALUES (?, ?, ?, '[]', ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
        [
          input.groupId,
          input.version,
          starts ? "running" : "scheduled",
          starts ? 0 : -1,
          JSON.stringify(starts ? [at] : []),
          input.successPercent,
          input.successWait,
          input.errorPercent,
          input.deviceTimeout,
          input.startAt === null ? null : isoTime(input.startAt),
          input.window ? JSON.stringify(input.window) : null,
          at,
          input.createdBy,
          input.validation ? JSON.stringify(input.validation) : null,
          validationCopy,
          starts ? at : null,
          at,
        ],
      );
      recordAudit(tx, input.actor, "deployment.create", `deployment:${id}`, { group: input.groupId, version: input.version, devices: devices.length, packages: packageIds });
      const order = stableOrder(id, devices);
      const ends = phaseCounts(input.phases, order.length);
      tx.run("UPDATE deployments SET phases = ? WHERE id = ?", [JSON.stringify(ends), id]);
      const versions = new Map(
        tx
          .all<{ id: number; metadata: string }>("SELECT d.id, d.metadata FROM devices d JOIN group_devices gd ON gd.device_id = d.id WHERE gd.group_id = ?", [input.groupId])
          .map((d) => [d.id, String((JSON.parse(d.metadata) as Record<string, unknown>)[versionKey] ?? "")]),
      );
      order.forEach((deviceId, position) => {
        tx.run("INSERT INTO deployment_devices (deployment_id, device_id, phase, position, state, from_version, to_version, updated) VALUES (?, ?, ?, ?, 'waiting', ?, ?, ?)", [
          id,
          deviceId,
          phaseOf(ends, position),
          position,
          versions.get(deviceId) || null,
          input.version,
          at,
        ]);
      });
      const row = getDeployment(tx, id)!;
      const run = this.runOf({ ...row }, now);
      order.forEach((deviceId, position) => {
        const phase = phaseOf(ends, position);
        this.index.set(deviceId, { run, phase, state: "waiting", offeredAt: null });
        run.counts[phase].waiting += 1;
      });
      return row;
    }));
    this.ctx.log.info(`deployment ${row.id}: ${row.version} to group ${row.group_id} (${row.status})`);
    this.publishRun(row);
    const run = this.runs.get(row.id);
    if (run) await this.evaluate(run);
    return getDeployment(this.db, row.id)!;
  }

  private activeRun(id: number): Run {
    this.fresh();
    const run = this.runs.get(id);
    if (run) return run;
    const row = getDeployment(this.db, id);
    if (!row) throw new LabgateError("not_found", "deployment does not exist");
    throw new LabgateError("conflict", `deployment ${id} is ${row.status}`);
  }

  /** No new offers until resumed (devices already under way go on). */
  async pause(id: number, actor: Actor, reason = "paused by a person"): Promise<void> {
    const run = this.activeRun(id);
    if (run.row.status === "paused") return;
    if (run.row.status !== "running") throw new LabgateError("conflict", `deployment ${id} is ${run.row.status}`);
    await this.db.write((tx) => {
      this.setRow(tx, run, id, { status: "paused", pause_reason: reason }, this.isoNow());
      recordAudit(tx, actor, "deployment.pause", `deployment:${id}`, { reason });
    });
    this.publishRun(run.row);
  }

  async resume(id: number, actor: Actor): Promise<void> {
    const run = this.activeRun(id);
    if (run.row.status === "running") return;
    if (run.row.status !== "paused") throw new LabgateError("conflict", `deployment ${id} is ${run.row.status}`);
    await this.db.write((tx) => {
      this.setRow(tx, run, id, { status: "running", pause_reason: null }, this.isoNow());
      recordAudit(tx, actor, "deployment.resume", `deployment:${id}`);
    });
    this.publishRun(run.row);
    await this.evaluate(run);
  }

  /** Starts the next phase now, whatever its gate says (and lifts a pause). */
  async advance(id: number, actor: Actor): Promise<void> {
    const run = this.activeRun(id);
    if (run.row.status === "scheduled") throw new LabgateError("conflict", `deployment ${id} has not started yet`);
    if (run.row.current_phase >= run.ends.length - 1) {
      throw new LabgateError("conflict", `deployment ${id} runs its last phase: it completes when its devices finish (or abort it)`);
    }
    await this.db.write((tx) => {
      this.startPhase(tx, run, this.ctx.clock.now());
      recordAudit(tx, actor, "deployment.advance", `deployment:${id}`, { phase: run.row.current_phase });
    });
    this.publishRun(run.row);
    await this.evaluate(run);
  }

  /**
   * Abort: no more offers; devices offered or downloading are told to stop and count as aborted;
   * devices installing cannot be stopped and report what happened. The group's policy stays.
   */
  async abort(id: number, actor: Actor): Promise<void> {
    const run = this.activeRun(id);
    const at = this.isoNow();
    const stopped: number[] = [];
    await this.db.write((tx) => {
      for (const [deviceId, member] of this.index) {
        if (member.run !== run || member.state === "installing" || (FINAL.has(member.state) && member.state !== "not_reached")) continue;
        if (member.state === "offered" || member.state === "downloading") {
          stopped.push(deviceId);
          this.history(tx, run.row.id, deviceId, "aborted", "the deployment was aborted", at);
        }
        this.move(tx, deviceId, member, { state: "aborted", at, progress: null });
      }
      this.setRow(tx, run, id, { status: "aborted", finished: at, pause_reason: null }, at);
      recordAudit(tx, actor, "deployment.abort", `deployment:${id}`, { stopped: stopped.length });
    });
    this.forget(run);
    this.publishRun(run.row);
    for (const { id: deviceId, mac_address: mac } of this.macs(stopped)) {
      const conn = this.hub.get(mac);
      if (conn?.deviceId === deviceId) {
        try {
          conn.send({ method: "update_abort", version: run.row.version });
        } catch {
          // Gone meanwhile: it finds no offer at its next check.
        }
      }
    }
  }

  // --- the update check ------------------------------------------------------------------------

  /**
   * What the update check of a device of `groupId` (its active group) does: undefined, the
   * group's policy as usual (not in a deployment, or its phase has not started, or no new offers
   * now); "hold", no update (the device finished in this deployment: nothing may pull it back);
   * or the deployment's target, and `settle` to record what the resolver found.
   */
  steer(deviceId: number, groupId: number, now: number): Steer | undefined {
    this.fresh();
    const member = this.index.get(deviceId);
    if (!member || member.run.row.group_id !== groupId || member.phase > member.run.row.current_phase) return undefined;
    const { state, run } = member;
    if (FINAL.has(state) && state !== "not_reached") return "hold";
    if (!UNDERWAY.has(state) && !this.offering(run, now)) return undefined;
    return { target: run.row.version, settle: (offered, deviceVersion) => this.settle(deviceId, member, offered, deviceVersion, now) };
  }

  private async settle(deviceId: number, member: Member, offered: boolean, deviceVersion: string, now: number): Promise<void> {
    const at = isoTime(now);
    const { run } = member;
    const before = member.state;
    const underway = UNDERWAY.has(before);
    let state: DeviceState;
    if (offered) state = underway ? before : "offered";
    else if (deviceVersion === run.row.version) state = underway ? "installed" : "already_installed";
    else state = "no_package";
    if (state === before) return;
    await this.db.write((tx) => {
      if (member.state !== before) return; // another check moved it meanwhile
      const change: MemberChange = { state, at };
      if (state === "offered") Object.assign(change, { offeredAt: at, progress: 0, fromVersion: deviceVersion, reason: null, output: null });
      if (state === "no_package") change.reason = `no package leads from ${deviceVersion} to ${run.row.version} for this device`;
      this.move(tx, deviceId, member, change);
      if (state === "installed") this.history(tx, run.row.id, deviceId, "installed", null, at);
    });
    this.publishDeviceById(run, deviceId, member);
    if (state === "installed") this.installed(run.row.id, deviceId, run.row.version);
    await this.evaluate(run);
  }

  // --- what devices report -------------------------------------------------------------------------

  /** `update_progress` of a device: an offered device is downloading (durable); percents ride along lazily. */
  async progress(deviceId: number, mac: string, percent: number): Promise<void> {
    this.fresh();
    const member = this.index.get(deviceId);
    if (!member || (member.state !== "offered" && member.state !== "downloading") || percent >= 100) return;
    const at = this.isoNow();
    if (member.state === "offered") {
      await this.db.write((tx) => this.move(tx, deviceId, member, { state: "downloading", at, progress: percent }));
      this.publishDevice(member.run, mac, member, { progress: percent });
    } else {
      this.db.writeLazy((tx) => void tx.run("UPDATE deployment_devices SET progress = ?, updated = ? WHERE deployment_id = ? AND device_id = ?", [percent, at, member.run.row.id, deviceId]));
    }
  }

  /** `update_version` of a device (also what agents without outcome reports send): at the target, it is installed. */
  async reportedVersion(deviceId: number, version: string): Promise<void> {
    this.fresh();
    const member = this.index.get(deviceId);
    if (!member || !UNDERWAY.has(member.state) || version !== member.run.row.version) return;
    await this.settle(deviceId, member, false, version, this.ctx.clock.now());
  }

  /**
   * `update_outcome` of a device (docs/device-channel.md): moves its state in its deployment (an
   * active one, or the latest one for an outcome that comes after an abort), and writes its update
   * history. Resolves once durable: the caller acknowledges then.
   */
  async outcome(conn: Pick<DeviceConnection, "deviceId" | "mac">, outcome: Outcome): Promise<void> {
    this.fresh();
    const deviceId = conn.deviceId;
    const at = this.isoNow();
    // A report sent again (its acknowledgement was lost) that made its history row changes nothing:
    // an intermediate hop's `installed` would otherwise move the device back to `offered`.
    if (outcome.reportId !== undefined && reportApplied(this.db, deviceId, outcome.reportId)) return;
    const member = this.index.get(deviceId);
    if (!member) {
      // Not in an active deployment: history only (an ended deployment's device still gets its row).
      if (outcome.state !== "installed" && outcome.state !== "failed") return;
      const latest = latestMembership(this.db, deviceId);
      // Its deployment ended while it installed that deployment's version (an abort cannot stop an install).
      const ended = latest && latest.to_version === outcome.version && (latest.state === "installing" || latest.state === "aborted" || latest.state === "not_reached") ? latest : undefined;
      await this.db.write((tx) => {
        // A report sent again (its acknowledgement was lost) is the newest row already.
        const newest = tx.get<{ to_version: string; outcome: string; reason: string | null }>("SELECT to_version, outcome, reason FROM update_history WHERE device_id = ? ORDER BY id DESC LIMIT 1", [deviceId]);
        if (newest && newest.to_version === outcome.version && newest.outcome === outcome.state && newest.reason === outcome.reason) return;
        addHistory(tx, { device_id: deviceId, deployment_id: ended?.deployment_id ?? null, from_version: outcome.fromVersion, to_version: outcome.version, outcome: outcome.state, reason: outcome.reason, at, report_id: outcome.reportId });
        if (ended && ended.state === "installing") {
          const done = outcome.state === "installed" ? "installed" : "failed";
          updateMember(tx, ended.deployment_id, deviceId, { state: done, at, reason: outcome.reason, output: outcome.output });
        }
      });
      return;
    }
    const { run } = member;
    const target = run.row.version;
    let next: MemberChange | undefined;
    switch (outcome.state) {
      case "installing":
        if (member.state === "offered" || member.state === "downloading" || member.state === "not_reached") next = { state: "installing", at, progress: null };
        break;
      case "installed":
        if (member.state === "installed" || member.state === "already_installed") break;
        // One hop of a longer path: on to the next offer.
        next = outcome.version === target ? { state: "installed", at, progress: null, reason: null, output: null } : { state: "offered", at, progress: 0 };
        break;
      case "failed":
        if (member.state !== "failed") next = { state: "failed", at, progress: null, reason: outcome.reason ?? "failed", output: outcome.output };
        break;
      case "aborted":
        if (UNDERWAY.has(member.state)) next = { state: "aborted", at, progress: null, reason: outcome.reason };
        break;
    }
    // A report sent again (its acknowledgement was lost) changes nothing.
    if (!next) return;
    const change = next;
    await this.db.write((tx) => {
      if (outcome.state === "installed" || outcome.state === "failed") {
        addHistory(tx, { device_id: deviceId, deployment_id: run.row.id, from_version: outcome.fromVersion, to_version: outcome.version, outcome: outcome.state, reason: outcome.reason, at, report_id: outcome.reportId });
      }
      this.move(tx, deviceId, member, change);
    });
    this.publishDevice(run, conn.mac, member, next.reason ? { reason: next.reason } : {});
    if (next.state === "installed") this.installed(run.row.id, deviceId, target);
    if (next.state === "failed") await this.checkErrors(run);
    await this.evaluate(run);
  }

  /**
   * A device that installed is failed after all (its validation failed: `failed: validation`).
   * Counts for the error threshold like any failure.
   */
  async fail(deploymentId: number, deviceId: number, reason: string, output: string | null): Promise<void> {
    this.fresh();
    const member = this.index.get(deviceId);
    if (!member || member.run.row.id !== deploymentId || member.state === "failed") return;
    const at = this.isoNow();
    await this.db.write((tx) => {
      this.move(tx, deviceId, member, { state: "failed", at, reason, output: output === null ? null : tail(output) });
      addHistory(tx, { device_id: deviceId, deployment_id: deploymentId, from_version: null, to_version: member.run.row.version, outcome: "failed", reason, at });
    });
    this.publishDeviceById(member.run, deviceId, member, { reason });
    await this.checkErrors(member.run);
    await this.evaluate(member.run);
  }

  /** A validation of the device's install begins (at its move to `installed`, and for one a restart interrupted). */
  holdForValidation(deploymentId: number, deviceId: number): void {
    const set = this.validating.get(deploymentId) ?? new Set();
    set.add(deviceId);
    this.validating.set(deploymentId, set);
  }

  /** The device's validation passed: on disk, so that a restart does not run it again. */
  async validated(deploymentId: number, deviceId: number): Promise<void> {
    const at = this.isoNow();
    await this.db.write((tx) => void tx.run("UPDATE deployment_devices SET validated = ? WHERE deployment_id = ? AND device_id = ? AND state = 'installed'", [at, deploymentId, deviceId]));
  }

  /** The validation ended (after `fail` when it failed): the deployment may move on. */
  async validationDone(deploymentId: number, deviceId: number): Promise<void> {
    const set = this.validating.get(deploymentId);
    set?.delete(deviceId);
    if (set?.size === 0) this.validating.delete(deploymentId);
    const run = this.runs.get(deploymentId);
    if (run) await this.evaluate(run);
  }

  private installed(deploymentId: number, deviceId: number, version: string): void {
    for (const hook of this.installedHooks) {
      try {
        hook({ deploymentId, deviceId, version });
      } catch (error) {
        this.ctx.log.error(`deployment ${deploymentId}: installed hook failed: ${(error as Error).message}`);
      }
    }
  }

  // --- gates and time --------------------------------------------------------------------------

  /** Counts over the started phases. */
  private startedCounts(run: Run): Counts {
    const total = emptyCounts();
    for (let phase = 0; phase <= run.row.current_phase; phase++) for (const [state, n] of Object.entries(run.counts[phase])) total[state as DeviceState] += n;
    return total;
  }

  /** The error threshold, after a failure: pause when more than E % of the started devices failed. */
  private async checkErrors(run: Run): Promise<void> {
    if (run.row.status !== "running" || !this.runs.has(run.row.id)) return;
    const started = this.startedCounts(run);
    if (!overErrorThreshold(started, run.row.error_percent)) return;
    const begun = totalOf(started) - started.waiting;
    const reason = `error threshold: ${started.failed} of ${begun} started devices failed (more than ${run.row.error_percent}%)`;
    await this.db.write((tx) => this.setRow(tx, run, run.row.id, { status: "paused", pause_reason: reason }, this.isoNow()));
    this.ctx.log.warn(`deployment ${run.row.id}: paused: ${reason}`);
    this.publishRun(run.row);
  }

  private startPhase(tx: Tx, run: Run, now: number): void {
    const at = isoTime(now);
    run.phaseStarted.push(now);
    const fields: Partial<DeploymentRow> = { current_phase: run.row.current_phase + 1, phase_started: JSON.stringify(run.phaseStarted.map((t) => isoTime(t))) };
    if (run.row.status !== "running") Object.assign(fields, { status: "running", pause_reason: null });
    if (run.row.started === null) fields.started = at;
    this.setRow(tx, run, run.row.id, fields, at);
  }

  /** Goes on when it may: the next phase (gate open) or completion (every device finished). */
  private async evaluate(run: Run): Promise<void> {
    for (;;) {
      if (run.row.status !== "running" || !this.runs.has(run.row.id)) return;
      if (this.validating.has(run.row.id)) return;
      const now = this.ctx.clock.now();
      const current = run.row.current_phase;
      const last = run.ends.length - 1;
      if (current === last) {
        const unfinished = run.counts.reduce((n, c) => n + totalOf(c) - sumOf(c, FINAL), 0);
        if (unfinished === 0) return this.complete(run);
        return;
      }
      const verdict = gate({ phase: run.counts[current], successPercent: run.row.success_percent, successWait: run.row.success_wait, phaseStartedAt: run.phaseStarted[current], now });
      if (verdict !== "go") return;
      await this.db.write((tx) => {
        if (run.row.current_phase === current) this.startPhase(tx, run, now);
      });
      this.publishRun(run.row);
    }
  }

  /** The last phase finished: the group's policy becomes exact_match,<target> in the same transaction. */
  private async complete(run: Run): Promise<void> {
    const at = this.isoNow();
    await changed(this.catalog, this.db.write((tx) => {
      if (run.row.status !== "running") return;
      this.setRow(tx, run, run.row.id, { status: "completed", finished: at, pause_reason: null }, at);
      tx.run("UPDATE groups SET policy = ? WHERE id = ?", [`exact_match,${run.row.version}`, run.row.group_id]);
    }));
    if (run.row.status !== "completed") return;
    this.forget(run);
    this.ctx.log.info(`deployment ${run.row.id}: completed; group ${run.row.group_id} policy is exact_match,${run.row.version}`);
    this.publishRun(run.row);
  }

  /** The time decisions: start time, window openings, device timeouts, success waits. */
  async tick(): Promise<void> {
    this.fresh();
    const now = this.ctx.clock.now();
    for (const run of [...this.runs.values()]) {
      if (run.row.status === "scheduled" && run.row.start_at !== null && Date.parse(run.row.start_at) <= now) {
        await this.db.write((tx) => {
          if (run.row.status === "scheduled") this.startPhase(tx, run, now);
        });
        this.publishRun(run.row);
      }
      await this.timeouts(run, now);
      await this.evaluate(run);
    }
  }

  /**
   * Devices that did not finish in time are not reached (not failed): counted from the offer, or
   * for a device never offered from its phase's start or the window's last opening, whichever is later.
   */
  private async timeouts(run: Run, now: number): Promise<void> {
    if (run.row.status === "scheduled") return;
    const limit = run.row.device_timeout * 60_000;
    const offering = this.offering(run, now);
    const late: number[] = [];
    for (const [deviceId, member] of this.index) {
      if (member.run !== run || member.phase > run.row.current_phase) continue;
      if (UNDERWAY.has(member.state) && member.offeredAt !== null && now - member.offeredAt >= limit) late.push(deviceId);
      else if (member.state === "waiting" && offering && now - Math.max(run.phaseStarted[member.phase], run.windowOpenedAt) >= limit) late.push(deviceId);
    }
    if (late.length === 0) return;
    const at = isoTime(now);
    await this.db.write((tx) => {
      for (const deviceId of late) {
        const member = this.index.get(deviceId);
        if (!member || (!UNDERWAY.has(member.state) && member.state !== "waiting")) continue;
        if (UNDERWAY.has(member.state)) this.history(tx, run.row.id, deviceId, "not_reached", `did not finish within ${run.row.device_timeout} minutes`, at);
        this.move(tx, deviceId, member, { state: "not_reached", at, progress: null, reason: `did not finish within ${run.row.device_timeout} minutes` });
      }
    });
    for (const { id, mac_address } of this.macs(late)) this.publishDevice(run, mac_address, this.index.get(id) ?? { phase: 0, state: "not_reached" });
  }

  // --- views ---------------------------------------------------------------------------------

  /** Counts per phase and state: from memory for an active deployment, else from its rows. */
  counts(row: DeploymentRow): Counts[] {
    this.fresh();
    const run = this.runs.get(row.id);
    return run ? run.counts.map((c) => ({ ...c })) : storedCounts(this.db, row.id, parsePhases(row).length);
  }

  /** What the current phase's gate says (null when the deployment is not running a phase with a next one). */
  gateOf(row: DeploymentRow): "go" | "wait" | "stuck" | null {
    const run = this.runs.get(row.id);
    if (!run || row.status === "scheduled" || row.current_phase >= run.ends.length - 1) return null;
    return gate({ phase: run.counts[row.current_phase], successPercent: row.success_percent, successWait: row.success_wait, phaseStartedAt: run.phaseStarted[row.current_phase], now: this.ctx.clock.now() });
  }

  windowOpenNow(row: DeploymentRow): boolean {
    return windowOpen(parseWindow(row), this.ctx.clock.now());
  }

  isActive(status: Status): boolean {
    return ACTIVE.has(status);
  }

  // --- helpers -------------------------------------------------------------------------------

  private isoNow(): string {
    return isoTime(this.ctx.clock.now());
  }

  private history(tx: Tx, deploymentId: number, deviceId: number, outcome: string, reason: string | null, at: string): void {
    const row = tx.get<{ from_version: string | null; to_version: string | null }>("SELECT from_version, to_version FROM deployment_devices WHERE deployment_id = ? AND device_id = ?", [deploymentId, deviceId]);
    addHistory(tx, { device_id: deviceId, deployment_id: deploymentId, from_version: row?.from_version ?? null, to_version: row?.to_version ?? "", outcome, reason, at });
  }

  /** The MACs of devices (one prepared statement, whatever the number). */
  private macs(ids: number[]): Array<{ id: number; mac_address: string }> {
    const out: Array<{ id: number; mac_address: string }> = [];
    for (const id of ids) {
      const row = this.db.get<{ mac_address: string }>("SELECT mac_address FROM devices WHERE id = ?", [id]);
      if (row) out.push({ id, mac_address: row.mac_address });
    }
    return out;
  }

  private publishDeviceById(run: Run, deviceId: number, member: Member, extra: Record<string, unknown> = {}): void {
    const mac = this.macs([deviceId])[0]?.mac_address;
    if (mac) this.publishDevice(run, mac, member, extra);
  }
}

/** The last OUTPUT_TAIL bytes of a text (cut at a character boundary). */
export function tail(text: string): string {
  const bytes = Buffer.from(text);
  if (bytes.length <= OUTPUT_TAIL) return text;
  return bytes.subarray(bytes.length - OUTPUT_TAIL).toString("utf8").replace(/^\uFFFD+/, "");
}
