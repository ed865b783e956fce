/*
 * What protoplaster's own API scripts check (tests/test-api.sh, tests/test-api-multinode.sh),
 * against labgate started through scripts/protoplaster (the `protoplaster --server` stand-in:
 * report_columns: reference, the three directories, auth none). The scripts themselves use fixed
 * ports and need a protoplaster checkout: scripts/protoplaster-compat.sh runs them unchanged.
 * Here the same requests and the same field cuts (`cut -d, -f7`, `-f8-`, awk's `$3`) run on
 * loopback with ports the servers pick.
 */
import assert from "node:assert/strict";
import { spawn, type ChildProcess } from "node:child_process";
import { existsSync, readFileSync, statSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { after, test } from "node:test";
import { labgate } from "../helpers/cli.ts";
import { removeDir, tempDir, waitFor } from "../helpers/server.ts";

const STANDIN = join(import.meta.dirname, "..", "..", "scripts", "protoplaster");
const API_TEST = readFileSync(join(import.meta.dirname, "..", "..", "assets", "testrun", "api-test.yml"), "utf8");

const children: ChildProcess[] = [];
const dirs: string[] = [];
after(async () => {
  for (const child of children) if (child.exitCode === null) child.kill("SIGTERM");
  await Promise.all(children.map((child) => (child.exitCode === null ? new Promise((r) => child.once("exit", r)) : undefined)));
  for (const dir of dirs) removeDir(dir);
});

/**
 * `protoplaster --test-dir .. --reports-dir .. --artifacts-dir .. [--external-devices F] --port 0 --server`; resolves its URL.
 * `bin`: the stand-in's LABGATE_BIN (else it runs the source through tsx).
 */
async function protoplaster(root: string, devices?: string, bin?: string): Promise<{ url: string; dir: (what: string) => string }> {
  const dir = (what: string) => join(root, what);
  const args = ["--test-dir", dir("tests"), "--reports-dir", dir("reports"), "--artifacts-dir", dir("artifacts"), "--port", "0", "--server"];
  if (devices) args.push("--external-devices", devices);
  const env = { ...process.env, PROTOPLASTER_LOG_LEVEL: "error", ...(bin ? { LABGATE_BIN: bin } : {}) };
  const child = spawn(STANDIN, args, { stdio: ["ignore", "pipe", "pipe"], env });
  children.push(child);
  let output = "";
  const url = await new Promise<string>((resolve, reject) => {
    const onData = (chunk: Buffer) => {
      output += chunk;
      const match = /labgate listening on (http:\/\/\S+)/.exec(output);
      if (match) resolve(match[1]);
    };
    child.stdout!.on("data", onData);
    child.stderr!.on("data", onData);
    child.once("exit", (code) => reject(new Error(`stand-in exited with ${code}: ${output}`)));
  });
  return { url, dir };
}

const get = async (url: string) => {
  const res = await fetch(url);
  return { status: res.status, text: await res.text() };
};
const getJson = async <T = any>(url: string): Promise<T> => JSON.parse((await get(url)).text) as T;

async function upload(url: string, name: string, yaml: string): Promise<string> {
  const form = new FormData();
  form.append("file", new Blob([yaml]), name);
  return ((await (await fetch(`${url}/api/v1/configs`, { method: "POST", body: form })).json()) as { name: string }).name;
}

/** The stand-ins have no auth and so no event stream to wait on: looks until the run has ended. */
const waitFinal = (url: string, id: string): Promise<string> =>
  waitFor(async () => {
    const { status } = await getJson<{ status: string }>(`${url}/api/v1/test-runs/${id}`);
    return status === "finished" || status === "failed" ? status : undefined;
  }, 30_000, `run ${id} to end`);

/** `grep PATTERN report | cut -d, -f<from>[-]` */
const cut = (report: string, pattern: string, field: number, rest = false): string => {
  const line = report.split(/\r?\n/).find((l) => l.includes(pattern));
  assert.ok(line, `no line with ${pattern} in\n${report}`);
  const fields = line.split(",");
  return rest ? fields.slice(field - 1).join(",") : fields[field - 1];
};

test("protoplaster's test-api.sh, through the stand-in", async () => {
  const root = tempDir("labgate-pp-");
  dirs.push(root);
  const { url, dir } = await protoplaster(root);
  assert.equal((await get(`${url}/api/v1/configs`)).text, "[]\n", "the reference's JSON ends with a newline");

  assert.equal(await upload(url, "api-test.yml", API_TEST), "api-test.yml");
  assert.ok(existsSync(join(dir("tests"), "api-test.yml")), "the config is in --test-dir");
  assert.deepEqual(await getJson(`${url}/api/v1/configs/api-test.yml/test-suites`), ["compl"]);
  assert.deepEqual(await getJson(`${url}/api/v1/configs/api-test.yml/override-hints`), ["tests.base.0.simple.device", "tests.ext.0.simple.device"]);

  await fetch(`${url}/api/v1/test-runs`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ config_name: "api-test.yml" }) });
  let report = "";
  let underTest = "";
  for (const { id } of await getJson<{ id: string }[]>(`${url}/api/v1/test-runs`)) {
    await waitFinal(url, id);
    if ((await getJson<{ hidden?: boolean }>(`${url}/api/v1/test-runs/${id}`)).hidden === true) continue;
    report += (await get(`${url}/api/v1/test-runs/${id}/report`)).text;
    underTest = id;
    assert.ok(existsSync(join(dir("reports"), `${id}.csv`)), "the report is in --reports-dir");
  }
  assert.equal(cut(report, "test.py::TestSimple::test_success", 7), "passed");
  assert.equal(cut(report, "test.py::TestSimple::test_failure", 7), "failed");
  assert.equal(cut(report, "test.py::TestSimple::test_record_artifact", 7), "passed");
  assert.match(cut(report, "test.py::TestSimple::test_record_artifact", 8, true), /file\.txt/);
  assert.match(report.split("\r\n")[0], /^start time,device name,test name,module,duration,message,status,artifacts$/);
  assert.match(cut(report, "test_success", 1), /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d$/, "start time: local ISO 8601 to the second");

  let fileTxt = "";
  for (const { id } of await getJson<{ id: string }[]>(`${url}/api/v1/test-runs`)) {
    const res = await get(`${url}/api/v1/test-runs/${id}/artifacts/file.txt`);
    if (res.status === 200) fileTxt = res.text;
  }
  assert.equal(fileTxt, "test");
  assert.equal(readFileSync(join(dir("artifacts"), underTest, "file.txt"), "utf8"), "test", "artifacts are in --artifacts-dir");

  const repeat = await fetch(`${url}/api/v1/test-runs/${underTest}/repeat`, { method: "POST", headers: { "content-type": "application/json" }, body: '"success or conditional_skip"' });
  const newId = ((await repeat.json()) as { id: string }).id;
  await waitFinal(url, newId);
  const again = (await get(`${url}/api/v1/test-runs/${newId}/report`)).text;
  // awk -F',' 'FNR>1 && $3 != "" {print $3}' | sort
  const names = again.split(/\r?\n/).slice(1).map((l) => l.split(",")[2]).filter((n) => n !== undefined && n !== "").sort();
  assert.deepEqual(names, ["conditional_skip[test_config0]", "success[test_config0]"]);

  // The JSON form has the same eight columns.
  const rows = await getJson<Record<string, string>[]>(`${url}/api/v1/test-runs/${newId}/report?format=json`);
  assert.deepEqual(Object.keys(rows[0]), ["start time", "device name", "test name", "module", "duration", "message", "status", "artifacts"]);
  assert.equal(rows[0].artifacts, "[]");
});

test("protoplaster's test-api-multinode.sh, through three stand-ins", async () => {
  const root = tempDir("labgate-ppm-");
  dirs.push(root);
  // The stand-in's LABGATE_BIN path (the previous test ran its source path): the bundle the other
  // child-process tests run, through a script as an executable would be.
  const bin = join(root, "labgate");
  writeFileSync(bin, `#!/bin/sh\nexec ${(await labgate()).map((arg) => `'${arg}'`).join(" ")} "$@"\n`, { mode: 0o755 });
  const [node1, node2] = await Promise.all([protoplaster(join(root, "node1"), undefined, bin), protoplaster(join(root, "node2"), undefined, bin)]);
  const devices = join(root, "devices.yaml");
  writeFileSync(devices, `node1: ${new URL(node1.url).host}\nnode2: ${new URL(node2.url).host}\n`);
  const main = await protoplaster(join(root, "main"), devices, bin);
  const prefix = "custom-prefix_";
  const config = [
    "aggregate_results: true",
    `combined_results_dir_prefix: "${prefix}"`,
    "tests:",
    "  local_tests:",
    "    - simple:",
    '        device: "local_dev"',
    "  node1_tests:",
    "    - simple:",
    '        device: "node1_dev"',
    "        machines: [node1]",
    "  node2_tests:",
    "    - simple:",
    '        device: "node2_dev"',
    "        machines: [node2]",
    "",
  ].join("\n");
  const name = "api-test-multinode-simple.yml";
  for (const node of [node1, node2, main]) assert.equal(await upload(node.url, name, config), name);
  await fetch(`${main.url}/api/v1/test-runs`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ config_name: name }) });

  for (const node of [main, node1, node2]) {
    // The script sleeps 2 s after the trigger; here: until the node has its run.
    const runs = await waitFor(async () => {
      const listed = await getJson<{ id: string }[]>(`${node.url}/api/v1/test-runs`);
      return listed.length > 0 ? listed : undefined;
    }, 30_000, "the node's run");
    const runId = runs[runs.length - 1].id;
    await waitFinal(node.url, runId);
    const report = (await get(`${node.url}/api/v1/test-runs/${runId}/report`)).text;
    assert.match(report, /simple/);
    assert.equal(cut(report, "TestSimple::test_success", 7), "passed");
    assert.equal(cut(report, "TestSimple::test_failure", 7), "failed");
    assert.match(cut(report, "TestSimple::test_record_artifact", 8, true), /file\.txt/);
    assert.equal((await get(`${node.url}/api/v1/test-runs/${runId}/artifacts/file.txt`)).text, "test");
  }

  // The combined results, on disk in the main node's --artifacts-dir, once the trigger has ended.
  const triggers = await getJson<{ trigger_id: string }[]>(`${main.url}/api/v1/test-runs/trigger`);
  const triggerId = triggers[triggers.length - 1].trigger_id;
  await waitFor(async () => (await getJson<{ status: string }>(`${main.url}/api/v1/test-runs/trigger/${triggerId}`)).status !== "running", 30_000, "the trigger to end");
  const combined = join(main.dir("artifacts"), `${prefix}${triggerId}`);
  for (const [node, entry] of [
    [main, "local"],
    [node1, "remote_node1"],
    [node2, "remote_node2"],
  ] as const) {
    const { runs } = await getJson<{ runs: { id: string }[] }>(`${node.url}/api/v1/test-runs/trigger/${triggerId}`);
    const runId = runs[runs.length - 1].id;
    assert.ok(existsSync(join(combined, `${entry}_${runId}.csv`)), `${entry}_${runId}.csv`);
    assert.ok(statSync(join(combined, `${entry}_${runId}`)).isDirectory(), `${entry}_${runId}/`);
    assert.ok(existsSync(join(combined, `${entry}_${runId}`, "file.txt")), `${entry}_${runId}/file.txt`);
  }
});
