import type { Database, Tx } from "../../db/index.ts";
import type { TestPlan } from "../plan.ts";
import type { DeviceProgress, TriggerStatus } from "../schema.ts";
import type { RunStatus } from "./status.ts";

export { FINAL_STATUSES, type RunStatus } from "./status.ts";
export type { TriggerStatus };

/** A run as stored (JSON columns parsed). Times are epoch milliseconds. */
export interface RunRecord {
  seq: number;
  id: string;
  triggerId: string;
  configName: string;
  suite: string;
  machineTarget: string | null;
  overrides: string[] | Record<string, unknown> | null;
  pattern: string;
  repeatOf: string | null;
  status: RunStatus;
  createdAt: number;
  startedAt: number | null;
  finishedAt: number | null;
  metadata: Record<string, string | null>;
  error: string | null;
  warnings: string[];
  abortRequested: boolean;
  /** A run on managed devices: each device's share; null for other runs. */
  devices: DeviceProgress[] | null;
}

export interface RemoteRun {
  machine: string;
  group: string;
  runId: string;
}

export interface TriggerRecord {
  seq: number;
  id: string;
  createdAt: number;
  configName: string;
  suite: string;
  orchestrated: boolean;
  status: TriggerStatus;
  isAborted: boolean;
  error: string | null;
  /** Machines contacted: name -> URL. */
  nodes: Record<string, string>;
  remoteRuns: RemoteRun[];
  finishedAt: number | null;
  /** Name of the combined results directory, once built. */
  resultsDir: string | null;
}

type RunRow = {
  seq: number;
  id: string;
  trigger_id: string;
  config_name: string;
  test_suite_name: string;
  machine_target: string | null;
  overrides: string | null;
  pattern: string;
  repeat_of: string | null;
  status: RunStatus;
  created_at: number;
  started_at: number | null;
  finished_at: number | null;
  metadata: string;
  error: string | null;
  warnings: string;
  abort_requested: number;
  devices: string | null;
};

type TriggerRow = {
  seq: number;
  id: string;
  created_at: number;
  config_name: string;
  test_suite_name: string;
  orchestrated: number;
  status: TriggerStatus;
  is_aborted: number;
  error: string | null;
  nodes: string;
  remote_runs: string;
  finished_at: number | null;
  results_dir: string | null;
};

const RUN_COLUMNS =
  "seq, id, trigger_id, config_name, test_suite_name, machine_target, overrides, pattern, repeat_of, status, created_at, started_at, finished_at, metadata, error, warnings, abort_requested, devices";

const toRun = (r: RunRow): RunRecord => ({
  seq: r.seq,
  id: r.id,
  triggerId: r.trigger_id,
  configName: r.config_name,
  suite: r.test_suite_name,
  machineTarget: r.machine_target,
  overrides: r.overrides === null ? null : JSON.parse(r.overrides),
  pattern: r.pattern,
  repeatOf: r.repeat_of,
  status: r.status,
  createdAt: r.created_at,
  startedAt: r.started_at,
  finishedAt: r.finished_at,
  metadata: JSON.parse(r.metadata),
  error: r.error,
  warnings: JSON.parse(r.warnings),
  abortRequested: r.abort_requested === 1,
  devices: r.devices === null ? null : JSON.parse(r.devices),
});

const toTrigger = (r: TriggerRow): TriggerRecord => ({
  seq: r.seq,
  id: r.id,
  createdAt: r.created_at,
  configName: r.config_name,
  suite: r.test_suite_name,
  orchestrated: r.orchestrated === 1,
  status: r.status,
  isAborted: r.is_aborted === 1,
  error: r.error,
  nodes: JSON.parse(r.nodes),
  remoteRuns: JSON.parse(r.remote_runs),
  finishedAt: r.finished_at,
  resultsDir: r.results_dir,
});

export interface NewRun {
  id: string;
  triggerId: string;
  configName: string;
  suite: string;
  machineTarget: string | null;
  overrides: RunRecord["overrides"];
  pattern: string;
  repeatOf: string | null;
  createdAt: number;
  warnings: string[];
  plan: TestPlan;
  /** Born aborted (a run created in an already aborted trigger). */
  status?: RunStatus;
  /** A run on managed devices: its devices, each `waiting`. */
  devices?: DeviceProgress[];
}

/** What changed: a run or trigger (created or updated), or a run whose record was deleted. */
export type RunChange = { kind: "run" | "trigger" | "run-deleted"; id: string };

/** A page of the run list: filters (all optional, combined with and) and paging. */
export interface RunQuery {
  configName?: string;
  statuses?: RunStatus[];
  triggerId?: string;
  /** Newest first when true; creation order (oldest first) otherwise. */
  newestFirst?: boolean;
  limit?: number;
  offset?: number;
}

/** Run and trigger records in the database. Reads are synchronous; writes resolve once on disk. */
export class RunStore {
  private readonly db: Database;
  private readonly changed: (change: RunChange) => void;
  /** `changed` hears of every write once it is on disk (the live run stream listens). */
  constructor(db: Database, changed: (change: RunChange) => void = () => {}) {
    this.db = db;
    this.changed = changed;
  }

  listRuns(): RunRecord[] {
    return this.db.all<RunRow>(`SELECT ${RUN_COLUMNS} FROM testrun_runs ORDER BY seq`).map(toRun);
  }

  /** One page of the runs matching `query`, and how many match in all. */
  queryRuns(query: RunQuery): { runs: RunRecord[]; total: number } {
    const where: string[] = [];
    const params: (string | number)[] = [];
    if (query.configName !== undefined) where.push("config_name = ?"), params.push(query.configName);
    if (query.triggerId !== undefined) where.push("trigger_id = ?"), params.push(query.triggerId);
    if (query.statuses && query.statuses.length > 0) where.push(`status IN (${query.statuses.map(() => "?").join(", ")})`), params.push(...query.statuses);
    const filter = where.length > 0 ? ` WHERE ${where.join(" AND ")}` : "";
    const total = this.db.get<{ n: number }>(`SELECT COUNT(*) AS n FROM testrun_runs${filter}`, params)?.n ?? 0;
    const page = ` ORDER BY seq ${query.newestFirst ? "DESC" : "ASC"} LIMIT ? OFFSET ?`;
    const runs = this.db.all<RunRow>(`SELECT ${RUN_COLUMNS} FROM testrun_runs${filter}${page}`, [...params, query.limit ?? -1, query.offset ?? 0]).map(toRun);
    return { runs, total };
  }

  getRun(id: string): RunRecord | undefined {
    const row = this.db.get<RunRow>(`SELECT ${RUN_COLUMNS} FROM testrun_runs WHERE id = ?`, [id]);
    return row && toRun(row);
  }

  getRunBySeq(seq: number): RunRecord | undefined {
    const row = this.db.get<RunRow>(`SELECT ${RUN_COLUMNS} FROM testrun_runs WHERE seq = ?`, [seq]);
    return row && toRun(row);
  }

  runsOfTrigger(triggerId: string): RunRecord[] {
    return this.db.all<RunRow>(`SELECT ${RUN_COLUMNS} FROM testrun_runs WHERE trigger_id = ? ORDER BY seq`, [triggerId]).map(toRun);
  }

  runsWithStatus(...statuses: RunStatus[]): RunRecord[] {
    return this.db
      .all<RunRow>(`SELECT ${RUN_COLUMNS} FROM testrun_runs WHERE status IN (${statuses.map(() => "?").join(", ")}) ORDER BY seq`, statuses)
      .map(toRun);
  }

  planOf(id: string): TestPlan | undefined {
    const row = this.db.get<{ plan: string }>("SELECT plan FROM testrun_runs WHERE id = ?", [id]);
    return row && (JSON.parse(row.plan) as TestPlan);
  }

  listTriggers(): TriggerRecord[] {
    return this.db.all<TriggerRow>("SELECT * FROM testrun_triggers ORDER BY seq").map(toTrigger);
  }

  getTrigger(id: string): TriggerRecord | undefined {
    const row = this.db.get<TriggerRow>("SELECT * FROM testrun_triggers WHERE id = ?", [id]);
    return row && toTrigger(row);
  }

  /** Creates the run (and its trigger when new) in one durable transaction. */
  async createRun(run: NewRun, trigger?: Omit<NewTrigger, "id">): Promise<RunRecord> {
    await this.db.write((tx) => {
      if (trigger && !tx.get("SELECT 1 FROM testrun_triggers WHERE id = ?", [run.triggerId])) insertTrigger(tx, { ...trigger, id: run.triggerId });
      tx.run(
        `INSERT INTO testrun_runs (id, trigger_id, config_name, test_suite_name, machine_target, overrides, pattern, repeat_of, status,
           created_at, finished_at, warnings, plan, devices) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
        [
          run.id,
          run.triggerId,
          run.configName,
          run.suite,
          run.machineTarget,
          run.overrides === null ? null : JSON.stringify(run.overrides),
          run.pattern,
          run.repeatOf,
          run.status ?? "pending",
          run.createdAt,
          run.status === "aborted" ? run.createdAt : null,
          JSON.stringify(run.warnings),
          JSON.stringify(run.plan),
          run.devices ? JSON.stringify(run.devices) : null,
        ],
      );
    });
    if (trigger) this.changed({ kind: "trigger", id: run.triggerId });
    this.changed({ kind: "run", id: run.id });
    return this.getRun(run.id)!;
  }

  async createTrigger(trigger: NewTrigger): Promise<TriggerRecord> {
    await this.db.write((tx) => insertTrigger(tx, trigger));
    this.changed({ kind: "trigger", id: trigger.id });
    return this.getTrigger(trigger.id)!;
  }

  async markRunning(id: string, at: number): Promise<void> {
    await this.db.write((tx) => void tx.run("UPDATE testrun_runs SET status = 'running', started_at = ? WHERE id = ? AND status = 'pending'", [at, id]));
    this.changed({ kind: "run", id });
  }

  /** Moves a run to a final state (only from pending/running: a final state is never changed). */
  async finishRun(id: string, fields: { status: RunStatus; at: number; error?: string | null; metadata?: Record<string, string | null>; warnings?: string[] }): Promise<boolean> {
    const done = await this.db.write((tx) => {
      const sets = ["status = ?", "finished_at = ?"];
      const params: (string | number | null)[] = [fields.status, fields.at];
      if (fields.error !== undefined) sets.push("error = ?"), params.push(fields.error);
      if (fields.metadata) sets.push("metadata = ?"), params.push(JSON.stringify(fields.metadata));
      if (fields.warnings) sets.push("warnings = ?"), params.push(JSON.stringify(fields.warnings));
      return tx.run(`UPDATE testrun_runs SET ${sets.join(", ")} WHERE id = ? AND status IN ('pending', 'running')`, [...params, id]).changes > 0;
    });
    if (done) this.changed({ kind: "run", id });
    return done;
  }

  /** A device run's progress (how far each device got). */
  async setDevices(id: string, devices: DeviceProgress[]): Promise<void> {
    await this.db.write((tx) => void tx.run("UPDATE testrun_runs SET devices = ? WHERE id = ?", [JSON.stringify(devices), id]));
    this.changed({ kind: "run", id });
  }

  /** Each case's result on one device of a run (test name -> status), for the config's history. */
  async saveDeviceResults(run: RunRecord, device: { mac: string; name: string }, results: Map<string, string>): Promise<void> {
    if (results.size === 0) return;
    await this.db.write((tx) => {
      for (const [testName, status] of results) {
        tx.run(
          "INSERT OR REPLACE INTO testrun_device_results (run_seq, run_id, config_name, device_mac, device_name, test_name, status) VALUES (?, ?, ?, ?, ?, ?, ?)",
          [run.seq, run.id, run.configName, device.mac, device.name, testName, status],
        );
      }
    });
  }

  /**
   * A config's history (the newest `runs` runs on devices): those runs, newest first, and one
   * page of its (device, test) pairs with the result in each of those runs (null: not run there).
   * With `macs`, only the results of those devices count.
   */
  deviceHistory(configName: string, runs: number, page: { limit: number; offset: number }, macs?: ReadonlySet<string>): { runs: RunRecord[]; total: number; rows: HistoryRow[] } {
    const ofDevices = macs ? " AND device_mac IN (SELECT value FROM json_each(?))" : "";
    const config: (string | number)[] = macs ? [configName, JSON.stringify([...macs])] : [configName];
    const seqs = this.db
      .all<{ run_seq: number }>(`SELECT DISTINCT run_seq FROM testrun_device_results WHERE config_name = ?${ofDevices} ORDER BY run_seq DESC LIMIT ?`, [...config, runs])
      .map((r) => r.run_seq);
    if (seqs.length === 0) return { runs: [], total: 0, rows: [] };
    const inRuns = `config_name = ?${ofDevices} AND run_seq IN (${seqs.map(() => "?").join(", ")})`;
    const params = [...config, ...seqs];
    const total = this.db.get<{ n: number }>(`SELECT COUNT(*) AS n FROM (SELECT DISTINCT device_mac, test_name FROM testrun_device_results WHERE ${inRuns})`, params)?.n ?? 0;
    const pairs = this.db.all<{ device_mac: string; test_name: string; device_name: string }>(
      `SELECT device_mac, test_name, MAX(device_name) AS device_name FROM testrun_device_results WHERE ${inRuns}
         GROUP BY device_mac, test_name ORDER BY MAX(device_name), device_mac, test_name LIMIT ? OFFSET ?`,
      [...params, page.limit, page.offset],
    );
    const rows: HistoryRow[] = pairs.map((p) => {
      const results = new Map(
        this.db
          .all<{ run_seq: number; status: string }>(`SELECT run_seq, status FROM testrun_device_results WHERE ${inRuns} AND device_mac = ? AND test_name = ?`, [...params, p.device_mac, p.test_name])
          .map((r) => [r.run_seq, r.status]),
      );
      return { device: p.device_name, mac: p.device_mac, testName: p.test_name, results: seqs.map((seq) => results.get(seq) ?? null) };
    });
    const records = seqs.map((seq) => this.getRunBySeq(seq)).filter((r): r is RunRecord => r !== undefined);
    return { runs: records, total, rows };
  }

  async setAbortRequested(id: string): Promise<void> {
    await this.db.write((tx) => void tx.run("UPDATE testrun_runs SET abort_requested = 1 WHERE id = ?", [id]));
    this.changed({ kind: "run", id });
  }

  async updateTrigger(id: string, fields: Partial<Pick<TriggerRecord, "status" | "isAborted" | "error" | "nodes" | "remoteRuns" | "finishedAt" | "resultsDir">>): Promise<void> {
    const sets: string[] = [];
    const params: (string | number | null)[] = [];
    if (fields.status !== undefined) sets.push("status = ?"), params.push(fields.status);
    if (fields.isAborted !== undefined) sets.push("is_aborted = ?"), params.push(fields.isAborted ? 1 : 0);
    if (fields.error !== undefined) sets.push("error = ?"), params.push(fields.error);
    if (fields.nodes !== undefined) sets.push("nodes = ?"), params.push(JSON.stringify(fields.nodes));
    if (fields.remoteRuns !== undefined) sets.push("remote_runs = ?"), params.push(JSON.stringify(fields.remoteRuns));
    if (fields.finishedAt !== undefined) sets.push("finished_at = ?"), params.push(fields.finishedAt);
    if (fields.resultsDir !== undefined) sets.push("results_dir = ?"), params.push(fields.resultsDir);
    if (sets.length === 0) return;
    await this.db.write((tx) => void tx.run(`UPDATE testrun_triggers SET ${sets.join(", ")} WHERE id = ?`, [...params, id]));
    this.changed({ kind: "trigger", id });
  }

  /**
   * Deletes the record of a run in a final state (its report and artifacts are the caller's);
   * a trigger left without runs and not orchestrated goes with it. False when there was none.
   */
  async deleteRun(id: string): Promise<boolean> {
    const run = this.getRun(id);
    if (!run) return false;
    const done = await this.db.write((tx) => {
      if (tx.run("DELETE FROM testrun_runs WHERE id = ? AND status IN ('finished', 'failed', 'aborted')", [id]).changes === 0) return false;
      tx.run("DELETE FROM testrun_device_results WHERE run_id = ?", [id]);
      tx.run("DELETE FROM testrun_triggers WHERE id = ? AND orchestrated = 0 AND NOT EXISTS (SELECT 1 FROM testrun_runs WHERE trigger_id = ?)", [run.triggerId, run.triggerId]);
      return true;
    });
    if (done) this.changed({ kind: "run-deleted", id });
    return done;
  }

  /** At start-up: runs that were pending or running become aborted; so do orchestrations. */
  async abortUnfinished(at: number, error: string): Promise<number> {
    const unfinished =
      this.db.get("SELECT 1 AS x FROM testrun_runs WHERE status IN ('pending', 'running') LIMIT 1") ??
      this.db.get("SELECT 1 AS x FROM testrun_triggers WHERE orchestrated = 1 AND status = 'running' LIMIT 1");
    if (!unfinished) return 0; // nothing to journal on a clean start
    return this.db.write((tx) => {
      const changed = tx.run("UPDATE testrun_runs SET status = 'aborted', finished_at = ?, error = ? WHERE status IN ('pending', 'running')", [at, error]).changes;
      tx.run("UPDATE testrun_triggers SET status = 'aborted', finished_at = ?, error = ? WHERE orchestrated = 1 AND status = 'running'", [at, error]);
      return changed;
    });
  }
}

/** One (device, test) pair of a config's history: its result in each run, newest first. */
export interface HistoryRow {
  device: string;
  mac: string;
  testName: string;
  results: (string | null)[];
}

export interface NewTrigger {
  id: string;
  createdAt: number;
  configName: string;
  suite: string;
  orchestrated: boolean;
}

function insertTrigger(tx: Tx, t: NewTrigger): void {
  tx.run("INSERT INTO testrun_triggers (id, created_at, config_name, test_suite_name, orchestrated, status) VALUES (?, ?, ?, ?, ?, 'running')", [
    t.id,
    t.createdAt,
    t.configName,
    t.suite,
    t.orchestrated ? 1 : 0,
  ]);
}
