// What one device may leave in a run (docs/device-tests.md): a directory of its own whatever the
// names, and a budget of artifact files and report-row bytes (test_server.device_artifacts_max_files,
// device_report_max_bytes) past which its uploads get 413 and its share fails.
import assert from "node:assert/strict";
import { readdirSync, statSync } from "node:fs";
import { join } from "node:path";
import { after, describe, test } from "node:test";
import { useTestServer } from "../helpers/server.ts";
import { FAST_SERVER } from "../update/helpers/agents.ts";
import { protocolDevice, type ProtocolDevice } from "./device-helpers.ts";
import { uploadConfig, waitRun } from "./run-helpers.ts";

const MAX_FILES = 20;
const MAX_REPORT = 100_000;
const devices: ProtocolDevice[] = [];
after(() => devices.forEach((d) => d.close()));
const server = useTestServer({ ...FAST_SERVER, test_server: { device_wait: 5, device_artifacts_max_files: MAX_FILES, device_report_max_bytes: MAX_REPORT } }, (s) =>
  uploadConfig(s, "bounds.yml", "tests:\n  g:\n  - exec:\n      command: [true]\n"),
);

/** Every file and directory under `dir`, relative. */
function entries(dir: string, prefix = ""): string[] {
  return readdirSync(join(dir, prefix), { withFileTypes: true }).flatMap((e) => {
    const name = prefix ? `${prefix}/${e.name}` : e.name;
    return e.isDirectory() ? [name, ...entries(dir, name)] : [name];
  });
}

/** A run of bounds.yml on `target`; the run id. */
async function start(target: string): Promise<string> {
  const started = await server.call("POST", "/api/v1/test-runs", { config_name: "bounds.yml", machine_target: target });
  assert.equal(started.status, 200, JSON.stringify(started.body));
  return started.body.id as string;
}

const artifacts = (id: string) => join(server.dataDir, "testrun", "artifacts", id);

describe("runs on devices: each device within its own directory and budget", () => {
  test("devices named dup, dup_020000007e13 and dup (MAC …7e:13) get three directories: each upload starts at 0 and holds its own bytes", async () => {
    const named = [await protocolDevice(server, "dup"), await protocolDevice(server, "dup_020000007e13"), await protocolDevice(server, "dup", "02:00:00:00:7e:13")];
    devices.push(...named);
    for (const d of named) assert.equal((await server.call("POST", `/api/v2/devices/${d.id}/tag/dupes`)).status, 200);
    const id = await start("tag:dupes");
    const runs = await Promise.all(named.map((d) => d.next("test_run_start")));
    assert.ok(runs.every((r) => r.run_id === id));
    for (const [i, d] of named.entries()) {
      // One after the other: a device sharing an earlier one's directory would be told to continue after its bytes.
      assert.deepEqual(await d.upload(id, "out.txt", ""), { status: 200, body: { offset: 0 } }, `device ${i}'s first upload`);
      assert.deepEqual(await d.upload(id, "out.txt", `device ${i}\n`), { status: 200, body: { offset: 9 } });
      d.send({ method: "test_run_end", run_id: id, status: "finished", error: null, warnings: [] });
    }
    const run = await waitRun(server, id);
    const dirs = (run.devices as Array<{ mac: string; dir: string }>).map((d): [string, string] => [d.mac, d.dir]);
    assert.deepEqual(new Map(dirs), new Map([[named[0].mac, "dup"], [named[1].mac, "dup_020000007e13"], [named[2].mac, "dup_020000007e13_2"]]));
    for (const [i, d] of named.entries()) {
      const dir = dirs.find(([mac]) => mac === d.mac)![1];
      const got = await server.request(`/api/v1/test-runs/${id}/artifacts/${dir}/out.txt`, { token: server.adminToken });
      assert.equal(await got.text(), `device ${i}\n`, dir);
    }
  });

  test(`artifact files and the directories they make count: past ${MAX_FILES} a new one is a 413 (its JSON error names the key), one side by side with others too`, async () => {
    const device = await protocolDevice(server, "many-files");
    devices.push(device);
    const id = await start(`device:${device.mac}`);
    await device.next("test_run_start");
    assert.equal((await device.upload(id, "a/b.txt", "x")).status, 200); // a directory and a file: two
    for (let i = 0; i < MAX_FILES - 2; i++) assert.equal((await device.upload(id, `f${i}.txt`, "")).status, 200, `file ${i}`);
    for (const name of ["more.txt", "a/more.txt", "c/d.txt"]) {
      const refused = await device.upload(id, name, "y");
      assert.equal(refused.status, 413, name);
      assert.equal(refused.body.error, `artifacts of one device are limited to ${MAX_FILES} files and directories (test_server.device_artifacts_max_files)`);
    }
    // An artifact it has goes on.
    assert.deepEqual(await device.upload(id, "a/b.txt", "z", 1), { status: 200, body: { offset: 2 } });
    const mine = join(artifacts(id), "many-files");
    assert.equal(entries(mine).length, MAX_FILES);

    // A flood side by side on a second run: exactly the budget is made.
    device.send({ method: "test_run_end", run_id: id, status: "finished", error: null, warnings: [] });
    await waitRun(server, id);
    const flood = await start(`device:${device.mac}`);
    await device.next("test_run_start");
    const answers = await Promise.all(Array.from({ length: 200 }, (_, i) => device.upload(flood, `n${i % 50}/e${i}.txt`, "")));
    const counted = answers.reduce((n, a) => n + (a.status === 200 ? 1 : 0), 0);
    assert.ok(answers.every((a) => a.status === 200 || a.status === 413), JSON.stringify(answers.filter((a) => a.status !== 200 && a.status !== 413).slice(0, 3)));
    assert.ok(counted > 0 && counted < MAX_FILES, `${counted} uploads stored`);
    assert.ok(entries(join(artifacts(flood), "many-files")).length <= MAX_FILES);
    device.send({ method: "test_run_end", run_id: flood, status: "finished", error: null, warnings: [] });
    await waitRun(server, flood);
  });

  test(`report rows count by their bytes: past ${MAX_REPORT} the share fails, the device is told to stop, and the report stays within the budget`, async () => {
    const device = await protocolDevice(server, "many-rows");
    devices.push(device);
    const id = await start(`device:${device.mac}`);
    await device.next("test_run_start");
    const message = "m".repeat(10_000);
    for (let i = 0; i < 50; i++) device.row(id, { test_name: `case${i}`, message });
    const abort = await device.next("test_run_abort");
    const error = `the device's report rows went over ${MAX_REPORT} bytes (test_server.device_report_max_bytes)`;
    assert.deepEqual([abort.run_id, abort.reason], [id, error]);
    const run = await waitRun(server, id);
    assert.deepEqual([run.status, run.error], ["failed", "device 'many-rows': " + error]);
    const size = statSync(join(server.dataDir, "testrun", "reports", `${id}.csv`)).size;
    // The rows it sent within the budget, the header, and the case it never reported (failed with the reason).
    assert.ok(size > MAX_REPORT - 10_100 && size <= MAX_REPORT + 1000, `report of ${size} bytes`);
    const rows = (await server.call("GET", `/api/v1/test-runs/${id}/report?format=json`)).body as Array<Record<string, string>>;
    assert.equal(rows.filter((r) => r.message === message).length, 9);
    assert.ok(rows.some((r) => r.message === error && r.status === "failed"));
  });
});
