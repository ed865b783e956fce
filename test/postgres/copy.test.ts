import { strict as assert } from "node:assert";
import { createHash } from "node:crypto";
import { readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { describe, test } from "node:test";
import { sql } from "kysely";
import { postgresQueryLayer } from "../../src/db/query/postgres.ts";
import { runCli } from "../helpers/cli.ts";
import { usePostgres } from "../helpers/postgres.ts";
import { startTestServer, tempDir } from "../helpers/server.ts";
import { uploadOk } from "../update/helpers/packages.ts";

const postgres = usePostgres();

/** Every file of the data dir with its SHA-256 (the lock aside, which the command takes and gives back). */
const filesOf = (dir: string) =>
  Object.fromEntries(
    readdirSync(dir, { recursive: true, withFileTypes: true })
      .filter((e) => e.isFile() && e.name !== "labgate.lock")
      .map((e) => {
        const path = join(e.parentPath, e.name);
        return [path.slice(dir.length), createHash("sha256").update(readFileSync(path)).digest("hex")];
      }),
  );

describe("labgate db copy", () => {
  test("copies a stopped embedded database whole: one line per table, counts that match, ids that go on, the data dir untouched", async () => {
    const dataDir = tempDir();
    const server = await startTestServer({ database: { url: "" } }, dataDir);
    const pkg = await uploadOk(server, { token: server.adminToken, version: "v7" });
    for (const name of ["lab-a", "lab-b"]) assert.equal((await server.call("POST", "/api/v2/groups", { metadata: { "svc.group.name": name } })).status, 200);
    await server.close();
    const before = filesOf(dataDir);

    const url = await postgres.createDatabase("copied");
    const copy = await runCli(["db", "copy", "--to", url, "--data-dir", dataDir]);
    assert.equal(copy.code, 0, copy.stderr);
    assert.deepEqual(filesOf(dataDir), before, "the embedded files are as they were");
    const lines = copy.stdout.trim().split("\n");
    assert.match(lines.at(-1)!, /^copied \d+ tables, \d+ rows, into postgres:\/\/labgate@127\.0\.0\.1:\d+\/copied; the embedded files are unchanged$/);

    const db = await postgresQueryLayer<Record<string, Record<string, unknown>>>(url);
    const counts = Object.fromEntries(lines.slice(0, -1).map((line) => line.match(/^(\w+): (\d+) rows$/)!.slice(1)).map(([t, n]) => [t, Number(n)]));
    assert.equal(counts.packages, 1);
    assert.equal(counts.groups, 2);
    for (const [table, rows] of Object.entries(counts)) {
      assert.equal(Number((await sql<{ n: string }>`SELECT count(*) AS n FROM ${sql.table(table)}`.execute(db)).rows[0].n), rows, table);
    }
    const copiedPackage = await db.selectFrom("packages").selectAll().where("id", "=", pkg.id).executeTakeFirstOrThrow();
    assert.equal(copiedPackage.sha256, pkg.sha256);
    // The next id PostgreSQL gives follows the ones copied.
    const next = await sql<{ id: number }>`INSERT INTO groups (created, metadata, priority, policy) SELECT created, '{}', priority, policy FROM groups LIMIT 1 RETURNING id`.execute(db);
    assert.equal(Number(next.rows[0].id), 3);
    await db.destroy();

    // Again into the same database: refused, nothing changed there.
    const again = await runCli(["db", "copy", "--to", url, "--data-dir", dataDir]);
    assert.equal(again.code, 1);
    assert.match(again.stderr, /is not empty/);
  });

  test("refuses a data dir a server is running on, a URL that is not PostgreSQL's, and one it cannot reach, copying nothing", async () => {
    const dataDir = tempDir();
    const server = await startTestServer({ database: { url: "" } }, dataDir);
    const url = await postgres.createDatabase("refusals");
    const running = await runCli(["db", "copy", "--to", url, "--data-dir", dataDir]);
    assert.equal(running.code, 1);
    assert.match(running.stderr, /in use by labgate process .* db copy reads a stopped database/);
    await server.close();

    const wrong = await runCli(["db", "copy", "--to", "mysql://x/y", "--data-dir", dataDir]);
    assert.equal(wrong.code, 2);
    assert.match(wrong.stderr, /--to must be a postgres:\/\/ URL/);

    const unreachable = await runCli(["db", "copy", "--to", "postgres://labgate:secret@127.0.0.1:1/none", "--data-dir", dataDir]);
    assert.equal(unreachable.code, 1);
    assert.match(unreachable.stderr, /cannot use postgres:\/\/labgate:\*\*\*@127\.0\.0\.1:1\/none/);
    assert.doesNotMatch(unreachable.stderr, /secret/);

    const db = await postgresQueryLayer<Record<string, never>>(url);
    assert.equal((await sql`SELECT 1 FROM information_schema.tables WHERE table_schema = 'public'`.execute(db)).rows.length, 0);
    await db.destroy();
  });
});
