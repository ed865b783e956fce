/*
 * Runs on managed devices (docs/device-tests.md): one run, one report. Each device's share goes
 * to its agent over the management WebSocket; its rows come back as they end and are written to
 * the run's report with the device's name, its artifacts come by HTTP (resumable) into
 * `<device>/`. A device that is offline, refuses, disconnects or never ends has the cases it did
 * not report written as failed with the reason; every wait is bounded by the injected clock.
 * The run is final when every device's share is. Outside the run queue (the work is on the devices).
 */
import { constants } from "node:fs";
import { lstat, mkdir, open } from "node:fs/promises";
import { join } from "node:path";
import type { Readable } from "node:stream";
import type { AppContext, Identity } from "../../app/context.ts";
import type { Actor } from "../../audit/audit.ts";
import type { Scope } from "../../auth/scopes.ts";
import type { ChannelHub, DeviceConnection } from "../../update/channel/hub.ts";
import type { PeerNode } from "../../cluster/cluster.ts";
import { callPeer } from "../../cluster/peer.ts";
import { readDeviceMessage, readServerMessage } from "../../protocol/labgate/wire.ts";
import { LabgateError } from "../../util/errors.ts";
import { after, dateOf, sleepUntilWoken, wakeAll, type Wakers } from "../../util/time.ts";
import { ReportWriter, type ReportRow } from "../engine/report.ts";
import type { ModuleLookup } from "../modules/registry.ts";
import type { DeviceShare, TestPlan } from "../plan.ts";
import { artifactsDir, reportDetailsPath, reportIndexPath, reportPath, type TestrunDirs } from "../paths.ts";
import type { DeviceProgress, RunCounts } from "../schema.ts";
import { ROW_LIMITS as LIMITS, TESTS_CAPABILITY, type DeviceMessageOf, type TestRunAbort, type TestRunStart } from "../../protocol/labgate/device.ts";
import type { PeerPowerRequest, PeerShareMessages, PeerShareStart, PeerShareStarted } from "../schema.ts";
import { deviceErrors, deviceLabel } from "./names.ts";
import { DeviceQueue } from "./queue.ts";
import { expectedCases, type ExpectedCase } from "./shares.ts";

export const NOT_CONNECTED = "device not connected";
export const DISCONNECTED = "device disconnected";
export const TESTS_DISABLED = "the device does not run tests (tests.enabled is false in its agent config)";
/** How long an aborted device may take to confirm (its processes get SIGTERM, then SIGKILL after 5 s). */
const ABORT_GRACE_MS = 10_000;
/** Progress reaches the run object (and the console) at most this often while rows come. */
const PROGRESS_INTERVAL_MS = 300;
/** In a cluster, how often a share waiting for its device looks whether it connected to another node. */
const REMOTE_LOOK_MS = 1000;
/** Bytes of device messages relayed to a run's node in one request (well within a JSON body's limit). */
const RELAY_BATCH_BYTES = 256 * 1024;

/** A run as the device runs read it (src/testrun/runs/store.ts keeps the whole record). */
export interface DeviceRun {
  readonly seq: number;
  readonly id: string;
  readonly configName: string;
  readonly suite: string;
  readonly pattern: string;
  readonly warnings: string[];
}

/** What the device runs read and write of their runs (src/testrun/runs/store.ts's RunStore). */
export interface DeviceRunStore {
  getRun(id: string): Promise<{ status: string } | undefined>;
  /** Whether the run was still pending and is running now. */
  markRunning(id: string, at: number): Promise<boolean>;
  setDevices(id: string, devices: DeviceProgress[]): Promise<void>;
  finishRun(id: string, fields: { status: "finished" | "failed" | "aborted"; at: number; error?: string | null; warnings?: string[]; counts?: RunCounts }): Promise<boolean>;
  saveDeviceResults(run: DeviceRun, device: { mac: string; name: string }, results: Map<string, string>): Promise<void>;
}

/** What the device runs need of the run service. */
export interface DeviceRunHost {
  readonly ctx: Pick<AppContext, "clock" | "config" | "log" | "cluster">;
  readonly store: DeviceRunStore;
  readonly dirs: TestrunDirs;
  readonly lookup: ModuleLookup;
  /** Tells whoever waits for the run that it ended. */
  ended(id: string): void;
}

/** Boards' consoles as the lab captures them (src/lab/console.ts): a run's span becomes the device's `console.log`. */
export interface ConsoleSpans {
  /** Where the device's console is now; undefined: it has no console port. */
  offsetOf(device: { mac_address: string; name: string }): number | undefined;
  /** What it printed since `from`. */
  span(device: { mac_address: string; name: string }, from: number): Buffer | undefined;
}

/** Board power as the lab switches it (src/lab/power.ts): the `power` module of a share acts through it. */
export interface BoardPower {
  act(identity: Identity, actor: Actor, deviceId: number, action: "on" | "off" | "cycle"): Promise<unknown>;
}

/** Board reservations as the lab keeps them (src/lab/reservations.ts): a validation run waits for its board's. */
export interface BoardReservations {
  /** Whether someone holds the device at `now`. */
  holds(deviceId: number, now: number): boolean;
  /** Resolves true once no one holds it; false when `signal` ended the wait first. */
  untilFree(deviceId: number, signal: AbortSignal): Promise<boolean>;
}

/** The artifact a device's console span is written to, beside what the device uploaded. */
export const CONSOLE_ARTIFACT = "console.log";

class Share {
  readonly plan: DeviceShare;
  /** Its place in the run's `devices` (the report's row index names it so). */
  readonly index: number;
  readonly progress: DeviceProgress;
  readonly expected: ExpectedCase[];
  /** `test name\nmodule` of every row received. */
  readonly seen = new Set<string>();
  /** test name -> status, for the config's history. */
  readonly results = new Map<string, string>();
  /** Aborted when the share ends: its timers stop. */
  readonly over = new AbortController();
  readonly done: Promise<void>;
  resolve!: () => void;
  conn: DeviceConnection | undefined;
  /** The node holding the device's socket, when that is another: the device's messages come relayed from it. */
  remote: PeerNode | undefined;
  ended = false;
  rows = 0;
  /** What the device has used of its budget (test_server.device_*_max_*). */
  reportBytes = 0;
  artifactBytes = 0;
  artifactFiles = 0;
  warnings: string[] = [];
  /** Where the board's console was when the share began (undefined: no console port). */
  consoleFrom: number | undefined;

  constructor(plan: DeviceShare, index: number, expected: ExpectedCase[]) {
    this.plan = plan;
    this.index = index;
    this.expected = expected;
    this.progress = { name: plan.name, mac: plan.mac, dir: plan.dir, status: "waiting", passed: 0, failed: 0, skipped: 0, error: null };
    this.done = new Promise((resolve) => (this.resolve = resolve));
  }
}

class ActiveRun {
  readonly run: DeviceRun;
  readonly plan: TestPlan;
  readonly controller = new AbortController();
  readonly shares = new Map<string, Share>();
  report!: ReportWriter;
  /** Report appends, one after the other. */
  writes: Promise<void> = Promise.resolve();
  /** Cancels the pending progress write (after() on the server clock). */
  progressTimer: (() => void) | undefined;
  /** Files being written: one upload per file at a time. */
  readonly uploading = new Set<string>();
  /** Resolves once the run is final. */
  readonly closed: Promise<void>;
  close!: () => void;

  constructor(run: DeviceRun, plan: TestPlan) {
    this.run = run;
    this.plan = plan;
    this.closed = new Promise((resolve) => (this.close = resolve));
  }
}

const str = (v: string | undefined, max: number): string => (v ?? "").slice(0, max);

/** Whether the share's device was started (here or through another node). */
const attached = (share: Share): boolean => share.conn !== undefined || share.remote !== undefined;

/** A share of a run on another node whose device's socket is here: what the device sends goes to that node. */
interface Relay {
  runId: string;
  conn: DeviceConnection;
  node: PeerNode;
  /** Messages not yet sent on, in the order the device sent them. */
  queue: Array<Record<string, unknown>>;
  disconnected: boolean;
  sending: boolean;
}

const relayKey = (runId: string, mac: string): string => `${runId}\n${mac}`;

/** The node-to-node routes of one device's share: `.../artifacts/{name}`, `.../power`. */
const peerSharePath = (runId: string, mac: string): string => `/api/v1/cluster/test-runs/${encodeURIComponent(runId)}/devices/${encodeURIComponent(mac)}`;

/** A relative artifact name from a device: `/`-separated plain segments, nothing that climbs or hides. */
function artifactSegments(name: string): string[] | undefined {
  if (name.length === 0 || name.length > 1024 || name.includes("\0") || name.includes("\\")) return undefined;
  const segments = name.split("/");
  if (segments.length > 16 || segments.some((s) => s === "" || s === "." || s === ".." || s.length > 255)) return undefined;
  return segments;
}

export class DeviceRuns {
  private readonly host: DeviceRunHost;
  private readonly hub: ChannelHub;
  private readonly active = new Map<string, ActiveRun>();
  private readonly connectWaiters: Wakers<string> = new Map();
  /** Which run holds each device: two runs never share one, the later waits (test_server.board_wait). */
  private readonly queue = new DeviceQueue();
  /** The lab's console captures, once the lab domain has started (attachConsoles). */
  private consoles: ConsoleSpans | undefined;
  /** The lab's power control (attachPower). */
  private boardPower: BoardPower | undefined;
  /** The lab's reservations (attachReservations). */
  private reservations: BoardReservations | undefined;
  /** Shares of other nodes' runs on devices whose sockets are here, by run and MAC. */
  private readonly relays = new Map<string, Relay>();

  constructor(host: DeviceRunHost, hub: ChannelHub) {
    this.host = host;
    this.hub = hub;
    hub.handle("test_run_row", (conn, message) => this.row(conn, message));
    hub.handle("test_run_end", (conn, message) => this.deviceEnd(conn, message));
    hub.onConnect((conn) => wakeAll(this.connectWaiters, conn.mac));
    hub.onDisconnect((mac) => this.disconnected(mac));
    host.ctx.cluster.onNodeLost((name) => this.nodeLost(name));
  }

  /** From now on every share on a board with a console port leaves its span as `console.log`. */
  attachConsoles(consoles: ConsoleSpans): void {
    this.consoles = consoles;
  }

  attachPower(power: BoardPower): void {
    this.boardPower = power;
  }

  /** From now on a validation run waits while someone holds its board. */
  attachReservations(reservations: BoardReservations): void {
    this.reservations = reservations;
  }

  /**
   * The `power` module of the share `mac` runs in `runId`: the board is switched with the
   * authority of the run's caller (the `power` permission on the device, checked by the lab),
   * audited as the caller. A validation run (the server's) has no caller to act as.
   */
  async power(runId: string, mac: string, action: "on" | "off" | "cycle", client: string, fromDevice = true): Promise<void> {
    const active = this.active.get(runId);
    const peer = active ? undefined : this.runNodeOf(runId, mac, fromDevice);
    if (peer) {
      const request: PeerPowerRequest = { action, client };
      await callPeer(this.ctx.cluster, peer, `${peerSharePath(runId, mac)}/power`, { json: request, timeoutMs: this.ctx.config.test_server.remote_run_timeout * 1000 });
      return;
    }
    const share = active?.shares.get(mac);
    if (!active || !share || !attached(share) || share.ended) throw new LabgateError("not_found", "no running test run of this device");
    const caller = active.plan.caller;
    if (!caller) throw new LabgateError("forbidden", "this run has no caller whose power permission the board could be switched with (a deployment's validation run)");
    if (!this.boardPower) throw new LabgateError("conflict", "this server controls no board power");
    const now = this.ctx.clock.now();
    const identity: Identity = { kind: "mgmt", user: caller.user, scopes: new Set(caller.scopes as Scope[]), expiresAt: now + 60_000, issuedAtMs: now };
    const actor: Actor = { kind: "token", name: caller.user, tokenId: null, client, at: dateOf(this.ctx.clock) };
    await this.boardPower.act(identity, actor, share.plan.id, action);
  }

  private get ctx(): DeviceRunHost["ctx"] {
    return this.host.ctx;
  }

  /** Whether `id` is a device run in progress here. */
  has(id: string): boolean {
    return this.active.has(id);
  }

  /** Starts a created (pending) device run; it ends on its own. */
  start(run: DeviceRun, plan: TestPlan): void {
    const active = new ActiveRun(run, plan);
    const lookup: ModuleLookup = { ...this.host.lookup, scripts: plan.modules ?? {} };
    for (const [i, share] of (plan.devices ?? []).entries()) active.shares.set(share.mac, new Share(share, i, expectedCases(share.entries, run.pattern, lookup)));
    this.active.set(run.id, active);
    void this.execute(active).catch((error) => this.ctx.log.error(`testrun: device run ${run.id}: ${(error as Error).stack ?? error}`));
  }

  /** Aborts a running device run: devices are told, and each has ABORT_GRACE_MS to confirm. */
  abort(id: string, reason: string | undefined): void {
    const active = this.active.get(id);
    if (!active || active.controller.signal.aborted) return;
    active.controller.abort(reason);
    for (const share of active.shares.values()) {
      if (share.ended || !attached(share)) continue;
      this.send(share, { method: "test_run_abort", run_id: id, reason: reason ?? "Aborted by user" });
      void this.ctx.clock.sleep(ABORT_GRACE_MS, share.over.signal).then(() => this.end(active, share, "aborted", "the device did not confirm the abort in time"));
    }
  }

  /** Shutdown: every device run ends aborted with `reason` at once (devices are told). */
  async shutdown(reason: string): Promise<void> {
    const runs = [...this.active.values()];
    for (const active of runs) {
      this.abort(active.run.id, reason);
      for (const share of active.shares.values()) await this.end(active, share, "aborted", reason);
    }
    await Promise.all(runs.map((r) => r.closed));
  }

  private async execute(active: ActiveRun): Promise<void> {
    const { run } = active;
    const store = this.host.store;
    const id = run.id;
    try {
      // Aborted while pending (between its creation and now): it never starts.
      if ((await store.getRun(id))?.status !== "pending") return;
      await mkdir(artifactsDir(this.host.dirs, id), { recursive: true });
      // Taken only while still pending: one aborted meanwhile never starts.
      if (!(await store.markRunning(id, this.ctx.clock.now()))) return;
      this.ctx.log.info(`testrun: run ${id} started on ${active.shares.size} device(s) (${run.configName}${run.suite ? `, ${run.suite}` : ""})`);
      active.report = await ReportWriter.create(reportPath(this.host.dirs, id), this.ctx.config.test_server.report_columns, {
        index: reportIndexPath(this.host.dirs, id),
        details: reportDetailsPath(this.host.dirs, id),
      });
      await Promise.all([...active.shares.values()].map((share) => this.runShare(active, share)));
      await active.writes;
      await active.report.close();
      const shares = [...active.shares.values()];
      const aborted = active.controller.signal.aborted;
      const failed = shares.some((s) => s.progress.status !== "finished" || s.progress.failed > 0);
      // An abort is the run's story: only the shares that failed for their own reason are named.
      const errors = deviceErrors(shares.map((s) => s.progress));
      const reason = typeof active.controller.signal.reason === "string" ? active.controller.signal.reason : undefined;
      active.progressTimer?.();
      await store.setDevices(id, shares.map((s) => s.progress));
      await store.finishRun(id, {
        status: aborted ? "aborted" : failed ? "failed" : "finished",
        at: this.ctx.clock.now(),
        error: aborted && reason ? reason : errors || null,
        warnings: [...run.warnings, ...shares.flatMap((s) => s.warnings.map((w) => `${deviceLabel(s.plan.name)}${w}`))],
        counts: shares.reduce((sum, s) => ({ passed: sum.passed + s.progress.passed, failed: sum.failed + s.progress.failed, skipped: sum.skipped + s.progress.skipped }), { passed: 0, failed: 0, skipped: 0 }),
      });
      this.ctx.log.info(`testrun: run ${id} ${(await store.getRun(id))?.status}${errors ? `: ${errors}` : ""}`);
    } catch (error) {
      await store.finishRun(id, { status: "failed", at: this.ctx.clock.now(), error: `runner error: ${(error as Error).message}` }).catch(() => {});
    } finally {
      active.progressTimer?.();
      this.active.delete(id);
      this.host.ended(id);
      active.close();
    }
  }

  /** The device's connection, or the other node holding its socket, waiting up to `test_server.device_wait` for it to connect. */
  private async connection(mac: string, signal: AbortSignal): Promise<DeviceConnection | PeerNode | undefined> {
    const wait = this.ctx.config.test_server.device_wait * 1000;
    const deadline = this.ctx.clock.now() + wait;
    // Only a cluster's nodes hear of sockets elsewhere; one node sleeps until its own device connects.
    const look = this.ctx.config.database.url ? REMOTE_LOOK_MS : wait;
    for (;;) {
      const here = this.hub.get(mac);
      if (here) return here;
      const peer = this.ctx.cluster.locate(mac);
      if (peer?.url) return peer;
      const left = deadline - this.ctx.clock.now();
      if (signal.aborted || left <= 0) return undefined;
      await sleepUntilWoken(this.ctx.clock, Math.min(left, look), signal, this.connectWaiters, mac);
    }
  }

  private async runShare(active: ActiveRun, share: Share): Promise<void> {
    const signal = active.controller.signal;
    const reason = () => (typeof signal.reason === "string" ? signal.reason : "Aborted by user");
    if (!(await this.takeBoard(active, share))) {
      if (signal.aborted) return this.end(active, share, "aborted", reason());
      const wait = this.ctx.config.test_server.board_wait;
      return this.end(active, share, "failed", `the board was busy with run ${this.queue.holder(share.plan.mac) ?? "(gone)"} for longer than test_server.board_wait (${wait} s)`);
    }
    if (signal.aborted) return this.end(active, share, "aborted", reason());
    share.consoleFrom = this.consoles?.offsetOf({ mac_address: share.plan.mac, name: share.plan.name });
    const found = await this.connection(share.plan.mac, signal);
    if (signal.aborted) return this.end(active, share, "aborted", reason());
    if (!found) return this.end(active, share, "failed", NOT_CONNECTED);
    if (!("raw" in found)) return this.runShareOn(active, share, found);
    const conn = found;
    let capabilities: Record<string, unknown>;
    try {
      capabilities = await conn.waitCapabilities(this.ctx.config.update_server.device_reply_timeout);
    } catch {
      return this.end(active, share, "failed", conn.open ? "the device did not report its capabilities" : DISCONNECTED);
    }
    if (capabilities[TESTS_CAPABILITY] !== true) return this.end(active, share, "failed", TESTS_DISABLED);
    if (signal.aborted) return this.end(active, share, "aborted", reason());
    share.conn = conn;
    share.progress.status = "running";
    this.progressChanged(active);
    if (!this.send(share, this.startMessage(active, share))) return this.end(active, share, "failed", DISCONNECTED);
    await this.awaitShare(active, share);
  }

  private startMessage(active: ActiveRun, share: Share): TestRunStart {
    return {
      method: "test_run_start",
      run_id: active.run.id,
      entries: share.plan.entries,
      modules: active.plan.modules ?? {},
      metadata: active.plan.metadata,
      pattern: active.run.pattern,
      artifacts_max_bytes: this.ctx.config.test_server.device_artifacts_max_bytes,
    };
  }

  /**
   * The share of a device whose socket is on another node: that node checks the device and starts
   * it, and relays what the device sends (its rows, its end, its uploads, its socket's close) here.
   */
  private async runShareOn(active: ActiveRun, share: Share, peer: PeerNode): Promise<void> {
    share.remote = peer;
    let answer: PeerShareStarted;
    try {
      const body: PeerShareStart = { run_id: active.run.id, mac: share.plan.mac, node: { name: this.ctx.cluster.name, url: this.ctx.config.cluster.advertise_url }, start: this.startMessage(active, share) };
      answer = await callPeer<PeerShareStarted>(this.ctx.cluster, peer, "/api/v1/cluster/test-shares", { json: body, timeoutMs: 3 * this.ctx.config.update_server.device_reply_timeout * 1000 });
    } catch (error) {
      return this.end(active, share, "failed", (error as Error).message);
    }
    if (!answer.started) return this.end(active, share, "failed", answer.error ?? DISCONNECTED);
    // The device may have ended already (its messages can come before this answer).
    if (!share.ended) {
      share.progress.status = "running";
      this.progressChanged(active);
    }
    await this.awaitShare(active, share);
  }

  /** Waits for the started share to end, bounded by test_server.remote_run_timeout. */
  private async awaitShare(active: ActiveRun, share: Share): Promise<void> {
    const timeout = this.ctx.config.test_server.remote_run_timeout;
    void this.ctx.clock.sleep(timeout * 1000, share.over.signal).then(() => {
      if (share.ended) return;
      this.send(share, { method: "test_run_abort", run_id: active.run.id, reason: "remote_run_timeout" });
      return this.end(active, share, "failed", `no result within remote_run_timeout (${timeout} s)`);
    });
    await share.done;
  }

  /**
   * Takes the share's board for its run. A validation run has no caller who could hold the
   * board's reservation: it waits for the reservation to end (however long: the deployment waits
   * for its verdict), before its turn in the queue and again after it (the holder's own runs go
   * meanwhile), and then holds the board as any run. False after test_server.board_wait in the
   * queue or an abort.
   */
  private async takeBoard(active: ActiveRun, share: Share): Promise<boolean> {
    const reservations = active.plan.validates === undefined ? undefined : this.reservations;
    const { id, mac } = share.plan;
    for (;;) {
      if (reservations?.holds(id, this.ctx.clock.now())) {
        this.ctx.log.info(`testrun: run ${active.run.id} waits for the reservation of device ${mac} to end`);
        if (!(await reservations.untilFree(id, active.controller.signal))) return false;
      }
      if (!(await this.takeDevice(active, share))) return false;
      if (!reservations?.holds(id, this.ctx.clock.now())) return true;
      // Reserved while it waited in the queue: the holder's runs go first.
      this.queue.release(mac, active.run.id);
    }
  }

  /** Takes the share's device for its run, queued behind the runs holding it; false after test_server.board_wait or an abort. */
  private async takeDevice(active: ActiveRun, share: Share): Promise<boolean> {
    const waited = new AbortController();
    const cancel = after(this.ctx.clock, this.ctx.config.test_server.board_wait * 1000, () => waited.abort());
    try {
      return await this.queue.take(share.plan.mac, active.run.id, AbortSignal.any([active.controller.signal, waited.signal]));
    } finally {
      cancel();
    }
  }

  private send(share: Share, message: TestRunStart | TestRunAbort): boolean {
    if (share.remote) return this.hub.sendAnywhere(share.plan.mac, message);
    try {
      share.conn?.send(message);
      return share.conn !== undefined;
    } catch {
      return false;
    }
  }

  /** Ends a device's share; the cases it did not report are written failed with `error` (not when aborted). */
  private async end(active: ActiveRun, share: Share, status: "finished" | "failed" | "aborted", error: string | null): Promise<void> {
    if (share.ended) return;
    share.ended = true;
    share.over.abort();
    if (status !== "aborted" && error) {
      const at = dateOf(this.ctx.clock);
      for (const c of share.expected) {
        if (share.seen.has(`${c.testName}\n${c.module}`)) continue;
        this.write(active, share, { startTime: at, deviceName: share.plan.name, testName: c.testName, module: c.module, duration: 0, message: error, status: "failed", artifacts: [], name: c.name, board: share.plan.name });
      }
    }
    share.progress.status = status;
    share.progress.error = error;
    this.progressChanged(active);
    try {
      await active.writes;
      await this.host.store.saveDeviceResults(active.run, share.plan, share.results);
    } catch (e) {
      this.ctx.log.error(`testrun: run ${active.run.id}: results of device ${share.plan.mac} not stored: ${(e as Error).message}`);
    } finally {
      await this.saveConsole(active, share);
      this.queue.release(share.plan.mac, active.run.id);
      share.resolve();
    }
  }

  /** The board's console from the share's start to now, as its `console.log` (a file the device uploaded under that name stays). */
  private async saveConsole(active: ActiveRun, share: Share): Promise<void> {
    if (share.consoleFrom === undefined || !this.consoles) return;
    const bytes = this.consoles.span({ mac_address: share.plan.mac, name: share.plan.name }, share.consoleFrom);
    if (!bytes) return;
    const root = join(artifactsDir(this.host.dirs, active.run.id), share.plan.dir);
    try {
      await mkdir(root, { recursive: true });
      const file = await open(join(root, CONSOLE_ARTIFACT), constants.O_WRONLY | constants.O_CREAT | constants.O_EXCL | constants.O_NOFOLLOW, 0o640);
      try {
        await file.writeFile(bytes);
      } finally {
        await file.close();
      }
    } catch (e) {
      this.ctx.log.warn(`testrun: run ${active.run.id}: console of device ${share.plan.mac} not saved: ${(e as Error).message}`);
    }
  }

  /** Queues a report row of `share` (in arrival order) and counts it. */
  private write(active: ActiveRun, share: Share, row: ReportRow, line: Buffer = active.report.line(row)): void {
    share.seen.add(`${row.testName}\n${row.module}`);
    share.results.set(row.testName, row.status);
    share.progress[row.status]++;
    active.writes = active.writes.then(() => active.report.append(row, share.index, line));
    this.progressChanged(active);
  }

  /** The run object shows each device's counts: written at most every PROGRESS_INTERVAL_MS. */
  private progressChanged(active: ActiveRun): void {
    if (active.progressTimer) return;
    active.progressTimer = after(this.ctx.clock, PROGRESS_INTERVAL_MS, () => {
      active.progressTimer = undefined;
      if (!this.active.has(active.run.id)) return;
      this.host.store.setDevices(active.run.id, [...active.shares.values()].map((s) => s.progress)).catch(() => {});
    });
  }

  /** The run and share a device message is about; a run this gateway no longer runs is stopped on the device. */
  private shareOf(conn: DeviceConnection, message: { run_id: string }): { active: ActiveRun; share: Share } | undefined {
    const runId = message.run_id;
    const active = this.active.get(runId);
    const share = active?.shares.get(conn.mac);
    if (!active || !share) {
      const relay = this.relays.get(relayKey(runId, conn.mac));
      if (relay?.conn === conn) {
        this.relay(relay, message as unknown as Record<string, unknown>);
        return undefined;
      }
      if (runId) {
        try {
          conn.send({ method: "test_run_abort", run_id: runId.slice(0, 128), reason: "the gateway does not run this test run" });
        } catch {
          // gone already
        }
      }
      return undefined;
    }
    return share.conn === conn && !share.ended ? { active, share } : undefined;
  }

  /** `test_run_row`: one case's result. */
  private row(conn: DeviceConnection, message: DeviceMessageOf<"test_run_row">): void {
    const found = this.shareOf(conn, message);
    if (found) this.rowOf(found.active, found.share, message);
  }

  private rowOf(active: ActiveRun, share: Share, message: DeviceMessageOf<"test_run_row">): void {
    const status = message.status;
    if (++share.rows > LIMITS.rows) {
      this.send(share, { method: "test_run_abort", run_id: active.run.id, reason: "too many rows" });
      void this.end(active, share, "failed", `the device sent more than ${LIMITS.rows} rows`);
      return;
    }
    const start = new Date(message.start_time);
    const duration = message.duration;
    const artifacts = message.artifacts
      .slice(0, LIMITS.artifactsPerRow)
      .filter((a) => artifactSegments(a) !== undefined)
      .map((a) => `${share.plan.dir}/${a}`);
    const row: ReportRow = {
      startTime: Number.isNaN(start.getTime()) ? dateOf(this.ctx.clock) : start,
      deviceName: share.plan.name,
      testName: str(message.test_name, LIMITS.testName),
      module: str(message.module, LIMITS.module),
      duration,
      message: str(message.message, LIMITS.message),
      status,
      artifacts,
      name: str(message.name, LIMITS.name),
      board: share.plan.name,
      output: status === "failed" ? str(message.output, LIMITS.output) : "",
    };
    // The row's bytes as written count against the device's budget: past it, the share fails.
    const line = active.report.line(row);
    const budget = this.ctx.config.test_server.device_report_max_bytes;
    if (share.reportBytes + line.length > budget) {
      const error = `the device's report rows went over ${budget} bytes (test_server.device_report_max_bytes)`;
      this.send(share, { method: "test_run_abort", run_id: active.run.id, reason: error });
      void this.end(active, share, "failed", error);
      return;
    }
    share.reportBytes += line.length;
    this.write(active, share, row, line);
  }

  /** `test_run_end`: the device's share ended (its artifacts are uploaded by then). */
  private deviceEnd(conn: DeviceConnection, message: DeviceMessageOf<"test_run_end">): void {
    const found = this.shareOf(conn, message);
    if (found) this.endOf(found, message);
  }

  private endOf(found: { active: ActiveRun; share: Share }, message: DeviceMessageOf<"test_run_end">): void {
    const { status } = message;
    const error = message.error ? message.error.slice(0, LIMITS.message) : status === "failed" && found.share.progress.failed === 0 ? "the device reported a failure" : null;
    found.share.warnings = message.warnings.slice(0, 100).map((w) => str(w, 1024));
    void this.end(found.active, found.share, status, error);
  }

  /** A device's socket closed: its running shares fail (here, and on the nodes whose shares it ran). */
  private disconnected(mac: string): void {
    for (const active of this.active.values()) {
      const share = active.shares.get(mac);
      if (share?.conn && !share.ended) void this.end(active, share, active.controller.signal.aborted ? "aborted" : "failed", DISCONNECTED);
    }
    for (const relay of this.relays.values()) {
      if (relay.conn.mac !== mac || relay.disconnected) continue;
      relay.disconnected = true;
      this.pump(relay);
    }
  }

  /**
   * Where a device's request about run `runId` goes when the run is not here: its node, for a
   * share relayed here; else (the request came from the device, through a load balancer) the node
   * holding the device's socket, which runs the share or relays it. At most two hops.
   */
  private runNodeOf(runId: string, mac: string, fromDevice: boolean): PeerNode | undefined {
    const relay = this.relays.get(relayKey(runId, mac));
    if (relay) return relay.node;
    const holder = fromDevice ? this.ctx.cluster.locate(mac) : undefined;
    return holder?.url ? holder : undefined;
  }

  /**
   * Another node went, and with it what it held: the shares it relayed for runs here end (their
   * devices stopped them when their sockets closed), and the relays here for its runs stop on
   * their devices (nothing is left to take what they send).
   */
  private nodeLost(name: string): void {
    for (const active of this.active.values()) {
      for (const share of active.shares.values()) {
        if (share.remote?.name !== name || share.ended) continue;
        void this.end(active, share, active.controller.signal.aborted ? "aborted" : "failed", `relay node ${name} lost: the device's socket was on it, and a device stops its share when its socket closes`);
      }
    }
    for (const [key, relay] of this.relays) {
      if (relay.node.name !== name) continue;
      this.relays.delete(key);
      try {
        if (relay.conn.open) relay.conn.send({ method: "test_run_abort", run_id: relay.runId, reason: `the run's node ${name} was lost` });
      } catch {
        // gone already
      }
    }
  }

  /**
   * Another node's share on a device whose socket is here: checks the device as a share here
   * would, and starts it; from then on what the device sends for the run goes to that node.
   */
  async startRelayed(request: PeerShareStart): Promise<PeerShareStarted> {
    const conn = this.hub.get(request.mac);
    if (!conn) return { started: false, error: NOT_CONNECTED };
    const read = readServerMessage(JSON.stringify(request.start));
    if (!("message" in read) || read.message.method !== "test_run_start" || read.message.run_id !== request.run_id) throw new LabgateError("invalid", "not a test_run_start of this run");
    const start = read.message;
    try {
      const capabilities = await conn.waitCapabilities(this.ctx.config.update_server.device_reply_timeout);
      if (capabilities[TESTS_CAPABILITY] !== true) return { started: false, error: TESTS_DISABLED };
    } catch {
      return { started: false, error: conn.open ? "the device did not report its capabilities" : DISCONNECTED };
    }
    const key = relayKey(request.run_id, request.mac);
    this.relays.set(key, { runId: request.run_id, conn, node: request.node, queue: [], disconnected: false, sending: false });
    try {
      conn.send(start);
    } catch {
      this.relays.delete(key);
      return { started: false, error: DISCONNECTED };
    }
    return { started: true, error: null };
  }

  /** A message of a relayed share: sent on to the run's node, after those before it. */
  private relay(relay: Relay, message: Record<string, unknown>): void {
    relay.queue.push(message);
    this.pump(relay);
  }

  private pump(relay: Relay): void {
    if (relay.sending) return;
    relay.sending = true;
    void (async () => {
      const mac = relay.conn.mac;
      const key = relayKey(relay.runId, mac);
      try {
        while (relay.queue.length > 0 || relay.disconnected) {
          let bytes = 0;
          let count = 0;
          while (count < relay.queue.length && (count === 0 || bytes < RELAY_BATCH_BYTES)) bytes += JSON.stringify(relay.queue[count++]).length;
          const messages = relay.queue.splice(0, count);
          const ended = messages.some((m) => m.method === "test_run_end");
          const body: PeerShareMessages = { run_id: relay.runId, mac, messages, disconnected: relay.disconnected && relay.queue.length === 0 };
          await callPeer(this.ctx.cluster, relay.node, "/api/v1/cluster/test-messages", { json: body, timeoutMs: 60_000 });
          if (ended || body.disconnected) return void this.relays.delete(key);
        }
      } catch (error) {
        // The run's node no longer runs the share (or cannot be reached): the device stops it.
        this.relays.delete(key);
        this.ctx.log.warn(`testrun: run ${relay.runId}: messages of device ${mac} not relayed to node ${relay.node.name}: ${(error as Error).message}`);
        try {
          if (relay.conn.open && !relay.disconnected) relay.conn.send({ method: "test_run_abort", run_id: relay.runId, reason: "the gateway does not run this test run" });
        } catch {
          // gone already
        }
      } finally {
        relay.sending = false;
      }
    })();
  }

  /** What the node holding the socket of a share's device relayed: its messages in order, or the socket's close. */
  relayed(request: PeerShareMessages): void {
    const active = this.active.get(request.run_id);
    const share = active?.shares.get(request.mac);
    if (!active || !share || !share.remote || share.ended) throw new LabgateError("not_found", "no running test run of this device");
    for (const raw of request.messages) {
      const read = readDeviceMessage(JSON.stringify(raw));
      if (!("message" in read) || share.ended) continue;
      const message = read.message;
      if (message.method === "test_run_row" && message.run_id === request.run_id) this.rowOf(active, share, message);
      else if (message.method === "test_run_end" && message.run_id === request.run_id) this.endOf({ active, share }, message);
    }
    if (request.disconnected && !share.ended) void this.end(active, share, active.controller.signal.aborted ? "aborted" : "failed", DISCONNECTED);
  }

  /**
   * `PUT /api/v1/devices/test-runs/{id}/artifacts/{name}?offset=N` from the device `mac`: appends
   * the body to the artifact at `offset`, which must be its present size (else 409 with
   * `offset`, from where the device resumes). Only while the device's share runs, within the
   * device's budget: `test_server.device_artifacts_max_bytes` bytes and
   * `test_server.device_artifacts_max_files` files and directories it made (413 beyond).
   * Returns the artifact's new size. An upload for a run of another node goes on to it
   * (runNodeOf); `fromDevice` false: another node sent it on, and it goes at most one hop further.
   */
  async writeArtifact(runId: string, mac: string, name: string, offset: number, body: Readable, fromDevice = true): Promise<number> {
    const active = this.active.get(runId);
    const share = active?.shares.get(mac);
    const peer = active ? undefined : this.runNodeOf(runId, mac, fromDevice);
    if (peer) return this.writeArtifactOn(peer, runId, mac, name, offset, body);
    if (!active || !share || share.ended || !attached(share)) throw new LabgateError("not_found", "no running test run of this device");
    const segments = artifactSegments(name);
    if (!segments) throw new LabgateError("invalid", "invalid artifact name");
    const root = join(artifactsDir(this.host.dirs, runId), share.plan.dir);
    const path = join(root, ...segments);
    if (active.uploading.has(path)) throw new LabgateError("conflict", "this artifact is being uploaded already");
    active.uploading.add(path);
    try {
      await mkdir(root, { recursive: true });
      let dir = root;
      for (const segment of segments.slice(0, -1)) {
        dir = join(dir, segment);
        const found = await lstat(dir).catch(() => undefined);
        if (found && !found.isDirectory()) throw new LabgateError("conflict", "artifact name is taken by a file");
        if (found) continue;
        const release = this.newEntry(share);
        await mkdir(dir).catch((error: NodeJS.ErrnoException) => {
          release();
          // Another upload of the device made it meanwhile (and counted it).
          if (error.code !== "EEXIST") throw error;
        });
      }
      const existing = await lstat(path).catch(() => undefined);
      if (existing && !existing.isFile()) throw new LabgateError("conflict", "artifact name is taken by a directory");
      const size = existing?.size ?? 0;
      if (offset !== size) throw new LabgateError("conflict", `upload must continue at offset ${size}`, { offset: size });
      const limit = this.ctx.config.test_server.device_artifacts_max_bytes;
      const flags = constants.O_WRONLY | constants.O_APPEND | constants.O_NOFOLLOW;
      let handle;
      if (existing) handle = await open(path, flags);
      else {
        const release = this.newEntry(share);
        handle = await open(path, flags | constants.O_CREAT | constants.O_EXCL, 0o644).catch((error: unknown) => {
          release();
          throw error;
        });
      }
      let written = size;
      try {
        for await (const chunk of body as AsyncIterable<Buffer>) {
          if (share.artifactBytes + chunk.length > limit) {
            body.resume();
            throw new LabgateError("too_large", `artifacts of one device are limited to ${limit} bytes (test_server.device_artifacts_max_bytes)`);
          }
          share.artifactBytes += chunk.length;
          await handle.write(chunk);
          written += chunk.length;
        }
        // What the answer reports is on disk (an empty upload wrote nothing to keep).
        if (written > size) await handle.sync();
      } finally {
        await handle.close();
      }
      return written;
    } finally {
      active.uploading.delete(path);
    }
  }

  /** An upload for a run of another node: streamed on towards the run's node, which keeps the share's budget and answers the offset. */
  private async writeArtifactOn(peer: PeerNode, runId: string, mac: string, name: string, offset: number, body: Readable): Promise<number> {
    const path = `${peerSharePath(runId, mac)}/artifacts/${name.split("/").map(encodeURIComponent).join("/")}?offset=${offset}`;
    const answer = await callPeer<{ offset: number }>(this.ctx.cluster, peer, path, { method: "PUT", stream: body, timeoutMs: this.ctx.config.test_server.remote_run_timeout * 1000 });
    return answer.offset;
  }

  /**
   * Counts a file or directory the device's upload is about to make, or 413 when its budget
   * (test_server.device_artifacts_max_files) is spent; counted before it exists, as uploads run
   * side by side. Returns how to give it back when it was not made.
   */
  private newEntry(share: Share): () => void {
    const limit = this.ctx.config.test_server.device_artifacts_max_files;
    if (share.artifactFiles >= limit) throw new LabgateError("too_large", `artifacts of one device are limited to ${limit} files and directories (test_server.device_artifacts_max_files)`);
    share.artifactFiles++;
    return () => void share.artifactFiles--;
  }
}
