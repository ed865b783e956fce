import { strict as assert } from "node:assert";
import { appendFileSync, existsSync, mkdirSync, readdirSync, readFileSync, rmSync, statSync, truncateSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { describe, test } from "node:test";
import { createHash } from "node:crypto";
import { Database, DatabaseCorruptError, DatabaseUnavailableError, IMAGE_FILE, IMAGE_SUM_FILE, migrate, SchemaTooNewError } from "../../src/db/index.ts";
import type { Migration } from "../../src/db/migrate.ts";
import { tempDir } from "../helpers/server.ts";

const schema: Migration[] = [{ version: 1, name: "items", sql: ["CREATE TABLE items (id INTEGER PRIMARY KEY, name TEXT NOT NULL, blob BLOB)"] }];

async function openWithItems(dir: string, options = {}) {
  const db = await Database.open(dir, options);
  await migrate(db, schema);
  return db;
}

const names = (db: Database) => db.all<{ name: string }>("SELECT name FROM items ORDER BY id").map((r) => r.name);
const journals = (dir: string) => readdirSync(dir).filter((f) => f.startsWith("labgate.journal."));

describe("database", () => {
  test("committed writes survive a crash (no close) through journal replay", async () => {
    const dir = tempDir();
    const db = await openWithItems(dir);
    for (let i = 0; i < 20; i++) await db.write((tx) => tx.run("INSERT INTO items (name) VALUES (?)", [`n${i}`]));
    const blob = new Uint8Array([0, 1, 2, 255]);
    await db.write((tx) => tx.run("INSERT INTO items (name, blob) VALUES (?, ?)", ["bin", blob]));
    // No close: the process "dies" here. A second open must replay the journal.
    const reopened = await Database.open(dir);
    assert.equal(names(reopened).length, 21);
    const row = reopened.get<{ blob: Uint8Array }>("SELECT blob FROM items WHERE name = 'bin'");
    assert.deepEqual([...row!.blob], [...blob]);
    await reopened.close();
  });

  test("a failed transaction changes nothing and writes no frame", async () => {
    const dir = tempDir();
    const db = await openWithItems(dir);
    const before = db.status().journal_bytes;
    await assert.rejects(
      db.write((tx) => {
        tx.run("INSERT INTO items (name) VALUES (?)", ["x"]);
        throw new Error("abort");
      }),
      /abort/,
    );
    assert.deepEqual(names(db), []);
    assert.equal(db.status().journal_bytes, before);
    await db.close();
  });

  test("a torn last frame is ignored and everything before it is kept", async () => {
    const dir = tempDir();
    const db = await openWithItems(dir);
    await db.write((tx) => tx.run("INSERT INTO items (name) VALUES (?)", ["kept"]));
    const journal = join(dir, journals(dir).sort().at(-1)!);
    const size = statSync(journal).size;
    await db.write((tx) => tx.run("INSERT INTO items (name) VALUES (?)", ["torn"]));
    // Cut the last frame in half, as a crash in the middle of write() would.
    truncateSync(journal, size + Math.floor((statSync(journal).size - size) / 2));
    const reopened = await Database.open(dir);
    assert.deepEqual(names(reopened), ["kept"]);
    // The next write after recovery lands in a fresh journal generation and survives.
    await reopened.write((tx) => tx.run("INSERT INTO items (name) VALUES (?)", ["after"]));
    const again = await Database.open(dir);
    assert.deepEqual(names(again), ["kept", "after"]);
    await again.close();
  });

  test("garbage after the last frame is ignored", async () => {
    const dir = tempDir();
    const db = await openWithItems(dir);
    await db.write((tx) => tx.run("INSERT INTO items (name) VALUES (?)", ["a"]));
    appendFileSync(join(dir, journals(dir).sort().at(-1)!), Buffer.from("LGJ1 this is not a frame"));
    const reopened = await Database.open(dir);
    assert.deepEqual(names(reopened), ["a"]);
    await reopened.close();
  });

  test("checkpoint writes an image and drops the journals it covers", async () => {
    const dir = tempDir();
    const db = await openWithItems(dir);
    for (let i = 0; i < 5; i++) await db.write((tx) => tx.run("INSERT INTO items (name) VALUES (?)", [`n${i}`]));
    await db.checkpoint();
    assert.equal(journals(dir).length, 1, "only the new, empty generation remains");
    assert.equal(statSync(join(dir, journals(dir)[0])).size, 0);
    await db.write((tx) => tx.run("INSERT INTO items (name) VALUES (?)", ["late"]));
    const reopened = await Database.open(dir);
    assert.deepEqual(names(reopened), ["n0", "n1", "n2", "n3", "n4", "late"]);
    await reopened.close();
  });

  test("commits made while a checkpoint is being written are not lost", async () => {
    const dir = tempDir();
    const db = await openWithItems(dir);
    await db.write((tx) => tx.run("INSERT INTO items (name) VALUES (?)", ["before"]));
    const checkpoint = db.checkpoint();
    const during = db.write((tx) => tx.run("INSERT INTO items (name) VALUES (?)", ["during"]));
    await Promise.all([checkpoint, during]);
    const reopened = await Database.open(dir);
    assert.deepEqual(names(reopened), ["before", "during"]);
    await reopened.close();
  });

  test("a crash between image rename and journal removal replays nothing twice", async () => {
    const dir = tempDir();
    const db = await openWithItems(dir);
    await db.write((tx) => tx.run("INSERT INTO items (name) VALUES (?)", ["once"]));
    const oldJournal = journals(dir).sort().at(-1)!;
    const saved = readFileSync(join(dir, oldJournal));
    await db.checkpoint();
    // Put the covered journal back, as if the process died before deleting it.
    writeFileSync(join(dir, oldJournal), saved);
    const reopened = await Database.open(dir);
    assert.deepEqual(names(reopened), ["once"]);
    await reopened.close();
  });

  test("concurrent commits share fsyncs and all resolve", async () => {
    const dir = tempDir();
    const db = await openWithItems(dir);
    await Promise.all(Array.from({ length: 200 }, (_, i) => db.write((tx) => tx.run("INSERT INTO items (name) VALUES (?)", [`c${i}`]))));
    const reopened = await Database.open(dir);
    assert.equal(names(reopened).length, 200);
    await reopened.close();
  });

  test("a failed journal write (full disk) is not acknowledged and the state goes back to disk", async () => {
    const dir = tempDir();
    const db = await openWithItems(dir);
    await db.write((tx) => tx.run("INSERT INTO items (name) VALUES (?)", ["durable"]));
    const epoch = db.epoch;
    db.failNextJournalWrite(Object.assign(new Error("ENOSPC: no space left on device"), { code: "ENOSPC" }));
    await assert.rejects(db.write((tx) => tx.run("INSERT INTO items (name) VALUES (?)", ["lost"])), DatabaseUnavailableError);
    // Recovery reloads from disk on the next turn of the event loop.
    await new Promise((r) => setTimeout(r, 20));
    assert.equal(db.status().state, "ok");
    assert.deepEqual(names(db), ["durable"], "the unacknowledged write is gone from memory too");
    assert.notEqual(db.epoch, epoch, "caches of table contents see that the state was rebuilt");
    await db.write((tx) => tx.run("INSERT INTO items (name) VALUES (?)", ["next"]));
    const reopened = await Database.open(dir);
    assert.deepEqual(names(reopened), ["durable", "next"]);
    await reopened.close();
  });

  test("a truncated image is refused and left untouched", async () => {
    const dir = tempDir();
    const db = await openWithItems(dir);
    await db.write((tx) => tx.run("INSERT INTO items (name) VALUES (?)", ["a"]));
    await db.close();
    const image = join(dir, IMAGE_FILE);
    truncateSync(image, statSync(image).size - 1000);
    const damaged = readFileSync(image);
    await assert.rejects(Database.open(dir), (e: Error) => e instanceof DatabaseCorruptError && /truncated/.test(e.message));
    assert.deepEqual(readFileSync(image), damaged);
  });

  test("a garbage image is refused and left untouched", async () => {
    const dir = tempDir();
    writeFileSync(join(dir, IMAGE_FILE), "definitely not sqlite");
    await assert.rejects(Database.open(dir), (e: Error) => e instanceof DatabaseCorruptError && /not a SQLite database/.test(e.message));
    assert.equal(readFileSync(join(dir, IMAGE_FILE), "utf8"), "definitely not sqlite");
  });

  test("each checkpoint, on the main thread or in the worker, writes the image's SHA-256 beside it", async () => {
    const dir = tempDir();
    const db = await openWithItems(dir);
    const sum = () => readFileSync(join(dir, IMAGE_SUM_FILE), "utf8").trim();
    const imageSum = () => createHash("sha256").update(readFileSync(join(dir, IMAGE_FILE))).digest("hex");
    for (const inline of [true, false]) {
      await db.write((tx) => tx.run("INSERT INTO items (name) VALUES (?)", [`inline ${inline}`]));
      const before = existsSync(join(dir, IMAGE_SUM_FILE)) ? sum() : "";
      await db.checkpoint({ inline });
      assert.equal(sum(), imageSum());
      assert.notEqual(sum(), before);
    }
    await db.close();
  });

  test("an image damaged inside is refused by quick_check and left untouched; a sum only vouches for the very bytes it was made of", async () => {
    const dir = tempDir();
    const db = await openWithItems(dir);
    await db.write((tx) => tx.run("INSERT INTO items (name) VALUES (?)", ["a"]));
    const { rootpage } = db.get<{ rootpage: number }>("SELECT rootpage FROM sqlite_master WHERE name = 'items'")!;
    await db.close();
    const image = join(dir, IMAGE_FILE);
    const damaged = readFileSync(image);
    damaged[(rootpage - 1) * damaged.readUInt16BE(16)] = 0x42; // the items table's root page: no b-tree page has this type
    writeFileSync(image, damaged);
    // The sum of the image as written no longer matches: quick_check runs and refuses it.
    const stale = readFileSync(join(dir, IMAGE_SUM_FILE), "utf8");
    await assert.rejects(Database.open(dir), (e: Error) => e instanceof DatabaseCorruptError && /is damaged/.test(e.message));
    assert.deepEqual(readFileSync(image), damaged);
    assert.equal(readFileSync(join(dir, IMAGE_SUM_FILE), "utf8"), stale, "a refused image gets no sum");
    // A sum of these very bytes vouches for them: the open trusts it and runs no quick_check.
    writeFileSync(join(dir, IMAGE_SUM_FILE), `${createHash("sha256").update(damaged).digest("hex")}\n`);
    const trusted = await Database.open(dir);
    assert.throws(() => trusted.all("SELECT name FROM items"), /malformed/);
    await trusted.close();
  });

  test("an image without a sum (an older version's, a restored one) passes quick_check once and gets its sum", async () => {
    const dir = tempDir();
    const db = await openWithItems(dir);
    await db.write((tx) => tx.run("INSERT INTO items (name) VALUES (?)", ["a"]));
    await db.close();
    const sumFile = join(dir, IMAGE_SUM_FILE);
    const written = readFileSync(sumFile, "utf8");
    rmSync(sumFile);
    const reopened = await Database.open(dir);
    assert.equal(readFileSync(sumFile, "utf8"), written);
    assert.deepEqual(names(reopened), ["a"]);
    await reopened.close();
  });

  test("a sum that cannot be written fails neither the checkpoint nor the next open, which checks the image", async () => {
    const dir = tempDir();
    mkdirSync(join(dir, IMAGE_SUM_FILE), { recursive: true }); // nothing can be renamed over a directory
    const db = await openWithItems(dir);
    await db.write((tx) => tx.run("INSERT INTO items (name) VALUES (?)", ["a"]));
    await db.checkpoint({ inline: true });
    await db.close();
    const reopened = await Database.open(dir);
    assert.deepEqual(names(reopened), ["a"]);
    await reopened.close();
  });

  test("migrations run once, and a newer schema is refused", async () => {
    const dir = tempDir();
    const db = await Database.open(dir);
    assert.deepEqual(await migrate(db, schema), [1]);
    assert.deepEqual(await migrate(db, schema), []);
    const v2: Migration[] = [...schema, { version: 2, name: "more", sql: ["ALTER TABLE items ADD COLUMN extra TEXT"] }];
    assert.deepEqual(await migrate(db, v2), [2]);
    await db.close();
    const older = await Database.open(dir);
    await assert.rejects(migrate(older, schema), (e: Error) => e instanceof SchemaTooNewError && /schema version 2/.test(e.message));
    await older.close();
  });

  test("a migration numbered below one already applied still runs (numbers are reserved per branch and land in any order)", async () => {
    const dir = tempDir();
    const db = await Database.open(dir);
    const v10: Migration[] = [...schema, { version: 10, name: "ten", sql: ["CREATE TABLE ten (id INTEGER)"] }];
    assert.deepEqual(await migrate(db, v10), [1, 10]);
    const v7: Migration[] = [...v10, { version: 7, name: "seven", sql: ["CREATE TABLE seven (id INTEGER)"] }];
    assert.deepEqual(await migrate(db, v7), [7]);
    assert.deepEqual(await migrate(db, v7), []);
    assert.ok(db.get("SELECT 1 AS x FROM sqlite_master WHERE name = 'seven'"));
    await db.close();
  });

  test("lazy writes ride on the next commit", async () => {
    const dir = tempDir();
    const db = await openWithItems(dir, { lazyFlushMs: 60_000 });
    db.writeLazy((tx) => void tx.run("INSERT INTO items (name) VALUES (?)", ["lazy"]));
    await db.write((tx) => tx.run("INSERT INTO items (name) VALUES (?)", ["eager"]));
    const reopened = await Database.open(dir);
    assert.deepEqual(names(reopened), ["lazy", "eager"]);
    await reopened.close();
    assert.ok(existsSync(join(dir, IMAGE_FILE)));
  });
});
