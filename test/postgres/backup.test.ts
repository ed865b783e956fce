import { strict as assert } from "node:assert";
import { createHash } from "node:crypto";
import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { describe, test } from "node:test";
import { sql, type Kysely } from "kysely";
import { Database } from "../../src/db/index.ts";
import { postgresQueryLayer } from "../../src/db/query/postgres.ts";
import { runCli } from "../helpers/cli.ts";
import { usePostgres } from "../helpers/postgres.ts";
import { startTestServer, tempDir } from "../helpers/server.ts";
import { uploadOk } from "../update/helpers/packages.ts";

const postgres = usePostgres();

type AnyTables = Kysely<Record<string, Record<string, unknown>>>;
const sha = (data: Uint8Array) => createHash("sha256").update(data).digest("hex");

/** Rows per table of a PostgreSQL database (schema_migrations aside). */
async function postgresCounts(db: AnyTables): Promise<Record<string, number>> {
  const tables = (await sql<{ name: string }>`SELECT table_name AS name FROM information_schema.tables WHERE table_schema = current_schema() AND table_name <> 'schema_migrations' ORDER BY 1`.execute(db)).rows;
  const counts: Record<string, number> = {};
  for (const { name } of tables) counts[name] = Number((await sql<{ n: number }>`SELECT count(*) AS n FROM ${sql.table(name)}`.execute(db)).rows[0].n);
  return counts;
}

/** Rows per table of a stopped embedded data dir (its own tables and schema_migrations aside). */
async function embeddedCounts(dataDir: string): Promise<Record<string, number>> {
  const db = await Database.open(dataDir);
  try {
    const tables = db.all<{ name: string }>("SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite\\_%' ESCAPE '\\' AND name NOT IN ('_labgate_meta', 'schema_migrations') ORDER BY name");
    return Object.fromEntries(tables.map(({ name }) => [name, db.get<{ n: number }>(`SELECT count(*) AS n FROM "${name}"`)!.n]));
  } finally {
    await db.close();
  }
}

/** A stopped embedded data dir with two packages (one large), groups and an approved account's sessions table rows as a start leaves them. */
async function populatedDataDir(): Promise<{ dataDir: string; packages: Array<{ id: number; sha256: string }>; adminToken: string }> {
  const dataDir = tempDir();
  const server = await startTestServer({ database: { url: "" } }, dataDir);
  const packages = [
    await uploadOk(server, { token: server.adminToken, file: Buffer.alloc(200_000, 3), version: "v1" }),
    await uploadOk(server, { token: server.adminToken, file: Buffer.from("second"), version: "v2" }),
  ];
  for (const name of ["lab-a", "lab-b"]) assert.equal((await server.call("POST", "/api/v2/groups", { metadata: { "svc.group.name": name } })).status, 200);
  const adminToken = server.adminToken;
  await server.close();
  return { dataDir, packages, adminToken };
}

describe("one backup format, restorable into either engine", () => {
  test("embedded -> archive -> PostgreSQL: restore --database-url copies every row into the empty database, the data dir keeps the rest and no stale image", async () => {
    const { dataDir, packages } = await populatedDataDir();
    const archive = join(tempDir(), "embedded.tar");
    const backup = await runCli(["backup", "--data-dir", dataDir, "--out", archive]);
    assert.equal(backup.code, 0, backup.stderr);
    const counts = await embeddedCounts(dataDir);

    const url = await postgres.createDatabase("restored");
    const target = join(tempDir(), "restored");
    const restore = await runCli(["restore", "--in", archive, "--data-dir", target, "--database-url", url]);
    assert.equal(restore.code, 0, restore.stderr);
    assert.match(restore.stdout, /^copied \d+ tables, \d+ rows into postgres:\/\/labgate@127\.0\.0\.1:\d+\/restored$/m);
    assert.equal(existsSync(join(target, "labgate.db")), false, "the database is PostgreSQL's now");

    const db = await postgresQueryLayer<Record<string, Record<string, unknown>>>(url);
    assert.deepEqual(await postgresCounts(db), counts);
    // What a download serves: each package's object, in the restored data dir, with the checksum its row holds.
    for (const pkg of packages) {
      const row = await db.selectFrom("packages").select(["sha256", "storage_name"]).where("id", "=", pkg.id).executeTakeFirstOrThrow();
      assert.equal(row.sha256, pkg.sha256);
      assert.equal(sha(readFileSync(join(target, "storage", String(row.storage_name)))), pkg.sha256);
    }
    await db.destroy();

    // Into a database that is not empty: refused, nothing at the target.
    const again = join(tempDir(), "again");
    const refused = await runCli(["restore", "--in", archive, "--data-dir", again, "--database-url", url]);
    assert.equal(refused.code, 1);
    assert.match(refused.stderr, /nothing restored: the PostgreSQL database is not empty/);
    assert.equal(existsSync(again), false);
  });

  test("PostgreSQL -> archive -> embedded: backup --database-url writes the embedded image of PostgreSQL's rows; the restored server serves them and downloads the packages", async () => {
    const { dataDir, packages, adminToken } = await populatedDataDir();
    const url = await postgres.createDatabase("source");
    const copy = await runCli(["db", "copy", "--to", url, "--data-dir", dataDir]);
    assert.equal(copy.code, 0, copy.stderr);
    // A change only PostgreSQL has: the backup must come from it, not from the embedded files beside.
    const db = await postgresQueryLayer<Record<string, Record<string, unknown>>>(url);
    await sql`INSERT INTO groups (created, metadata, priority, policy) SELECT created, '{"svc.group.name": "only-in-postgres"}', priority, policy FROM groups LIMIT 1`.execute(db);
    await sql`DELETE FROM groups WHERE metadata LIKE '%lab-a%'`.execute(db);
    const counts = await postgresCounts(db);
    const maxGroupId = Number((await sql<{ n: number }>`SELECT max(id) AS n FROM groups`.execute(db)).rows[0].n);
    await db.destroy();

    const archive = join(tempDir(), "postgres.tar");
    const backup = await runCli(["backup", "--data-dir", dataDir, "--database-url", url, "--out", archive]);
    assert.equal(backup.code, 0, backup.stderr);
    const target = join(tempDir(), "embedded");
    const restore = await runCli(["restore", "--in", archive, "--data-dir", target], { env: { LABGATE_DATABASE_URL: "" } });
    assert.equal(restore.code, 0, restore.stderr);
    // The backup's own audit entry is in the log it took, on either engine.
    assert.deepEqual(await embeddedCounts(target), { ...counts, audit_log: counts.audit_log + 1 });

    const server = await startTestServer({ database: { url: "" } }, target);
    try {
      const groups = (await server.call("GET", "/api/v2/groups")).body as Array<{ metadata: Record<string, string> }>;
      assert.deepEqual(groups.map((g) => g.metadata["svc.group.name"]).sort(), ["lab-b", "only-in-postgres"]);
      // Ids go on after the highest PostgreSQL gave, as there.
      const made = await server.call("POST", "/api/v2/groups", { metadata: { "svc.group.name": "next" } });
      assert.equal(made.body.id, maxGroupId + 1);
      for (const pkg of packages) {
        const { body } = await server.call("GET", `/api/v1/packages/${pkg.id}/download`);
        const res = await fetch(body.download_url);
        assert.equal(res.status, 200);
        assert.equal(sha(Buffer.from(await res.arrayBuffer())), pkg.sha256);
      }
      assert.equal((await server.request("/api/whoami", { token: adminToken })).status, 200, "the same keys: tokens stay good");
    } finally {
      await server.close();
    }
  });
});
