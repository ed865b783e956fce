/*
 * A deployment's devices are in the service's memory only once the transaction that records them
 * committed: the creation's, and a completed deployment's reopening by a retry. A commit that
 * fails leaves the memory as it was, and no update check is offered from it meanwhile.
 */
import assert from "node:assert/strict";
import { afterEach, test } from "node:test";
import WebSocket from "ws";
import type { Store, TransactOptions, Tx } from "../../src/db/store.ts";
import { useTestServer } from "../helpers/server.ts";
import { deviceMetadata, seedDevices } from "./helpers/devices.ts";
import { offerGroup, uploadOk } from "./helpers/packages.ts";

const server = useTestServer();
const DAY = 86400;
type Device = { id: number; mac: string; token: string };

const service = () => server.server.domains.update.deployments;

/**
 * Makes the next service transaction whose result `fails` picks out fail at its commit (its
 * statements ran, then COMMIT throws); `during` is called there, before the failure, to see
 * what the memory holds meanwhile.
 */
function failCommitOf(fails: (result: unknown) => boolean, during: () => void): () => void {
  const store = server.server.ctx.store as { transact: Store["transact"] };
  const original = store.transact;
  const transact = original.bind(store);
  let armed = true;
  store.transact = <T>(fn: (tx: Tx) => Promise<T>, options?: TransactOptions): Promise<T> =>
    transact(async (tx) => {
      const result = await fn(tx);
      if (armed && fails(result)) {
        armed = false;
        during();
        throw new Error("COMMIT failed (the test's)");
      }
      return result;
    }, options);
  return () => (store.transact = original);
}
let restore: (() => void) | undefined;
afterEach(() => {
  restore?.();
  restore = undefined;
});

async function check(device: Device, version: string): Promise<{ status: number; version?: string }> {
  const res = await server.request("/api/v1/update/check", { method: "POST", token: device.token, json: deviceMetadata(device.mac, { "svc.software.version": version, "svc.hardware.devtype": "board" }) });
  return { status: res.status, version: res.status === 200 ? ((await res.json()) as { version: string }).version : (await res.body?.cancel(), undefined) };
}

async function fleet(count: number): Promise<{ devices: Device[]; group: number }> {
  const admin = server.adminToken;
  const devices = (await seedDevices(server, count)).map((d) => ({ ...d, token: server.server.ctx.tokens.issueDevice(d.mac, d.id, 30 * DAY) }));
  const v2 = (await uploadOk(server, { token: admin, version: `v2`, devtype: "board", file: Buffer.from(`v2 ${devices[0].mac}`) })).id;
  const group = await offerGroup(server, { policy: "no_update,", packages: [v2], devices: devices.map((d) => d.id) });
  return { devices, group };
}

test("a creation whose commit fails leaves no device in memory, offers nothing meanwhile, and the next creation goes ahead", async () => {
  const { devices, group } = await fleet(3);
  const tracked = service().trackedDevices;
  let during: unknown[] = [];
  restore = failCommitOf(
    (result) => typeof result === "object" && result !== null && "phases" in result && (result as unknown as { group_id: number }).group_id === group,
    () => (during = devices.map((d) => service().steer(d.id, group, server.server.ctx.clock.now(), undefined))),
  );
  const failed = await server.call("POST", "/api/v2/deployments", { group, version: "v2" });
  assert.equal(failed.status, 500, JSON.stringify(failed.body));
  assert.deepEqual(during, [undefined, undefined, undefined], "an update check during the commit is answered by the group's policy");
  assert.equal(service().trackedDevices, tracked);
  assert.deepEqual(await check(devices[0], "v1"), { status: 204, version: undefined });
  restore();

  const created = await server.call<{ id: number }>("POST", "/api/v2/deployments", { group, version: "v2" });
  assert.equal(created.status, 201, JSON.stringify(created.body));
  assert.equal(service().trackedDevices, tracked + devices.length);
  assert.deepEqual(await check(devices[0], "v1"), { status: 200, version: "v2" });
  assert.equal((await server.call("POST", `/api/v2/deployments/${created.body.id}/abort`)).status, 200);
});

test("a retry that reopens a completed deployment and fails at its commit leaves it ended and the device held out", async () => {
  const { devices, group } = await fleet(1);
  const [device] = devices;
  const created = await server.call<{ id: number }>("POST", "/api/v2/deployments", { group, version: "v2", retries: 0 });
  assert.equal(created.status, 201, JSON.stringify(created.body));
  const id = created.body.id;
  assert.deepEqual(await check(device, "v1"), { status: 200, version: "v2" });
  const ws = new WebSocket(`${server.url.replace("http", "ws")}/api/v1/devices/ws`, { headers: { authorization: `Bearer token=${device.token}` } });
  try {
    await new Promise((resolve, reject) => (ws.once("open", resolve), ws.once("error", reject)));
    const acked = new Promise((resolve) => ws.on("message", (data) => JSON.parse(String(data)).method === "update_outcome_ack" && resolve(undefined)));
    ws.send(JSON.stringify({ method: "update_outcome", id: "fail-1", state: "failed", version: "v2", from_version: "v1", reason: "exit 3" }));
    await acked;
  } finally {
    ws.close();
  }
  assert.equal((await server.call<{ status: string }>("GET", `/api/v2/deployments/${id}`)).body.status, "completed_with_failures");
  const tracked = service().trackedDevices;

  let during: unknown;
  restore = failCommitOf(
    (result) => typeof result === "object" && result !== null && "chosen" in result,
    () => (during = service().steer(device.id, group, server.server.ctx.clock.now(), "v2")),
  );
  const failed = await server.call("POST", `/api/v2/deployments/${id}/retry`, {});
  assert.equal(failed.status, 500, JSON.stringify(failed.body));
  assert.equal(during, "hold", "the device failed for good is held out of the policy during the commit");
  assert.equal(service().trackedDevices, tracked);
  assert.equal((await server.call<{ status: string }>("GET", `/api/v2/deployments/${id}`)).body.status, "completed_with_failures");
  assert.deepEqual(await check(device, "v1"), { status: 204, version: undefined });
  restore();

  const retried = await server.call("POST", `/api/v2/deployments/${id}/retry`, {});
  assert.equal(retried.status, 200, JSON.stringify(retried.body));
  assert.equal(service().trackedDevices, tracked + 1);
  assert.deepEqual(await check(device, "v1"), { status: 200, version: "v2" });
});
