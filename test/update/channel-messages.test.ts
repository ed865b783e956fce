/*
 * Every device -> server message kind, sent over a real device socket with one field that does
 * not fit its schema (src/protocol/labgate/device.ts): the hub drops it, counts it, and the
 * socket stays open; what it would have done does not happen.
 */
import assert from "node:assert/strict";
import { test } from "node:test";
import { messages } from "../../src/protocol/labgate/device.ts";
import { openDeviceSocket } from "../helpers/device-socket.ts";
import { useTestServer, waitFor } from "../helpers/server.ts";
import { seedDevices } from "./helpers/devices.ts";

const server = useTestServer();

/** Per method, a message that is well-formed but for one field. */
const WRONG: Record<string, Record<string, unknown>> = {
  capability_report: { capabilities: ["exec_cmds"] },
  action_list_update: { actions: "reboot" },
  alert: { alert: "cannot handle request" },
  action_exec_control: { execution_id: 7, status: "ok" },
  action_exec_result: { execution_id: "e1", status_code: 1.5, output: "" },
  fs_file_probe_reply: { id: "p1", status: "0", size: 3 },
  fs_file_download_reply: { id: "d1", status: 0, etags: [1] },
  update_progress: { progress: "50" },
  update_version: { version: "" },
  update_outcome: { id: "o1", state: "exploded", version: "v2" },
  test_run_row: { run_id: "r1", start_time: 0, test_name: "t", module: "m", duration: 1, message: "", status: "maybe", artifacts: [] },
  test_run_end: { run_id: "r1", status: "finished", error: null, warnings: "none" },
};

test("every device message kind with a wrong field is dropped and counted; the socket stays open", async () => {
  const methods = messages().DEVICE_MESSAGES.map((schema) => schema.def.shape.method.def.values[0]);
  assert.deepEqual(Object.keys(WRONG).sort(), [...methods].sort(), "a wrong example for every device -> server method");
  const [device] = await seedDevices(server, 1);
  const socket = await openDeviceSocket(server.url, device!.token);
  const hub = server.server.domains.update.hub;
  try {
    await socket.next("alert");
    const before = hub.dropped;
    for (const [method, fields] of Object.entries(WRONG)) socket.send({ method, ...fields });
    // Not JSON, no method, a method nobody knows: dropped and counted too.
    socket.ws.send("not json");
    socket.send({ progress: 5 });
    socket.send({ method: "no_such_method" });
    // Frames are handled in order: once this one is in, every one before it was.
    socket.send({ method: "capability_report", capabilities: { exec_cmds: true } });
    await waitFor(async () => (await server.db.get<{ capabilities: string }>("SELECT capabilities FROM devices WHERE id = ?", [device!.id]))?.capabilities === '{"exec_cmds":true}', 5000, "the good report");
    assert.equal(hub.dropped - before, methods.length + 3);
    assert.equal(hub.get(device!.mac)?.open, true);
    // The dropped ones changed nothing: no version stored, no progress record, no history row.
    const row = await server.db.get<{ metadata: string }>("SELECT metadata FROM devices WHERE id = ?", [device!.id]);
    assert.equal(row?.metadata, "{}");
    assert.equal(await server.db.get("SELECT 1 FROM progress WHERE device_id = ?", [device!.id]), undefined);
    assert.deepEqual((await server.call("GET", `/api/v2/devices/${device!.id}/update-history`)).body, []);
  } finally {
    socket.ws.close();
  }
});
