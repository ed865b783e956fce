/*
 * Update checks on two nodes of one PostgreSQL: what a check answers from memory (the catalog of
 * groups, the deltas, the devices the token gate knows) follows the changes made on the other node.
 */
import { strict as assert } from "node:assert";
import { test } from "node:test";
import { inProcessNode as node } from "../helpers/cluster.ts";
import { usePostgres } from "../helpers/postgres.ts";
import { waitFor, type TestServer } from "../helpers/server.ts";
import { deviceMetadata, registerDevice, seedDevices } from "../update/helpers/devices.ts";
import { offerGroup, uploadOk } from "../update/helpers/packages.ts";

const postgres = usePostgres();

/** An update check of `device` on `server`, as the device running c1 on a board makes it. */
const checkOn = (server: TestServer, device: { token: string; client: { mac: string } }) =>
  fetch(`${server.url}/api/v1/update/check`, {
    method: "POST",
    headers: { "content-type": "application/json", authorization: `Bearer token=${device.token}` },
    body: JSON.stringify({ "svc.software.version": "c1", "svc.hardware.devtype": "board", "svc.hardware.macaddr": device.client.mac }),
  });

test("a delta made and a policy changed on one node are answered by the other node's update checks", async () => {
  const url = await postgres.createDatabase("checks");
  const a = await node(url, "node-a");
  const b = await node(url, "node-b", a.dataDir);
  try {
    const device = await registerDevice(a);
    const check = async (server: TestServer) => {
      const res = await checkOn(server, device);
      const text = await res.text();
      return { status: res.status, text, body: text ? (JSON.parse(text) as { id: number; delta?: { id: number } }) : undefined };
    };
    const base = await uploadOk(a, { token: a.adminToken, version: "c1", devtype: "board", file: Buffer.from("the c1 image\n".repeat(2000)) });
    const target = await uploadOk(a, { token: a.adminToken, version: "c2", devtype: "board", file: Buffer.from("the c2 image\n".repeat(2000)) });
    const group = await offerGroup(a, { policy: "exact_match,c2", devices: [device.id], packages: [target.id] });
    const first = await check(b);
    assert.equal(first.status, 200, first.text);
    assert.equal(first.body?.id, target.id);
    assert.equal(first.body?.delta, undefined);

    const queued = await a.call<{ id: number }>("POST", `/api/v1/packages/${target.id}/delta`, { from: base.id });
    assert.equal(queued.status, 202, JSON.stringify(queued.body));
    const job = await waitFor(async () => (await a.call<Array<{ id: number; state: string; package?: number; error?: string }>>("GET", "/api/v1/packages/deltas")).body.find((j) => j.id === queued.body.id && j.state !== "queued" && j.state !== "running"), 20_000, "the delta made");
    assert.equal(job.state, "done", job.error);
    // Node b hears of it through PostgreSQL a moment after the commit.
    const offered = await waitFor(async () => {
      const answer = await check(b);
      return answer.body?.delta ? answer : undefined;
    }, 5000, "node b offering the delta");
    assert.equal(offered.body?.delta?.id, job.package);

    assert.equal((await a.call("POST", `/api/v2/groups/${group}/policy`, { policy: "no_update," })).status, 200);
    await waitFor(async () => (await check(b)).status === 204 || undefined, 5000, "node b answering the group's new policy");
  } finally {
    await b.close();
    await a.close();
  }
});

test("a device deleted on one node: its token is refused by the other node's gate, which had let it in", async () => {
  const url = await postgres.createDatabase("gate");
  const a = await node(url, "node-a");
  const b = await node(url, "node-b", a.dataDir);
  try {
    const device = await registerDevice(a);
    const check = async (server: TestServer) => (await checkOn(server, device)).status;
    // Node b's gate remembers the device from its first check.
    assert.equal(await check(b), 204);
    assert.equal(await check(b), 204);
    assert.equal((await a.call("DELETE", `/api/v2/devices/${device.id}`)).status, 200);
    assert.equal(await check(a), 401);
    await waitFor(async () => (await check(b)) === 401 || undefined, 5000, "node b refusing the deleted device's token");
  } finally {
    await b.close();
    await a.close();
  }
});

test("checks answered while a node builds its deployments' memory again (another node's change) offer only what the deployment recorded", async () => {
  const url = await postgres.createDatabase("rebuilt");
  const a = await node(url, "node-a");
  const b = await node(url, "node-b", a.dataDir);
  try {
    const DAY = 86400;
    const devices = (await seedDevices(a, 9)).map((d) => ({ ...d, token: a.server.ctx.tokens.issueDevice(d.mac, d.id, DAY) }));
    const [other, ...checked] = devices as [(typeof devices)[0], ...typeof devices];
    const pkg = await uploadOk(a, { token: a.adminToken, version: "v2", devtype: "board", file: Buffer.from("v2 for boards") });
    const group = await offerGroup(a, { policy: "no_update,", devices: checked.map((d) => d.id), packages: [pkg.id] });
    const deployment = await a.call<{ id: number }>("POST", "/api/v2/deployments", { group, version: "v2" });
    assert.equal(deployment.status, 201, JSON.stringify(deployment.body));
    // Node b starts a deployment of its own; node a hears of it and builds its memory again at its next check.
    const heard = new Promise<void>((resolve) => a.server.ctx.cluster.on("deployments_changed", () => resolve()));
    const otherGroup = await offerGroup(b, { policy: "no_update,", devices: [other.id], packages: [pkg.id] });
    assert.equal((await b.call("POST", "/api/v2/deployments", { group: otherGroup, version: "v2" })).status, 201);
    await heard;
    const answers = await Promise.all(
      checked.map(async (d) => {
        const res = await a.request("/api/v1/update/check", { method: "POST", token: d.token, json: deviceMetadata(d.mac) });
        return { id: d.id, status: res.status, text: await res.text() };
      }),
    );
    const states = new Map((await a.call<Array<{ device: number; state: string }>>("GET", `/api/v2/deployments/${deployment.body.id}/devices?limit=20`)).body.map((m) => [m.device, m.state]));
    const told = answers.map((answer) => `${answer.status} ${states.get(answer.id)}`);
    assert.deepEqual(told, checked.map(() => "200 offered"), "every device offered v2, each offer recorded before the answer");
  } finally {
    await b.close();
    await a.close();
  }
});
