/*
 * Deployments (docs/update-server.md, "Deployments"): the state machine of a version rolled out to a group in
 * phases. Every transition is one durable write (the caller's answer waits for it); the active
 * deployments and their devices' states are kept in memory as well, so that an update check of a
 * device in a deployment costs a map lookup (and one write, the first time it is offered).
 *
 * Time decisions (start time, window, success wait, device timeout) read the injected clock; a
 * loop sleeping on it runs them (tests move a TestClock and the loop wakes).
 */
import type { Store, Tx } from "../../db/store.ts";
import { Lock } from "../../db/query/lock.ts";
import { recordAudit, systemActor, type Actor } from "../../audit/audit.ts";
import type { AppContext, Identity } from "../../app/context.ts";
import { LabgateError } from "../../util/errors.ts";
import type { ChannelHub, DeviceConnection } from "../channel/hub.ts";
import type { EventBroadcaster } from "../events/broadcaster.ts";
import { deviceMac, groupMemberKey } from "../devices/devices.ts";
import { packageMetadataText } from "../packages/packages.ts";
import { assignPackages, changed, getGroup, groupPackageIds, groupPolicy, setPolicyIn, type CatalogWatch } from "../groups/groups.ts";
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
  inOrderKeyOrder,
  orderKey,
  type OrderKey,
  overErrorThreshold,
  phaseCounts,
  phaseOf,
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
  insertDeployment,
  insertMembers,
  markValidated,
  memberProgress,
  memberVersions,
  reportApplied,
  getDeployment,
  memberStates,
  parsePhases,
  parsePhaseStarted,
  parseWindow,
  storedCounts,
  failedMembers,
  updateDeployment,
  updateMember,
  updateMembers,
  type DeploymentRow,
  type MemberChange,
  type MemberState,
} from "./store.ts";
import { PastOutcomes } from "./past.ts";
import { isoTime } from "../../util/time.ts";
import { OUTPUT_TAIL } from "../../protocol/labgate/device.ts";

/** How often the time decisions run (on the injected clock). */
const TICK_MS = 1000;
/** The writes of this long go to the other nodes as one change. */
const PUBLISH_DELAY_MS = 50;
/** Download percents reported within this long are written together, in one step. */
const PERCENTS_DELAY_MS = 1000;
/**
 * Steps waiting for each other run back to back in one event-loop turn (each lets the next in as
 * it commits in memory); after this long the loop turns before the next, so that a queue of them
 * (a phase's devices checking at once) never holds up the update checks and sockets meanwhile.
 */
const STEP_SLICE_MS = 4;

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
async function assignFirst(tx: Tx, input: NewDeployment): Promise<number[]> {
  try {
    return await assignPackages(tx, input.identity, input.groupId, input.packages, "add", input.actor);
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

/**
 * One transaction of the service: its statements (`tx`), how to take back the memory changes
 * made with them should it not commit (PostgreSQL runs a transaction again after a conflict), and
 * the memory changes that wait for its commit (what nothing may see before it is committed:
 * a new deployment's devices, which update checks would otherwise be offered from).
 */
interface Step {
  tx: Tx;
  undo: Array<() => void>;
  atCommit: Array<() => void>;
}

/** The actor of the deployments' own steps (pause at the threshold, advance, completion, timeouts). */
const automatic = (now: number): Actor => systemActor("deployment", new Date(now));

/**
 * Told once an `installed` transition is on disk (a deployment's validation starts here,
 * docs/device-tests.md); `validation` is the deployment's (its row's JSON, null: none).
 */
export type InstalledHook = (event: { deploymentId: number; deviceId: number; version: string; validation: string | null }) => void;

/**
 * Recovery of a board silent after its install (`recover`): power-cycles it once (src/lab), and
 * answers what it did for the history (undefined: the device has no power port, nothing done).
 */
export type RecoverHook = (event: { deploymentId: number; deviceId: number; attempt: number; minutes: number }) => Promise<{ reason: string } | undefined>;

/** Told when an attempt is offered and when it ended (its history row is on disk): the lab captures its console span. */
export type AttemptHook = (event: { kind: "offered" | "ended" | "recovered"; deploymentId: number; deviceId: number; attempt: number }) => void;

export class DeploymentService implements Steering {
  private readonly ctx: AppContext;
  private readonly store: Store;
  private readonly events: EventBroadcaster;
  private readonly hub: ChannelHub;
  private readonly catalog: CatalogWatch;
  private readonly runs = new Map<number, Run>();
  /**
   * Held by each of the service's transactions from its first statement to its commit (in memory
   * on the embedded engine, so that the steps waiting share the next fsync): their memory changes
   * come with them, so no step decides on another's before it committed (serial already on the
   * embedded engine; PostgreSQL would run them side by side).
   */
  private readonly stepping = new Lock();
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
  /** The memory being (re)built from the database. */
  private loading: Promise<void> | undefined;
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
    this.store = ctx.store;
    this.catalog = catalog;
    this.events = events;
    this.hub = hub;
    // Another node's writes, or this node taking the time decisions over: the memory is read again.
    ctx.cluster.on("deployments_changed", () => (this.remoteChanges += 1));
    ctx.cluster.onTaken("deployments", () => (this.remoteChanges += 1));
    this.ready = this.current();
  }

  /** Changes other nodes made to the deployments (counted as they are told), and how many the memory holds. */
  private remoteChanges = 0;
  private loadedChanges = 0;
  private publishing: ReturnType<typeof setTimeout> | undefined;

  /** Devices' download percents not written yet (the latest of each). */
  private readonly percents = new Map<number, { member: Member; percent: number; at: string }>();
  private percentsDue: ReturnType<typeof setTimeout> | undefined;

  /**
   * Writes the percents reported since the last time, in one step of the service: inside its
   * transactions (on PostgreSQL a write beside them would make theirs on the same rows run again),
   * and only for devices still downloading (a move since wrote what the device shows).
   */
  private async writePercents(): Promise<void> {
    this.percentsDue = undefined;
    const due = [...this.percents];
    this.percents.clear();
    await this.transact(async (step) => {
      for (const [deviceId, { member, percent, at }] of due) {
        if (this.index.get(deviceId) === member && member.state === "downloading") await memberProgress(step.tx, member.run.row.id, deviceId, percent, at);
      }
    }).catch((error) => this.ctx.log.warn(`deployments: download percents not written: ${(error as Error).message}`));
  }

  /** Tells the other nodes, once for the writes of a short while, that their memory of deployments is stale. */
  private changedHere(): void {
    this.publishing ??= setTimeout(() => {
      this.publishing = undefined;
      this.ctx.cluster.publish("deployments_changed");
    }, PUBLISH_DELAY_MS);
    this.publishing.unref?.();
  }

  /** Settles once the memory is built from the database (the server awaits it before it serves). */
  readonly ready: Promise<void>;

  /** Starts the loop of time decisions; it ends with `close`. */
  start(): void {
    void (async () => {
      while (!this.stop.signal.aborted) {
        await this.ctx.clock.sleep(TICK_MS, this.stop.signal);
        if (this.stop.signal.aborted) return;
        // One node of a cluster makes the time decisions (src/cluster).
        if (!this.ctx.cluster.runs("deployments")) continue;
        await this.tick().catch((error) => this.ctx.log.warn(`deployments: ${(error as Error).message}`));
      }
    })();
  }

  close(): void {
    this.stop.abort();
    clearTimeout(this.percentsDue);
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

  /**
   * (Re)builds the memory from the database: at start, and after the database reloaded from disk.
   * Read in one transaction (one state of the database), put in place at once, between two steps:
   * a step committed after the read and before the swap would be missing from the new memory.
   */
  private async load(): Promise<void> {
    await this.stepping.acquire();
    try {
      const epoch = this.store.epoch;
      const changes = this.remoteChanges;
      const { rows, members, held } = await this.store.transact(async (tx) => {
        const rows = await activeDeployments(tx);
        const members: MemberState[][] = [];
        for (const row of rows) members.push(await memberStates(tx, row.id));
        return { rows, members, held: await heldOut(tx) };
      });
      this.runs.clear();
      this.index.clear();
      this.held.clear();
      const now = this.ctx.clock.now();
      rows.forEach((row, i) => this.track(this.runOf(row, now), members[i]));
      for (const { device_id, version } of held) this.hold(device_id, version);
      this.epoch = epoch;
      this.loadedChanges = changes;
    } finally {
      this.stepping.release();
    }
  }

  /** The memory in step with the database: built again when the database was reloaded from disk (after a write that could not be saved). */
  private current(): Promise<void> {
    if (this.store.epoch === this.epoch && this.loadedChanges === this.remoteChanges) return Promise.resolve();
    this.loading ??= this.load().finally(() => (this.loading = undefined));
    return this.loading;
  }

  /** An active deployment and its devices into memory. */
  private track(run: Run, members: readonly MemberState[]): void {
    this.runs.set(run.row.id, run);
    for (const m of members) {
      this.index.set(m.device_id, memberOf(run, m));
      run.counts[m.phase][m.state] += 1;
    }
  }

  /** An active deployment's memory, not yet in place (`runs`): a step makes it, and puts it in place at its commit. */
  private runOf(row: DeploymentRow, now: number): Run {
    const ends = parsePhases(row);
    return { row, ends, phaseStarted: parsePhaseStarted(row).map((t) => Date.parse(t)), window: parseWindow(row), counts: ends.map(emptyCounts), windowOpenedAt: now, windowCache: { minute: -1, open: false } };
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

  /**
   * Runs `fn` as one transaction of the service; the memory changes its steps made (move,
   * setRow, what they record in `undo`) are taken back when it does not commit, and before
   * PostgreSQL runs it again. Events, hooks and sockets act once it resolved.
   */
  private async transact<T>(fn: (step: Step) => Promise<T>): Promise<T> {
    const undo: Array<() => void> = [];
    const atCommit: Array<() => void> = [];
    const back = () => {
      while (undo.length > 0) undo.pop()!();
      atCommit.length = 0;
    };
    await this.stepping.acquire();
    await this.turnWhenSliceEnds();
    // The next step may go once this one committed (in memory, on the embedded engine): its frame
    // follows this one's on disk, and a frame that fails reloads the database and, from it, this memory.
    let released = false;
    const letGo = () => {
      if (released) return;
      released = true;
      this.stepping.release();
    };
    let committed = false;
    const onCommit = () => {
      committed = true;
      try {
        for (const apply of atCommit) apply();
      } finally {
        letGo();
      }
    };
    try {
      const result = await this.store.transact(
        (tx) => {
          back();
          return fn({ tx, undo, atCommit });
        },
        { committed: onCommit },
      );
      this.changedHere();
      return result;
    } catch (error) {
      if (!committed) back();
      throw error;
    } finally {
      letGo();
    }
  }

  /** When the current turn's steps began (ms, performance.now); undefined once the loop turned. */
  private sliceStarted: number | undefined;

  /** Lets the event loop turn when the steps of this turn have run for STEP_SLICE_MS. */
  private async turnWhenSliceEnds(): Promise<void> {
    for (;;) {
      const now = performance.now();
      if (this.sliceStarted === undefined) {
        this.sliceStarted = now;
        setImmediate(() => (this.sliceStarted = undefined));
        return;
      }
      if (now - this.sliceStarted < STEP_SLICE_MS) return;
      await new Promise((resolve) => setImmediate(resolve));
    }
  }

  /**
   * Moves a device in memory at once (its checks and this move are one synchronous step, so
   * nothing decides on the state in between) and on disk (inside the step's transaction).
   */
  private move(step: Step, deviceId: number, member: Member, change: MemberChange): Promise<void> {
    const was = { state: member.state, offeredAt: member.offeredAt, attempt: member.attempt, failures: member.failures, offeredVersion: member.offeredVersion, retryAt: member.retryAt };
    const released = this.releasedAt.get(deviceId);
    const installing = this.installingSince.get(deviceId);
    const validating = this.validating.get(member.run.row.id)?.has(deviceId) ?? false;
    step.undo.push(() => {
      const counts = member.run.counts[member.phase];
      counts[member.state] -= 1;
      counts[was.state] += 1;
      Object.assign(member, was);
      if (released === undefined) this.releasedAt.delete(deviceId);
      else this.releasedAt.set(deviceId, released);
      if (installing === undefined) this.installingSince.delete(deviceId);
      else this.installingSince.set(deviceId, installing);
      if (!validating) this.validationDropped(member.run.row.id, deviceId);
    });
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
    return updateMember(step.tx, member.run.row.id, deviceId, change);
  }

  /** Writes deployment fields (in the step's transaction) and keeps the in-memory row in step at once. */
  private setRow(step: Step, run: Run | undefined, id: number, fields: Partial<DeploymentRow>, at: string): Promise<void> {
    if (run) {
      const was = { ...run.row };
      step.undo.push(() => Object.assign(run.row, was));
      Object.assign(run.row, fields, { updated: at });
    }
    return updateDeployment(step.tx, id, { ...fields, updated: at });
  }

  /** Drops a deployment that ended from memory (back again should `step` not commit). */
  private forget(run: Run, step?: Step): void {
    const gone: Array<[number, Member]> = [];
    this.runs.delete(run.row.id);
    for (const [deviceId, member] of this.index) if (member.run === run) this.index.delete(deviceId), gone.push([deviceId, member]);
    step?.undo.push(() => {
      this.runs.set(run.row.id, run);
      for (const [deviceId, member] of gone) this.index.set(deviceId, member);
    });
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
    await this.current();
    const now = this.ctx.clock.now();
    const at = isoTime(now);
    const versionKey = checkKeys(this.ctx.config.prefix).version;
    if (input.validation && !this.validator) throw new LabgateError("invalid", `field "validation": this server runs no tests`);
    // Its devices run the config as it is now: an upload under its name later changes nothing here.
    const validationCopy = input.validation ? this.validator!.pin(input.validation) : null;
    // A device follows one deployment at a time (the one of its active group).
    const busyCheck = (devices: readonly number[]) => {
      const busy = devices.find((id) => this.index.has(id));
      if (busy !== undefined) throw new LabgateError("conflict", `field "group": device ${busy} is in deployment ${this.index.get(busy)!.run.row.id} of group ${this.index.get(busy)!.run.row.group_id}`);
    };
    const row = await changed(this.catalog, this.transact(async (step) => {
      const { tx } = step;
      if (!(await getGroup(tx, input.groupId))) throw new LabgateError("invalid", `field "group": group ${input.groupId} does not exist`);
      const running = await activeDeploymentOf(tx, input.groupId);
      if (running) throw new LabgateError("conflict", `field "group": group ${input.groupId} already has deployment ${running.id} (${running.status})`);
      const members = await groupMemberKey(tx, this.store.engine, input.groupId, versionKey, () => this.turnWhenSliceEnds());
      const devices = members.map((m) => m.id);
      if (devices.length === 0) throw new LabgateError("invalid", `field "group": group ${input.groupId} has no devices`);
      busyCheck(devices);
      const packageIds = input.packages.length > 0 ? await assignFirst(tx, input) : await groupPackageIds(tx, input.groupId);
      let hasVersion = false;
      for (const id of packageIds) {
        const metadata = await packageMetadataText(tx, id);
        if (metadata !== undefined && String((JSON.parse(metadata) as Record<string, unknown>)[versionKey] ?? "") === input.version) hasVersion = true;
      }
      if (!hasVersion) throw new LabgateError("invalid", `field "version": no package of group ${input.groupId} (or in "packages") has version ${input.version}`);

      const starts = input.startAt === null || input.startAt <= now;
      const id = await insertDeployment(tx, {
        group_id: input.groupId,
        version: input.version,
        status: starts ? "running" : "scheduled",
        phases: "[]",
        current_phase: starts ? 0 : -1,
        phase_started: JSON.stringify(starts ? [at] : []),
        success_percent: input.successPercent,
        success_wait: input.successWait,
        error_percent: input.errorPercent,
        device_timeout: input.deviceTimeout,
        retries: input.retries,
        retry_backoff: input.retryBackoff,
        start_at: input.startAt === null ? null : isoTime(input.startAt),
        window: input.window ? JSON.stringify(input.window) : null,
        created: at,
        created_by: input.createdBy,
        validation: input.validation ? JSON.stringify(input.validation) : null,
        validation_copy: validationCopy,
        recover: input.recover ? JSON.stringify(input.recover) : null,
        started: starts ? at : null,
        updated: at,
      });
      await recordAudit(tx, input.actor, "deployment.create", `deployment:${id}`, { group: input.groupId, version: input.version, devices: devices.length, packages: packageIds });
      const keys: OrderKey[] = [];
      for (const deviceId of devices) {
        if (keys.length % 500 === 0) await this.turnWhenSliceEnds();
        keys.push(orderKey(id, deviceId));
      }
      const order = inOrderKeyOrder(keys);
      const ends = phaseCounts(input.phases, order.length);
      await updateDeployment(tx, id, { phases: JSON.stringify(ends) });
      const versions = new Map(members.map((m) => [m.id, m.value === null ? "" : String(m.value)]));
      // In slices: the checks and sockets of the other devices go on between them.
      await insertMembers(
        tx,
        order.map((deviceId, position) => ({ deployment_id: id, device_id: deviceId, phase: phaseOf(ends, position), position, from_version: versions.get(deviceId) || null, to_version: input.version, updated: at })),
        () => this.turnWhenSliceEnds(),
      );
      const row = (await getDeployment(tx, id))!;
      const run = this.runOf({ ...row }, now);
      const tracked = order.map((deviceId, position): [number, Member] => [deviceId, { run, phase: phaseOf(ends, position), state: "waiting", offeredAt: null, attempt: 0, failures: 0, offeredVersion: null, retryAt: null }]);
      for (const [, member] of tracked) run.counts[member.phase].waiting += 1;
      // Into memory at its commit (no update check is offered from a deployment that may not commit), and
      // checked once more in this step: no other deployment takes these devices meanwhile.
      busyCheck(devices);
      step.atCommit.push(() => {
        this.runs.set(run.row.id, run);
        for (const [deviceId, member] of tracked) this.index.set(deviceId, member);
      });
      return row;
    }));
    this.ctx.log.info(`deployment ${row.id}: ${row.version} to group ${row.group_id} (${row.status})`);
    this.publishRun(row);
    const run = this.runs.get(row.id);
    if (run) await this.evaluate(run);
    return (await getDeployment(this.store.query, row.id))!;
  }

  /** The active deployment `id` in memory, or why there is none (404, or 409 naming its status). */
  private async activeRun(id: number): Promise<Run> {
    await this.current();
    const run = this.runs.get(id);
    if (run) return run;
    const row = await getDeployment(this.store.query, id);
    if (!row) throw new LabgateError("not_found", "deployment does not exist");
    throw new LabgateError("conflict", `deployment ${id} is ${row.status}`);
  }

  /** Inside a command's transaction: the deployment is still active (the command's first check was made before it began). */
  private stillActive(run: Run): void {
    if (this.runs.get(run.row.id) !== run) throw new LabgateError("conflict", `deployment ${run.row.id} is ${run.row.status}`);
  }

  /** No new offers until resumed (devices already under way go on). */
  async pause(id: number, actor: Actor, reason = "paused by a person"): Promise<void> {
    const run = await this.activeRun(id);
    const paused = await this.transact(async (step) => {
      this.stillActive(run);
      if (run.row.status === "paused") return false;
      if (run.row.status !== "running") throw new LabgateError("conflict", `deployment ${id} is ${run.row.status}`);
      await this.setRow(step, run, id, { status: "paused", pause_reason: reason }, this.isoNow());
      await recordAudit(step.tx, actor, "deployment.pause", `deployment:${id}`, { reason });
      return true;
    });
    if (paused) this.publishRun(run.row);
  }

  async resume(id: number, actor: Actor): Promise<void> {
    const run = await this.activeRun(id);
    const resumed = await this.transact(async (step) => {
      this.stillActive(run);
      if (run.row.status === "running") return false;
      if (run.row.status !== "paused") throw new LabgateError("conflict", `deployment ${id} is ${run.row.status}`);
      await this.setRow(step, run, id, { status: "running", pause_reason: null }, this.isoNow());
      await recordAudit(step.tx, actor, "deployment.resume", `deployment:${id}`);
      return true;
    });
    if (!resumed) return;
    this.publishRun(run.row);
    await this.evaluate(run);
  }

  /** Starts the next phase now, whatever its gate says (and lifts a pause). */
  async advance(id: number, actor: Actor): Promise<void> {
    const run = await this.activeRun(id);
    await this.transact(async (step) => {
      this.stillActive(run);
      if (run.row.status === "scheduled") throw new LabgateError("conflict", `deployment ${id} has not started yet`);
      if (run.row.current_phase >= run.ends.length - 1) {
        throw new LabgateError("conflict", `deployment ${id} runs its last phase: it completes when its devices finish (or abort it)`);
      }
      await this.startPhase(step, run, this.ctx.clock.now());
      await recordAudit(step.tx, actor, "deployment.advance", `deployment:${id}`, { phase: run.row.current_phase });
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
    await this.current();
    const now = this.ctx.clock.now();
    const at = isoTime(now);
    const change: MemberChange = { state: "retrying", at, failures: 0, retryAt: at, reason: `retry asked by ${actor.name}` };
    const { row, chosen, run } = await this.transact(async (step) => {
      const { tx } = step;
      const row = await getDeployment(tx, id);
      if (!row) throw new LabgateError("not_found", "deployment does not exist");
      const reopen = COMPLETED.has(row.status);
      if (!reopen && !ACTIVE.has(row.status)) throw new LabgateError("conflict", `deployment ${id} is ${row.status}: its devices are retried by a new deployment`);
      const failed = new Set(await failedMembers(tx, id));
      const chosen = [...new Set(devices ?? failed)];
      const stray = chosen.find((deviceId) => !failed.has(deviceId));
      if (stray !== undefined) throw new LabgateError("invalid", `field "devices": device ${stray} has not failed in deployment ${id}`);
      if (chosen.length === 0) throw new LabgateError("conflict", `deployment ${id} has no failed devices`);
      if (!reopen) {
        const run = this.runs.get(id);
        for (const deviceId of chosen) {
          const member = this.index.get(deviceId);
          if (member && member.run === run && member.state === "failed") await this.move(step, deviceId, member, change);
        }
        await recordAudit(tx, actor, "deployment.retry", `deployment:${id}`, { devices: chosen.slice(0, 100), count: chosen.length, reopened: false });
        return { row, chosen, run };
      }
      const other = await activeDeploymentOf(tx, row.group_id);
      if (other) throw new LabgateError("conflict", `group ${row.group_id} has deployment ${other.id} (${other.status}): a completed deployment reopens only when its group has none`);
      await updateDeployment(tx, id, { status: "running", finished: null, pause_reason: null, updated: at });
      await updateMembers(tx, id, chosen, change);
      await recordAudit(tx, actor, "deployment.retry", `deployment:${id}`, { devices: chosen.slice(0, 100), count: chosen.length, reopened: true });
      const reopened = (await getDeployment(tx, id))!;
      const members = await memberStates(tx, id);
      // Into memory at its commit, checked in the same step.
      const busy = chosen.find((deviceId) => this.index.has(deviceId));
      if (busy !== undefined) throw new LabgateError("conflict", `device ${busy} is in deployment ${this.index.get(busy)!.run.row.id}`);
      const run = this.runOf(reopened, now);
      step.atCommit.push(() => this.track(run, members));
      return { row, chosen, run };
    });
    for (const deviceId of chosen) this.release(deviceId, row.version);
    if (!run) return;
    this.publishRun(run.row);
    for (const { id: deviceId, mac_address } of await this.macs(chosen)) {
      const member = this.index.get(deviceId);
      if (member) this.publishDevice(run, mac_address, member);
    }
  }

  /**
   * Abort: no more offers; devices offered or downloading are told to stop and count as aborted;
   * devices installing cannot be stopped and report what happened. The group's policy stays.
   */
  async abort(id: number, actor: Actor): Promise<void> {
    const run = await this.activeRun(id);
    const at = this.isoNow();
    const stopped = await this.transact(async (step) => {
      this.stillActive(run);
      const stopped: number[] = [];
      for (const [deviceId, member] of [...this.index]) {
        if (member.run !== run || member.state === "installing" || (FINAL.has(member.state) && member.state !== "not_reached")) continue;
        const underway = member.state === "offered" || member.state === "downloading";
        await this.move(step, deviceId, member, { state: "aborted", at, progress: null });
        if (!underway) continue;
        stopped.push(deviceId);
        await this.history(step.tx, run.row.id, deviceId, "aborted", "the deployment was aborted", at);
      }
      await this.setRow(step, run, id, { status: "aborted", finished: at, pause_reason: null }, at);
      await recordAudit(step.tx, actor, "deployment.abort", `deployment:${id}`, { stopped: stopped.length });
      // Out of memory in the same step: nothing offers from it once this commits.
      this.forget(run, step);
      return stopped;
    });
    this.publishRun(run.row);
    for (const { id: deviceId, mac_address: mac } of await this.macs(stopped)) {
      const conn = this.hub.get(mac);
      // Gone meanwhile, or connected nowhere: it finds no offer at its next check.
      if (conn ? conn.deviceId === deviceId : true) this.hub.sendAnywhere(mac, { method: "update_abort", version: run.row.version });
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
    // Nothing is offered from plans older than the database (it was reloaded from disk): none until they are built again.
    if (this.store.epoch !== this.epoch) {
      this.current().catch((error) => this.ctx.log.error(`deployments: ${(error as Error).message}`));
      return "hold";
    }
    // Another node's changes are read in the background: meanwhile the checks go on from what is known.
    if (this.loadedChanges !== this.remoteChanges) this.current().catch((error) => this.ctx.log.error(`deployments: ${(error as Error).message}`));
    const member = this.index.get(deviceId);
    if (member && member.run.row.group_id === groupId && member.phase <= member.run.row.current_phase) {
      const { state, run } = member;
      if (FINAL.has(state) && state !== "not_reached") return "hold";
      // A board someone holds (src/lab/reservations.ts) gets no new offer: it waits for its release.
      if (!UNDERWAY.has(state) && this.boardHeld(deviceId, now)) return "hold";
      if (state === "retrying") {
        if ((member.retryAt !== null && now < member.retryAt) || !this.offering(run, now)) return "hold";
      } else if (!UNDERWAY.has(state) && !this.offering(run, now)) return this.policyHeld(deviceId, policyTarget);
      return (member.steer ??= { target: run.row.version, recordOffer: (offered, deviceVersion, mac) => this.recordOffer(deviceId, member, offered, deviceVersion, mac) });
    }
    return this.policyHeld(deviceId, policyTarget);
  }

  private policyHeld(deviceId: number, target: string | undefined): "hold" | undefined {
    return target !== undefined && this.held.get(deviceId)?.has(target) ? "hold" : undefined;
  }

  /**
   * Records what the resolver found (`offered`: the version of the package it offers). The same
   * offer again is the same attempt (no write); a device not under way gets a new attempt. `mac`:
   * the device's, when the caller knows it (its events name it). "hold": the offer was not recorded
   * (the device moved meanwhile), so the device must not hear it.
   */
  private recordOffer(deviceId: number, member: Member, offered: string | undefined, deviceVersion: string, mac?: string): OfferTag | "hold" | Promise<OfferTag | "hold" | undefined> | undefined {
    if (offered !== undefined && UNDERWAY.has(member.state) && member.offeredVersion === offered) return { deployment: member.run.row.id, attempt: member.attempt };
    return this.recordOfferChange(deviceId, member, offered, deviceVersion, mac);
  }

  /** A package offered starts the device's progress record in the same transaction (the update check then finds it written). */
  private async recordOfferChange(deviceId: number, member: Member, offered: string | undefined, deviceVersion: string, mac: string | undefined): Promise<OfferTag | "hold" | undefined> {
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
    const progressFor = offered !== undefined && mac !== undefined ? mac : undefined;
    const moved = await this.transact(async (step) => {
      if (member.state !== before || this.index.get(deviceId) !== member) return false; // another check moved it, or the memory was built again, meanwhile
      await this.move(step, deviceId, member, change);
      if (change.state === "installed") await this.history(step.tx, run.row.id, deviceId, "installed", null, at, member.attempt);
      if (progressFor !== undefined) await this.progressRecords.startIn(step.tx, deviceId, progressFor, offered!, new Date(now));
      return true;
    });
    if (moved) {
      if (progressFor !== undefined) this.progressRecords.started(deviceId, offered!, now);
      if (mac !== undefined) this.publishDevice(run, mac, member);
      else await this.publishDeviceById(run, deviceId, member);
      if (change.state === "offered" || change.state === "installed") this.attempted(change.state === "offered" ? "offered" : "ended", run.row.id, deviceId, member.attempt);
      if (change.state === "installed") this.installed(run, deviceId, run.row.version);
      await this.evaluate(run);
    }
    // The memory was built again meanwhile (another node's changes) and holds the device as the check found it: the offer is recorded on that.
    const rebuilt = this.index.get(deviceId);
    if (!moved && rebuilt !== undefined && rebuilt !== member && rebuilt.state === before && rebuilt.run.row.id === run.row.id && rebuilt.run.row.status === run.row.status) {
      return this.recordOffer(deviceId, rebuilt, offered, deviceVersion, mac);
    }
    if (UNDERWAY.has(member.state)) return { deployment: run.row.id, attempt: member.attempt };
    return offered === undefined ? undefined : "hold";
  }

  // --- what devices report -------------------------------------------------------------------------

  /** `update_progress` of a device: an offered device is downloading (durable); percents ride along lazily. */
  async progress(deviceId: number, mac: string, percent: number): Promise<void> {
    await this.current();
    const member = this.index.get(deviceId);
    if (!member || (member.state !== "offered" && member.state !== "downloading") || percent >= 100) return;
    const at = this.isoNow();
    if (member.state === "offered") {
      const moved = await this.transact(async (step) => {
        if (member.state !== "offered" || this.index.get(deviceId) !== member) return false;
        await this.move(step, deviceId, member, { state: "downloading", at, progress: percent });
        return true;
      });
      if (moved) this.publishDevice(member.run, mac, member, { progress: percent });
    } else {
      this.percents.set(deviceId, { member, percent, at });
      this.percentsDue ??= setTimeout(() => void this.writePercents(), PERCENTS_DELAY_MS);
      this.percentsDue.unref?.();
    }
  }

  /** `update_version` of a device (also what agents without outcome reports send): at the target, it is installed. */
  async reportedVersion(deviceId: number, version: string): Promise<void> {
    await this.current();
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
    await this.current();
    const deviceId = conn.deviceId;
    // A report sent again (its acknowledgement was lost) that made its history row changes nothing:
    // an intermediate hop's `installed` would otherwise move the device back to `offered`. Asked
    // only of a report that answers an attempt: the others' recording checks it in its own
    // transaction, and a flood of them past the device's allowance costs no query.
    const answering = () => {
      const member = this.index.get(deviceId);
      return member && answers(member, outcome) ? member : undefined;
    };
    if (outcome.reportId !== undefined && answering() && (await reportApplied(this.store.query, deviceId, outcome.reportId))) return;
    const member = answering();
    if (member) return this.attemptOutcome(conn, member, outcome);
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
    const before = { state: member.state, attempt, failures: member.failures, offeredVersion: member.offeredVersion };
    const moved = await this.transact(async (step) => {
      const { tx } = step;
      // What this report decides was decided on the device's state as it was: another report (or a timeout) that moved it first wins.
      if (this.index.get(deviceId) !== member || member.state !== before.state || member.attempt !== before.attempt || member.failures !== before.failures || member.offeredVersion !== before.offeredVersion) return false;
      // Read again in the transaction that records it: a copy of the report recorded meanwhile (sent again on another socket) conflicts with this one.
      if (outcome.reportId !== undefined && (await reportApplied(tx, deviceId, outcome.reportId))) return false;
      await this.move(step, deviceId, member, change);
      if (outcome.state !== "installing") await this.progressRecords.endIn(tx, deviceId);
      if (outcome.state === "installed" || outcome.state === "failed") {
        await addHistory(tx, {
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
      return true;
    });
    if (!moved) return this.outcome(conn, outcome);
    // What this report did (another report may have moved the device on meanwhile).
    if ((outcome.state === "installed" || outcome.state === "failed") && !UNDERWAY.has(change.state)) this.attempted("ended", run.row.id, deviceId, attempt);
    if (change.state === "failed") this.hold(deviceId, target);
    this.publishDevice(run, conn.mac, member, { ...(change.reason ? { reason: change.reason } : {}), ...(change.retryAt ? { retry_at: change.retryAt } : {}) });
    if (change.state === "installed") this.installed(run, deviceId, target);
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
    await this.current();
    const member = this.index.get(deviceId);
    if (!member || member.run.row.id !== deploymentId || member.state === "failed") return;
    const at = this.isoNow();
    const failed = await this.transact(async (step) => {
      if (this.index.get(deviceId) !== member || member.state === "failed") return false;
      await this.move(step, deviceId, member, { state: "failed", at, reason, output: output === null ? null : tail(output), retryAt: null });
      await addHistory(step.tx, { device_id: deviceId, deployment_id: deploymentId, attempt: member.attempt, from_version: null, to_version: member.run.row.version, outcome: "failed", reason, output: output === null ? null : tail(output), at });
      return true;
    });
    if (!failed) return;
    this.hold(deviceId, member.run.row.version);
    await this.publishDeviceById(member.run, deviceId, member, { reason });
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
    await markValidated(this.store.query, deploymentId, deviceId, at);
  }

  /** The validation ended (after `fail` when it failed): the deployment may move on. */
  async validationDone(deploymentId: number, deviceId: number): Promise<void> {
    this.validationDropped(deploymentId, deviceId);
    const run = this.runs.get(deploymentId);
    if (run) await this.evaluate(run);
  }

  private validationDropped(deploymentId: number, deviceId: number): void {
    const set = this.validating.get(deploymentId);
    set?.delete(deviceId);
    if (set?.size === 0) this.validating.delete(deploymentId);
  }

  private installed(run: Run, deviceId: number, version: string): void {
    const deploymentId = run.row.id;
    for (const hook of this.installedHooks) {
      try {
        hook({ deploymentId, deviceId, version, validation: run.row.validation });
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
    const now = this.ctx.clock.now();
    const reason = await this.transact(async (step) => {
      if (run.row.status !== "running" || this.runs.get(run.row.id) !== run) return undefined;
      const started = this.startedCounts(run);
      if (!overErrorThreshold(started, run.row.error_percent)) return undefined;
      const begun = begunOf(started);
      // The share is of the devices offered so far; those of the started phases not offered yet are said apart, not counted in.
      const notYet = started.waiting + started.reserved > 0 ? `; ${started.waiting + started.reserved} of the ${totalOf(started)} devices in the started phases not offered yet` : "";
      const reason = `error threshold: ${started.failed} of the ${begun} devices offered so far failed (${Math.round((started.failed * 100) / begun)}%, more than ${run.row.error_percent}%)${notYet}`;
      await this.setRow(step, run, run.row.id, { status: "paused", pause_reason: reason }, isoTime(now));
      await recordAudit(step.tx, automatic(now), "deployment.pause", `deployment:${run.row.id}`, { reason, failed: started.failed, started: begun, error_percent: run.row.error_percent });
      return reason;
    });
    if (reason === undefined) return;
    this.ctx.log.warn(`deployment ${run.row.id}: paused: ${reason}`);
    this.publishRun(run.row);
  }

  private startPhase(step: Step, run: Run, now: number): Promise<void> {
    const at = isoTime(now);
    run.phaseStarted.push(now);
    step.undo.push(() => run.phaseStarted.pop());
    const fields: Partial<DeploymentRow> = { current_phase: run.row.current_phase + 1, phase_started: JSON.stringify(run.phaseStarted.map((t) => isoTime(t))) };
    if (run.row.status !== "running") Object.assign(fields, { status: "running", pause_reason: null });
    if (run.row.started === null) fields.started = at;
    return this.setRow(step, run, run.row.id, fields, at);
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
      const advanced = await this.transact(async (step) => {
        if (run.row.current_phase !== current || run.row.status !== "running" || this.runs.get(run.row.id) !== run) return false;
        const phase = { ...run.counts[current] };
        await this.startPhase(step, run, now);
        await recordAudit(step.tx, automatic(now), "deployment.advance", `deployment:${run.row.id}`, { phase: current + 1, succeeded: sumOf(phase, SUCCEEDED), devices: totalOf(phase), success_percent: run.row.success_percent });
        return true;
      });
      if (advanced) this.publishRun(run.row);
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
    const policy = `exact_match,${run.row.version}`;
    const status = await changed(this.catalog, this.transact(async (step) => {
      const { tx } = step;
      // Checked again in the step that completes it: a report or a command may have come first.
      if (run.row.status !== "running" || this.runs.get(run.row.id) !== run || this.validating.has(run.row.id)) return undefined;
      if (run.counts.reduce((n, c) => n + totalOf(c) - sumOf(c, FINAL), 0) > 0) return undefined;
      const counts = this.startedCounts(run);
      const status = endStatus(counts);
      await this.setRow(step, run, run.row.id, { status, finished: at, pause_reason: null }, at);
      const before = (await groupPolicy(tx, run.row.group_id)) ?? null;
      await setPolicyIn(tx, run.row.group_id, policy);
      const target = `deployment:${run.row.id}`;
      await recordAudit(tx, automatic(now), "deployment.complete", target, { status, counts: Object.fromEntries(Object.entries(counts).filter(([, n]) => n > 0)) });
      await recordAudit(tx, automatic(now), "deployment.policy", target, { group: run.row.group_id, from: before, to: policy });
      return status;
    }));
    if (status === undefined) return;
    // Out of memory only now: until the new policy is committed, a check of its devices must find
    // them finished here (held), not answered by the group's earlier policy.
    this.forget(run);
    this.ctx.log.info(`deployment ${run.row.id}: ${status}; group ${run.row.group_id} policy is ${policy}`);
    this.publishRun(run.row);
  }

  /** The time decisions: start time, window openings, device timeouts, success waits. */
  async tick(): Promise<void> {
    await this.current();
    const now = this.ctx.clock.now();
    for (const run of [...this.runs.values()]) {
      if (run.row.status === "scheduled" && run.row.start_at !== null && Date.parse(run.row.start_at) <= now) {
        const started = await this.transact(async (step) => {
          if (run.row.status !== "scheduled" || this.runs.get(run.row.id) !== run) return false;
          await this.startPhase(step, run, now);
          await recordAudit(step.tx, automatic(now), "deployment.start", `deployment:${run.row.id}`, { start_at: run.row.start_at });
          return true;
        });
        if (started) this.publishRun(run.row);
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
    await this.store.transact((tx) => this.history(tx, run.row.id, deviceId, "power_cycle", reason, isoTime(this.ctx.clock.now()), attempt));
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
    const done = await this.transact(async (step) => {
      const done: typeof moves = [];
      for (const move of moves) {
        const { deviceId, member, state } = move;
        if (this.index.get(deviceId) !== member || (state === "reserved") === (member.state === "reserved")) continue;
        // Only a board still waiting (or retrying) is reserved: it may have been offered since.
        if (state === "reserved" && member.state !== "waiting" && member.state !== "retrying") continue;
        await this.move(step, deviceId, member, { state, at });
        done.push(move);
      }
      return done;
    });
    for (const { deviceId, member, state } of done) {
      if (state !== "reserved") this.releasedAt.set(deviceId, now);
      await this.publishDeviceById(run, deviceId, member);
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
    const isLate = (deviceId: number, member: Member | undefined): member is Member => {
      if (!member || member.run !== run || member.phase > run.row.current_phase) return false;
      const released = this.releasedAt.get(deviceId) ?? 0;
      if (UNDERWAY.has(member.state)) return member.offeredAt !== null && now - member.offeredAt >= limit;
      if (member.state === "waiting") return offering && now - Math.max(run.phaseStarted[member.phase], run.windowOpenedAt, released) >= limit;
      if (member.state === "retrying") return offering && now - Math.max(member.retryAt ?? 0, run.windowOpenedAt, released) >= limit;
      return false;
    };
    const late: number[] = [];
    for (const [deviceId, member] of this.index) if (isLate(deviceId, member)) late.push(deviceId);
    if (late.length === 0) return;
    const at = isoTime(now);
    const reason = `did not finish within ${run.row.device_timeout} minutes`;
    const ended = await this.transact(async (step) => {
      const { tx } = step;
      const ended: Array<[number, number]> = [];
      const marked: number[] = [];
      for (const deviceId of late) {
        // Late still: it may have reported, or been offered again, since.
        const member = this.index.get(deviceId);
        if (!isLate(deviceId, member)) continue;
        const underway = UNDERWAY.has(member.state);
        await this.move(step, deviceId, member, { state: "not_reached", at, progress: null, reason, retryAt: null });
        marked.push(deviceId);
        if (!underway) continue;
        await this.history(tx, run.row.id, deviceId, "not_reached", reason, at, member.attempt);
        await this.progressRecords.endIn(tx, deviceId);
        ended.push([deviceId, member.attempt]);
      }
      if (marked.length > 0) await recordAudit(tx, automatic(now), "deployment.timeout", `deployment:${run.row.id}`, { devices: marked.slice(0, 100), count: marked.length, minutes: run.row.device_timeout });
      return ended;
    });
    for (const { id, mac_address } of await this.macs(late)) this.publishDevice(run, mac_address, this.index.get(id) ?? { phase: 0, state: "not_reached" });
    for (const [deviceId, attempt] of ended) this.attempted("ended", run.row.id, deviceId, attempt);
  }

  // --- views ---------------------------------------------------------------------------------

  /** Counts per phase and state: from memory for an active deployment, else from its rows. */
  async counts(row: DeploymentRow): Promise<Counts[]> {
    await this.current();
    const run = this.runs.get(row.id);
    return run ? run.counts.map((c) => ({ ...c })) : storedCounts(this.store.query, row.id, parsePhases(row).length);
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

  private async history(tx: Tx, deploymentId: number, deviceId: number, outcome: string, reason: string | null, at: string, attempt: number | null = null): Promise<void> {
    const row = await memberVersions(tx, deploymentId, deviceId);
    await addHistory(tx, { device_id: deviceId, deployment_id: deploymentId, attempt, from_version: row?.from_version ?? null, to_version: row?.to_version ?? "", outcome, reason, at });
  }

  /** The MACs of devices (one precompiled query, whatever the number). */
  private async macs(ids: number[]): Promise<Array<{ id: number; mac_address: string }>> {
    const out: Array<{ id: number; mac_address: string }> = [];
    for (const id of ids) {
      const mac = await deviceMac(this.store.query, id);
      if (mac !== undefined) out.push({ id, mac_address: mac });
    }
    return out;
  }

  private async publishDeviceById(run: Run, deviceId: number, member: Member, extra: Record<string, unknown> = {}): Promise<void> {
    const mac = (await this.macs([deviceId]))[0]?.mac_address;
    if (mac) this.publishDevice(run, mac, member, extra);
  }
}

/** The last OUTPUT_TAIL bytes of a text (cut at a character boundary). */
export function tail(text: string): string {
  const bytes = Buffer.from(text);
  if (bytes.length <= OUTPUT_TAIL) return text;
  return bytes.subarray(bytes.length - OUTPUT_TAIL).toString("utf8").replace(/^\uFFFD+/, "");
}
