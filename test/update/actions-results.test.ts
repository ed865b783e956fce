/*
 * The action log's results (src/update/actions/store.ts), on the engine the suite runs on: the
 * results of one turn are recorded together, each exactly as its own would be: the first result of
 * an execution is stored, a second one is late, one for a row already final is late, one for a row
 * that does not exist (or another device's) is unknown; outputs and exit codes land in their rows.
 */
import { strict as assert } from "node:assert";
import { after, test } from "node:test";
import { ActionLogStore, type ResultRecord } from "../../src/update/actions/store.ts";
import { removeDir, startTestServer } from "../helpers/server.ts";

const server = await startTestServer();
after(async () => {
  await server.close();
  removeDir(server.dataDir);
});

const MAC = "02:00:00:00:00:01";
const OTHER = "02:00:00:00:00:02";

test("one turn's results: stored, late (second word, already final), unknown (no row, another device's); each row as its own result leaves it", async () => {
  const log = new ActionLogStore(server.server.ctx.store, server.server.ctx.clock, () => {});
  const ids = Array.from({ length: 1200 }, (_, i) => `exec-${i}`);
  const stored = await log.insertPending(ids.map((id) => ({ id, mac: MAC, actionId: "noop", cap: 10_000 })));
  assert.equal(stored.filter(Boolean).length, ids.length);
  assert.equal(await log.recordResult({ id: "exec-0", mac: MAC, code: 0, output: null, key: null }), "stored");

  const bytes = new Uint8Array([0, 1, 2, 255]);
  const records: ResultRecord[] = [
    ...ids.slice(1).map((id, i) => ({ id, mac: MAC, code: i % 3, output: i % 2 ? bytes : null, key: i % 7 === 0 ? `actions/${id}` : null })),
    { id: "exec-5", mac: MAC, code: 9, output: null, key: null },
    { id: "exec-0", mac: MAC, code: 4, output: null, key: null },
    { id: "exec-missing", mac: MAC, code: 0, output: null, key: null },
    { id: "exec-7", mac: OTHER, code: 0, output: null, key: null },
  ];
  const answers = await Promise.all(records.map((r) => log.recordResult(r)));
  assert.deepEqual(answers.slice(0, ids.length - 1), ids.slice(1).map(() => "stored"));
  assert.deepEqual(answers.slice(ids.length - 1), ["late", "late", "unknown", "unknown"]);

  const rows = await server.db.all<{ id: string; status: string; status_code: number; output: Uint8Array | null; output_key: string | null; finished: string | null }>(
    "SELECT id, status, status_code, output, output_key, finished FROM action_log WHERE mac_address = ? ORDER BY seq",
    [MAC],
  );
  assert.equal(rows.length, ids.length);
  assert.deepEqual([rows[0]!.status, Number(rows[0]!.status_code)], ["success", 0]);
  for (const [i, row] of rows.slice(1).entries()) {
    const code = i % 3;
    assert.deepEqual(
      [row.id, row.status, Number(row.status_code), row.output ? [...row.output] : null, row.output_key, row.finished !== null],
      [ids[i + 1], code === 0 ? "success" : "error", code, i % 2 ? [...bytes] : null, i % 7 === 0 ? `actions/${ids[i + 1]}` : null, true],
    );
  }
});
