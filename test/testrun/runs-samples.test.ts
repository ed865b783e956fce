import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { chmodSync, copyFileSync, mkdirSync, readdirSync, readFileSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { after, before, describe, test } from "node:test";
import { FakeBoard, sampleBoard } from "../helpers/fake-board.ts";
import { removeDir, tempDir, useTestServer } from "../helpers/server.ts";
import { BUILTIN_MODULES } from "../../src/testrun/modules/registry.ts";
import { reportRows, trigger, uploadConfig, waitRun } from "./run-helpers.ts";

const HARDWARE = ["network", "usbdev", "adc", "dac", "thermal", "mmc", "block", "gpio", "i2c", "i2c_registers", "spi", "camera", "memtester", "fpga"].map((k) => `${k}.yml`);
const ASSETS = join(dirname(fileURLToPath(import.meta.url)), "..", "..", "assets", "testrun");

describe("sample configs in assets/testrun/samples run green", () => {
  let fakeBin: string | undefined;
  let board: FakeBoard;
  const savedPath = process.env.PATH;

  before(async () => {
    // The ping sample needs a system ping; where the box has none, a stand-in answers as iputils does.
    if (spawnSync("sh", ["-c", "command -v ping"]).status !== 0) {
      fakeBin = tempDir("labgate-bin-");
      writeFileSync(join(fakeBin, "ping"), '#!/bin/sh\necho "1 packets transmitted, 1 received, 0% packet loss, time 0ms"\necho "rtt min/avg/max/mdev = 0.04/0.04/0.04/0.00 ms"\n');
      chmodSync(join(fakeBin, "ping"), 0o755);
      process.env.PATH = `${fakeBin}:${savedPath}`;
    }
    // The hardware samples run against the board they were written for, its tools on the PATH.
    board = sampleBoard(new FakeBoard());
  });
  const s = useTestServer(
    () => ({ test_server: { compat_modules: true, ...board.config } as never }),
    async (s) => {
      mkdirSync(join(s.dataDir, "testrun", "modules"), { recursive: true });
      copyFileSync(join(ASSETS, "modules", "hello.yaml"), join(s.dataDir, "testrun", "modules", "hello.yaml"));
    },
  );
  after(() => {
    board.remove();
    process.env.PATH = savedPath;
    if (fakeBin) removeDir(fakeBin);
  });

  const samples = readdirSync(join(ASSETS, "samples")).filter((f) => f.endsWith(".yml"));

  test("there is one sample per module, and the console's tour (suites, override hints, artifacts)", () => {
    const modules = BUILTIN_MODULES.map((m) => `${m.key}.yml`);
    assert.deepEqual(samples.filter((f) => !modules.includes(f)).sort(), ["script.yml", "suites.yml"]);
    assert.deepEqual(modules.filter((f) => !samples.includes(f)), []);
  });

  for (const sample of samples) {
    test(sample, async () => {
      await uploadConfig(s, sample, readFileSync(join(ASSETS, "samples", sample), "utf8"));
      const port = new URL(s.url).port;
      const extra: Record<string, unknown> = {
        "http.yml": { overrides: `tests.web.0.http.url: ${s.url}/api/health` },
        "tcp.yml": { overrides: `tests.ports.0.tcp.port: ${port}` },
        "simple.yml": { pattern: "not failure" },
        "extended_simple.yml": { pattern: "not failure" },
        // Its pause is there for the console's tour (its length is an override hint): not waited here.
        "suites.yml": { overrides: "tests.soak.0.sleep.seconds: 0" },
      }[sample] ?? {};
      const run = await waitRun(s, (await trigger(s, { config_name: sample, ...extra })).id, undefined, 30_000);
      const rows = await reportRows(s, run.id);
      assert.equal(run.status, "finished", JSON.stringify({ run, rows }, null, 1));
      assert.ok(rows.length > 0);
      assert.ok(rows.every((r) => r.status !== "failed"));
      // On the board they were written for, the hardware samples skip nothing.
      if (HARDWARE.includes(sample)) assert.ok(rows.every((r) => r.status === "passed"), JSON.stringify(rows));
      if (sample === "junit.yml") {
        assert.deepEqual(
          rows.map((r) => [r["device name"], r["test name"], r.status]),
          [
            ["shell-suite", "command[test_config0]", "passed"],
            ["shell-suite", "checks.disk_present[test_config0]", "passed"],
            ["shell-suite", "checks.optional_tool[test_config0]", "skipped"],
          ],
        );
      }
    });
  }
});
