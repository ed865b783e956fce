import { strict as assert } from "node:assert";
import { existsSync, readFileSync, statSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { describe, test } from "node:test";
import { FROM_SOURCE, runCli, runInProcess, startServe } from "../helpers/cli.ts";
import { tempDir } from "../helpers/server.ts";
import { databaseUrlFor } from "../helpers/test-database.ts";
import { consoleUrl } from "../../src/cli/main.ts";
import { openDatabase } from "../../src/db/open.ts";

const bearer = (token: string) => ({ authorization: `Bearer token=${token}` });

// Usage and config errors past the first test or two run main() in-process (runInProcess): the
// exit code main() answers is the process's (src/main.ts), which the spawned cases check.
describe("cli: usage and config errors", () => {
  test("version and help", async () => {
    const version = await runCli(["version"]);
    assert.equal(version.code, 0);
    assert.match(version.stdout, new RegExp(`^labgate \\d+\\.\\d+\\.\\d+ \\(commit \\S+, built \\S+, ${process.platform}-${process.arch}, node v\\d+\\.\\d+\\.\\d+\\)\n$`));
    const help = await runCli(["help"]);
    assert.equal(help.code, 0);
    assert.match(help.stdout, /labgate serve/);
    assert.match(help.stdout, /labgate token issue/);
  });

  test("unknown command and unknown flag exit 2", async () => {
    const command = await runCli(["frobnicate"]);
    assert.equal(command.code, 2);
    assert.match(command.stderr, /unknown command "frobnicate"/);
    const flag = await runCli(["serve", "--bogus"]);
    assert.equal(flag.code, 2);
    assert.match(flag.stderr, /--bogus/);
  });

  const badConfigs: Array<[string, string, RegExp]> = [
    ["unknown top-level key", "listne: 0.0.0.0:5000\n", /config key listne: unknown key/],
    ["unknown nested key", "update_server:\n  download_ttl: 5\n", /config key update_server\.download_ttl: unknown key/],
    ["wrong type", "update_server:\n  download_link_ttl: soon\n", /config key update_server\.download_link_ttl: expected an integer/],
    ["bad listen address", "listen: localhost\n", /config key listen: expected HOST:PORT/],
    ["bad enum", "test_server:\n  api_variant: C\n", /config key test_server\.api_variant: expected one of A, B/],
    ["bad node url", "test_server:\n  nodes:\n    dut: ftp://x\n", /config key test_server\.nodes\.dut: expected an http\(s\) URL/],
    ["not YAML", "listen: [unclosed\n", /not valid YAML/],
  ];
  for (const [name, yaml, message] of badConfigs) {
    test(`bad config file (${name}) exits 2 naming the key`, async () => {
      const dir = tempDir();
      writeFileSync(join(dir, "c.yaml"), yaml);
      const result = await runInProcess(["serve", "--config", join(dir, "c.yaml"), "--data-dir", join(dir, "data")]);
      assert.equal(result.code, 2, result.stderr);
      assert.match(result.stderr, message);
      assert.equal(existsSync(join(dir, "data")), false, "nothing is created for a bad config");
    });
  }

  test("bad --listen flag and LABGATE_LISTEN are named", async () => {
    const flag = await runInProcess(["serve", "--listen", "nowhere"]);
    assert.equal(flag.code, 2);
    assert.match(flag.stderr, /--listen: expected HOST:PORT/);
    const env = await runInProcess(["serve"], { LABGATE_LISTEN: "1.2.3.4:99999" });
    assert.equal(env.code, 2);
    assert.match(env.stderr, /LABGATE_LISTEN: expected HOST:PORT/);
  });

  test("a missing --config file exits 2", async () => {
    const result = await runInProcess(["serve", "--config", "/nonexistent/labgate.yaml"]);
    assert.equal(result.code, 2);
    assert.match(result.stderr, /cannot read config file/);
  });

  test("token issue refuses unknown scopes and bad ttl", async () => {
    const dir = tempDir();
    const scope = await runInProcess(["token", "issue", "--user", "u", "--scopes", "svc_root", "--data-dir", dir]);
    assert.equal(scope.code, 2);
    assert.match(scope.stderr, /--scopes: unknown scope "svc_root"/);
    const ttl = await runInProcess(["token", "issue", "--user", "u", "--scopes", "svc_admin_ro", "--ttl", "forever", "--data-dir", dir]);
    assert.equal(ttl.code, 2);
    assert.match(ttl.stderr, /--ttl/);
  });
});

describe("cli: serve", () => {
  test("first start writes admin.token (0600) that works; flags beat env beat file", async () => {
    const dir = tempDir();
    const config = join(dir, "appliance.config.yaml");
    writeFileSync(config, "listen: 127.0.0.1:1\nlog_level: warn\n");
    // The file says port 1 (would fail), env overrides it with port 0 on another host form, the flag wins over both.
    // From source, as `npm start` runs it (every other child process of the tests runs the bundle).
    const server = await startServe(["serve", "--data-dir", join(dir, "data"), "--listen", "127.0.0.1:0"], {
      cwd: dir,
      env: { LABGATE_LISTEN: "127.0.0.1:2" },
      command: FROM_SOURCE,
    });
    try {
      assert.match(server.url, /^http:\/\/127\.0\.0\.1:\d+$/);
      assert.match(server.stdout(), new RegExp(`^labgate: web console at ${server.url}/\n`, "m"));
      const tokenFile = join(dir, "data", "admin.token");
      assert.equal(statSync(tokenFile).mode & 0o777, 0o600);
      assert.match(server.stderr(), /admin\.token/);
      assert.match(server.stderr(), /console account "admin" \(all scopes\) created; its password is in \S+admin\.password/);
      const token = readFileSync(tokenFile, "utf8").trim();
      const whoami = await fetch(`${server.url}/api/whoami`, { headers: bearer(token) });
      assert.equal(whoami.status, 200);
      const body = (await whoami.json()) as { sub: string; scopes: string[] };
      assert.equal(body.sub, "admin");
      assert.ok(body.scopes.includes("svc_admin_rw") && body.scopes.includes("svc_tests_rw"));

      // token issue works while the server runs on the same data dir
      const issued = await runCli(["token", "issue", "--user", "alice", "--scopes", "svc_tests_ro,admin_ro", "--ttl", "1h", "--data-dir", join(dir, "data")]);
      assert.equal(issued.code, 0, issued.stderr);
      assert.match(issued.stdout, /^[\w-]+\.[\w-]+\.[\w-]+\n$/);
      const alice = await fetch(`${server.url}/api/whoami`, { headers: bearer(issued.stdout.trim()) });
      assert.deepEqual(((await alice.json()) as { scopes: string[] }).scopes.sort(), ["svc_admin_ro", "svc_tests_ro"]);

      // a second server on the same data dir refuses
      const second = await runCli(["serve", "--data-dir", join(dir, "data"), "--listen", "127.0.0.1:0"]);
      assert.equal(second.code, 1);
      assert.match(second.stderr, /is in use by labgate process \d+/);
    } finally {
      assert.equal(await server.stop("SIGTERM"), 0, "SIGTERM exits 0");
    }
    assert.equal(existsSync(join(dir, "data", "labgate.lock")), false, "the lock is released");

    // env beats the file when no flag is given
    const again = await startServe(["serve", "--data-dir", join(dir, "data")], { cwd: dir, env: { LABGATE_LISTEN: "127.0.0.1:0" } });
    assert.match(again.stderr(), /^(?![\s\S]*admin\.token)/, "no new admin token on a second start");
    assert.match(again.stderr(), /^(?![\s\S]*admin\.password)/, "no new admin account on a second start");
    assert.equal(await again.stop("SIGINT"), 0, "SIGINT exits 0");
  });

  test("a first start that ended after migrating, before admin.token, writes it on the next start (both engines)", async () => {
    const data = join(tempDir(), "data");
    // What a first start killed between its migrations' commit and the token leaves: a migrated database, no files.
    const opened = await openDatabase({ dataDir: data, url: (await databaseUrlFor(data)) ?? "", log: () => {} });
    assert.ok(opened.applied.length > 0, "the open migrated");
    await opened.close();
    assert.equal(existsSync(join(data, "admin.token")), false);
    const server = await startServe(["serve", "--data-dir", data, "--listen", "127.0.0.1:0"]);
    try {
      assert.match(server.stderr(), /first start: an admin token \(all scopes\) is in \S+admin\.token/);
      const token = readFileSync(join(data, "admin.token"), "utf8").trim();
      const whoami = await fetch(`${server.url}/api/whoami`, { headers: bearer(token) });
      assert.equal(whoami.status, 200);
      assert.equal(((await whoami.json()) as { sub: string }).sub, "admin");
    } finally {
      assert.equal(await server.stop("SIGTERM"), 0);
    }
  });

  test("a lock left by a dead process does not block the start", async () => {
    const dir = tempDir();
    const first = await startServe(["serve", "--data-dir", dir, "--listen", "127.0.0.1:0"]);
    assert.equal(await first.stop("SIGKILL"), null);
    assert.ok(existsSync(join(dir, "labgate.lock")), "kill -9 leaves the lock file behind");
    const second = await startServe(["serve", "--data-dir", dir, "--listen", "127.0.0.1:0"]);
    const health = await fetch(`${second.url}/api/health`);
    assert.equal(health.status, 200);
    assert.equal(await second.stop(), 0);
  });

  test("a damaged database file: refuses to start with a clear message and leaves it alone", async () => {
    const dir = tempDir();
    writeFileSync(join(dir, "labgate.db"), Buffer.alloc(5000, 7));
    // The embedded engine's own file: on that engine whatever the suite runs on.
    const result = await runCli(["serve", "--data-dir", dir, "--listen", "127.0.0.1:0"], { env: { LABGATE_DATABASE_URL: "" } });
    assert.equal(result.code, 1);
    assert.match(result.stderr, /labgate\.db is not a SQLite database/);
    assert.deepEqual(readFileSync(join(dir, "labgate.db")), Buffer.alloc(5000, 7));
    assert.equal(existsSync(join(dir, "labgate.lock")), false);
  });
});

test("the start names the console's URL: public_url, or the listener with a wildcard address as loopback", () => {
  assert.equal(consoleUrl("", "http://0.0.0.0:5000"), "http://127.0.0.1:5000/");
  assert.equal(consoleUrl("", "https://[::]:8443"), "https://127.0.0.1:8443/");
  assert.equal(consoleUrl("", "http://10.0.0.1:5000"), "http://10.0.0.1:5000/");
  assert.equal(consoleUrl("https://gateway.lab:5000", "http://0.0.0.0:5000"), "https://gateway.lab:5000/");
});
