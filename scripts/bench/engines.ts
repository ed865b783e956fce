/**
 * Which database engines a benchmark runs, one after the other in the same run: `--engine
 * embedded|postgres|both` (or BENCH_ENGINE), the embedded engine by default. PostgreSQL is a
 * throwaway cluster on this machine (test/helpers/postgres.ts) with fsync on, as a deployed one
 * has it, started on first use and stopped at exit; its CPU is counted beside the server's.
 */
import { spawn } from "node:child_process";
import { once } from "node:events";
import { readdirSync, readFileSync } from "node:fs";
import { loadavg } from "node:os";
import type { Store } from "../../src/db/store.ts";
import { startPostgres, type ThrowawayPostgres } from "../../test/helpers/postgres.ts";
import { textFlag } from "./flags.ts";

export type BenchEngine = "embedded" | "postgres";

export function benchEngines(): BenchEngine[] {
  const chosen = textFlag("engine") ?? process.env.BENCH_ENGINE ?? "embedded";
  if (chosen === "both") return ["embedded", "postgres"];
  if (chosen === "embedded" || chosen === "postgres") return [chosen];
  throw new Error(`--engine ${chosen}: expected embedded, postgres or both`);
}

let cluster: Promise<ThrowawayPostgres> | undefined;
let databases = 0;

/** A fresh, empty PostgreSQL database of the run's cluster: its URL. */
export async function benchDatabase(): Promise<string> {
  cluster ??= startPostgres({ durable: true, maxConnections: 100 });
  return (await cluster).createDatabase(`bench${process.pid}_${++databases}`);
}

/** `database.url` for `engine`: "" (the data dir's embedded database) or a fresh PostgreSQL database. */
export const databaseUrlOf = (engine: BenchEngine): Promise<string> => (engine === "postgres" ? benchDatabase() : Promise.resolve(""));

export async function stopBenchPostgres(): Promise<void> {
  const running = cluster;
  cluster = undefined;
  await (await running)?.stop();
}

/** CPU seconds (user + system) of a process, with its waited-for children's when `children` (/proc, USER_HZ = 100). */
function cpuOf(pid: number, children = false): number {
  try {
    const fields = readFileSync(`/proc/${pid}/stat`, "utf8").replace(/^.*\) /, "").split(" ");
    const own = Number(fields[11]) + Number(fields[12]);
    return (children ? own + Number(fields[13]) + Number(fields[14]) : own) / 100;
  } catch {
    return 0; // gone meanwhile
  }
}

/** CPU seconds PostgreSQL has used so far: the postmaster, its live backends and those that ended; 0 without a cluster. */
export async function postgresCpuSeconds(): Promise<number> {
  const pid = (await cluster)?.pid();
  if (pid === undefined) return 0;
  let total = cpuOf(pid, true);
  for (const entry of readdirSync("/proc")) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const stat = readFileSync(`/proc/${entry}/stat`, "utf8").replace(/^.*\) /, "").split(" ");
      if (Number(stat[1]) === pid) total += cpuOf(Number(entry));
    } catch {
      continue;
    }
  }
  return total;
}

/**
 * Inserts `count` bare devices (name = MAC, MACs counted up from `firstMac`, `metadata` JSON) through the store, on
 * either engine, in one transaction; their ids and MACs in id order.
 */
export async function seedDevices(store: Store, count: number, firstMac: number, metadata = "{}"): Promise<Array<{ id: number; mac_address: string }>> {
  const now = new Date().toISOString();
  const macs = Array.from({ length: count }, (_, i) => (firstMac + i).toString(16).padStart(12, "0").match(/../g)!.join(":"));
  await store.transact(async (tx) => {
    for (let at = 0; at < macs.length; at += 1000) {
      await tx
        .insertInto("devices")
        .values(macs.slice(at, at + 1000).map((mac) => ({ created: now, name: mac, mac_address: mac, capabilities: "{}", metadata })))
        .execute();
    }
  });
  const rows = await store.query.selectFrom("devices").select(["id", "mac_address"]).where("mac_address", "in", macs).orderBy("id").execute();
  return rows.map((r) => ({ id: Number(r.id), mac_address: r.mac_address }));
}

/** What a PostgreSQL database has done so far (its statistics views): transactions committed, rows read, scans per table. */
export interface PostgresActivity {
  transactions: number;
  rowsRead: number;
  scans: Record<string, { seq: number; index: number; written: number }>;
}

export async function postgresActivity(url: string): Promise<PostgresActivity> {
  const { default: pg } = await import("pg");
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try {
    // Statistics are sent by backends at the end of each transaction, at most every second: wait for them.
    await client.query("SELECT pg_stat_clear_snapshot()");
    await new Promise((resolve) => setTimeout(resolve, 1100));
    const db = (await client.query("SELECT xact_commit::float8 AS t, (tup_returned + tup_fetched)::float8 AS r FROM pg_stat_database WHERE datname = current_database()")).rows[0];
    const tables = (await client.query("SELECT relname, coalesce(seq_scan, 0)::float8 AS seq, coalesce(idx_scan, 0)::float8 AS idx, (n_tup_ins + n_tup_upd + n_tup_del)::float8 AS w FROM pg_stat_user_tables")).rows;
    return { transactions: db.t, rowsRead: db.r, scans: Object.fromEntries(tables.map((t) => [t.relname, { seq: t.seq, index: t.idx, written: t.w }])) };
  } finally {
    await client.end();
  }
}

/** `after - before` per request, as one line: transactions, rows read, and the tables scanned or written. */
export function activityPerRequest(before: PostgresActivity, after: PostgresActivity, requests: number): string {
  const per = (n: number) => (n / requests).toFixed(2);
  const tables = Object.entries(after.scans)
    .map(([name, s]) => {
      const b = before.scans[name] ?? { seq: 0, index: 0, written: 0 };
      return { name, seq: s.seq - b.seq, index: s.index - b.index, written: s.written - b.written };
    })
    .filter((t) => t.seq + t.index + t.written > 0)
    .map((t) => `${t.name} ${per(t.seq)} seq/${per(t.index)} index scans, ${per(t.written)} rows written`);
  return `PostgreSQL per request: ${per(after.transactions - before.transactions)} transactions, ${per(after.rowsRead - before.rowsRead)} rows read; ${tables.join("; ") || "no table touched"}`;
}

/**
 * With more than one engine chosen, runs this benchmark again once per engine (`--engine E`, its
 * other arguments as given), one after the other, each one's output under a heading; true when it
 * did (the caller then has nothing left to do). One engine: false, and the caller measures it.
 */
export async function runPerEngine(): Promise<boolean> {
  const engines = benchEngines();
  if (engines.length < 2) return false;
  const given = process.argv.slice(2);
  const at = given.indexOf("--engine");
  const rest = at >= 0 ? [...given.slice(0, at), ...given.slice(at + 2)] : given;
  for (const engine of engines) {
    console.log(`\n=== ${engine} (load average ${loadavg().map((l) => l.toFixed(2)).join(" ")}) ===`);
    const child = spawn(process.execPath, [...process.execArgv, process.argv[1], ...rest, "--engine", engine], { stdio: "inherit", env: { ...process.env, BENCH_ENGINE: engine } });
    const [code] = await once(child, "exit");
    if (code !== 0) throw new Error(`the ${engine} run exited with ${code}`);
  }
  return true;
}
