/*
 * Test-run reports and artifacts on an S3 store (storage.driver: s3, the store every node reads):
 * a finished run's files are in the bucket before the run shows finished, a node without them
 * (here: the node's own copies removed) serves the report and the artifacts from the store, and
 * deleting the run removes its objects. The store checks every signature (test/helpers/s3.ts).
 */
import assert from "node:assert/strict";
import { rmSync } from "node:fs";
import { join } from "node:path";
import { after, describe, test } from "node:test";
import { ConfigError } from "../../src/config/read.ts";
import { S3Objects } from "../../src/storage/s3.ts";
import { LabgateError } from "../../src/util/errors.ts";
import { startS3, type TestS3 } from "../helpers/s3.ts";
import { useTestServer } from "../helpers/server.ts";
import { trigger, uploadConfig, waitRun } from "./run-helpers.ts";

const CONFIG = "tests:\n  g:\n  - exec:\n      name: writes\n      command: 'mkdir -p logs && printf \"line one\\nline two\\n\" > \"logs/boot log.txt\"'\n      save_output: out.log\n";

describe("test-run files on S3", () => {
  let s3: TestS3;
  const server = useTestServer(async () => {
    s3 = await startS3();
    return { storage: { driver: "s3", s3: s3.settings } };
  });
  after(() => s3?.stop());
  const bucket = () => new S3Objects(s3.settings, { config: (m) => new ConfigError(m), unavailable: (m) => new LabgateError("unavailable", m) });

  test("a finished run's report and artifacts are in the bucket and are served from it by a node that lacks them; deleting the run removes them", async () => {
    await uploadConfig(server, "writes.yml", CONFIG);
    const run = await waitRun(server, (await trigger(server, { config_name: "writes.yml" })).id);
    assert.equal(run.status, "finished");
    const keys = (await bucket().list(".testrun/")).map((o) => o.key);
    assert.ok(keys.includes(`.testrun/reports/${run.id}.csv`), keys.join(", "));
    assert.ok(keys.includes(`.testrun/artifacts/${run.id}/logs/boot log.txt`), keys.join(", "));
    assert.ok(keys.includes(`.testrun/artifacts/${run.id}/out.log`), keys.join(", "));

    const csvHere = await (await server.request(`/api/v1/test-runs/${run.id}/report`, { token: server.adminToken })).text();
    const jsonHere = await (await server.request(`/api/v1/test-runs/${run.id}/report?format=json`, { token: server.adminToken })).json();
    assert.match(csvHere, /passed/);
    // Another node: the run's files are not on its disk.
    rmSync(join(server.dataDir, "testrun", "reports", `${run.id}.csv`));
    rmSync(join(server.dataDir, "testrun", "artifacts", run.id), { recursive: true });

    const report = await server.request(`/api/v1/test-runs/${run.id}/report`, { token: server.adminToken });
    assert.equal(report.status, 200);
    assert.equal(await report.text(), csvHere, "the report fetched from the store is the same");
    assert.deepEqual(await (await server.request(`/api/v1/test-runs/${run.id}/report?format=json`, { token: server.adminToken })).json(), jsonHere);
    const listed = (await server.call<Array<{ name: string }>>("GET", `/api/v1/test-runs/${run.id}/artifacts`)).body.map((a) => a.name);
    assert.deepEqual(listed, ["logs/boot log.txt", "out.log"]);
    const artifact = await server.request(`/api/v1/test-runs/${run.id}/artifacts/logs/boot%20log.txt`, { token: server.adminToken });
    assert.equal(artifact.status, 200);
    assert.equal(artifact.headers.get("content-security-policy"), "sandbox; default-src 'none'");
    assert.match(artifact.headers.get("content-disposition") ?? "", /^attachment; filename="boot log\.txt"/);
    assert.equal(await artifact.text(), "line one\nline two\n");
    const part = await server.request(`/api/v1/test-runs/${run.id}/artifacts/logs/boot%20log.txt`, { token: server.adminToken, headers: { range: "bytes=5-7" } });
    assert.equal(part.status, 206);
    assert.equal(part.headers.get("content-range"), "bytes 5-7/18");
    assert.equal(await part.text(), "one");
    assert.equal((await server.request(`/api/v1/test-runs/${run.id}/artifacts/logs%2F..%2Fout.log`, { token: server.adminToken })).status, 404);
    assert.equal((await server.request(`/api/v1/test-runs/${run.id}/artifacts/nothing.txt`, { token: server.adminToken })).status, 404);

    assert.equal((await server.call("DELETE", `/api/v1/test-runs/${run.id}/record`)).status, 200);
    assert.deepEqual((await bucket().list(".testrun/")).map((o) => o.key), []);
  });
});
