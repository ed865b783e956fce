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
import { recordAudit, systemActor, type Actor } from "../../audit/audit.ts";
import type { AppContext, Identity } from "../../app/context.ts";
import { LabgateError } from "../../util/errors.ts";
import type { ChannelHub, DeviceConnection } from "../channel/hub.ts";
import type { EventBroadcaster } from "../events/broadcaster.ts";
import { deviceMac, groupMemberMetadata } from "../devices/devices.ts";
import { packageMetadataText } from "../packages/packages.ts";
import { assignPackages, changed, getGroup, groupDeviceIds, groupPackageIds, groupPolicy, setPolicyIn, type CatalogWatch } from "../groups/groups.ts";
import type { UpdateProgress } from "../progress/progress.ts";
import { checkKeys, type OfferTag, type OfferDecision, type Steering } from "../updatecheck/check.ts";
import {
  ACTIVE,
  afterFailedAttempt,
  COMPLETED,
  begunOf,
  emptyCounts,
  endStatus,
  FINAL,
  gate,
  overErrorThreshold,
  phaseCounts,
  phaseOf,
  stableOrder,
  SUCCEEDED,
  sumOf,
  totalOf,
  UNDERWAY,
  windowOpen,
} from "./model.ts";
import type { Counts, DeploymentValidation, DeviceState, MaintenanceWindow, Outcome, PhaseSpec, Status } from "./schema.ts";
import {
  activeDeploymentOf,
  activeDeployments,
  addHistory,
  heldOut,
  reportApplied,
  getDeployment,
  memberStates,
  parsePhases,
  parsePhaseStarted,
  parseWindow,
  storedCounts,
  failedMembers,
  updateMember,
  type DeploymentRow,
  type MemberChange,
  type MemberState,
} from "./store.ts";
import { PastOutcomes } from "./past.ts";
import { isoTime } from "../../util/time.ts";
import { OUTPUT_TAIL } from "../../protocol/labgate/device.ts";

/** How often the time decisions run (on the injected clock). */
const TICK_MS = 1000;

/**
 * Whether an outcome answers the device's current attempt: it carries that deployment and attempt
 * (a device that echoes none: one of the offered version while the offer is out, or an install of
 * another one, a mismatch). A device not offered yet in this deployment (waiting, or in a phase
 * not started) has no attempt to answer.
 */
function answers(member: Member, outcome: Outcome): boolean {
  if (member.attempt === 0 || !(UNDERWAY.has(member.state) || member.state === "not_reached")) return false;
  if (outcome.deployment !== undefined) return outcome.deployment === member.run.row.id && outcome.attempt === member.attempt;
  return outcome.state === "installed" || outcome.version === (member.offeredVersion ?? member.run.row.version);
}

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
  retries: number;
  /** Seconds before the first retry. */
  retryBackoff: number;
  startAt: number | null;
  window: MaintenanceWindow | null;
  createdBy: string | null;
  /** A test config (and suite) each device runs once it installed; a failure fails the device (`validation`). */
  validation: DeploymentValidation | null;
  /** Boards silent that long after they began installing are power-cycled once (the lab's onRecover). */
  recover?: { power_cycle_after_minutes: number } | null;
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
  /** Offers made in this deployment: the current attempt's number. */
  attempt: number;
  /** Failed attempts: past the deployment's retries, the device is failed for good. */
  failures: number;
  /** The package version offered in the current attempt (null: not offered yet, or a hop's next one). */
  offeredVersion: string | null;
  /** When a device `retrying` may be offered again (ms). */
  retryAt: number | null;
  /** What the update check is told for this device (kept: the hot path allocates nothing). */
  steer?: Exclude<OfferDecision, "hold">;
}

const memberOf = (run: Run, m: MemberState): Member => ({
  run,
  phase: m.phase,
  state: m.state,
  offeredAt: m.offered_at ? Date.parse(m.offered_at) : null,
  attempt: m.attempt,
  failures: m.failures,
  offeredVersion: m.offered_version,
  retryAt: m.retry_at ? Date.parse(m.retry_at) : null,
});

/** The actor of the deployments' own steps (pause at the threshold, advance, completion, timeouts). */
const automatic = (now: number): Actor => systemActor("deployment", new Date(now));

/** Told once an `installed` transition is on disk (a deployment's validation starts here, docs/device-tests.md). */
export type InstalledHook = (event: { deploymentId: number; deviceId: number; version: string }) => void;

/**
 * Recovery of a board silent after its install (`recover`): power-cycles it once (src/lab), and
 * answers what it did for the history (undefined: the device has no power port, nothing done).
 */
export type RecoverHook = (event: { deploymentId: number; deviceId: number; attempt: number; minutes: number }) => Promise<{ reason: string } | undefined>;

/** Told when an attempt is offered and when it ended (its history row is on disk): the lab captures its console span. */
export type AttemptHook = (event: { kind: "offered" | "ended" | "recovered"; deploymentId: number; deviceId: number; attempt: number }) => void;

export class DeploymentService implements Steering {
  private readonly ctx: AppContext;
  private readonly db: Database;
  private readonly events: EventBroadcaster;
  private readonly hub: ChannelHub;
  private readonly catalog: CatalogWatch;
  private readonly runs = new Map<number, Run>();
  /** Device id -> its place in an active deployment (a device is in at most one: one per group, and the check uses its active group). */
  private readonly index = new Map<number, Member>();
  /** Device id -> versions it failed for good (store.ts heldOut): nothing offers them until a retry or a new deployment. */
  private readonly held = new Map<number, Set<string>>();
  private readonly progressRecords: UpdateProgress;
  private readonly installedHooks: InstalledHook[] = [];
  private readonly attemptHooks: AttemptHook[] = [];
  private recoverHook: RecoverHook | undefined;
  /** Device id -> when it began installing (ms), for `recover`; a device installing at a restart counts from the start. */
  private readonly installingSince = new Map<number, number>();
  /** `deviceId:attempt` of the attempts recovered already (once each). */
  private readonly recovered = new Set<string>();
  /** The power cycles under way, beside the tick. */
  private readonly recovering = new Set<Promise<void>>();
  /** Set when this server runs tests too: deployments may then name a `validation`. */
  validator: ValidationRunner | undefined;
  /** Device id -> when its reservation ended (ms): a board released waits its device timeout from then, not from its phase's start. */
  private readonly releasedAt = new Map<number, number>();
  /** Deployment id -> devices whose installed update is being validated: meanwhile it neither advances nor completes. */
  private readonly validating = new Map<number, Set<number>>();
  private epoch = -1;
  private readonly stop = new AbortController();
  /** Outcomes that answer no current attempt: history within bounds (past.ts). */
  readonly past: PastOutcomes;

  /**
   * `catalog` is told of the group writes (a package assignment at creation, the policy at
   * completion); `progress` records end with the attempt they belong to.
   */
  constructor(ctx: AppContext, catalog: CatalogWatch, events: EventBroadcaster, hub: ChannelHub, progress: UpdateProgress) {
    this.ctx = ctx;
    this.progressRecords = progress;
    this.past = new PastOutcomes(ctx, progress, (deploymentId) => this.runs.has(deploymentId));
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

  /** Runs when an attempt is offered and once it ended (installed, failed, not reached). */
  onAttempt(hook: AttemptHook): void {
    this.attemptHooks.push(hook);
  }

  /** How `recover` power-cycles a board (the lab, when it runs). */
  onRecover(hook: RecoverHook): void {
    this.recoverHook = hook;
  }

  /** Whether someone holds a board at a time (the lab's reservations, when it runs): held boards get no offer. */
  heldBy(hook: (deviceId: number, now: number) => boolean): void {
    this.boardHeld = hook;
  }

  private boardHeld: (deviceId: number, now: number) => boolean = () => false;

  private attempted(kind: "offered" | "ended" | "recovered", deploymentId: number, deviceId: number, attempt: number): void {
    for (const hook of this.attemptHooks) {
      try {
        hook({ kind, deploymentId, deviceId, attempt });
      } catch (error) {
        this.ctx.log.error(`deployment ${deploymentId}: attempt hook failed: ${(error as Error).message}`);
      }
    }
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
    this.held.clear();
    const now = this.ctx.clock.now();
    for (const row of activeDeployments(this.db)) this.track(row, now);
    for (const { device_id, version } of heldOut(this.db)) this.hold(device_id, version);
    this.epoch = this.db.epoch;
  }

  /** An active deployment's devices into memory. */
  private track(row: DeploymentRow, now: number): Run {
    const run = this.runOf(row, now);
    for (const m of memberStates(this.db, row.id)) {
      this.index.set(m.device_id, memberOf(run, m));
      run.counts[m.phase][m.state] += 1;
    }
    return run;
  }

  private hold(deviceId: number, version: string): void {
    const versions = this.held.get(deviceId) ?? new Set();
    versions.add(version);
    this.held.set(deviceId, versions);
  }

  private release(deviceId: number, version: string): void {
    const versions = this.held.get(deviceId);
    versions?.delete(version);
    if (versions?.size === 0) this.held.delete(deviceId);
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

  /** Reloads the plans when the database was reloaded from disk (after a write that could not be saved). */
  private reloadIfDatabaseReloaded(): void {
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
    if (change.attempt !== undefined) member.attempt = change.attempt;
    if (change.failures !== undefined) member.failures = change.failures;
    if (change.offeredVersion !== undefined) member.offeredVersion = change.offeredVersion;
    if (change.retryAt !== undefined) member.retryAt = change.retryAt === null ? null : Date.parse(change.retryAt);
    if (change.state !== "waiting" && change.state !== "retrying") this.releasedAt.delete(deviceId);
    if (change.state === "installing") this.installingSince.set(deviceId, this.ctx.clock.now());
    else this.installingSince.delete(deviceId);
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
    this.reloadIfDatabaseReloaded();
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
        const metadata = packageMetadataText(tx, id);
        return metadata !== undefined && String((JSON.parse(metadata) as Record<string, unknown>)[versionKey] ?? "") === input.version;
      });
      if (!hasVersion) throw new LabgateError("invalid", `field "version": no package of group ${input.groupId} (or in "packages") has version ${input.version}`);

      const starts = input.startAt === null || input.startAt <= now;
      const { lastInsertRowid: id } = tx.run(
        `INSERT INTO deployments (group_id, version, status, phases, current_phase, phase_started, success_percent, success_wait, error_percent,
           device_timeout, retries, retry_backoff, start_at, window, created, created_by, validation, validation_copy, recover, started, updated)
         VALUES (?, ?, ?, '[]', ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
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
          input.retries,
          input.retryBackoff,
          input.startAt === null ? null : isoTime(input.startAt),
          input.window ? JSON.stringify(input.window) : null,
          at,
          input.createdBy,
          input.validation ? JSON.stringify(input.validation) : null,
          validationCopy,
          input.recover ? JSON.stringify(input.recover) : null,
          starts ? at : null,
          at,
        ],
      );
      recordAudit(tx, input.actor, "deployment.create", `deployment:${id}`, { group: input.groupId, version: input.version, devices: devices.length, packages: packageIds });
      const order = stableOrder(id, devices);
      const ends = phaseCounts(input.phases, order.length);
      tx.run("UPDATE deployments SET phases = ? WHERE id = ?", [JSON.stringify(ends), id]);
      const versions = new Map(
        groupMemberMetadata(tx, input.groupId).map((d) => [d.id, String((JSON.parse(d.metadata) as Record<string, unknown>)[versionKey] ?? "")]),
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
        this.index.set(deviceId, { run, phase, state: "waiting", offeredAt: null, attempt: 0, failures: 0, offeredVersion: null, retryAt: null });
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
    this.reloadIfDatabaseReloaded();
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
   * A person asks for another go at failed devices (all of them, or `devices`): each has its
   * retries again and is offered at its next check. A deployment that completed reopens (running,
   * every phase started); an aborted one does not (a new deployment is the way).
   */
  async retry(id: number, actor: Actor, devices?: readonly number[]): Promise<void> {
    this.reloadIfDatabaseReloaded();
    const row = getDeployment(this.db, id);
    if (!row) throw new LabgateError("not_found", "deployment does not exist");
    const reopen = COMPLETED.has(row.status);
    if (!reopen && !ACTIVE.has(row.status)) throw new LabgateError("conflict", `deployment ${id} is ${row.status}: its devices are retried by a new deployment`);
    const failed = new Set(failedMembers(this.db, id));
    const chosen = [...new Set(devices ?? failed)];
    const stray = chosen.find((deviceId) => !failed.has(deviceId));
    if (stray !== undefined) throw new LabgateError("invalid", `field "devices": device ${stray} has not failed in deployment ${id}`);
    if (chosen.length === 0) throw new LabgateError("conflict", `deployment ${id} has no failed devices`);
    if (reopen) {
      const other = activeDeploymentOf(this.db, row.group_id);
      if (other) throw new LabgateError("conflict", `group ${row.group_id} has deployment ${other.id} (${other.status}): a completed deployment reopens only when its group has none`);
      const busy = chosen.find((deviceId) => this.index.has(deviceId));
      if (busy !== undefined) throw new LabgateError("conflict", `device ${busy} is in deployment ${this.index.get(busy)!.run.row.id}`);
    }
    const now = this.ctx.clock.now();
    const at = isoTime(now);
    const change: MemberChange = { state: "retrying", at, failures: 0, retryAt: at, reason: `retry asked by ${actor.name}` };
    await this.db.write((tx) => {
      const current = getDeployment(tx, id)!;
      if (current.status !== row.status) throw new LabgateError("conflict", `deployment ${id} is ${current.status}`);
      if (reopen) {
        tx.run("UPDATE deployments SET status = 'running', finished = NULL, pause_reason = NULL, updated = ? WHERE id = ?", [at, id]);
        for (const deviceId of chosen) updateMember(tx, id, deviceId, change);
      } else {
        for (const deviceId of chosen) {
          const member = this.index.get(deviceId);
          if (member?.run.row.id === id && member.state === "failed") this.move(tx, deviceId, member, change);
        }
      }
      recordAudit(tx, actor, "deployment.retry", `deployment:${id}`, { devices: chosen.slice(0, 100), count: chosen.length, reopened: reopen });
    });
    for (const deviceId of chosen) this.release(deviceId, row.version);
    const run = reopen ? this.track(getDeployment(this.db, id)!, now) : this.runs.get(id);
    if (!run) return;
    this.publishRun(run.row);
    for (const { id: deviceId, mac_address } of this.macs(chosen)) {
      const member = this.index.get(deviceId);
      if (member) this.publishDevice(run, mac_address, member);
    }
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
   * now); "hold", no update (the device finished in this deployment, waits for its retry, or
   * failed for good the version the policy names: nothing may pull it back); or the deployment's
   * target, and `settle` to record what the resolver found.
   */
  steer(deviceId: number, groupId: number, now: number, policyTarget: string | undefined): OfferDecision | undefined {
    this.reloadIfDatabaseReloaded();
    const member = this.index.get(deviceId);
    if (member && member.run.row.group_id === groupId && member.phase <= member.run.row.current_phase) {
      const { state, run } = member;
      if (FINAL.has(state) && state !== "not_reached") return "hold";
      // A board someone holds (src/lab/reservations.ts) gets no new offer: it waits for its release.
      if (!UNDERWAY.has(state) && this.boardHeld(deviceId, now)) return "hold";
      if (state === "retrying") {
        if ((member.retryAt !== null && now < member.retryAt) || !this.offering(run, now)) return "hold";
      } else if (!UNDERWAY.has(state) && !this.offering(run, now)) return this.policyHeld(deviceId, policyTarget);
      return (member.steer ??= { target: run.row.version, recordOffer: (offered, deviceVersion) => this.recordOffer(deviceId, member, offered, deviceVersion) });
    }
    return this.policyHeld(deviceId, policyTarget);
  }

  private policyHeld(deviceId: number, target: string | undefined): "hold" | undefined {
    return target !== undefined && this.held.get(deviceId)?.has(target) ? "hold" : undefined;
  }

  /**
   * Records what the resolver found (`offered`: the version of the package it offers). The same
   * offer again is the same attempt (no write); a device not under way gets a new attempt.
   */
  private recordOffer(deviceId: number, member: Member, offered: string | undefined, deviceVersion: string): OfferTag | Promise<OfferTag | undefined> | undefined {
    if (offered !== undefined && UNDERWAY.has(member.state) && member.offeredVersion === offered) return { deployment: member.run.row.id, attempt: member.attempt };
    return this.recordOfferChange(deviceId, member, offered, deviceVersion);
  }

  private async recordOfferChange(deviceId: number, member: Member, offered: string | undefined, deviceVersion: string): Promise<OfferTag | undefined> {
    const now = this.ctx.clock.now();
    const at = isoTime(now);
    const { run } = member;
    const before = member.state;
    const underway = UNDERWAY.has(before);
    let change: MemberChange;
    if (offered !== undefined) {
      change = underway
        ? { state: before, at, offeredVersion: offered } // a hop's next package, in the same attempt
        : { state: "offered", at, offeredAt: at, progress: 0, fromVersion: deviceVersion, reason: null, output: null, attempt: member.attempt + 1, offeredVersion: offered, retryAt: null };
    } else if (deviceVersion === run.row.version) {
      change = { state: underway ? "installed" : "already_installed", at, progress: null };
    } else {
      change = { state: "no_package", at, reason: `no package leads from ${deviceVersion} to ${run.row.version} for this device` };
    }
    const moved = await this.db.write((tx) => {
      if (member.state !== before) return false; // another check moved it meanwhile
      this.move(tx, deviceId, member, change);
      if (change.state === "installed") this.history(tx, run.row.id, deviceId, "installed", null, at, member.attempt);
      return true;
    });
    if (moved) {
      this.publishDeviceById(run, deviceId, member);
      if (change.state === "offered" || change.state === "installed") this.attempted(change.state === "offered" ? "offered" : "ended", run.row.id, deviceId, member.attempt);
      if (change.state === "installed") this.installed(run.row.id, deviceId, run.row.version);
      await this.evaluate(run);
    }
    return UNDERWAY.has(member.state) ? { deployment: run.row.id, attempt: member.attempt } : undefined;
  }

  // --- what devices report -------------------------------------------------------------------------

  /** `update_progress` of a device: an offered device is downloading (durable); percents ride along lazily. */
  async progress(deviceId: number, mac: string, percent: number): Promise<void> {
    this.reloadIfDatabaseReloaded();
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
    this.reloadIfDatabaseReloaded();
    const member = this.index.get(deviceId);
    if (!member || !UNDERWAY.has(member.state) || version !== member.run.row.version) return;
    await this.recordOffer(deviceId, member, undefined, version);
  }

  /**
   * `update_outcome` of a device (docs/device-channel.md). An outcome that answers the current
   * attempt of its deployment moves the device there; any other (an earlier attempt, the group's
   * policy, a deployment that ended) is history only, within the device's bounds. Resolves once
   * durable: the caller acknowledges then.
   */
  async outcome(conn: Pick<DeviceConnection, "deviceId" | "mac">, outcome: Outcome): Promise<void> {
    this.reloadIfDatabaseReloaded();
    const deviceId = conn.deviceId;
    // A report sent again (its acknowledgement was lost) that made its history row changes nothing:
    // an intermediate hop's `installed` would otherwise move the device back to `offered`.
    if (outcome.reportId !== undefined && reportApplied(this.db, deviceId, outcome.reportId)) return;
    const member = this.index.get(deviceId);
    if (member && answers(member, outcome)) return this.attemptOutcome(conn, member, outcome);
    if (outcome.state === "installed" || outcome.state === "failed") await this.past.record(deviceId, outcome);
  }

  private async attemptOutcome(conn: Pick<DeviceConnection, "deviceId" | "mac">, member: Member, outcome: Outcome): Promise<void> {
    const deviceId = conn.deviceId;
    const now = this.ctx.clock.now();
    const at = isoTime(now);
    const { run } = member;
    const target = run.row.version;
    const offered = member.offeredVersion ?? target;
    let next: MemberChange | undefined;
    let failure: { reason: string; output: string | null } | undefined;
    switch (outcome.state) {
      case "installing":
        if (member.state !== "installing") next = { state: "installing", at, progress: null };
        break;
      case "installed":
        if (outcome.version !== offered) failure = { reason: `reported ${outcome.version}, offered ${offered}`, output: outcome.output };
        else if (offered === target) next = { state: "installed", at, progress: null, reason: null, output: null };
        // One hop of a longer path: the next check offers the next package, in this attempt.
        else next = { state: "offered", at, progress: 0, fromVersion: outcome.version, offeredVersion: null };
        break;
      case "failed":
        failure = { reason: outcome.reason ?? "failed", output: outcome.output };
        break;
      case "aborted":
        if (UNDERWAY.has(member.state)) next = { state: "aborted", at, progress: null, reason: outcome.reason };
        break;
    }
    if (failure) next = this.failedAttempt(member, failure.reason, failure.output, now);
    if (!next) return;
    const change = next;
    const attempt = member.attempt;
    await this.db.write((tx) => {
      if (outcome.state !== "installing") this.progressRecords.endIn(tx, deviceId);
      if (outcome.state === "installed" || outcome.state === "failed") {
        addHistory(tx, {
          device_id: deviceId,
          deployment_id: run.row.id,
          attempt,
          from_version: outcome.fromVersion,
          to_version: failure ? offered : outcome.version,
          outcome: failure ? "failed" : "installed",
          reason: failure ? failure.reason : outcome.reason,
          output: failure?.output ?? null,
          at,
          report_id: outcome.reportId,
        });
      }
      this.move(tx, deviceId, member, change);
    });
    // What this report did (another report may have moved the device on meanwhile).
    if ((outcome.state === "installed" || outcome.state === "failed") && !UNDERWAY.has(change.state)) this.attempted("ended", run.row.id, deviceId, attempt);
    if (change.state === "failed") this.hold(deviceId, target);
    this.publishDevice(run, conn.mac, member, { ...(change.reason ? { reason: change.reason } : {}), ...(change.retryAt ? { retry_at: change.retryAt } : {}) });
    if (change.state === "installed") this.installed(run.row.id, deviceId, target);
    if (change.state === "failed") await this.checkErrors(run);
    await this.evaluate(run);
  }

  /** The move of a failed attempt: `retrying` after the backoff, or `failed` for good once it had its retries. */
  private failedAttempt(member: Member, reason: string, output: string | null, now: number): MemberChange {
    const failures = member.failures + 1;
    const at = isoTime(now);
    const next = afterFailedAttempt(failures, member.run.row.retries, member.run.row.retry_backoff, now);
    if (next.state === "failed") return { state: "failed", at, progress: null, reason, output, failures, retryAt: null };
    return { state: "retrying", at, progress: null, reason, output, failures, retryAt: isoTime(next.retryAt) };
  }

  /**
   * A device that installed is failed after all (its validation failed: `failed: validation`).
   * Counts for the error threshold like any failure.
   */
  async fail(deploymentId: number, deviceId: number, reason: string, output: string | null): Promise<void> {
    this.reloadIfDatabaseReloaded();
    const member = this.index.get(deviceId);
    if (!member || member.run.row.id !== deploymentId || member.state === "failed") return;
    const at = this.isoNow();
    await this.db.write((tx) => {
      this.move(tx, deviceId, member, { state: "failed", at, reason, output: output === null ? null : tail(output), retryAt: null });
      addHistory(tx, { device_id: deviceId, deployment_id: deploymentId, attempt: member.attempt, from_version: null, to_version: member.run.row.version, outcome: "failed", reason, output: output === null ? null : tail(output), at });
    });
    this.hold(deviceId, member.run.row.version);
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

  /** The error threshold, after a failure: pause when more than E % of the devices offered so far in the started phases failed. */
  private async checkErrors(run: Run): Promise<void> {
    if (run.row.status !== "running" || !this.runs.has(run.row.id)) return;
    const started = this.startedCounts(run);
    if (!overErrorThreshold(started, run.row.error_percent)) return;
    const begun = begunOf(started);
    // The share is of the devices offered so far; those of the started phases not offered yet are said apart, not counted in.
    const notYet = started.waiting + started.reserved > 0 ? `; ${started.waiting + started.reserved} of the ${totalOf(started)} devices in the started phases not offered yet` : "";
    const reason = `error threshold: ${started.failed} of the ${begun} devices offered so far failed (${Math.round((started.failed * 100) / begun)}%, more than ${run.row.error_percent}%)${notYet}`;
    const now = this.ctx.clock.now();
    await this.db.write((tx) => {
      this.setRow(tx, run, run.row.id, { status: "paused", pause_reason: reason }, isoTime(now));
      recordAudit(tx, automatic(now), "deployment.pause", `deployment:${run.row.id}`, { reason, failed: started.failed, started: begun, error_percent: run.row.error_percent });
    });
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
        if (run.row.current_phase !== current) return;
        this.startPhase(tx, run, now);
        const phase = run.counts[current];
        recordAudit(tx, automatic(now), "deployment.advance", `deployment:${run.row.id}`, { phase: current + 1, succeeded: sumOf(phase, SUCCEEDED), devices: totalOf(phase), success_percent: run.row.success_percent });
      });
      this.publishRun(run.row);
    }
  }

  /**
   * The last phase finished: `completed` (or `completed_with_failures`: failed or unreached
   * devices), and the group's policy becomes exact_match,<target> in the same transaction (the
   * devices failed for good stay held out of it).
   */
  private async complete(run: Run): Promise<void> {
    const now = this.ctx.clock.now();
    const at = isoTime(now);
    const counts = this.startedCounts(run);
    const status = endStatus(counts);
    const policy = `exact_match,${run.row.version}`;
    await changed(this.catalog, this.db.write((tx) => {
      if (run.row.status !== "running") return;
      const before = groupPolicy(tx, run.row.group_id) ?? null;
      this.setRow(tx, run, run.row.id, { status, finished: at, pause_reason: null }, at);
      setPolicyIn(tx, run.row.group_id, policy);
      const target = `deployment:${run.row.id}`;
      recordAudit(tx, automatic(now), "deployment.complete", target, { status, counts: Object.fromEntries(Object.entries(counts).filter(([, n]) => n > 0)) });
      recordAudit(tx, automatic(now), "deployment.policy", target, { group: run.row.group_id, from: before, to: policy });
    }));
    if (run.row.status !== status) return;
    this.forget(run);
    this.ctx.log.info(`deployment ${run.row.id}: ${status}; group ${run.row.group_id} policy is ${policy}`);
    this.publishRun(run.row);
  }

  /** The time decisions: start time, window openings, device timeouts, success waits. */
  async tick(): Promise<void> {
    this.reloadIfDatabaseReloaded();
    const now = this.ctx.clock.now();
    for (const run of [...this.runs.values()]) {
      if (run.row.status === "scheduled" && run.row.start_at !== null && Date.parse(run.row.start_at) <= now) {
        await this.db.write((tx) => {
          if (run.row.status !== "scheduled") return;
          this.startPhase(tx, run, now);
          recordAudit(tx, automatic(now), "deployment.start", `deployment:${run.row.id}`, { start_at: run.row.start_at });
        });
        this.publishRun(run.row);
      }
      await this.reservations(run, now);
      await this.recoveries(run, now);
      await this.timeouts(run, now);
      await this.evaluate(run);
    }
  }

  /**
   * `recover`: a device installing that has not reported for `power_cycle_after_minutes` is
   * power-cycled once per attempt (when it is a board with a power port), recorded in its history
   * as `power_cycle` (the console span beside it) and audited by the lab as system:deployment; it
   * then counts as it reports or times out. The cycle runs beside the tick: a slow PDU holds up
   * no other decision.
   */
  private async recoveries(run: Run, now: number): Promise<void> {
    if (!run.row.recover || !this.recoverHook) return;
    const minutes = (JSON.parse(run.row.recover) as { power_cycle_after_minutes: number }).power_cycle_after_minutes;
    for (const [deviceId, member] of this.index) {
      if (member.run !== run || member.state !== "installing") continue;
      const since = this.installingSince.get(deviceId) ?? (this.installingSince.set(deviceId, now), now);
      const key = `${deviceId}:${member.attempt}`;
      if (now - since < minutes * 60_000 || this.recovered.has(key)) continue;
      this.recovered.add(key);
      const recovery = this.recover(this.recoverHook, run, deviceId, member.attempt, minutes)
        .catch((error: Error) => this.ctx.log.warn(`deployment ${run.row.id}: recovery of device ${deviceId}: ${error.message}`))
        .finally(() => this.recovering.delete(recovery));
      this.recovering.add(recovery);
    }
  }

  /** Resolves once the recoveries begun so far have recorded what they did (shutdown waits for them). */
  async recoveriesSettled(): Promise<void> {
    await Promise.all(this.recovering);
  }

  private async recover(hook: RecoverHook, run: Run, deviceId: number, attempt: number, minutes: number): Promise<void> {
    let done: { reason: string } | undefined;
    try {
      done = await hook({ deploymentId: run.row.id, deviceId, attempt, minutes });
    } catch (error) {
      done = { reason: `no report within ${minutes} minutes of its install; the power cycle failed: ${(error as Error).message}` };
    }
    if (!done) return;
    const reason = done.reason;
    await this.db.write((tx) => this.history(tx, run.row.id, deviceId, "power_cycle", reason, isoTime(this.ctx.clock.now()), attempt));
    this.attempted("recovered", run.row.id, deviceId, attempt);
  }

  /**
   * Boards someone holds (src/lab/reservations.ts) of the started phases: one waiting or retrying
   * is `reserved` while it is held (no offer, no timeout, not counted as started), and goes back
   * when the reservation ends (`retrying` when it still has its retry time).
   */
  private async reservations(run: Run, now: number): Promise<void> {
    const moves: Array<{ deviceId: number; member: Member; state: DeviceState }> = [];
    for (const [deviceId, member] of this.index) {
      if (member.run !== run || member.phase > run.row.current_phase) continue;
      const { state } = member;
      if (state !== "waiting" && state !== "retrying" && state !== "reserved") continue;
      const held = this.boardHeld(deviceId, now);
      if (held && state !== "reserved") moves.push({ deviceId, member, state: "reserved" });
      else if (!held && state === "reserved") moves.push({ deviceId, member, state: member.retryAt !== null ? "retrying" : "waiting" });
    }
    if (moves.length === 0) return;
    const at = isoTime(now);
    const done = await this.db.write((tx) =>
      moves.filter(({ deviceId, member, state }) => {
        if (this.index.get(deviceId) !== member || (state === "reserved") === (member.state === "reserved")) return false;
        this.move(tx, deviceId, member, { state, at });
        return true;
      }),
    );
    for (const { deviceId, member, state } of done) {
      if (state !== "reserved") this.releasedAt.set(deviceId, now);
      this.publishDeviceById(run, deviceId, member);
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
      const released = this.releasedAt.get(deviceId) ?? 0;
      if (UNDERWAY.has(member.state) && member.offeredAt !== null && now - member.offeredAt >= limit) late.push(deviceId);
      else if (member.state === "waiting" && offering && now - Math.max(run.phaseStarted[member.phase], run.windowOpenedAt, released) >= limit) late.push(deviceId);
      else if (member.state === "retrying" && offering && now - Math.max(member.retryAt ?? 0, run.windowOpenedAt, released) >= limit) late.push(deviceId);
    }
    if (late.length === 0) return;
    const at = isoTime(now);
    const reason = `did not finish within ${run.row.device_timeout} minutes`;
    const ended: Array<[number, number]> = [];
    await this.db.write((tx) => {
      const marked: number[] = [];
      for (const deviceId of late) {
        const member = this.index.get(deviceId);
        if (!member || (!UNDERWAY.has(member.state) && member.state !== "waiting" && member.state !== "retrying")) continue;
        if (UNDERWAY.has(member.state)) {
          this.history(tx, run.row.id, deviceId, "not_reached", reason, at, member.attempt);
          this.progressRecords.endIn(tx, deviceId);
          ended.push([deviceId, member.attempt]);
        }
        this.move(tx, deviceId, member, { state: "not_reached", at, progress: null, reason, retryAt: null });
        marked.push(deviceId);
      }
      if (marked.length > 0) recordAudit(tx, automatic(now), "deployment.timeout", `deployment:${run.row.id}`, { devices: marked.slice(0, 100), count: marked.length, minutes: run.row.device_timeout });
    });
    for (const { id, mac_address } of this.macs(late)) this.publishDevice(run, mac_address, this.index.get(id) ?? { phase: 0, state: "not_reached" });
    for (const [deviceId, attempt] of ended) this.attempted("ended", run.row.id, deviceId, attempt);
  }

  // --- views ---------------------------------------------------------------------------------

  /** Counts per phase and state: from memory for an active deployment, else from its rows. */
  counts(row: DeploymentRow): Counts[] {
    this.reloadIfDatabaseReloaded();
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

  private history(tx: Tx, deploymentId: number, deviceId: number, outcome: string, reason: string | null, at: string, attempt: number | null = null): void {
    const row = tx.get<{ from_version: string | null; to_version: string | null }>("SELECT from_version, to_version FROM deployment_devices WHERE deployment_id = ? AND device_id = ?", [deploymentId, deviceId]);
    addHistory(tx, { device_id: deviceId, deployment_id: deploymentId, attempt, from_version: row?.from_version ?? null, to_version: row?.to_version ?? "", outcome, reason, at });
  }

  /** The MACs of devices (one prepared statement, whatever the number). */
  private macs(ids: number[]): Array<{ id: number; mac_address: string }> {
    const out: Array<{ id: number; mac_address: string }> = [];
    for (const id of ids) {
      const mac = deviceMac(this.db, id);
      if (mac !== undefined) out.push({ id, mac_address: mac });
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
