/*
 * The update server's answers are exactly the shapes the OpenAPI document shows (the schema.ts
 * of each area under src/update): parsing an answer with its schema keeps every field and drops
 * none, so a field the handler sends but the schema lacks, or one the schema requires but the
 * handler leaves out, fails here.
 */
import assert from "node:assert/strict";
import { after, test } from "node:test";
import * as z from "zod";
import type { Agent } from "../../src/agent/agent.ts";
import { Action, ActionLogEntry, ExecResult, FanOutResults } from "../../src/update/actions/schema.ts";
import { Deployment, DeploymentDevice, UpdateHistoryEntry } from "../../src/update/deployments/schema.ts";
import { FetchedFile } from "../../src/update/devicefiles/schema.ts";
import { Device, DeviceV1, Tags } from "../../src/update/devices/schema.ts";
import { Group, GroupV1 } from "../../src/update/groups/schema.ts";
import { Log } from "../../src/update/logs/schema.ts";
import { Package, PackageLink } from "../../src/update/packages/schema.ts";
import { PermissionObject } from "../../src/update/permissions/schema.ts";
import { Progress } from "../../src/update/progress/schema.ts";
import { PendingRegistration, PendingRemoved, ReferencePending } from "../../src/update/registration/schema.ts";
import { UpdateOffer } from "../../src/update/updatecheck/schema.ts";
import { exact } from "../helpers/shapes.ts";
import { useTestServer } from "../helpers/server.ts";
import { connectedAgent, FAST_SERVER } from "./helpers/agents.ts";
import { deviceClient, deviceMetadata, seedDevices } from "./helpers/devices.ts";
import { offerGroup, uploadOk } from "./helpers/packages.ts";

const agents: Agent[] = [];
// Registered first, so it runs first: the agents stop before the server closes.
after(async () => {
  for (const agent of agents) await agent.stop();
});
const server = useTestServer(FAST_SERVER);

/** The JSON answer of an admin request, asserting a 2xx. */
async function answer(method: string, path: string, json?: unknown): Promise<any> {
  const { status, body } = await server.call(method, path, json);
  assert.ok(status >= 200 && status < 300, `${method} ${path}: ${status} ${JSON.stringify(body)}`);
  return body;
}

test("registrations, devices, tags, groups, packages, permissions", async () => {
  const client = deviceClient(server);
  assert.equal((await client.authorize()).status, "pending");
  exact(z.array(ReferencePending), await answer("GET", "/api/v1/auth/pending"), "pending list");
  const detailed = await answer("GET", "/api/v1/auth/pending?details=true");
  exact(z.array(PendingRegistration), detailed, "pending list with details");
  assert.ok(detailed.length > 0);
  await answer("POST", "/api/v1/auth/register", { mac_address: client.mac, public_key: client.publicKeyPem });
  assert.equal((await client.authorize()).status, "accepted");
  exact(PendingRemoved, await answer("POST", "/api/v1/auth/pending/remove", { all: true }), "bulk removal");

  const devices = await answer("GET", "/api/v2/devices");
  exact(z.array(Device), devices, "device list");
  const id = devices.find((d: { mac_address: string }) => d.mac_address === client.mac).id;
  exact(z.array(Device), await answer("GET", "/api/v2/devices?limit=5&q=board"), "a page of devices");
  exact(Device, await answer("GET", `/api/v2/devices/${id}`), "one device");
  exact(Device, await answer("PATCH", `/api/v2/devices/${id}`, { name: "bench-1" }), "a renamed device");
  await answer("POST", `/api/v2/devices/${id}/tag/lab`);
  exact(Tags, await answer("GET", `/api/v2/devices/${id}/tags`), "tags");
  exact(z.array(Device), await answer("GET", "/api/v2/tags/lab"), "devices with a tag");
  exact(z.array(DeviceV1), await answer("GET", "/api/v1/devices"), "v1 device list");
  exact(DeviceV1, await answer("GET", `/api/v1/devices/${id}`), "v1 device");

  const pkg = await uploadOk(server, { token: server.adminToken, version: "v2" });
  exact(Package, pkg, "an upload");
  exact(z.array(Package), await answer("GET", "/api/v1/packages"), "package list");
  exact(PackageLink, await answer("GET", `/api/v1/packages/${pkg.id}/download`), "a download link");

  const group = await answer("POST", "/api/v2/groups", { metadata: { site: "a" }, priority: 3 });
  exact(Group, group, "a v2 group");
  await answer("PATCH", `/api/v2/groups/${group.id}/devices`, { add: [id], remove: [] });
  await answer("POST", `/api/v2/groups/${group.id}/package`, { packages: [pkg.id] });
  exact(Group, await answer("GET", `/api/v2/groups/${group.id}`), "one v2 group");
  exact(z.array(Group), await answer("GET", "/api/v2/groups"), "v2 group list");
  const v1 = await answer("POST", "/api/v1/groups", { site: "b" });
  exact(GroupV1, v1, "a v1 group");
  exact(GroupV1, await answer("GET", `/api/v1/groups/${v1.id}`), "one v1 group");
  exact(z.array(GroupV1), await answer("GET", "/api/v1/groups"), "v1 group list");

  const permission = await answer("POST", "/api/v1/permissions", { user_id: "ann", resource: "device_by_tag", resource_name: "lab", permission: "read" });
  exact(PermissionObject, permission, "a grant");
  exact(PermissionObject, await answer("GET", `/api/v1/permissions/${permission.id}`), "one permission");
  exact(z.array(PermissionObject), await answer("GET", "/api/v1/permissions"), "permission list");
});

test("update checks, progress, logs, deployments and update history", async () => {
  const [device] = await seedDevices(server, 1);
  const pkg = await uploadOk(server, { token: server.adminToken, version: "v2" });
  const group = await offerGroup(server, { policy: "exact_match,v2", packages: [pkg.id], devices: [device.id] });
  const check = await server.request("/api/v1/update/check", { method: "POST", token: device.token, json: deviceMetadata(device.mac) });
  assert.equal(check.status, 200);
  exact(UpdateOffer, await check.json(), "an offer");
  exact(z.array(Progress), await answer("GET", "/api/v2/devices/progress"), "devices updating");
  exact(Progress, await answer("GET", `/api/v2/devices/${device.id}/progress`), "one device's progress");

  const batch = { batch: [{ device_timestamp: "Wed, 02 Oct 2002 15:00:00 -0000", name: "cpu", entry: "0.12" }] };
  assert.equal((await server.request("/api/v1/logs", { method: "POST", token: device.token, json: batch })).status, 200);
  const logs = await answer("GET", `/api/v1/logs/device/${device.id}?limit=10`);
  exact(z.array(Log), logs, "a page of logs");
  exact(z.array(Log), await answer("GET", `/api/v1/logs/group/${group}`), "a group's logs, streamed");
  exact(Log, await answer("GET", `/api/v1/logs/${logs[0].id}`), "one log entry");

  const created = await server.call("POST", "/api/v2/deployments", {
    group,
    version: "v2",
    phases: [50, 100],
    window: { days: ["mon", "tue"], from: "22:00", to: "05:00" },
    start_at: "2030-01-01T00:00:00Z",
  });
  assert.equal(created.status, 201, JSON.stringify(created.body));
  exact(Deployment, created.body, "a new deployment");
  const deployment = created.body.id;
  exact(Deployment, await answer("GET", `/api/v2/deployments/${deployment}`), "one deployment");
  exact(z.array(Deployment), await answer("GET", `/api/v2/deployments?group=${group}`), "deployment list");
  exact(z.array(DeploymentDevice), await answer("GET", `/api/v2/deployments/${deployment}/devices`), "a deployment's devices");
  exact(Deployment, await answer("POST", `/api/v2/deployments/${deployment}/abort`), "an aborted deployment");
  exact(z.array(UpdateHistoryEntry), await answer("GET", `/api/v2/devices/${device.id}/update-history`), "update history");
});

test("actions and a file from a connected agent", async () => {
  const { agent, id } = await connectedAgent(server, agents);
  exact(z.array(Action), await answer("GET", `/api/v2/devices/${agent.mac}/action/list`), "action list");
  exact(ExecResult, await answer("GET", `/api/v2/devices/${agent.mac}/action/exec/ok`), "an execution");
  exact(FanOutResults, await answer("POST", "/api/v2/devices/action/exec", { action_id: "ok", devices: [agent.mac, "02:00:00:00:99:99"] }), "a fan-out");
  exact(z.array(ActionLogEntry), await answer("GET", `/api/v2/devices/${agent.mac}/action/log`), "action log");
  exact(FetchedFile, await answer("POST", `/api/v2/devices/${id}/fs/file`, { file: "/nothing/here" }), "a file fetch that found nothing");
});
