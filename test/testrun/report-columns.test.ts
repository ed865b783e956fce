import assert from "node:assert/strict";
import { test } from "node:test";
import { removeDir, startTestServer } from "../helpers/server.ts";
import { reportRows, trigger, uploadConfig, waitRun } from "./run-helpers.ts";

// test_server.report_columns as a list (protoplaster's --csv-columns): the CSV and the JSON form
// have exactly those columns in that order; `artifacts` lists the case's recorded names, then the
// run's metadata files.
test("report_columns as a list: CSV and JSON carry those columns; artifacts: recorded names, then metadata files", async () => {
  const s = await startTestServer({ test_server: { report_columns: ["test name", "status", "artifacts"] } as never });
  try {
    const config = [
      "metadata:",
      "  kernel:",
      "    run: uname -s",
      "tests:",
      "  system:",
      "  - exec:",
      "      name: kernel",
      "      command: [uname, -s]",
      "      save_output: uname.txt",
      "  - exec:",
      "      name: plain",
      "      command: [true]",
      "",
    ].join("\n");
    await uploadConfig(s, "cols.yml", config);
    const run = await trigger(s, { config_name: "cols.yml" });
    assert.equal((await waitRun(s, run.id)).status, "finished");
    const csv = await (await s.request(`/api/v1/test-runs/${run.id}/report`, { token: s.adminToken })).text();
    const lines = csv.split("\r\n").filter(Boolean);
    assert.equal(lines[0], "test name,status,artifacts");
    assert.equal(lines.length, 3);
    assert.match(lines[1], /^[^,]+,passed,"\['uname\.txt', 'kernel'\]"$/);
    assert.match(lines[2], /^[^,]+,passed,\['kernel'\]$/);
    const rows = await reportRows(s, run.id);
    // The columns, then what the row says beyond them: the entry's `name:`.
    assert.deepEqual(Object.keys(rows[0]), ["test name", "status", "artifacts", "name"]);
    assert.equal(rows[0].name, "kernel");
    assert.equal(rows[0].artifacts, "['uname.txt', 'kernel']");
    const bad = await s.request(`/api/v1/test-runs/${run.id}/report?format=xml`, { token: s.adminToken });
    assert.equal(bad.status, 400);
    assert.deepEqual(await bad.json(), { error: "unknown report format: xml", field: "format" });
  } finally {
    await s.close();
    removeDir(s.dataDir);
  }
});
