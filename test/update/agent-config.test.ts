import assert from "node:assert/strict";
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { test } from "node:test";
import { loadAgentConfig } from "../../src/agent/config.ts";
import { ConfigError } from "../../src/config/config.ts";
import { runCli } from "../helpers/cli.ts";
import { tempDir } from "../helpers/server.ts";

const MAC = "0a:00:00:00:00:01";

function configFile(text: string): { dir: string; file: string } {
  const dir = tempDir("labgate-agent-config-");
  const file = join(dir, "agent.yaml");
  writeFileSync(file, text);
  return { dir, file };
}

test("agent config: flags beat the file, which beats the defaults; relative dirs from the working directory", () => {
  const { dir, file } = configFile(`server: http://from-file:5000/\ndata_dir: file-data\nmac_address: "0A:00:00:00:00:01"\nfile_base_dir: logs\n`);
  const fromFile = loadAgentConfig({ file, cwd: dir });
  assert.equal(fromFile.server, "http://from-file:5000");
  assert.equal(fromFile.data_dir, join(dir, "file-data"));
  assert.equal(fromFile.mac_address, MAC);
  assert.equal(fromFile.file_base_dir, join(dir, "logs"));
  assert.equal(fromFile.update_check_interval, 60);
  assert.equal(fromFile.software_version, "0");
  assert.deepEqual(fromFile.actions.map((a) => a.id), ["uptime"]);
  // No shell sessions unless a command is configured; they start in file_base_dir.
  assert.deepEqual(fromFile.shell, { command: [], cwd: join(dir, "logs"), idle_timeout: 900, max_sessions: 2 });
  // Test runs from the gateway are the device owner's decision: off unless turned on.
  assert.deepEqual(fromFile.tests, { enabled: false, max_duration: 3600, sys_root: "/sys", dev_root: "/dev", firmware_root: "/lib/firmware", run_as: undefined, work_dir: join(dir, "file-data-runs") });

  const flagged = loadAgentConfig({ file, cwd: dir, server: "http://from-flag:1", dataDir: "/tmp/flag-data" });
  assert.equal(flagged.server, "http://from-flag:1");
  assert.equal(flagged.data_dir, "/tmp/flag-data");
  // Without a file, the flags alone.
  assert.equal(loadAgentConfig({ server: "http://only-flag:2", cwd: dir, dataDir: "d" }).data_dir, join(dir, "d"));
});

test("agent config: every bad value names its key", () => {
  const cases: Array<[string, RegExp]> = [
    ["mac_address: bogus", /mac_address: expected six hex pairs/],
    ["software_version: 1.10", /software_version: expected a non-empty string/],
    ["software_version: 7", /^$/],
    ["shell: {bogus: 1}", /shell\.bogus: unknown key/],
    ["shell: {command: sh}", /shell\.command: expected a list of strings/],
    ["shell: []", /shell: expected a mapping/],
    ["shell: {max_sessions: 0}", /shell\.max_sessions: expected a number >= 1/],
    ["actions: [{id: a, command: []}]", /actions\[0\]\.command: must not be empty/],
    ["key_type: dsa", /key_type: expected rsa or ed25519/],
    ["update_check_interval: -1", /update_check_interval/],
    ["tests: {enabled: yes please}", /tests\.enabled: expected true or false/],
    ["tests: {max_duration: -5}", /tests\.max_duration: expected a number >= 0/],
    ["tests: {run: 1}", /tests\.run: unknown key/],
    ["tests: {sys_root: ''}", /tests\.sys_root: expected a directory/],
    ["tests: {run_as: labgate-no-such-user}", /agent config key tests\.run_as: no user 'labgate-no-such-user' on this machine/],
    ["tests: {run_as: root}", /tests\.run_as: 'root' is root; name an unprivileged user/],
    ["tests: {run_as: 'a b'}", /tests\.run_as: expected a user name or user:group/],
    ["tests: {work_dir: ./agent-data/runs}", /tests\.work_dir: .* is inside the data dir/],
  ];
  for (const [line, message] of cases) {
    const mac = line.startsWith("mac_address") ? "" : `mac_address: "${MAC}"\n`;
    const { dir, file } = configFile(`server: http://gw:5000\n${mac}${line}\n`);
    const load = () => loadAgentConfig({ file, cwd: dir });
    if (message.source === "^$") {
      assert.equal(load().software_version, "7");
      continue;
    }
    assert.throws(load, (error: Error) => error instanceof ConfigError && message.test(error.message), line);
  }
  const { dir } = configFile("");
  assert.throws(() => loadAgentConfig({ cwd: dir, dataDir: "d" }), /server: required/);
  assert.throws(() => loadAgentConfig({ cwd: dir, server: "ftp://gw" }), /server: expected an http\(s\) URL/);
  assert.throws(() => loadAgentConfig({ cwd: dir, file: "missing.yaml" }), /--config: file .* does not exist/);
});

test("agent config: server may be a list of URLs (the nodes of a cluster, in the order tried); one URL stays a list of one", () => {
  const load = (text: string) => {
    const { dir, file } = configFile(`mac_address: "${MAC}"\n${text}\n`);
    return loadAgentConfig({ file, cwd: dir });
  };
  const listed = load("server:\n  - http://node-1:5000/\n  - https://node-2:5443");
  assert.deepEqual([listed.server, listed.servers], ["http://node-1:5000", ["http://node-1:5000", "https://node-2:5443"]]);
  const single = load("server: http://gw:5000");
  assert.deepEqual([single.server, single.servers], ["http://gw:5000", ["http://gw:5000"]]);
  const refused: Array<[string, RegExp]> = [
    ["server: []", /agent config key server: expected at least one URL/],
    ["server: [http://a:1, ftp://b]", /agent config key server\[1\]: expected an http\(s\) URL, got "ftp:\/\/b"/],
    ["server: [http://a:1, 5]", /agent config key server\[1\]: expected a string, got 5/],
    ["server: [http://a:1, http://a:1/]", /agent config key server: lists http:\/\/a:1 twice/],
  ];
  for (const [line, message] of refused) assert.throws(() => load(line), (error: Error) => error instanceof ConfigError && message.test(error.message), line);
});

test("labgate agent: a bad flag or config exits 2 with one message naming it", async () => {
  const { dir, file } = configFile(`server: http://gw:5000\nmac_address: nope\n`);
  const run = (args: string[]) => runCli(["agent", ...args]);
  // (A missing server and the other keys: ConfigError above, which main() maps to exit 2.)
  const [badFlag, badMac] = await Promise.all([run(["--bogus"]), run(["--config", file, "--data-dir", join(dir, "d")])]);
  assert.equal(badFlag.code, 2);
  assert.match(badFlag.stderr, /bogus/);
  assert.deepEqual([badMac.code, /mac_address: expected/.test(badMac.stderr)], [2, true], badMac.stderr);
  assert.equal(badMac.stderr.trim().split("\n").length, 1, "one line");
});
