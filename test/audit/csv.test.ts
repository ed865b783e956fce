/*
 * Issue 39.6: no CSV labgate writes holds a formula. A text cell that starts with =, +, -, @, a
 * tab or a CR is written with a leading ' (OWASP), in the audit export and in test-run reports;
 * numbers are written as numbers; the report's JSON form, read from its CSV, gives back the texts.
 */
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { describe, test } from "node:test";
import { parse } from "csv-parse/sync";
import { csvCell, csvText } from "../../src/util/csv.ts";
import { openReportCsv, openReportJson, reportSummary, REFERENCE_COLUMNS, ReportWriter } from "../../src/testrun/engine/report.ts";
import { tempDir, useTestServer } from "../helpers/server.ts";
import { login } from "../accounts/helpers.ts";
import { reportRows, trigger, uploadConfig, waitRun } from "../testrun/run-helpers.ts";

const HOSTILE = ["=cmd|' /C calc'!A0", '=HYPERLINK("http://evil.example","x")', "+1+1", "-2+3", "@SUM(A1)", "\t=1", "\r=1"];
/** A cell a spreadsheet would read as a formula. */
const FORMULA = /^[=+\-@\t\r]/;

test("csvCell: texts that start a formula get a leading '; numbers and other texts are as they are; csvText takes it back", () => {
  for (const text of HOSTILE) assert.equal(csvCell(text), `'${text}`);
  for (const text of ["plain", "user:=x", "{\"a\":1}", "", "1.5", "'quoted"]) assert.equal(csvCell(text), text);
  assert.equal(csvCell(-1.5), "-1.5", "a number is never a formula");
  assert.equal(csvCell(null), "");
  // A text that starts with ' and then a formula gets one more: reading back is exact.
  assert.equal(csvCell("'=x"), "''=x");
  for (const text of [...HOSTILE, "'=x", "''+y", "'plain", "plain"]) assert.equal(csvText(csvCell(text)), text);
});

describe("the audit export", () => {
  const server = useTestServer();

  test("a hostile failed login name and a hostile token user are no formula in the CSV", async () => {
    // Five: names that cannot exist share one throttle key, which waits after five failures.
    const tried = HOSTILE.slice(0, 5);
    for (const name of tried) assert.equal((await login(server, name, "wrong")).status, 401);
    const hostile = server.token(["tests_ro"], HOSTILE[1]);
    assert.equal((await server.call("GET", "/api/v1/audit", undefined, hostile)).status, 403);
    const res = await server.request("/api/v1/audit?format=csv", { token: server.adminToken });
    assert.equal(res.status, 200);
    const rows = parse(await res.text(), { columns: true }) as Array<Record<string, string>>;
    const cells = rows.flatMap((row) => Object.values(row));
    assert.deepEqual(cells.filter((cell) => FORMULA.test(cell)), []);
    const refused = rows.find((row) => row.action === "auth.refused")!;
    assert.equal(refused.actor, `'${HOSTILE[1]}`);
    assert.match(refused.id, /^\d+$/);
    const failures = rows.filter((row) => row.action === "login.failure");
    assert.deepEqual(failures.map((row) => JSON.parse(row.detail).tried).reverse(), tried, "the names tried, exactly, in the detail");
  });
});

describe("test-run reports", () => {
  const server = useTestServer();

  test("hostile device names, test names and messages are no formula in the CSV; the JSON form and the counts give them back", async () => {
    const path = join(tempDir(), "report.csv");
    const writer = await ReportWriter.create(path, REFERENCE_COLUMNS);
    const row = (deviceName: string, message: string) => ({ startTime: new Date(), deviceName, testName: "@SUM(A1)", module: "\tmod", duration: 1.5, message, status: "failed" as const, artifacts: [] });
    await writer.append(row(HOSTILE[0], "-1"));
    await writer.append(row("=dev", HOSTILE[1]));
    await writer.append(row("'=quoted", "+1"));
    await writer.close();
    const cells = (parse(readFileSync(path, "utf8")) as string[][]).slice(1);
    assert.deepEqual(cells.flat().filter((cell) => FORMULA.test(cell)), []);
    assert.deepEqual(
      cells.map((c) => [c[1], c[2], c[3], c[4], c[5]]),
      [
        [`'${HOSTILE[0]}`, "'@SUM(A1)", "'\tmod", "1.5", "'-1"],
        ["'=dev", "'@SUM(A1)", "'\tmod", "1.5", `'${HOSTILE[1]}`],
        ["''=quoted", "'@SUM(A1)", "'\tmod", "1.5", "'+1"],
      ],
    );
    const { stream } = await openReportJson(() => openReportCsv(path));
    let json = "";
    for await (const chunk of stream) json += String(chunk);
    const rows = JSON.parse(json) as Array<Record<string, string>>;
    assert.deepEqual(
      rows.map((r) => [r["device name"], r["test name"], r.module, r.message]),
      [
        [HOSTILE[0], "@SUM(A1)", "\tmod", "-1"],
        ["=dev", "@SUM(A1)", "\tmod", HOSTILE[1]],
        ["'=quoted", "@SUM(A1)", "\tmod", "+1"],
      ],
    );
    const summary = await reportSummary(() => openReportCsv(path), { byDevice: true });
    assert.deepEqual(summary.devices?.map((d) => d.device).sort(), ["'=quoted", "=dev", HOSTILE[0]].sort());
  });

  test("a run whose case is named like a formula: its CSV report says it as text, its JSON form as it is", async () => {
    await uploadConfig(server, "formula.yml", ["tests:", "  '=1+2':", "  - exec:", "      name: '@calc'", "      command: [true]", ""].join("\n"));
    const run = await trigger(server, { config_name: "formula.yml" });
    assert.equal((await waitRun(server, run.id)).status, "finished");
    const csv = await (await server.request(`/api/v1/test-runs/${run.id}/report`, { token: server.adminToken })).text();
    const [header, ...lines] = parse(csv) as string[][];
    assert.deepEqual(lines.flat().filter((cell) => FORMULA.test(cell)), []);
    const rows = await reportRows(server, run.id);
    assert.equal(rows.length, 1);
    // An exec case's name is its row's device name (as protoplaster reports it).
    assert.equal(lines[0][header.indexOf("device name")], "'@calc");
    assert.equal(rows[0]["device name"], "@calc");
  });
});
