/**
 * The board's files are confined at the access itself (src/testrun/engine/test-files.ts): a link
 * that points inside the tree when a module's path is checked, and is swapped to point outside
 * before the file is opened, leads nowhere. Here the swap happens exactly between the check and
 * the access (a run over HTTP would hit that window only by chance), with the server's identity
 * and, as root (CI), as a run_as user. The same module functions read a board over HTTP in
 * runs-hardware.test.ts.
 */
import assert from "node:assert/strict";
import { chmodSync, chownSync, mkdirSync, readFileSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { after, describe, test } from "node:test";
import type { TestIdentity } from "../../src/testrun/engine/identity.ts";
import { testFiles, type FileOps, type TestFiles } from "../../src/testrun/engine/test-files.ts";
import { BoardPathError, fileType, listDir, readAttribute, writeAttribute } from "../../src/testrun/modules/hardware.ts";
import { removeDir, tempDir } from "../helpers/server.ts";
import { ensureUser, isRoot, RUNNER } from "../helpers/users.ts";

const base = tempDir("labgate-board-race-");
after(() => removeDir(base));
// Every directory is open to the run_as user, every file readable and writable: only confinement stands in the way.
chmodSync(base, 0o755);
const sys = join(base, "sys");
const link = join(sys, "class", "x");
const outside = join(base, "elsewhere");
for (const [dir, values] of [
  [join(sys, "devices", "x"), { attr: "inside\n", value: "0\n" }],
  [outside, { attr: "secret\n", value: "untouched\n" }],
] as const) {
  mkdirSync(dir, { recursive: true, mode: 0o755 });
  for (const [name, text] of Object.entries(values)) {
    writeFileSync(join(dir, name), text);
    chmodSync(join(dir, name), 0o666);
  }
}
// Not for the run_as user: a directory only the server's user may enter.
mkdirSync(join(sys, "kernel", "debug"), { recursive: true, mode: 0o700 });
writeFileSync(join(sys, "kernel", "debug", "attr"), "server only\n", { mode: 0o644 });

/** The link as sysfs has it: into the tree. */
function restore(): void {
  mkdirSync(join(sys, "class"), { recursive: true, mode: 0o755 });
  rmSync(link, { force: true });
  symlinkSync("../devices/x", link);
}

/** `files` whose `op` below a root first swaps the link to point outside: after the module's check, before the access. */
function swappingBefore(files: TestFiles, op: keyof FileOps): TestFiles {
  const swap = () => {
    rmSync(link, { force: true });
    symlinkSync(outside, link);
  };
  return {
    ...files,
    below(root) {
      const inner = files.below(root);
      return { ...inner, [op]: (...args: never[]) => (swap(), (inner[op] as (...a: never[]) => unknown)(...args)) };
    },
  };
}

const roots = { sys, dev: join(base, "dev"), firmware: join(base, "firmware") };
const outsideMessage = (path: string) => new BoardPathError(`${path} leads outside /sys`);

function suite(identity: () => TestIdentity | undefined, runDir: () => string) {
  const board = (files: TestFiles = testFiles(identity(), runDir())) => ({ roots, files });

  test("without a swap the module functions read, list and write the tree", async () => {
    restore();
    assert.equal(await readAttribute(board(), "/sys/class/x/attr"), "inside");
    assert.deepEqual(await listDir(board(), "/sys/class/x"), ["attr", "value"]);
    assert.equal(await fileType(board(), "/sys/class/x/value"), "file");
    await writeAttribute(board(), "/sys/class/x/value", "1");
    assert.equal(readFileSync(join(sys, "devices", "x", "value"), "utf8"), "1");
  });

  test("a link swapped between the check and the access: no read, no listing, no stat, no write outside", async () => {
    for (const [op, attempt] of [
      ["read", (b: ReturnType<typeof board>) => readAttribute(b, "/sys/class/x/attr")],
      ["list", (b: ReturnType<typeof board>) => listDir(b, "/sys/class/x")],
      ["stat", (b: ReturnType<typeof board>) => fileType(b, "/sys/class/x/attr")],
      ["write", (b: ReturnType<typeof board>) => writeAttribute(b, "/sys/class/x/value", "1")],
    ] as const) {
      restore();
      const path = op === "list" ? "/sys/class/x" : op === "write" ? "/sys/class/x/value" : "/sys/class/x/attr";
      await assert.rejects(attempt(board(swappingBefore(testFiles(identity(), runDir()), op))), outsideMessage(path), op);
    }
    assert.equal(readFileSync(join(outside, "value"), "utf8"), "untouched\n");
  });
}

describe("as the server's user", () => suite(() => undefined, () => base));

describe("as a run_as user", { skip: !isRoot && "needs root to create the user (CI runs as root)" }, () => {
  let identity: TestIdentity;
  const runDir = join(base, "run");
  mkdirSync(runDir, { mode: 0o700 });
  const ids = isRoot ? ensureUser(RUNNER) : { uid: -1, gid: -1 };
  if (isRoot) chownSync(runDir, ids.uid, ids.gid);
  identity = { user: RUNNER, ...ids };
  suite(() => identity, () => runDir);

  test("nothing the user cannot reach by its path is reached through the server's open", async () => {
    assert.equal(await readAttribute({ roots, files: testFiles(undefined, base) }, "/sys/kernel/debug/attr"), "server only");
    assert.equal(await readAttribute({ roots, files: testFiles(identity, runDir) }, "/sys/kernel/debug/attr"), undefined);
    assert.equal(await fileType({ roots, files: testFiles(identity, runDir) }, "/sys/kernel/debug/attr"), undefined);
  });
});
