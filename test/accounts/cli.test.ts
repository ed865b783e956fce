import assert from "node:assert/strict";
import { existsSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { after, describe, test } from "node:test";
import { runCli, runInProcess } from "../helpers/cli.ts";
import { removeDir, requestAt, startTestServer, tempDir } from "../helpers/server.ts";
import { makeCert, trustingFetch } from "../helpers/tls.ts";
import { login } from "./helpers.ts";

const dir = tempDir("labgate-user-cli-");
after(() => removeDir(dir));

const user = (dataDir: string, args: string[], input?: string) => runCli(["user", ...args, "--data-dir", dataDir], { input });

describe("cli: labgate user", () => {
  test("before the first start there is no database to add to", async () => {
    const res = await user(join(dir, "fresh"), ["list"]);
    assert.equal(res.code, 1);
    assert.match(res.stderr, /run labgate serve once first/);
  });

  test("add, passwd, disable, list while a server runs on the data dir; enable and list with none; the server sees each change", async () => {
    const dataDir = join(dir, "data");
    const passwordFile = join(dir, "alice.password");
    writeFileSync(passwordFile, "alice-password\n");
    let server = await startTestServer({}, dataDir);
    try {
      const added = await user(dataDir, ["add", "alice", "--scopes", "svc_tests_rw,admin_ro", "--password-file", passwordFile]);
      assert.equal(added.code, 0, added.stderr);
      assert.match(added.stdout, /^alice\tenabled\tsvc_admin_ro,svc_tests_rw\t/);
      assert.equal((await login(server, "alice", "alice-password")).status, 200);

      const again = await user(dataDir, ["add", "ALICE", "--scopes", "svc_tests_ro", "--password-file", passwordFile]);
      assert.equal(again.code, 1);
      assert.match(again.stderr, /already exists/);

      const passwd = await user(dataDir, ["passwd", "alice"], "alice-new-password\n");
      assert.equal(passwd.code, 0, passwd.stderr);
      assert.equal((await login(server, "alice", "alice-password")).status, 401);
      assert.equal((await login(server, "alice", "alice-new-password")).status, 200);

      const disabled = await user(dataDir, ["disable", "alice"]);
      assert.equal(disabled.code, 0, disabled.stderr);
      assert.match(disabled.stdout, /^alice\tdisabled\t/);
      assert.equal((await login(server, "alice", "alice-new-password")).status, 401);

      const lastAdmin = await user(dataDir, ["disable", "admin"]);
      assert.equal(lastAdmin.code, 1);
      assert.match(lastAdmin.stderr, /last enabled account with admin_rw/);

      const list = await user(dataDir, ["list"]);
      assert.equal(list.code, 0, list.stderr);
      assert.deepEqual(
        list.stdout.trim().split("\n").map((l) => l.split("\t").slice(0, 2).join(" ")),
        ["admin enabled", "alice disabled"],
      );
    } finally {
      await server.close();
    }
    assert.equal(existsSync(join(dataDir, "server.url")), false, "the server's address file goes with it");

    const enabled = await user(dataDir, ["enable", "alice"]);
    assert.equal(enabled.code, 0, enabled.stderr);
    assert.match(enabled.stdout, /^alice\tenabled\t/);
    server = await startTestServer({}, dataDir);
    try {
      assert.equal(server.server.adminPasswordFile, undefined, "accounts exist: no new admin");
      assert.equal((await login(server, "alice", "alice-new-password")).status, 200);
    } finally {
      await server.close();
    }
  });

  test("usage errors exit 2 and change nothing", async () => {
    const dataDir = join(dir, "usage");
    const server = await startTestServer({}, dataDir);
    await server.close();
    // A password too short, read from stdin, in a child process; the errors found before any
    // password is read in this one (runInProcess).
    const short = await user(dataDir, ["add", "bob", "--scopes", "svc_tests_ro"], "short\n");
    assert.equal(short.code, 2, short.stderr);
    assert.match(short.stderr, /at least 8 characters/);
    for (const [args, message] of [
      [["add", "bad name", "--scopes", "svc_tests_ro"], /name: 1 to 64/],
      [["add", "bob", "--scopes", "svc_root"], /unknown scope "svc_root"/],
      [["add", "bob"], /--scopes: required/],
      [["passwd"], /one account name/],
      [["frob", "bob"], /unknown user command "frob"/],
    ] as const) {
      const res = await runInProcess(["user", ...args, "--data-dir", dataDir]);
      assert.equal(res.code, 2, `${args.join(" ")}: ${res.stderr}`);
      assert.match(res.stderr, message);
    }
    const list = await user(dataDir, ["list"]);
    assert.deepEqual(list.stdout.trim().split("\n").map((l) => l.split("\t")[0]), ["admin"]);
  });

  test("through a server speaking HTTPS: the CLI trusts exactly its configured certificate", async () => {
    const cert = makeCert(dir, "cli-server");
    const dataDir = join(dir, "tls");
    const config = join(dir, "tls.yaml");
    writeFileSync(config, `tls:\n  cert_file: ${cert.cert}\n  key_file: ${cert.key}\n`);
    const server = await startTestServer({ tls: { cert_file: cert.cert, key_file: cert.key } }, dataDir);
    server.request = requestAt(server.url, trustingFetch(cert.cert));
    try {
      const added = await runCli(["user", "add", "carol", "--scopes", "svc_admin_ro", "--config", config, "--data-dir", dataDir], { input: "carol-password\n" });
      assert.equal(added.code, 0, added.stderr);
      assert.equal((await login(server, "carol", "carol-password")).status, 200);

      // Another certificate in the config: the CLI refuses to talk (and sends no token).
      const other = makeCert(dir, "other");
      writeFileSync(config, `tls:\n  cert_file: ${other.cert}\n  key_file: ${other.key}\n`);
      const refused = await runCli(["user", "list", "--config", config, "--data-dir", dataDir]);
      assert.equal(refused.code, 1);
      assert.match(refused.stderr, /does not present/);
    } finally {
      await server.close();
    }
  });
});
