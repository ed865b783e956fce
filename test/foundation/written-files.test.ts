// A write that fails early leaves no file behind (src/util/files.ts, removeWritten): a pipeline can
// settle while its destination is still opening the file (Node 20), and an unlink before that open
// finds nothing. The abuse corpus met it as a stray storage/.tmp/<uuid> after a cut upload.
import assert from "node:assert/strict";
import { createWriteStream, readdirSync } from "node:fs";
import { join } from "node:path";
import { Readable } from "node:stream";
import { pipeline } from "node:stream/promises";
import { test } from "node:test";
import { LocalStorage } from "../../src/storage/local.ts";
import { removeWritten } from "../../src/util/files.ts";
import { removeDir, tempDir } from "../helpers/server.ts";

/** A source that fails on the next turn, before the destination has had time to open its file. */
const failingSoon = () => {
  const source = new Readable({ read() {} });
  setImmediate(() => source.destroy(new Error("the client went away")));
  return source;
};

test("removeWritten: 300 pipelines cut at once leave no file", async () => {
  const dir = tempDir();
  try {
    for (let i = 0; i < 300; i++) {
      const path = join(dir, `file-${i}`);
      const file = createWriteStream(path, { flags: "wx" });
      await assert.rejects(pipeline(failingSoon(), file), /went away/);
      await removeWritten(file, path);
    }
    assert.deepEqual(readdirSync(dir), []);
  } finally {
    removeDir(dir);
  }
});

test("an upload cut at once leaves nothing in the storage's temp area", async () => {
  const dir = tempDir();
  try {
    const storage = new LocalStorage(join(dir, "storage"));
    for (let i = 0; i < 300; i++) await assert.rejects(storage.stage(failingSoon()), /went away/);
    assert.deepEqual(readdirSync(join(dir, "storage", ".tmp")), []);
  } finally {
    removeDir(dir);
  }
});
