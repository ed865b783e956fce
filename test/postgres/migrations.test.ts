import { strict as assert } from "node:assert";
import { describe, test } from "node:test";
import type { Kysely } from "kysely";
import { Database, migrate, migrations } from "../../src/db/index.ts";
import { migratePostgres } from "../../src/db/query/postgres-schema.ts";
import { postgresQueryLayer } from "../../src/db/query/postgres.ts";
import { transact } from "../../src/db/query/transaction.ts";
import { embeddedStore } from "../../src/db/store.ts";
import { usePostgres } from "../helpers/postgres.ts";
import { startTestServer, tempDir, type TestServer } from "../helpers/server.ts";

type Row = Record<string, string | number | null | Uint8Array>;
type AnyTables = Record<string, Row>;

const NOW = new Date();
const T = NOW.toISOString();
const LATER = new Date(NOW.getTime() + 86_400_000).toISOString();
const MS = NOW.getTime();
const MAC = "02:00:00:00:00:01";

/**
 * What a gateway at each schema version held: rows of the tables that step made, inserted right
 * after it in the columns the table has then (ids start at 1 on a fresh database of either engine).
 * Times are now's, so that nothing a start expires (registrations, progress, audit retention) goes.
 */
const ROWS_OF_STEP: Record<number, Array<[table: string, row: Row]>> = {
  1: [["settings", { key: "migration.probe", value: "kept" }]],
  2: [
    ["testrun_triggers", { id: "trigger-1", created_at: MS, config_name: "smoke", test_suite_name: "boot", status: "finished", finished_at: MS }],
    ["testrun_runs", { id: "run-1", trigger_id: "trigger-1", config_name: "smoke", test_suite_name: "boot", status: "finished", created_at: MS, started_at: MS, finished_at: MS, plan: "{}" }],
  ],
  3: [
    ["devices", { created: T, name: "board-a", mac_address: MAC, public_key: null, key_fingerprint: null, capabilities: "{}", metadata: '{"site":"lab"}', last_access: T }],
    ["device_tags", { device_id: 1, tag: "rack-1" }],
    ["registrations", { mac_address: "02:00:00:00:00:09", key_fingerprint: "fp-9", public_key: "key-9", metadata: "{}", last_appeared: T }],
    ["permissions", { created: T, user_id: "alice", resource: "device", resource_id: 1, resource_name: null, permission: "read" }],
  ],
  4: [
    ["packages", { created: T, sha256: "ab".repeat(32), driver: "local", metadata: '{"svc.software.version":"v1","svc.hardware.devtype":"board"}', storage_dir: "", storage_name: "object-1", size: 3, version: "v1", devtype: "board", created_by: "admin" }],
    ["packages", { created: T, sha256: "cd".repeat(32), driver: "local", metadata: '{"svc.software.version":"v2","svc.hardware.devtype":"board","requires:svc.software.version":"v1","svc.delta.target":"1","svc.delta.base":"1"}', storage_dir: "", storage_name: "object-2", size: 2, version: "v2", devtype: "board", created_by: "admin" }],
    ["groups", { created: T, metadata: '{"name":"lab-a"}', policy: "no_update,", priority: 25, created_by: "admin" }],
    ["group_devices", { group_id: 1, device_id: 1 }],
    ["group_packages", { group_id: 1, package_id: 1 }],
    ["progress", { device_id: 1, mac_address: MAC, created: T, version: "v1", progress: 50 }],
  ],
  5: [["action_log", { id: "action-1", mac_address: MAC, action_id: "noop", created: T, status: "success", status_code: 0, output_key: null, finished: T }]],
  8: [
    ["revoked_tokens", { jti: "jti-1", revoked: T, expires: Math.floor(MS / 1000) + 86_400 }],
    ["revoked_users", { user_id: "Mallory", before_ms: MS, revoked: T }],
  ],
  9: [["accounts", { name: "alice", password_hash: "scrypt$16384$8$1$c2FsdA$aGFzaA", scopes: "admin_ro", created: T }]],
  10: [["device_logs", { device_id: 1, created: T, device_timestamp: T, name: "boot", entry: "hello" }]],
  12: [["action_log", { id: "action-2", mac_address: MAC, action_id: "noop", created: T, status: "success", status_code: 0, finished: T, output: new TextEncoder().encode("done") }]],
  16: [
    ["deployments", { group_id: 1, version: "v1", status: "completed", phases: "[1]", current_phase: 0, phase_started: JSON.stringify([T]), device_timeout: 3600, created: T, created_by: "admin", started: T, finished: T, updated: T }],
    ["deployment_devices", { deployment_id: 1, device_id: 1, phase: 0, position: 0, state: "installed", progress: 100, from_version: "v0", to_version: "v1", updated: T }],
  ],
  17: [["update_history", { device_id: 1, deployment_id: 1, from_version: "v0", to_version: "v1", outcome: "installed", at: T }]],
  18: [["audit_log", { time: T, actor_kind: "account", actor: "admin", client: "127.0.0.1", action: "group.create", target: "group:1", outcome: "ok", detail: '{"name":"lab-a"}' }]],
  20: [["testrun_device_results", { run_seq: 1, run_id: "run-1", config_name: "smoke", device_mac: MAC, device_name: "board-a", test_name: "boots", status: "passed" }]],
  29: [
    ["lab_power", { device_id: 1, state: "on", action: "on", actor: "admin", at: T }],
    ["lab_reservations", { device_id: 1, holder: "alice", note: "flashing", since: T, until: LATER }],
    ["lab_boards", { key: "02:00:00:00:00:02", config: '{"device":"02:00:00:00:00:02"}', updated: T, actor: "admin" }],
  ],
  30: [["lab_console_spans", { history_id: 1, device_id: 1, start: 0, end: 5, bytes: new TextEncoder().encode("login"), at: T }]],
  32: [["lab_open_spans", { device_id: 1, deployment_id: 1, attempt: 1, start: 0, recovered: null }]],
  33: [
    ["ddi_targets", { controller_id: MAC, device_id: 1, token_sha256: "cd".repeat(32), created: T, token_set: T }],
    ["ddi_actions", { device_id: 1, deployment_id: 1, attempt: 1, package_id: 1, version: "v1", state: "closed", result: "success", created: T, updated: T }],
    ["ddi_artifacts", { package_id: 1, sha1: "ef".repeat(20), md5: "01".repeat(16) }],
  ],
  36: [
    ["cluster_nodes", { name: "gw-1", instance: "i-1", advertise_url: "http://127.0.0.1:8080", version: "0.1.0", started_at: MS, heartbeat_at: MS, stopped: 1, session_pid: null }],
    ["cluster_devices", { mac_address: MAC, node: "gw-1", instance: "i-1" }],
  ],
};

const versions = migrations.map((m) => m.version).sort((a, b) => a - b);
const newest = versions.at(-1)!;
const earlier = versions.slice(0, -1);
const stepsUpTo = (version: number) => migrations.filter((m) => m.version <= version);
const rowsUpTo = (version: number) => Object.entries(ROWS_OF_STEP).filter(([step]) => Number(step) <= version).flatMap(([, rows]) => rows);

/** A value as both engines read it back: bytes as hex, numbers as text. */
const comparable = (value: unknown) => (value instanceof Uint8Array ? `bytes:${Buffer.from(value).toString("hex")}` : value === null || value === undefined ? null : String(value));

async function insertRows(run: (fn: (db: Kysely<AnyTables>) => Promise<void>) => Promise<void>, rows: Array<[string, Row]>) {
  await run(async (db) => {
    for (const [table, row] of rows) await db.insertInto(table).values(row).execute();
  });
}

/** A database left at schema `version` with the rows of every step up to it; the server to open it with. */
const leftAt: Record<"embedded" | "postgres", (version: number) => Promise<() => Promise<TestServer>>> = {
  async embedded(version) {
    const dir = tempDir();
    const db = await Database.open(dir);
    await migrate(db, stepsUpTo(version));
    const store = embeddedStore(db);
    await insertRows((fn) => store.transact((tx) => fn(tx as unknown as Kysely<AnyTables>)), rowsUpTo(version));
    await store.close();
    await db.close();
    return () => startTestServer({ database: { url: "" } }, dir);
  },
  async postgres(version) {
    const url = await postgres.createDatabase(`schema${version}`);
    const db = await postgresQueryLayer<AnyTables>(url);
    await migratePostgres(db, stepsUpTo(version));
    await insertRows((fn) => transact(db, (tx) => fn(tx)), rowsUpTo(version));
    await db.destroy();
    return () => startTestServer({ database: { url } });
  },
};

const postgres = usePostgres();

test("every table of the newest schema has rows in this test's earlier schemas", async () => {
  const db = await Database.open(tempDir());
  await migrate(db, migrations);
  const tables = db.all<{ name: string }>("SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' AND name NOT LIKE '\\_labgate%' ESCAPE '\\' ORDER BY name").map((t) => t.name);
  await db.close();
  const covered = new Set(rowsUpTo(newest).map(([table]) => table));
  // The migrations fill these themselves.
  const missing = tables.filter((t) => !covered.has(t) && t !== "schema_migrations" && t !== "access_generation");
  assert.deepEqual(missing, [], "a new table needs its rows in ROWS_OF_STEP");
});

for (const engine of ["embedded", "postgres"] as const) {
  describe(`${engine}: a database left at every earlier schema, opened by this server`, () => {
    for (const version of earlier) {
      test(`schema ${version}: migrated to ${newest}, every row kept and served`, async () => {
        const open = await leftAt[engine](version);
        const server = await open();
        try {
          const health = await server.call<{ database: { engine: string; schema_version: number } }>("GET", "/api/health");
          assert.equal(health.body.database.engine, engine);
          assert.equal(health.body.database.schema_version, newest);
          const applied = await server.db.all<{ version: number }>("SELECT version FROM schema_migrations ORDER BY version");
          assert.deepEqual(applied.map((r) => Number(r.version)), versions);

          for (const [table, row] of rowsUpTo(version)) {
            const stored = await server.db.all(`SELECT * FROM ${table}`);
            const kept = stored.some((s) => Object.entries(row).every(([column, value]) => comparable(s[column]) === comparable(value)));
            assert.ok(kept, `${table}: ${JSON.stringify(row)} is not kept; the table holds ${JSON.stringify(stored)}`);
          }
          // What the later steps compute for the rows that were there before them.
          if (version >= 4 && version < 6) assert.equal((await server.db.get<{ updated: string }>("SELECT updated FROM progress WHERE device_id = 1"))?.updated, T);
          if (version >= 10 && version < 15) assert.equal(Number((await server.db.get<{ bytes: number }>("SELECT bytes FROM device_logs"))?.bytes), 9);
          if (version >= 3 && version < 31) assert.equal(Number((await server.db.get<{ seq: number }>("SELECT seq FROM registrations"))?.seq), 1);
          if (version >= 4 && version < 37) {
            const deltas = await server.db.all<{ id: number; delta_target: number | null; delta_base_version: string | null }>("SELECT id, delta_target, delta_base_version FROM packages ORDER BY id");
            assert.deepEqual(deltas.map((r) => [Number(r.id), r.delta_target === null ? null : Number(r.delta_target), r.delta_base_version]), [[1, null, null], [2, 1, "v1"]]);
          }

          // The server answers from them.
          if (version >= 3) {
            const device = await server.call("GET", "/api/v2/devices/1");
            assert.equal(device.status, 200, JSON.stringify(device.body));
            assert.equal(device.body.name, "board-a");
            const pending = await server.call<Array<{ mac_address: string }>>("GET", "/api/v1/auth/pending");
            assert.deepEqual(pending.body.map((p) => p.mac_address), ["02:00:00:00:00:09"]);
          }
          if (version >= 4) {
            const groups = await server.call<Array<{ id: number; metadata: { name?: string } }>>("GET", "/api/v2/groups");
            assert.deepEqual(groups.body.map((g) => [g.id, g.metadata.name]), [[1, "lab-a"]]);
            const packages = await server.call<Array<{ id: number; sha256: string }>>("GET", "/api/v1/packages");
            assert.deepEqual(packages.body.map((p) => [p.id, p.sha256]), [[1, "ab".repeat(32)], [2, "cd".repeat(32)]]);
          }
          if (version >= 16) {
            const deployment = await server.call("GET", "/api/v2/deployments/1");
            assert.equal(deployment.status, 200, JSON.stringify(deployment.body));
            assert.equal(deployment.body.status, "completed");
          }
          // A write after the migration takes the next id, on either engine.
          const created = await server.call<{ id: number }>("POST", "/api/v2/groups", { metadata: { name: "after" } });
          assert.equal(created.status, 200, JSON.stringify(created.body));
          assert.equal(created.body.id, version >= 4 ? 2 : 1);
        } finally {
          await server.close();
        }
      });
    }
  });
}
