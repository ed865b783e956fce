import { strict as assert } from "node:assert";
import { setTimeout as sleep } from "node:timers/promises";
import { describe, test } from "node:test";
import { Kysely, sql, type Generated } from "kysely";
import { Database } from "../../src/db/index.ts";
import { embeddedDialect } from "../../src/db/query/embedded.ts";
import { postgresQueryLayer } from "../../src/db/query/postgres.ts";
import { transact } from "../../src/db/query/transaction.ts";
import { usePostgres } from "../helpers/postgres.ts";
import { tempDir } from "../helpers/server.ts";

interface Tables {
  counters: { name: string; n: number };
  log: { id: Generated<number>; counter: string; seen: number };
}

const postgres = usePostgres();

/** The same scenario on each engine: concurrent read-modify-write transactions that await between their statements. */
async function concurrentIncrements(db: Kysely<Tables>, writers: number) {
  await db.insertInto("counters").values({ name: "c", n: 0 }).execute();
  await Promise.all(
    Array.from({ length: writers }, () =>
      transact(db, async (tx) => {
        const { n } = await tx.selectFrom("counters").select("n").where("name", "=", "c").executeTakeFirstOrThrow();
        await sleep(2);
        await tx.insertInto("log").values({ counter: "c", seen: n }).execute();
        await tx.updateTable("counters").set({ n: n + 1 }).where("name", "=", "c").execute();
      }),
    ),
  );
  const { n } = await db.selectFrom("counters").select("n").where("name", "=", "c").executeTakeFirstOrThrow();
  const seen = (await db.selectFrom("log").select("seen").orderBy("seen").execute()).map((r) => r.seen);
  return { n, seen };
}

describe("one query layer, two engines", () => {
  test("PostgreSQL: concurrent writers end as some serial order would (SERIALIZABLE, retried)", async () => {
    const db = await postgresQueryLayer<Tables>(await postgres.createDatabase("serial"));
    await sql`CREATE TABLE counters (name TEXT PRIMARY KEY, n BIGINT NOT NULL)`.execute(db);
    await sql`CREATE TABLE log (id BIGSERIAL PRIMARY KEY, counter TEXT NOT NULL, seen BIGINT NOT NULL)`.execute(db);
    const { n, seen } = await concurrentIncrements(db, 8);
    assert.equal(n, 8);
    // Each writer saw the count the one before it left: no lost update, no two saw the same.
    assert.deepEqual(seen, [0, 1, 2, 3, 4, 5, 6, 7]);
    assert.equal(typeof n, "number");
    await db.destroy();
  });

  test("embedded: the same writers, serial by the held connection", async () => {
    const database = await Database.open(tempDir());
    await database.write((tx) => {
      tx.run("CREATE TABLE counters (name TEXT PRIMARY KEY, n INTEGER NOT NULL)");
      tx.run("CREATE TABLE log (id INTEGER PRIMARY KEY AUTOINCREMENT, counter TEXT NOT NULL, seen INTEGER NOT NULL)");
    });
    const db = new Kysely<Tables>({ dialect: embeddedDialect(database) });
    const { n, seen } = await concurrentIncrements(db, 8);
    assert.equal(n, 8);
    assert.deepEqual(seen, [0, 1, 2, 3, 4, 5, 6, 7]);
    await database.close();
  });

  test("PostgreSQL: an error that is not a serialization failure is not retried and changes nothing", async () => {
    const db = await postgresQueryLayer<Tables>(await postgres.createDatabase("noretry"));
    await sql`CREATE TABLE counters (name TEXT PRIMARY KEY, n BIGINT NOT NULL)`.execute(db);
    let runs = 0;
    await assert.rejects(
      transact(db, async (tx) => {
        runs++;
        await tx.insertInto("counters").values({ name: "a", n: 1 }).execute();
        await tx.insertInto("counters").values({ name: "a", n: 2 }).execute();
      }),
      (error: { code?: string }) => error.code === "23505",
    );
    assert.equal(runs, 1);
    assert.deepEqual(await db.selectFrom("counters").selectAll().execute(), []);
    await db.destroy();
  });
});

describe("one set of numbered migrations, both engines", () => {
  test("every step applies on PostgreSQL and gives the embedded schema's tables and columns; again is a no-op", async () => {
    const { migrations, migrate } = await import("../../src/db/index.ts");
    const { migratePostgres } = await import("../../src/db/query/postgres-schema.ts");
    const db = await postgresQueryLayer<Record<string, never>>(await postgres.createDatabase("schema"));
    const applied = await migratePostgres(db, migrations);
    assert.deepEqual(applied, migrations.map((m) => m.version).sort((a, b) => a - b));
    assert.deepEqual(await migratePostgres(db, migrations), []);
    const onPostgres = (
      await sql<{ t: string; c: string }>`SELECT table_name AS t, column_name AS c FROM information_schema.columns WHERE table_schema = 'public' ORDER BY 1, 2`.execute(db)
    ).rows.map((r) => `${r.t}.${r.c}`);
    const embedded = await Database.open(tempDir());
    await migrate(embedded, migrations);
    const tables = embedded.all<{ name: string }>("SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' AND name NOT LIKE '\\_labgate%' ESCAPE '\\' ORDER BY name");
    const onEmbedded = tables.flatMap(({ name }) => embedded.all<{ name: string }>(`SELECT name FROM pragma_table_info('${name}')`).map((c) => `${name}.${c.name}`)).sort();
    assert.deepEqual(onPostgres, onEmbedded);
    await embedded.close();
    await db.destroy();
  });

  test("PostgreSQL: the access generation counts changes as on the embedded engine; names ignore case", async () => {
    const { migrations } = await import("../../src/db/index.ts");
    const { migratePostgres } = await import("../../src/db/query/postgres-schema.ts");
    const db = await postgresQueryLayer<Record<string, never>>(await postgres.createDatabase("generation"));
    await migratePostgres(db, migrations);
    const generation = async () => Number((await sql<{ n: number }>`SELECT n FROM access_generation`.execute(db)).rows[0].n);
    const start = await generation();
    await sql`INSERT INTO revoked_users (user_id, before_ms, revoked) VALUES ('Alice', 1, 'now')`.execute(db);
    assert.equal(await generation(), start + 1);
    await assert.rejects(sql`INSERT INTO revoked_users (user_id, before_ms, revoked) VALUES ('alice', 2, 'now')`.execute(db), (e: { code?: string }) => e.code === "23505");
    await sql`UPDATE revoked_users SET before_ms = 3 WHERE user_id = 'ALICE'`.execute(db);
    assert.equal(await generation(), start + 2);
    await db.destroy();
  });
});
