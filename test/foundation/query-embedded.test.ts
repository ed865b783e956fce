import { strict as assert } from "node:assert";
import { setTimeout as sleep } from "node:timers/promises";
import { describe, test } from "node:test";
import { Kysely, sql, type Generated } from "kysely";
import { Database, migrate } from "../../src/db/index.ts";
import type { Migration } from "../../src/db/migrate.ts";
import { embeddedDialect } from "../../src/db/query/embedded.ts";
import { embeddedStore } from "../../src/db/store.ts";
import { tempDir } from "../helpers/server.ts";

const schema: Migration[] = [{ version: 1, name: "items", sql: ["CREATE TABLE items (id INTEGER PRIMARY KEY AUTOINCREMENT, name TEXT NOT NULL UNIQUE, n INTEGER NOT NULL DEFAULT 0)"] }];

interface Tables {
  items: { id: Generated<number>; name: string; n: Generated<number> };
}

async function open(dir: string) {
  const db = await Database.open(dir);
  await migrate(db, schema);
  return { db, k: new Kysely<Tables>({ dialect: embeddedDialect(db) }) };
}

const names = (db: Database) => db.all<{ name: string }>("SELECT name FROM items ORDER BY id").map((r) => r.name);

describe("the query layer over the embedded database", () => {
  test("a transaction's writes are one durable frame: after a crash (no close) they are all there", async () => {
    const dir = tempDir();
    const { db, k } = await open(dir);
    const before = db.status().journal_bytes;
    const id = await k.transaction().execute(async (tx) => {
      const inserted = await tx.insertInto("items").values({ name: "a" }).returning("id").executeTakeFirstOrThrow();
      await tx.insertInto("items").values({ name: "b", n: 2 }).execute();
      await tx.updateTable("items").set({ n: 7 }).where("id", "=", inserted.id).execute();
      return inserted.id;
    });
    assert.equal(id, 1);
    assert.ok(db.status().journal_bytes > before);
    const reopened = await Database.open(dir);
    assert.deepEqual(reopened.all("SELECT name, n FROM items ORDER BY id"), [{ name: "a", n: 7 }, { name: "b", n: 2 }]);
    await reopened.close();
  });

  test("a transaction that throws changes nothing and writes no frame", async () => {
    const { db, k } = await open(tempDir());
    const before = db.status().journal_bytes;
    await assert.rejects(
      k.transaction().execute(async (tx) => {
        await tx.insertInto("items").values({ name: "x" }).execute();
        await tx.insertInto("items").values({ name: "x" }).execute(); // UNIQUE
      }),
      /UNIQUE/,
    );
    assert.deepEqual(names(db), []);
    assert.equal(db.status().journal_bytes, before);
    await db.close();
  });

  test("a write outside a transaction is acknowledged once durable; a read writes nothing", async () => {
    const dir = tempDir();
    const { db, k } = await open(dir);
    const result = await k.insertInto("items").values({ name: "solo" }).executeTakeFirst();
    assert.equal(result.numInsertedOrUpdatedRows, 1n);
    const before = db.status().journal_bytes;
    assert.deepEqual(await k.selectFrom("items").select("name").execute(), [{ name: "solo" }]);
    assert.deepEqual((await sql<{ c: number }>`SELECT count(*) AS c FROM items`.execute(k)).rows, [{ c: 1 }]);
    assert.equal(db.status().journal_bytes, before);
    const reopened = await Database.open(dir);
    assert.deepEqual(names(reopened), ["solo"]);
    await reopened.close();
  });

  test("transactions are serial even across awaits, and no other query sees uncommitted rows", async () => {
    const { db, k } = await open(tempDir());
    await k.insertInto("items").values({ name: "counter", n: 0 }).execute();
    const seen: number[] = [];
    // Each reads, waits on a timer (another macrotask), then writes what it read plus one: lost updates if they interleaved.
    const bump = () =>
      k.transaction().execute(async (tx) => {
        const { n } = await tx.selectFrom("items").select("n").where("name", "=", "counter").executeTakeFirstOrThrow();
        await tx.insertInto("items").values({ name: `during-${n}` }).execute();
        await sleep(5);
        await tx.updateTable("items").set({ n: n + 1 }).where("name", "=", "counter").execute();
      });
    const reader = (async () => {
      await sleep(2);
      const rows = await k.selectFrom("items").select("name").where("name", "like", "during-%").execute();
      seen.push(rows.length);
    })();
    await Promise.all([bump(), bump(), bump(), reader]);
    const { n } = await k.selectFrom("items").select("n").where("name", "=", "counter").executeTakeFirstOrThrow();
    assert.equal(n, 3);
    // The reader waited for the transaction that held the connection, then saw only committed rows.
    assert.equal(seen.length, 1);
    assert.ok(seen[0] >= 1 && seen[0] <= 3, `saw ${seen[0]}`);
    await db.close();
  });

  test("a commit that cannot reach the disk rejects, and the database goes back to what is on disk", async () => {
    const dir = tempDir();
    const { db, k } = await open(dir);
    await k.insertInto("items").values({ name: "kept" }).execute();
    db.failNextJournalWrite(Object.assign(new Error("no space"), { code: "ENOSPC" }));
    await assert.rejects(k.transaction().execute(async (tx) => void (await tx.insertInto("items").values({ name: "lost" }).execute())), /change not saved/);
    const reopened = await Database.open(dir);
    assert.deepEqual(names(reopened), ["kept"]);
    await reopened.close();
  });

  test("a synchronous write, a lazy write and an inline checkpoint wait for an open transaction instead of landing inside it", async () => {
    const dir = tempDir();
    const { db, k } = await open(dir);
    let release!: () => void;
    const held = new Promise<void>((resolve) => (release = resolve));
    const transaction = k.transaction().execute(async (tx) => {
      await tx.insertInto("items").values({ name: "in-tx" }).execute();
      await held;
      throw new Error("rolled back");
    });
    await sleep(5);
    const written = db.write((tx) => void tx.run("INSERT INTO items (name) VALUES ('sync')"));
    db.writeLazy((tx) => void tx.run("INSERT INTO items (name) VALUES ('lazy')"));
    const checkpoint = db.checkpoint({ inline: true });
    release();
    await assert.rejects(transaction, /rolled back/);
    await written;
    await checkpoint;
    // Neither landed inside the transaction: its rollback took only its own row.
    assert.deepEqual(names(db), ["sync", "lazy"]);
    await db.close();
    const reopened = await Database.open(dir);
    assert.deepEqual(names(reopened), ["sync", "lazy"]);
    await reopened.close();
  });

  test("a transaction's committed callback runs once COMMIT ran in memory, before its frame is durable; not for one rolled back", async () => {
    const dir = tempDir();
    const db = await Database.open(dir);
    await migrate(db, schema);
    const store = embeddedStore(db);
    let durable = false;
    const seen: string[][] = [];
    const written = store
      .transact(async (tx) => void (await (tx as unknown as Kysely<Tables>).insertInto("items").values({ name: "a" }).execute()), {
        committed: () => {
          // What reads see from now on, while the promise still waits for the disk.
          assert.equal(durable, false);
          seen.push(names(db));
        },
      })
      .then(() => (durable = true));
    await written;
    assert.deepEqual(seen, [["a"]]);
    let called = false;
    await assert.rejects(
      store.transact(
        async (tx) => {
          await (tx as unknown as Kysely<Tables>).insertInto("items").values({ name: "a" }).execute(); // UNIQUE
        },
        { committed: () => (called = true) },
      ),
      /UNIQUE/,
    );
    assert.equal(called, false);
    await store.close();
    await db.close();
  });

  test("a query or a transaction on the store from inside one of its transactions fails at once instead of waiting for itself", async () => {
    const dir = tempDir();
    const db = await Database.open(dir);
    await db.write((tx) => void tx.run("CREATE TABLE items (id INTEGER PRIMARY KEY AUTOINCREMENT, name TEXT NOT NULL UNIQUE, n INTEGER NOT NULL DEFAULT 0)"));
    const store = embeddedStore(db);
    const k = store.query as unknown as Kysely<Tables>;
    await assert.rejects(
      store.transact(async (tx) => {
        await (tx as unknown as Kysely<Tables>).insertInto("items").values({ name: "a" }).execute();
        await k.selectFrom("items").selectAll().execute();
      }),
      /inside one of its own transactions/,
    );
    // Nothing of it committed, and the store goes on: the next transaction and a plain query run.
    await store.transact(async (tx) => void (await (tx as unknown as Kysely<Tables>).insertInto("items").values({ name: "b" }).execute()));
    assert.deepEqual((await k.selectFrom("items").select("name").execute()).map((r) => r.name), ["b"]);
    // Caught again once no transaction ran for a while (the guard is off meanwhile), and while another one waits.
    const waiting = store.transact(async (tx) => void (await (tx as unknown as Kysely<Tables>).insertInto("items").values({ name: "c" }).execute()));
    await assert.rejects(
      store.transact(async () => void (await k.selectFrom("items").selectAll().execute())),
      /inside one of its own transactions/,
    );
    await waiting;
    // A transaction opened on the store from inside one fails the same way instead of waiting.
    await assert.rejects(
      store.transact(async (tx) => {
        await (tx as unknown as Kysely<Tables>).insertInto("items").values({ name: "d" }).execute();
        await store.transact(async (inner) => void (await (inner as unknown as Kysely<Tables>).insertInto("items").values({ name: "e" }).execute()));
      }),
      /inside one of its own transactions/,
    );
    assert.deepEqual((await k.selectFrom("items").select("name").orderBy("name").execute()).map((r) => r.name), ["b", "c"]);
    await store.close();
    await db.close();
  });
});
