import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { chmodSync, mkdirSync, readdirSync, readFileSync, statSync, writeFileSync } from "node:fs";
import { join, relative } from "node:path";
import { promisify } from "node:util";
import { after, describe, test } from "node:test";
import { removeDir, tempDir } from "../helpers/server.ts";

const run = promisify(execFile);
const dir = tempDir("labgate-service-");
after(() => removeDir(dir));

const fake = join(dir, "labgate-executable");
writeFileSync(fake, "#!/bin/sh\necho labgate\n");
chmodSync(fake, 0o755);

/** Runs scripts/install.sh with `args`; resolves with its output, rejects on a non-zero exit. */
const install = (...args: string[]) => run("sh", ["scripts/install.sh", "--executable", fake, ...args]);

/** Every file under `root` with its mode and content, for comparing two installs. */
function tree(root: string): Record<string, string> {
  const out: Record<string, string> = {};
  const walk = (path: string) => {
    for (const entry of readdirSync(path, { withFileTypes: true })) {
      const full = join(path, entry.name);
      if (entry.isDirectory()) walk(full);
      else out[relative(root, full)] = `${(statSync(full).mode & 0o777).toString(8)} ${readFileSync(full, "utf8")}`;
    }
  };
  walk(root);
  return out;
}

describe("systemd service", () => {
  const root = join(dir, "root");

  test("install.sh into a staging root: executable, units, sysusers entry, configs; a second run changes nothing and keeps an edited config", async () => {
    const first = await install("--destdir", root);
    assert.match(first.stdout, /installed \/usr\/local\/bin\/labgate\n/);
    const files = tree(root);
    assert.deepEqual(Object.keys(files).sort(), [
      "etc/labgate/agent.yaml",
      "etc/labgate/labgate.yaml",
      "etc/systemd/system/labgate-agent.service",
      "etc/systemd/system/labgate.service",
      "etc/sysusers.d/labgate.conf",
      "usr/local/bin/labgate",
    ]);
    assert.equal(files["usr/local/bin/labgate"], `755 ${readFileSync(fake, "utf8")}`);
    // The defaults, but the service's tests run as labgate-runner.
    const config = readFileSync("appliance.config.yaml", "utf8");
    assert.match(config, /^  run_as: ""$/m);
    assert.equal(files["etc/labgate/labgate.yaml"], `640 ${config.replace(/^  run_as: ""$/m, "  run_as: labgate-runner")}`);
    assert.equal(files["etc/systemd/system/labgate.service"], `644 ${readFileSync("scripts/labgate.service", "utf8")}`);

    const edited = join(root, "etc/labgate/labgate.yaml");
    writeFileSync(edited, "listen: 0.0.0.0:8443\n");
    const before = tree(root);
    const second = await install("--destdir", root);
    assert.equal(second.stdout, "", "nothing to install the second time");
    assert.deepEqual(tree(root), before);

    // The sysusers entry makes the user (checked inside the staging root, not on this machine).
    await run("systemd-sysusers", [`--root=${root}`, join(root, "etc/sysusers.d/labgate.conf")]);
    assert.match(readFileSync(join(root, "etc/passwd"), "utf8"), /^labgate:x:\d+:\d+:[^:]*:\/var\/lib\/labgate:/m);
    assert.match(readFileSync(join(root, "etc/passwd"), "utf8"), /^labgate-runner:x:\d+:\d+:[^:]*:\/nonexistent:/m);
    assert.match(readFileSync(join(root, "etc/group"), "utf8"), /^labgate-runner:x:\d+:labgate$/m, "the server is in the runner's group");
  });

  test("--prefix: the executable goes to PREFIX/bin and the units run it from there", async () => {
    const other = join(dir, "prefixed");
    await install("--destdir", other, "--prefix", "/opt/labgate");
    assert.equal(statSync(join(other, "opt/labgate/bin/labgate")).mode & 0o777, 0o755);
    for (const unit of ["labgate.service", "labgate-agent.service"]) {
      const text = readFileSync(join(other, "etc/systemd/system", unit), "utf8");
      assert.match(text, /^ExecStart=\/opt\/labgate\/bin\/labgate /m);
      assert.doesNotMatch(text, /\/usr\/local\/bin/);
    }
    await assert.rejects(install("--prefix", "relative/path", "--destdir", other), /must be an absolute path/);
  });

  test("the units have the hardening the README promises and pass systemd-analyze verify", async () => {
    const server = readFileSync("scripts/labgate.service", "utf8");
    for (const line of [
      /^User=labgate$/m,
      /^StateDirectory=labgate labgate-runs$/m,
      // Switching to the test runner is the only privilege (README: "Who tests run as").
      /^SupplementaryGroups=labgate-runner$/m,
      /^AmbientCapabilities=CAP_SETUID CAP_SETGID$/m,
      /^CapabilityBoundingSet=CAP_SETUID CAP_SETGID$/m,
      /^Restart=on-failure$/m,
      /^ProtectSystem=strict$/m,
      /^ProtectHome=yes$/m,
      /^NoNewPrivileges=yes$/m,
      /^PrivateTmp=yes$/m,
      /^ReadWritePaths=\/var\/lib\/labgate \/var\/lib\/labgate-runs$/m,
      /^LimitNOFILE=65536$/m,
      /^ExecReload=\/bin\/kill -HUP \$MAINPID$/m,
      // A cgroup per test run (README: "Who tests run as").
      /^Delegate=yes$/m,
      // Idle and after-fan-out memory (README, issue 31).
      /^Environment=MALLOC_ARENA_MAX=2 MALLOC_MMAP_THRESHOLD_=131072 MALLOC_TRIM_THRESHOLD_=131072$/m,
    ]) {
      assert.match(server, line);
    }
    assert.match(readFileSync("scripts/labgate-agent.service", "utf8"), /^StateDirectory=labgate-agent$/m);
    assert.match(readFileSync("scripts/labgate-agent.service", "utf8"), /^Delegate=yes$/m);

    // verify checks that ExecStart's program exists: point the installed units at the staged one.
    const units = join(dir, "verify");
    mkdirSync(units);
    for (const unit of ["labgate.service", "labgate-agent.service"]) {
      const text = readFileSync(join(root, "etc/systemd/system", unit), "utf8").replaceAll("/usr/local/bin/labgate", join(root, "usr/local/bin/labgate"));
      writeFileSync(join(units, unit), text);
      const { stdout, stderr } = await run("systemd-analyze", ["verify", join(units, unit)]).catch((error: { stderr?: string; message: string }) =>
        assert.fail(`systemd-analyze verify ${unit}: ${error.stderr || error.message}`),
      );
      assert.equal(stdout + stderr, "", `${unit}: no warnings`);
    }
  });
});
