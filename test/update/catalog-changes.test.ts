/*
 * The update check's catalog across a group write (src/update/updatecheck/catalog.ts): what a load
 * read before the write committed is not kept, so the first check after the write's answer sees it.
 */
import { strict as assert } from "node:assert";
import { test } from "node:test";
import { Database, migrate, migrations } from "../../src/db/index.ts";
import { embeddedStore } from "../../src/db/store.ts";
import { changed } from "../../src/update/groups/groups.ts";
import { UpdateCatalog } from "../../src/update/updatecheck/catalog.ts";
import { tempDir } from "../helpers/server.ts";

test("a membership changed while the catalog loads is what the next check sees", async () => {
  const db = await Database.open(tempDir());
  await migrate(db, migrations);
  const store = embeddedStore(db);
  try {
    const created = new Date().toISOString();
    await store.query.insertInto("devices").values({ created, name: "d", mac_address: "aa:bb:cc:dd:ee:01" }).execute();
    await store.query.insertInto("groups").values([{ created, metadata: "{}", priority: 25 }, { created, metadata: "{}", priority: 10 }]).execute();
    await store.query.insertInto("group_devices").values({ group_id: 1, device_id: 1 }).execute();
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
