/*
 * Issue 29: the CLI's entries reach the audit log whether or not a server runs on the data dir
 * (src/audit/spool.ts): `token issue` and `restore` through the spool, `user` and `token revoke`
 * through the running server or the database; none lost when either side is killed, none twice.
 */
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { once } from "node:events";
import { chownSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { describe, test } from "node:test";
import { labgate, runCli, startServe } from "../helpers/cli.ts";
import { callWith, removeDir, requestAt, startTestServer, tempDir, useTestServer, waitFor } from "../helpers/server.ts";
import { appendToSpool } from "../../src/audit/spool.ts";
import { systemActor } from "../../src/audit/audit.ts";
import { entries } from "./helpers.ts";

const SPOOL = "audit-spool";

/** `labgate token issue` on `dir`: the token and its id. */
async function issue(dir: string, user: string): Promise<{ token: string; id: string }> {
  const res = await runCli(["token", "issue", "--user", user, "--scopes", "svc_tests_ro", "--ttl", "1h", "--data-dir", dir]);
  assert.equal(res.code, 0, res.stderr);
  const id = /token id (\S+)/.exec(res.stderr)?.[1];
  assert.ok(id, res.stderr);
  return { token: res.stdout.trim(), id };
}

describe("labgate token issue with no server running", () => {
  test("the next start logs it, once, also when the spool is read again after a stop before its deletion", async () => {
    const dir = tempDir();
    try {
      await (await startTestServer({}, dir)).close();
      const { token, id } = await issue(dir, "ivy");
      const spool = join(dir, SPOOL);
      const [file] = readdirSync(spool);
      assert.match(file!, /^[0-9a-f-]{36}\.json$/, "one file per entry");
      const spooled = readFileSync(join(spool, file!));
      // A command killed mid-write (before it printed anything) leaves its torn .tmp: never read.
      writeFileSync(join(spool, "0000dead-0000-4000-8000-000000000000.tmp"), '{"id":"torn","time":"2026-');
      const later = await issue(dir, "ivy");

      let server = await startTestServer({}, dir);
      try {
        const [entry] = await entries(server, `target=token:${id}`);
        assert.deepEqual([entry.action, entry.actor_kind, entry.client, entry.outcome], ["token.issue", "system", "", "ok"]);
        assert.match(entry.actor, /^cli:/);
        assert.deepEqual(entry.detail, { user: "ivy", scopes: "tests_ro", expires: entry.detail?.expires });
        assert.equal((await entries(server, `target=token:${later.id}`)).length, 1);
        assert.ok(!JSON.stringify(await entries(server, "limit=1000")).includes(token.split(".")[2]), "the token's signature is nowhere in the log");
        assert.deepEqual(readdirSync(spool), ["0000dead-0000-4000-8000-000000000000.tmp"], "the entries' files are gone once logged");
      } finally {
        await server.close();
      }
      // As if the server had been killed after its commit, before deleting the file: read again.
      writeFileSync(join(spool, file!), spooled);
      server = await startTestServer({}, dir);
      try {
        assert.equal((await entries(server, `target=token:${id}`)).length, 1, "kept once");
      } finally {
        await server.close();
      }
    } finally {
      removeDir(dir);
    }
  });

  test("run by root on a service's data dir, the spool stays the data dir owner's (the server can take it)", async () => {
    const dir = tempDir();
    try {
      await (await startTestServer({}, dir)).close();
      rmSync(join(dir, SPOOL), { recursive: true });
      // As root (the tests' usual user here) the data dir belongs to another user, as a service's does.
      if (process.getuid?.() === 0) chownSync(dir, 65534, 65534);
      await issue(dir, "ivy");
      const owner = statSync(dir).uid;
      const [file] = readdirSync(join(dir, SPOOL));
      assert.deepEqual([statSync(join(dir, SPOOL)).uid, statSync(join(dir, SPOOL, file!)).uid], [owner, owner]);
    } finally {
      removeDir(dir);
    }
  });

  test("backup (no server) is logged in the data dir; restore in the new one, at its first start", async () => {
    const dir = tempDir();
    const out = tempDir();
    const target = join(out, "restored");
    try {
      await (await startTestServer({}, dir)).close();
      assert.equal((await runCli(["backup", "--data-dir", dir, "--out", join(out, "b.tar")])).code, 0);
      const restored = await runCli(["restore", "--in", join(out, "b.tar"), "--data-dir", target]);
      assert.equal(restored.code, 0, restored.stderr);
      const server = await startTestServer({}, target);
      try {
        const list = await entries(server, "action=restore");
        assert.deepEqual(list.map((e) => [e.target, e.actor_kind, e.detail?.from]), [["data_dir", "system", dir]]);
        assert.match(list[0].actor, /^cli:/);
        assert.ok(Number(list[0].detail?.files) > 0);
        // The backup's own entry, written before its snapshot, came with it.
        const [backup] = await entries(server, "action=backup");
        assert.deepEqual([backup.actor_kind, backup.target, backup.actor], ["system", "data_dir", list[0].actor]);
      } finally {
        await server.close();
      }
    } finally {
      removeDir(dir);
      removeDir(out);
    }
  });
});

describe("the CLI beside a running server", () => {
  const server = useTestServer();

  test("token issue is in the log within moments; token revoke and user add are logged by the server as cli:<login>", async () => {
    const { id } = await issue(server.dataDir, "ada");
    const entry = await waitFor(async () => (await entries(server, `target=token:${id}`))[0], 5000, "the token.issue entry");
    assert.equal(entry.action, "token.issue");
    assert.match(entry.actor, /^cli:/);
    assert.equal((await runCli(["token", "revoke", "--id", id, "--data-dir", server.dataDir])).code, 0);
    const revoke = (await entries(server, `target=token:${id}`))[0];
    assert.deepEqual([revoke.action, revoke.actor_kind, revoke.actor], ["token.revoke", "token", entry.actor]);
    const passwordFile = join(server.dataDir, "..", `pw-${process.pid}`);
    writeFileSync(passwordFile, "a long password\n");
    try {
      assert.equal((await runCli(["user", "add", "una", "--scopes", "svc_tests_ro", "--password-file", passwordFile, "--data-dir", server.dataDir])).code, 0);
    } finally {
      removeDir(passwordFile);
    }
    const [add] = await entries(server, "target=user:una");
    assert.deepEqual([add.action, add.actor], ["user.add", entry.actor]);
    assert.equal((await entries(server, `target=token:${id}&action=token.issue`)).length, 1);
  });
  test("entries left while the server takes others are all logged, once: writers and the server never share a file", async () => {
    const at = new Date();
    const targets = Array.from({ length: 300 }, (_, i) => `token:stress-${i}`);
    for (const [i, target] of targets.entries()) {
      appendToSpool(server.dataDir, systemActor("cli:stress", at), "token.issue", target);
      // Let the server's watch fire and take files between writes.
      if (i % 10 === 0) await new Promise((resolve) => setImmediate(resolve));
    }
    await waitFor(async () => (await entries(server, "actor=cli:stress&limit=1000")).length === targets.length, 10_000, "every entry logged");
    const logged = (await entries(server, "actor=cli:stress&limit=1000")).map((e) => e.target).sort();
    assert.deepEqual(logged, [...targets].sort());
  });
});

test("kill -9 of the server and of commands: every token printed is logged exactly once", async () => {
  const dir = tempDir();
  let server = await startServe(["serve", "--data-dir", dir, "--listen", "127.0.0.1:0"]);
  try {
    const printed: string[] = [];
    // Commands killed at some moment of their run: whatever they printed counts.
    const [bin, ...pre] = await labgate();
    const killed = [150, 300, 450, 600].map(async (ms) => {
      const child = spawn(bin, [...pre, "token", "issue", "--user", "kim", "--scopes", "svc_tests_ro", "--data-dir", dir], { stdio: ["ignore", "pipe", "pipe"] });
      let stderr = "";
      child.stderr.on("data", (d) => (stderr += d));
      const timer = setTimeout(() => child.kill("SIGKILL"), ms);
      await once(child, "exit");
      clearTimeout(timer);
      const id = /token id (\S+)/.exec(stderr)?.[1];
      if (id) printed.push(id);
    });
    // Three workers issue tokens; the server is killed after the fourth is printed and is down for the rest.
    const workers = [0, 1, 2].map(async () => {
      for (let i = 0; i < 3; i++) {
        printed.push((await issue(dir, "kim")).id);
        if (printed.length === 4) server.child.kill("SIGKILL");
      }
    });
    await Promise.all([...workers, ...killed]);
    await server.stop("SIGKILL");
    assert.ok(printed.length >= 9);

    server = await startServe(["serve", "--data-dir", dir, "--listen", "127.0.0.1:0"]);
    const call = callWith(requestAt(server.url), readFileSync(join(dir, "admin.token"), "utf8").trim());
    const issued = await entries({ call }, "action=token.issue&limit=1000");
    const targets = issued.map((e) => e.target);
    assert.equal(new Set(targets).size, targets.length, "no entry twice");
    for (const id of printed) assert.ok(targets.includes(`token:${id}`), `token ${id} was printed but is not in the log`);
    // Entries of commands killed after their append and before printing may be there too; nothing else is.
    assert.ok(targets.length <= printed.length + 4);
  } finally {
    await server.stop("SIGKILL");
    removeDir(dir);
  }
});
