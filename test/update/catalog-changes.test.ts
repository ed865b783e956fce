/*
 * The update check's catalog across a group write (src/update/updatecheck/catalog.ts): what a load
 * read before the write committed is not kept, so the first check after the write's answer sees it.
 */
import { strict as assert } from "node:assert";
import { test } from "node:test";
import { DummyDriver, Kysely, SqliteAdapter, SqliteIntrospector, SqliteQueryCompiler } from "kysely";
import { Database, migrate, migrations } from "../../src/db/index.ts";
import { embeddedStore, type Queries, type Store } from "../../src/db/store.ts";
import { changed } from "../../src/update/groups/groups.ts";
import { UpdateCatalog } from "../../src/update/updatecheck/catalog.ts";
import { tempDir } from "../helpers/server.ts";

/** A database with a device in group 1 (priority 25) and a group 2 (priority 10) it is not in. */
async function fleet(): Promise<{ db: Database; store: Store }> {
  const db = await Database.open(tempDir());
  await migrate(db, migrations);
  const store = embeddedStore(db);
  const created = new Date().toISOString();
  await store.query.insertInto("devices").values({ created, name: "d", mac_address: "aa:bb:cc:dd:ee:01" }).execute();
  await store.query.insertInto("groups").values([{ created, metadata: "{}", priority: 25 }, { created, metadata: "{}", priority: 10 }]).execute();
  await store.query.insertInto("group_devices").values({ group_id: 1, device_id: 1 }).execute();
  return { db, store };
}

/** Queries that fail as on a lost database: every statement is refused. */
const refused = {
  executeQuery: () => Promise.reject(new Error("database unavailable")),
  async *streamQuery(): AsyncIterableIterator<never> {
    throw new Error("database unavailable");
  },
};
const unavailable: Queries = new Kysely({
  dialect: {
    createAdapter: () => new SqliteAdapter(),
    createDriver: () => Object.assign(new DummyDriver(), { acquireConnection: async () => refused }),
    createIntrospector: (k) => new SqliteIntrospector(k),
    createQueryCompiler: () => new SqliteQueryCompiler(),
  },
});

test("a membership changed while the catalog loads is what the next check sees", async () => {
  const { db, store } = await fleet();
  try {
    const catalog = new UpdateCatalog(store);
    assert.equal(await catalog.activeGroup(1), 1);

    catalog.changed();
    // This check's load reads the memberships before the write below runs (it asked for the connection first).
    const during = catalog.activeGroup(1);
    await changed(catalog, store.transact(async (tx) => void (await tx.insertInto("group_devices").values({ group_id: 2, device_id: 1 }).execute())));
    assert.equal(await during, 1, "the check under way answers from what it read");
    assert.equal(await catalog.activeGroup(1), 2, "the check after the write's answer sees the group of lower priority value");
  } finally {
    await store.close();
    await db.close();
  }
});

test("a load that failed is not kept: the next check loads again", async () => {
  const { db, store } = await fleet();
  let down = true;
  const flaky: Store = { ...store, get query() { return down ? unavailable : store.query; }, get epoch() { return store.epoch; } };
  try {
    const catalog = new UpdateCatalog(flaky);
    await assert.rejects(catalog.activeGroup(1), /database unavailable/);
    await assert.rejects(catalog.groupPlan(1, "svc.software.version"), /database unavailable/);
    down = false;
    assert.equal(await catalog.activeGroup(1), 1);
    assert.equal((await catalog.groupPlan(1, "svc.software.version"))?.packages.length, 0);
  } finally {
    await store.close();
    await db.close();
  }
});
