/*
 * `recover`'s power cycle runs beside the deployments' tick: while a board's PDU takes its time,
 * the tick goes on deciding for the others (here another device's timeout), and the cycle is
 * recorded once it is done.
 */
import assert from "node:assert/strict";
import { test } from "node:test";
import { openDeviceSocket } from "../helpers/device-socket.ts";
import { useTestServer } from "../helpers/server.ts";
import { deviceMetadata, seedDevices } from "../update/helpers/devices.ts";
import { uploadOk } from "../update/helpers/packages.ts";
import { labConfig } from "./helpers.ts";

const DAY = 86400;
const MAC = "02:00:00:46:05:03";
// The cycle's off-to-on pause stands for a PDU that takes long: it ends only when the test moves the clock past it.
const server = useTestServer({ lab: labConfig([{ device: MAC, power: { driver: "command", on: ["true"], off: ["true"], delay: 600 } }]) });
const admin = () => server.token(["admin_rw"], "lab-admin", 30 * DAY);
const call = (method: string, path: string, json?: unknown) => server.call(method, path, json, admin());
const deployments = () => server.server.domains.update.deployments;

test("a power cycle that takes long holds up no other decision of the deployments' tick, and is recorded once done", async () => {
  const pkg = (await uploadOk(server, { token: admin(), version: "v2", devtype: "board", file: Buffer.from("v2 for boards") })).id;
  const [board, other] = await seedDevices(server, 2);
  await server.db.run("UPDATE devices SET mac_address = ? WHERE id = ?", [MAC, board!.id]);
  const group = (await call("POST", "/api/v2/groups", { metadata: {} })).body.id as number;
  for (const [method, path, json] of [
    ["POST", `/api/v2/groups/${group}/policy`, { policy: "no_update," }],
    ["POST", `/api/v2/groups/${group}/package`, { packages: [pkg] }],
    ["PATCH", `/api/v2/groups/${group}/devices`, { add: [board!.id, other!.id], remove: [] }],
  ] as const) {
    assert.equal((await call(method, path, json)).status, 200);
  }
  const created = await call("POST", "/api/v2/deployments", { group, version: "v2", device_timeout_minutes: 5, recover: { power_cycle_after_minutes: 2 } });
  assert.equal(created.status, 201, JSON.stringify(created.body));
  const token = server.server.ctx.tokens.issueDevice(MAC, board!.id, 30 * DAY);
  const res = await server.request("/api/v1/update/check", { method: "POST", token, json: deviceMetadata(MAC, { "svc.software.version": "v1" }) });
  assert.equal(res.status, 200);
  await res.arrayBuffer();
  const socket = await openDeviceSocket(server.url, token, "board");
  try {
    const acked = socket.next("update_outcome_ack");
    socket.send({ method: "update_outcome", id: "r-1", state: "installing", version: "v2", from_version: "v1" });
    await acked;

    await deployments().tick();
    server.clock.advance(6 * 60_000);
    // Past the board's recover time and the other device's timeout: the tick decides the timeout while the PDU works.
    const ticked = await Promise.race([deployments().tick().then(() => "done"), new Promise((resolve) => setTimeout(resolve, 5000, "held up"))]);
    assert.equal(ticked, "done", "the tick does not wait for the PDU");
    const states = new Map(((await call("GET", `/api/v2/deployments/${created.body.id}/devices?limit=10`)).body as Array<{ device: number; state: string }>).map((m) => [m.device, m.state]));
    assert.equal(states.get(other!.id), "not_reached", "the other device timed out meanwhile");
    assert.equal((await call("GET", `/api/v2/devices/${board!.id}/power`)).body.busy, true, "the cycle is under way");

    server.clock.advance(600_000);
    await deployments().recoveriesSettled();
    const history = (await call("GET", `/api/v2/devices/${board!.id}/update-history`)).body as Array<{ outcome: string; reason: string | null }>;
    assert.deepEqual(history.filter((h) => h.outcome === "power_cycle").map((h) => h.reason), ["no report within 2 minutes of its install: power-cycled"]);
  } finally {
    socket.ws.close();
  }
});
