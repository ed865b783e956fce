// Who sees a device's results (docs/device-tests.md): a reader of runs sees only the devices it
// may `read`; the run object, the report (CSV, JSON, by device, summary), the artifacts, the live
// stream and the config's history leave the others out, names and MAC addresses included.
import assert from "node:assert/strict";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";
import { parse } from "csv-parse/sync";
import { openReportCsv, ReportWriter, SEED_COLUMNS } from "../../src/testrun/engine/report.ts";
import { openStream, type SseEvent } from "../helpers/events.ts";
import { tempDir, useTestServer } from "../helpers/server.ts";
import { FAST_SERVER } from "../update/helpers/agents.ts";
import { protocolDevice, type ProtocolDevice } from "./device-helpers.ts";
import { uploadConfig, waitRun, type RunObject } from "./run-helpers.ts";

const devices: ProtocolDevice[] = [];
after(() => devices.forEach((d) => d.close()));
const server = useTestServer({ ...FAST_SERVER, test_server: { device_wait: 5 } });

/** Plays one device's share: a row per case name, an artifact, then the end. */
async function share(device: ProtocolDevice, cases: string[], end: { status: string; error: string | null; warnings: string[] }): Promise<string> {
  const start = await device.next("test_run_start");
  const run = start.run_id as string;
  for (const name of cases) device.row(run, { test_name: name, status: end.status === "failed" ? "failed" : "passed", message: `${name} says hi`, artifacts: ["out.txt"] });
  assert.equal((await device.upload(run, "out.txt", `bytes of ${cases[0]}\n`)).status, 200);
  device.send({ method: "test_run_end", run_id: run, ...end });
  return run;
}

describe("runs on devices: what a reader sees", () => {
  // One run on seen-a (the reader may read it) and hidden-b (it may not), watched by the reader's stream.
  let seen: ProtocolDevice;
  let hidden: ProtocolDevice;
  let reader: string;
  let outsider: string;
  let id: string;
  let events: SseEvent[];
  before(async () => {
    await server.started;
    seen = await protocolDevice(server, "seen-a");
    hidden = await protocolDevice(server, "hidden-b");
    devices.push(seen, hidden);
    for (const d of [seen, hidden]) assert.equal((await server.call("POST", `/api/v2/devices/${d.id}/tag/sight`)).status, 200);
    reader = server.token(["tests_ro"], "reader");
    outsider = server.token(["tests_ro"], "outsider");
    assert.equal((await server.call("POST", "/api/v1/permissions", { user_id: "reader", resource: "device", resource_id: seen.id, permission: "read" })).status, 200);
    assert.equal((await server.call(`GET`, `/api/v2/devices/${hidden.id}`, undefined, reader)).status, 404, "the reader may not read hidden-b");
    await uploadConfig(server, "sight.yml", "tests:\n  g:\n  - exec:\n      command: [true]\n");
    const stream = await openStream(server, reader, "/api/v1/test-runs/stream");
    const started = await server.call("POST", "/api/v1/test-runs", { config_name: "sight.yml", machine_target: "tag:sight" });
    assert.equal(started.status, 200, JSON.stringify(started.body));
    id = started.body.id as string;
    await Promise.all([
      share(seen, ["alpha"], { status: "finished", error: null, warnings: ["warn-a"] }),
      share(hidden, ["beta"], { status: "failed", error: "boom-b", warnings: ["warn-b"] }),
    ]);
    const full = await waitRun(server, id);
    assert.equal(full.status, "failed");
    assert.equal(full.error, "device 'hidden-b': boom-b");
    assert.deepEqual(full.warnings, ["device 'seen-a': warn-a", "device 'hidden-b': warn-b"]);
    await stream.next((e) => e.event === "run" && e.data.id === id && e.data.status === "failed", 10_000, "the reader's final run event");
    stream.close();
    events = stream.events;
  });

  /** Nothing of hidden-b: not its name, MAC address, rows, messages or artifacts. */
  const clean = (what: string, text: string) => {
    for (const word of ["hidden-b", hidden.mac, "beta", "boom-b", "warn-b"]) assert.ok(!text.includes(word), `${what} shows ${word}: ${text.slice(0, 600)}`);
  };
  const text = async (path: string, token: string) => {
    const res = await server.request(path, { token });
    assert.equal(res.status, 200, path);
    return res.text();
  };

  test("the run object: alone, in the lists and in its trigger, without the device it may not see and the words about it", async () => {
    const run = (await server.call("GET", `/api/v1/test-runs/${id}`, undefined, reader)).body as RunObject;
    assert.deepEqual((run.devices as Array<{ name: string; mac: string }>).map((d) => [d.name, d.mac]), [["seen-a", seen.mac]]);
    assert.deepEqual([run.status, run.error, run.warnings, run.machine_target], ["failed", undefined, ["device 'seen-a': warn-a"], "tag:sight"]);
    clean("the run object", JSON.stringify(run));
    clean("the run list", await text("/api/v1/test-runs", reader));
    clean("the run list page", await text("/api/v1/test-runs?limit=10", reader));
    clean("the trigger", await text(`/api/v1/test-runs/trigger/${run.trigger_id as string}`, reader));
    clean("the triggers", await text("/api/v1/test-runs/trigger", reader));
    assert.ok((await text(`/api/v1/test-runs/${id}`, server.adminToken)).includes(hidden.mac), "the admin sees every device");
  });

  test("the stream: every run event the reader got leaves the device out", () => {
    const runEvents = events.filter((e) => e.event === "run" && e.data.id === id);
    assert.ok(runEvents.length >= 2, "the stream saw the run change");
    clean("the stream's events", JSON.stringify(events));
    assert.deepEqual((runEvents.at(-1)!.data.devices as Array<{ name: string }>).map((d) => d.name), ["seen-a"]);
  });

  test("the CSV report: only the rows of the devices it may see (and its own validator)", async () => {
    const csv = await text(`/api/v1/test-runs/${id}/report`, reader);
    clean("the CSV report", csv);
    assert.deepEqual(csv.split("\r\n"), ["device name,test name,module,duration,message,status", "seen-a,alpha,m,0,alpha says hi,passed", ""]);
    assert.ok((await text(`/api/v1/test-runs/${id}/report`, server.adminToken)).includes("hidden-b,beta"), "the admin sees every row");
    const etag = async (token: string) => (await server.request(`/api/v1/test-runs/${id}/report`, { token })).headers.get("etag");
    assert.notEqual(await etag(reader), await etag(server.adminToken));
  });

  test("the JSON report, by device and its summary: only the devices it may see", async () => {
    const json = JSON.parse(await text(`/api/v1/test-runs/${id}/report?format=json`, reader)) as Array<Record<string, string>>;
    assert.deepEqual(json.map((r) => [r["device name"], r["test name"]]), [["seen-a", "alpha"]]);
    const grouped = await text(`/api/v1/test-runs/${id}/report?format=json&group_by=device`, reader);
    clean("the report by device", grouped);
    assert.deepEqual((JSON.parse(grouped) as Array<{ device: string }>).map((g) => g.device), ["seen-a"]);
    const summary = JSON.parse(await text(`/api/v1/test-runs/${id}/report/summary`, reader));
    assert.deepEqual([summary.total, summary.devices], [1, [{ device: "seen-a", total: 1, passed: 1, failed: 0, skipped: 0 }]]);
  });

  test("the artifacts: listed and downloaded only under the directories of the devices it may see", async () => {
    const artifacts = JSON.parse(await text(`/api/v1/test-runs/${id}/artifacts`, reader)) as Array<{ name: string }>;
    assert.deepEqual(artifacts.map((a) => a.name), ["seen-a/out.txt"]);
    assert.equal(await text(`/api/v1/test-runs/${id}/artifacts/seen-a/out.txt`, reader), "bytes of alpha\n");
    for (const path of ["hidden-b/out.txt", "hidden-b%2Fout.txt"]) {
      const res = await server.request(`/api/v1/test-runs/${id}/artifacts/${path}`, { token: reader });
      assert.equal(res.status, 404, path);
      await res.body?.cancel();
    }
    assert.equal(await text(`/api/v1/test-runs/${id}/artifacts/hidden-b/out.txt`, server.adminToken), "bytes of beta\n");
  });

  test("the config's history: only the devices it may see", async () => {
    const history = await text("/api/v1/configs/sight.yml/history", reader);
    clean("the history", history);
    assert.deepEqual((JSON.parse(history).rows as Array<{ device: string }>).map((r) => r.device), ["seen-a"]);
  });

  test("a reader with read on no device of the run: the run without devices, a report of its header, no artifacts", async () => {
    const bare = (await server.call("GET", `/api/v1/test-runs/${id}`, undefined, outsider)).body as RunObject;
    assert.deepEqual([bare.status, bare.devices, bare.error, bare.warnings], ["failed", [], undefined, []]);
    for (const word of ["seen-a", "hidden-b", seen.mac, hidden.mac]) assert.ok(!JSON.stringify(bare).includes(word), word);
    assert.equal(await text(`/api/v1/test-runs/${id}/report`, outsider), "device name,test name,module,duration,message,status\r\n");
    assert.deepEqual(JSON.parse(await text(`/api/v1/test-runs/${id}/report?format=json`, outsider)), []);
    assert.deepEqual(JSON.parse(await text(`/api/v1/test-runs/${id}/artifacts`, outsider)), []);
  });

  test("a run on one device the reader may not see: its device: target is left out too", async () => {
    const lone = await protocolDevice(server, "lone-c");
    devices.push(lone);
    const outsider = server.token(["tests_ro"], "outsider");
    await uploadConfig(server, "lone.yml", "tests:\n  g:\n  - exec:\n      command: [true]\n");
    const started = await server.call("POST", "/api/v1/test-runs", { config_name: "lone.yml", machine_target: `device:${lone.mac}` });
    assert.equal(started.status, 200, JSON.stringify(started.body));
    await share(lone, ["gamma"], { status: "finished", error: null, warnings: [] });
    await waitRun(server, started.body.id);
    const run = (await server.call("GET", `/api/v1/test-runs/${started.body.id}`, undefined, outsider)).body as RunObject;
    assert.deepEqual([run.status, run.devices, run.machine_target], ["finished", [], null]);
  });
});

describe("the report's row index", () => {
  test("a filtered report is the header and exactly the kept devices' rows in their order, large rows and runs of rows included; without an index, the header alone", async () => {
    const dir = tempDir();
    const path = join(dir, "r.csv");
    const writer = await ReportWriter.create(path, SEED_COLUMNS, { index: join(dir, "r.rows") });
    const rows = Array.from({ length: 60 }, (_, i) => ({ device: i % 7 === 0 ? 2 : i % 3, message: (i % 5 === 0 ? "x".repeat(70_000) : "short, \"quoted\"\r\nline") + i }));
    for (const r of rows) await writer.append({ startTime: new Date(0), deviceName: `d${r.device}`, testName: "t", module: "m", duration: 1, message: r.message, status: "passed", artifacts: [] }, r.device);
    await writer.close();
    const read = async (keep?: (device: number) => boolean, index = join(dir, "r.rows")) => {
      const chunks: Buffer[] = [];
      for await (const chunk of await openReportCsv(path, keep && { index, keep })) chunks.push(chunk as Buffer);
      return Buffer.concat(chunks).toString();
    };
    const all = await read();
    const lines = (text: string) => parse(text, { relax_column_count: true }) as string[][];
    for (const kept of [[0], [1, 2], [2], [0, 1, 2], []]) {
      const expected = lines(all).filter((cells, i) => i === 0 || kept.includes(Number(cells[0].slice(1))));
      assert.deepEqual(lines(await read((d) => kept.includes(d))), expected, `devices ${kept}`);
    }
    assert.equal(await read(() => true, join(dir, "none.rows")), "device name,test name,module,duration,message,status\r\n");
  });
});
