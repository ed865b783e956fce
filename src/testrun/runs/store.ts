import type { Selectable, UpdateQueryBuilder, UpdateResult } from "kysely";
import type { Tables, TestrunRunsTable, TestrunTriggersTable } from "../../db/schema.ts";
import type { Queries, Store, Tx } from "../../db/store.ts";
import type { TestPlan } from "../plan.ts";
import type { DeviceProgress, RunCounts, TriggerStatus } from "../schema.ts";
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
  /** Its report's cases by status, kept when it ended; null before then, or when it ended without them. */
  counts: RunCounts | null;
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

type RunRow = Omit<Selectable<TestrunRunsTable>, "plan">;
type TriggerRow = Selectable<TestrunTriggersTable>;

const RUN_COLUMNS = [
  "seq",
  "id",
  "trigger_id",
  "config_name",
  "test_suite_name",
  "machine_target",
  "overrides",
  "pattern",
  "repeat_of",
  "status",
  "created_at",
  "started_at",
  "finished_at",
  "metadata",
  "error",
  "warnings",
  "abort_requested",
  "devices",
  "passed",
  "failed",
  "skipped",
] as const;

const RESULT_ROWS_PER_STATEMENT = 500;

/** The statuses a run is in before it ends (a final one is never changed). */
const UNFINISHED: RunStatus[] = ["pending", "running"];

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
  status: r.status as RunStatus,
  createdAt: r.created_at,
  startedAt: r.started_at,
  finishedAt: r.finished_at,
  metadata: JSON.parse(r.metadata),
  error: r.error,
  warnings: JSON.parse(r.warnings),
  abortRequested: r.abort_requested === 1,
  devices: r.devices === null ? null : JSON.parse(r.devices),
  counts: r.passed === null || r.failed === null || r.skipped === null ? null : { passed: r.passed, failed: r.failed, skipped: r.skipped },
});

const toTrigger = (r: TriggerRow): TriggerRecord => ({
  seq: r.seq,
  id: r.id,
  createdAt: r.created_at,
  configName: r.config_name,
  suite: r.test_suite_name,
  orchestrated: r.orchestrated === 1,
  status: r.status as TriggerStatus,
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

/** What changed: a run or trigger (created or updated, with its record as written), or a run whose record was deleted. */
export type RunChange = { kind: "run"; id: string; run: RunRecord } | { kind: "trigger"; id: string; trigger: TriggerRecord } | { kind: "run-deleted"; id: string };

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

/** Run and trigger records in the database; writes resolve once committed. */
export class RunStore {
  private readonly store: Store;
  private readonly changed: (change: RunChange) => void;
  /** `changed` hears of every write once it is committed (the live run stream listens). */
  constructor(store: Store, changed: (change: RunChange) => void = () => {}) {
    this.store = store;
    this.changed = changed;
  }

  private get q(): Queries {
    return this.store.query;
  }

  private runs(q: Queries = this.q) {
    return q.selectFrom("testrun_runs").select(RUN_COLUMNS);
  }

  async listRuns(): Promise<RunRecord[]> {
    return (await this.runs().orderBy("seq").execute()).map(toRun);
  }

  /** One page of the runs matching `query`, and how many match in all. */
  async queryRuns(query: RunQuery): Promise<{ runs: RunRecord[]; total: number }> {
    let matching = this.q.selectFrom("testrun_runs");
    if (query.configName !== undefined) matching = matching.where("config_name", "=", query.configName);
    if (query.triggerId !== undefined) matching = matching.where("trigger_id", "=", query.triggerId);
    if (query.statuses && query.statuses.length > 0) matching = matching.where("status", "in", query.statuses);
    const counted = await matching.select((eb) => eb.fn.countAll<number>().as("n")).executeTakeFirst();
    let page = matching.select(RUN_COLUMNS).orderBy("seq", query.newestFirst ? "desc" : "asc");
    // SQLite takes an OFFSET only after a LIMIT.
    if (query.limit !== undefined || query.offset) page = page.limit(query.limit ?? Number.MAX_SAFE_INTEGER);
    if (query.offset) page = page.offset(query.offset);
    return { runs: (await page.execute()).map(toRun), total: Number(counted?.n ?? 0) };
  }

  async getRun(id: string): Promise<RunRecord | undefined> {
    const row = await this.runs().where("id", "=", id).executeTakeFirst();
    return row && toRun(row);
  }

  async getRunBySeq(seq: number): Promise<RunRecord | undefined> {
    const row = await this.runs().where("seq", "=", seq).executeTakeFirst();
    return row && toRun(row);
  }

  async runsOfTrigger(triggerId: string): Promise<RunRecord[]> {
    return (await this.runs().where("trigger_id", "=", triggerId).orderBy("seq").execute()).map(toRun);
  }

  async runsWithStatus(...statuses: RunStatus[]): Promise<RunRecord[]> {
    if (statuses.length === 0) return [];
    return (await this.runs().where("status", "in", statuses).orderBy("seq").execute()).map(toRun);
  }

  async planOf(id: string): Promise<TestPlan | undefined> {
    const row = await this.q.selectFrom("testrun_runs").select("plan").where("id", "=", id).executeTakeFirst();
    return row && (JSON.parse(row.plan) as TestPlan);
  }

  async listTriggers(): Promise<TriggerRecord[]> {
    return (await this.q.selectFrom("testrun_triggers").selectAll().orderBy("seq").execute()).map(toTrigger);
  }

  async getTrigger(id: string): Promise<TriggerRecord | undefined> {
    const row = await this.q.selectFrom("testrun_triggers").selectAll().where("id", "=", id).executeTakeFirst();
    return row && toTrigger(row);
  }

  /** Creates the run (and its trigger when new) in one transaction. */
  async createRun(run: NewRun, trigger?: Omit<NewTrigger, "id">): Promise<RunRecord> {
    const created = await this.store.transact(async (tx) => {
      const exists = await tx.selectFrom("testrun_triggers").select("id").where("id", "=", run.triggerId).executeTakeFirst();
      const newTrigger = trigger && !exists ? await insertTrigger(tx, { ...trigger, id: run.triggerId }) : undefined;
      const row = await tx
        .insertInto("testrun_runs")
        .values({
          id: run.id,
          trigger_id: run.triggerId,
          config_name: run.configName,
          test_suite_name: run.suite,
          machine_target: run.machineTarget,
          overrides: run.overrides === null ? null : JSON.stringify(run.overrides),
          pattern: run.pattern,
          repeat_of: run.repeatOf,
          status: run.status ?? "pending",
          created_at: run.createdAt,
          finished_at: run.status === "aborted" ? run.createdAt : null,
          warnings: JSON.stringify(run.warnings),
          plan: JSON.stringify(run.plan),
          devices: run.devices ? JSON.stringify(run.devices) : null,
        })
        .returning(RUN_COLUMNS)
        .executeTakeFirstOrThrow();
      return { run: toRun(row), trigger: newTrigger };
    });
    if (created.trigger) this.changed({ kind: "trigger", id: created.trigger.id, trigger: created.trigger });
    this.changed({ kind: "run", id: run.id, run: created.run });
    return created.run;
  }

  /** Creates the trigger; undefined when one with its id exists. */
  async createTrigger(trigger: NewTrigger): Promise<TriggerRecord | undefined> {
    const created = await this.store.transact(async (tx) => {
      if (await tx.selectFrom("testrun_triggers").select("id").where("id", "=", trigger.id).executeTakeFirst()) return undefined;
      return insertTrigger(tx, trigger);
    });
    if (created) this.changed({ kind: "trigger", id: trigger.id, trigger: created });
    return created;
  }

  /**
   * Moves a pending run to `running`: the one step that takes it, so a run aborted meanwhile is
   * never started. False when it was no longer pending.
   */
  async markRunning(id: string, at: number): Promise<boolean> {
    return this.updated(this.q.updateTable("testrun_runs").set({ status: "running", started_at: at }).where("id", "=", id).where("status", "=", "pending"));
  }

  /**
   * Moves a run to a final state, from one of `from` (pending or running by default: a final
   * state is never changed). False when it was in none of them.
   */
  async finishRun(
    id: string,
    fields: { status: RunStatus; at: number; error?: string | null; metadata?: Record<string, string | null>; warnings?: string[]; counts?: RunCounts },
    from: RunStatus[] = UNFINISHED,
  ): Promise<boolean> {
    const set = {
      status: fields.status,
      finished_at: fields.at,
      ...(fields.error !== undefined ? { error: fields.error } : {}),
      ...(fields.metadata ? { metadata: JSON.stringify(fields.metadata) } : {}),
      ...(fields.warnings ? { warnings: JSON.stringify(fields.warnings) } : {}),
      ...(fields.counts ? { passed: fields.counts.passed, failed: fields.counts.failed, skipped: fields.counts.skipped } : {}),
    };
    return this.updated(this.q.updateTable("testrun_runs").set(set).where("id", "=", id).where("status", "in", from));
  }

  /** Runs the update of one run; whether it changed the run (then heard of with the record it left). */
  private async updated(update: UpdateQueryBuilder<Tables, "testrun_runs", "testrun_runs", UpdateResult>): Promise<boolean> {
    const row = await update.returning(RUN_COLUMNS).executeTakeFirst();
    if (row) this.changed({ kind: "run", id: row.id, run: toRun(row) });
    return row !== undefined;
  }

  /** A device run's progress (how far each device got). */
  async setDevices(id: string, devices: DeviceProgress[]): Promise<void> {
    await this.updated(this.q.updateTable("testrun_runs").set({ devices: JSON.stringify(devices) }).where("id", "=", id));
  }

  /** Each case's result on one device of a run (test name -> status), for the config's history. */
  async saveDeviceResults(run: Pick<RunRecord, "seq" | "id" | "configName">, device: { mac: string; name: string }, results: Map<string, string>): Promise<void> {
    if (results.size === 0) return;
    const rows = [...results].map(([testName, status]) => ({
      run_seq: run.seq,
      run_id: run.id,
      config_name: run.configName,
      device_mac: device.mac,
      device_name: device.name,
      test_name: testName,
      status,
    }));
    // In slices, so that no statement has more parameters than an engine binds.
    await this.store.transact(async (tx) => {
      for (let i = 0; i < rows.length; i += RESULT_ROWS_PER_STATEMENT) {
        await tx
          .insertInto("testrun_device_results")
          .values(rows.slice(i, i + RESULT_ROWS_PER_STATEMENT))
          .onConflict((oc) =>
            oc.columns(["run_seq", "device_mac", "test_name"]).doUpdateSet((eb) => ({
              run_id: eb.ref("excluded.run_id"),
              config_name: eb.ref("excluded.config_name"),
              device_name: eb.ref("excluded.device_name"),
              status: eb.ref("excluded.status"),
            })),
          )
          .execute();
      }
    });
  }

  /**
   * A config's history (the newest `runs` runs on devices): those runs, newest first, and one
   * page of its (device, test) pairs with the result in each of those runs (null: not run there).
   * With `macs`, only the results of those devices count.
   */
  async deviceHistory(configName: string, runs: number, page: { limit: number; offset: number }, macs?: ReadonlySet<string>): Promise<{ runs: RunRecord[]; total: number; rows: HistoryRow[] }> {
    if (macs?.size === 0) return { runs: [], total: 0, rows: [] };
    let ofConfig = this.q.selectFrom("testrun_device_results").where("config_name", "=", configName);
    if (macs) ofConfig = ofConfig.where("device_mac", "in", [...macs]);
    const seqs = (await ofConfig.select("run_seq").distinct().orderBy("run_seq", "desc").limit(runs).execute()).map((r) => r.run_seq);
    if (seqs.length === 0) return { runs: [], total: 0, rows: [] };
    const inRuns = ofConfig.where("run_seq", "in", seqs);
    const counted = await this.q
      .selectFrom(inRuns.select(["device_mac", "test_name"]).distinct().as("pairs"))
      .select((eb) => eb.fn.countAll<number>().as("n"))
      .executeTakeFirst();
    const pairs = await inRuns
      .select((eb) => ["device_mac", "test_name", eb.fn.max("device_name").as("device_name")])
      .groupBy(["device_mac", "test_name"])
      .orderBy((eb) => eb.fn.max("device_name"))
      .orderBy("device_mac")
      .orderBy("test_name")
      .limit(page.limit)
      .offset(page.offset)
      .execute();
    const results = new Map<string, Map<number, string>>();
    if (pairs.length > 0) {
      const found = await inRuns
        .where("device_mac", "in", [...new Set(pairs.map((p) => p.device_mac))])
        .where("test_name", "in", [...new Set(pairs.map((p) => p.test_name))])
        .select(["run_seq", "device_mac", "test_name", "status"])
        .execute();
      for (const r of found) {
        const key = `${r.device_mac}\n${r.test_name}`;
        results.set(key, (results.get(key) ?? new Map()).set(r.run_seq, r.status));
      }
    }
    const rows: HistoryRow[] = pairs.map((p) => {
      const of = results.get(`${p.device_mac}\n${p.test_name}`);
      return { device: p.device_name, mac: p.device_mac, testName: p.test_name, results: seqs.map((seq) => of?.get(seq) ?? null) };
    });
    const records = new Map((await this.runs().where("seq", "in", seqs).execute()).map((r) => [r.seq, toRun(r)]));
    return { runs: seqs.map((seq) => records.get(seq)).filter((r): r is RunRecord => r !== undefined), total: Number(counted?.n ?? 0), rows };
  }

  /** Marks a running run as being aborted (its processes are signalled). */
  async setAbortRequested(id: string): Promise<void> {
    await this.updated(this.q.updateTable("testrun_runs").set({ abort_requested: 1 }).where("id", "=", id).where("status", "=", "running"));
  }

  async updateTrigger(id: string, fields: Partial<Pick<TriggerRecord, "status" | "isAborted" | "error" | "nodes" | "remoteRuns" | "finishedAt" | "resultsDir">>): Promise<void> {
    const set = {
      ...(fields.status !== undefined ? { status: fields.status } : {}),
      ...(fields.isAborted !== undefined ? { is_aborted: fields.isAborted ? 1 : 0 } : {}),
      ...(fields.error !== undefined ? { error: fields.error } : {}),
      ...(fields.nodes !== undefined ? { nodes: JSON.stringify(fields.nodes) } : {}),
      ...(fields.remoteRuns !== undefined ? { remote_runs: JSON.stringify(fields.remoteRuns) } : {}),
      ...(fields.finishedAt !== undefined ? { finished_at: fields.finishedAt } : {}),
      ...(fields.resultsDir !== undefined ? { results_dir: fields.resultsDir } : {}),
    };
    if (Object.keys(set).length === 0) return;
    const row = await this.q.updateTable("testrun_triggers").set(set).where("id", "=", id).returningAll().executeTakeFirst();
    if (row) this.changed({ kind: "trigger", id, trigger: toTrigger(row) });
  }

  /**
   * Deletes the record of a run in a final state (its report and artifacts are the caller's);
   * a trigger left without runs and not orchestrated goes with it. False when there was none.
   */
  async deleteRun(id: string): Promise<boolean> {
    const done = await this.store.transact(async (tx) => {
      const run = await tx.selectFrom("testrun_runs").select("trigger_id").where("id", "=", id).executeTakeFirst();
      if (!run) return false;
      const deleted = await tx.deleteFrom("testrun_runs").where("id", "=", id).where("status", "in", ["finished", "failed", "aborted"]).executeTakeFirst();
      if (deleted.numDeletedRows === 0n) return false;
      await tx.deleteFrom("testrun_device_results").where("run_id", "=", id).execute();
      await tx
        .deleteFrom("testrun_triggers")
        .where("id", "=", run.trigger_id)
        .where("orchestrated", "=", 0)
        .where((eb) => eb.not(eb.exists(eb.selectFrom("testrun_runs").select("id").where("trigger_id", "=", run.trigger_id))))
        .execute();
      return true;
    });
    if (done) this.changed({ kind: "run-deleted", id });
    return done;
  }

  /** At start-up: runs that were pending or running become aborted; so do orchestrations. */
  async abortUnfinished(at: number, error: string): Promise<number> {
    const unfinished =
      (await this.q.selectFrom("testrun_runs").select("id").where("status", "in", UNFINISHED).limit(1).executeTakeFirst()) ??
      (await this.q.selectFrom("testrun_triggers").select("id").where("orchestrated", "=", 1).where("status", "=", "running").limit(1).executeTakeFirst());
    if (!unfinished) return 0; // nothing to journal on a clean start
    return this.store.transact(async (tx) => {
      const changed = await tx.updateTable("testrun_runs").set({ status: "aborted", finished_at: at, error }).where("status", "in", UNFINISHED).executeTakeFirst();
      await tx.updateTable("testrun_triggers").set({ status: "aborted", finished_at: at, error }).where("orchestrated", "=", 1).where("status", "=", "running").execute();
      return Number(changed.numUpdatedRows);
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

async function insertTrigger(tx: Tx, t: NewTrigger): Promise<TriggerRecord> {
  const row = await tx
    .insertInto("testrun_triggers")
    .values({ id: t.id, created_at: t.createdAt, config_name: t.configName, test_suite_name: t.suite, orchestrated: t.orchestrated ? 1 : 0, status: "running" })
    .returningAll()
    .executeTakeFirstOrThrow();
  return toTrigger(row);
}
