import { strict as assert } from "node:assert";
import { setTimeout as sleep } from "node:timers/promises";
import { after, before, describe, test } from "node:test";
import { Kysely, sql, type Generated } from "kysely";
import { Database } from "../../src/db/index.ts";
import { embeddedDialect } from "../../src/db/query/embedded.ts";
import { postgresQueryLayer } from "../../src/db/query/postgres.ts";
import { transact } from "../../src/db/query/transaction.ts";
import { startPostgres, type ThrowawayPostgres } from "../helpers/postgres.ts";
import { tempDir } from "../helpers/server.ts";

interface Tables {
  counters: { name: string; n: number };
  log: { id: Generated<number>; counter: string; seen: number };
}

let postgres: ThrowawayPostgres;
before(async () => {
  postgres = await startPostgres();
});
after(async () => {
  await postgres?.stop();
});

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
