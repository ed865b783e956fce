/*
 * Deployments over HTTP and the device socket, with hand-driven devices (seeded rows, their
 * update checks and `update_outcome` reports): the phases, gates, threshold, timeouts, window,
 * abort, completion, validation and permissions. The run with real agents is
 * deployments-agents.test.ts.
 */
import assert from "node:assert/strict";
import { afterEach, describe, test } from "node:test";
import WebSocket from "ws";
import { openStream } from "../helpers/events.ts";
import { useTestServer } from "../helpers/server.ts";
import { deviceMetadata, seedDevices } from "./helpers/devices.ts";
import { uploadOk } from "./helpers/packages.ts";

const server = useTestServer();
const DAY = 86400;

type Device = { id: number; mac: string; token: string };

// Tokens that outlive the hours the clock test moves the server's clock by.
let adminToken: string | undefined;
const admin = () => (adminToken ??= server.token(["admin_rw"], "deploy-admin", 30 * DAY));
const call = <T = any>(method: string, path: string, json?: unknown, token?: string) => server.call<T>(method, path, json, token ?? admin());
async function devicesOf(count: number): Promise<Device[]> {
  return (await seedDevices(server, count)).map((d) => ({ ...d, token: server.server.ctx.tokens.issueDevice(d.mac, d.id, 30 * DAY) }));
}

/** An update check of `device` running `version`: the status and the offer. */
async function check(device: Device, version: string, devtype = "board"): Promise<{ status: number; body: { id?: number; version?: string } }> {
  const res = await server.request("/api/v1/update/check", {
    method: "POST",
    token: device.token,
    json: deviceMetadata(device.mac, { "svc.software.version": version, "svc.hardware.devtype": devtype }),
  });
  return { status: res.status, body: res.status === 200 ? await res.json() : {} };
}

interface DeviceSocket {
  send(message: object): void;
  next(method: string): Promise<Record<string, unknown>>;
  close(): void;
}
/** One socket per device (the server refuses a second), open until the test's end. */
const sockets = new Map<number, Promise<DeviceSocket>>();
afterEach(() => {
  for (const socket of sockets.values()) void socket.then((s) => s.close());
  sockets.clear();
});
function socketOf(device: Device): Promise<DeviceSocket> {
  let socket = sockets.get(device.id);
  if (!socket) sockets.set(device.id, (socket = openSocket(device)));
  return socket;
}

/** A device socket: `send` a message, `next(method)` waits for one from the server. */
async function openSocket(device: Device): Promise<DeviceSocket> {
  const ws = new WebSocket(`${server.url.replace("http", "ws")}/api/v1/devices/ws`, { headers: { authorization: `Bearer token=${device.token}` } });
  const inbox: Array<Record<string, unknown>> = [];
  const waiting: Array<{ method: string; resolve: (m: Record<string, unknown>) => void }> = [];
  ws.on("message", (data) => {
    const message = JSON.parse(data.toString()) as Record<string, unknown>;
    const i = waiting.findIndex((w) => w.method === message.method);
    if (i >= 0) waiting.splice(i, 1)[0].resolve(message);
    else inbox.push(message);
  });
  await new Promise((resolve, reject) => (ws.once("open", resolve), ws.once("error", reject)));
  return {
    send: (message) => ws.send(JSON.stringify(message)),
    next: (method) =>
      new Promise((resolve, reject) => {
        const i = inbox.findIndex((m) => m.method === method);
        if (i >= 0) return resolve(inbox.splice(i, 1)[0]);
        const timer = setTimeout(() => reject(new Error(`no ${method} from the server within 5 s`)), 5000);
        waiting.push({ method, resolve: (m) => (clearTimeout(timer), resolve(m)) });
      }),
    close: () => ws.close(),
  };
}

let outcomeCount = 0;
/** Reports an outcome (as `id`: a report sent again) over the device's socket and waits for its acknowledgement (the report is durable then). */
async function report(device: Device, outcome: Record<string, unknown>, id = `o-${++outcomeCount}`): Promise<void> {
  const socket = await socketOf(device);
  const acked = socket.next("update_outcome_ack");
  socket.send({ method: "update_outcome", id, ...outcome });
  assert.equal((await acked).id, id);
}

/** A v2 group (as admin) with `devices`, `packages` and policy; its id. */
async function group(devices: number[], packages: number[], policy = "no_update,"): Promise<number> {
  const { body } = await call<{ id: number }>("POST", "/api/v2/groups", { metadata: {} });
  for (const [method, path, json] of [
    ["POST", `/api/v2/groups/${body.id}/policy`, { policy }],
    ["POST", `/api/v2/groups/${body.id}/package`, { packages }],
    ["PATCH", `/api/v2/groups/${body.id}/devices`, { add: devices, remove: [] }],
  ] as const) {
    const res = await call(method, path, json);
    assert.equal(res.status, 200, JSON.stringify(res.body));
  }
  return body.id;
}

interface MemberView {
  device: number;
  phase: number;
  state: string;
  reason: string | null;
  output: string | null;
  progress: number | null;
  attempt: number;
  failures: number;
}

async function members(id: number, query = ""): Promise<MemberView[]> {
  const res = await call<MemberView[]>("GET", `/api/v2/deployments/${id}/devices?limit=1000${query}`);
  assert.equal(res.status, 200, JSON.stringify(res.body));
  return res.body;
}

const deployment = async (id: number) => (await call("GET", `/api/v2/deployments/${id}`)).body;

async function create(body: Record<string, unknown>): Promise<{ id: number; status: string; phases: Array<{ devices: number }> }> {
  const res = await call("POST", "/api/v2/deployments", body);
  assert.equal(res.status, 201, JSON.stringify(res.body));
  return res.body;
}

/** Devices of a deployment by phase, in the recorded order. */
async function byPhase(id: number, devices: Device[]): Promise<Device[][]> {
  const list = await members(id);
  const phases: Device[][] = [];
  for (const m of list) (phases[m.phase] ??= []).push(devices.find((d) => d.id === m.device)!);
  return phases;
}

let packages: { v2: number; v3: number; v2other: number; v15: number };
const packagesReady = async () => {
  packages ??= {
    v2: (await uploadOk(server, { token: admin(), version: "v2", devtype: "board", file: Buffer.from("v2 for boards") })).id,
    v3: (await uploadOk(server, { token: admin(), version: "v3", devtype: "board", file: Buffer.from("v3 for boards"), fields: { "requires:svc.software.version": "v2" } })).id,
    v2other: (await uploadOk(server, { token: admin(), version: "v2", devtype: "other", file: Buffer.from("v2 for others") })).id,
    v15: (await uploadOk(server, { token: admin(), version: "v1.5", devtype: "board", file: Buffer.from("v1.5 for boards") })).id,
  };
  return packages;
};

describe("deployments", () => {
  test("bad input is a 4xx naming the field, and creates nothing", async () => {
    const pk = await packagesReady();
    const devices = await devicesOf(2);
    const g = await group([devices[0].id], [pk.v2]);
    const empty = await group([], [pk.v2]);
    const before = (await call("GET", "/api/v2/deployments")).headers.get("x-total-count");
    const cases: Array<[Record<string, unknown>, number, RegExp]> = [
      [{ version: "v2" }, 400, /"group"/],
      [{ group: 999_999, version: "v2" }, 400, /"group": group 999999 does not exist/],
      [{ group: g, version: "v9" }, 400, /"version": no package/],
      [{ group: g, version: "v2", phases: [10, 50] }, 400, /"phases".*100/],
      [{ group: g, version: "v2", phases: [50, 20, 100] }, 400, /"phases".*grow/],
      [{ group: g, version: "v2", phases: [] }, 400, /"phases"/],
      [{ group: g, version: "v2", phases: ["x"] }, 400, /"phases"/],
      [{ group: g, version: "v2", success_percent: 101 }, 400, /"success_percent"/],
      [{ group: g, version: "v2", error_percent: -1 }, 400, /"error_percent"/],
      [{ group: g, version: "v2", window: { days: [], from: "22:00", to: "04:00" } }, 400, /"window.days".*never opens/],
      [{ group: g, version: "v2", window: { days: ["mon"], from: "22:00", to: "22:00" } }, 400, /"window".*never opens/],
      [{ group: g, version: "v2", window: { days: ["mon"], from: "25:00", to: "04:00" } }, 400, /"window.from"/],
      [{ group: g, version: "v2", window: { days: ["mon"], from: "01:00", to: "04:00", timezone: "Mars/Base" } }, 400, /"window.timezone"/],
      [{ group: g, version: "v2", start_at: "tomorrow" }, 400, /"start_at"/],
      [{ group: g, version: "v2", device_timeout_minutes: 0 }, 400, /"device_timeout_minutes"/],
      [{ group: g, version: "v2", packages: [999_999] }, 404, /"packages": package 999999 does not exist/],
      [{ group: g, version: "v2", colour: "red" }, 400, /unknown field "colour"/],
      [{ group: empty, version: "v2" }, 400, /"group": group \d+ has no devices/],
    ];
    for (const [body, status, message] of cases) {
      const res = await call("POST", "/api/v2/deployments", body);
      assert.equal(res.status, status, `${JSON.stringify(body)}: ${JSON.stringify(res.body)}`);
      assert.match(res.body.error, message, JSON.stringify(body));
    }
    assert.equal((await call("GET", "/api/v2/deployments")).headers.get("x-total-count"), before, "nothing was created");
    // The packages of a refused request were not assigned either.
    const v3 = await call("POST", "/api/v2/deployments", { group: g, version: "v9", packages: [pk.v3] });
    assert.equal(v3.status, 400);
    assert.deepEqual((await call("GET", `/api/v2/groups/${g}`)).body.packages, [pk.v2]);

    // One active deployment per group.
    const first = await create({ group: g, version: "v2" });
    const second = await call("POST", "/api/v2/deployments", { group: g, version: "v2" });
    assert.equal(second.status, 409);
    assert.match(second.body.error, /"group": group \d+ already has deployment/);
    assert.equal((await call("POST", `/api/v2/deployments/${first.id}/abort`)).status, 200);
  });

  test("phases start in the recorded order; the gate opens the next; errors pause; completion sets the policy", async () => {
    const pk = await packagesReady();
    const devices = await devicesOf(10);
    const g = await group(devices.map((d) => d.id), [pk.v2], "no_update,");
    const stream = await openStream(server, admin());
    try {
      const created = await create({ group: g, version: "v2", phases: [20, 50, 100], success_percent: 100, error_percent: 15, retries: 0 });
      assert.equal(created.status, "running");
      assert.deepEqual(created.phases.map((p) => p.devices), [2, 3, 5]);
      const phases = await byPhase(created.id, devices);
      // The order is recorded: asking again gives the same.
      assert.deepEqual((await byPhase(created.id, devices)).map((p) => p.map((d) => d.id)), phases.map((p) => p.map((d) => d.id)));

      // Phase 0 is offered the target; the others follow the group's policy (no_update).
      for (const d of phases[0]) {
        const answer = await check(d, "v1");
        assert.equal(answer.status, 200);
        assert.equal(answer.body.version, "v2");
      }
      for (const d of phases[1]) assert.equal((await check(d, "v1")).status, 204);
      assert.deepEqual((await members(created.id, "&phase=0")).map((m) => m.state), ["offered", "offered"]);
      assert.deepEqual((await members(created.id, "&state=waiting")).length, 8);

      // Downloading with a percent, then installed.
      const socket = await socketOf(phases[0][0]);
      socket.send({ method: "update_progress", progress: 40 });
      await stream.next((e) => e.event === "deployment_device" && e.data.device === phases[0][0].mac && e.data.state === "downloading", 5000, "downloading");
      await report(phases[0][0], { state: "installing", version: "v2", from_version: "v1" });
      await report(phases[0][0], { state: "installed", version: "v2", from_version: "v1" });
      // An installed device is held: the group's policy cannot pull it anywhere while the deployment runs.
      assert.equal((await check(phases[0][0], "v2")).status, 204);
      assert.equal((await deployment(created.id)).current_phase, 0, "the gate needs 100 %");
      await report(phases[0][1], { state: "installed", version: "v2", from_version: "v1" });
      await stream.next((e) => e.event === "deployment" && e.data.deployment === created.id && e.data.current_phase === 1, 5000, "phase 1 started");

      // Phase 1: two of its three devices check; one failure of the 4 offered so far (2 installed,
      // 2 offered): 25 % > 15 % pauses it, and the reason counts the one not offered yet apart.
      for (const d of phases[1].slice(0, 2)) assert.equal((await check(d, "v1")).status, 200);
      await report(phases[1][0], { state: "failed", version: "v2", from_version: "v1", reason: "install command exited with 3", output: "x".repeat(5000) + "the end" });
      const paused = await deployment(created.id);
      assert.equal(paused.status, "paused");
      assert.equal(paused.pause_reason, "error threshold: 1 of the 4 devices offered so far failed (25%, more than 15%); 1 of the 5 devices in the started phases not offered yet");
      const failed = (await members(created.id, "&state=failed"))[0];
      assert.equal(failed.reason, "install command exited with 3");
      assert.equal(Buffer.byteLength(failed.output!), 4096, "the last 4 KiB of the output");
      assert.ok(failed.output!.endsWith("the end"));
      // A failed device is not offered again during the deployment.
      assert.equal((await check(phases[1][0], "v1")).status, 204);

      // Paused: devices already under way go on; nobody new is offered (phase 2 is not started anyway).
      await report(phases[1][1], { state: "installed", version: "v2", from_version: "v1" });
      assert.equal((await check(phases[1][2], "v1")).status, 204, "not offered while paused");
      const resumed = await call("POST", `/api/v2/deployments/${created.id}/resume`);
      assert.equal(resumed.body.status, "running");
      assert.equal((await check(phases[1][2], "v1")).status, 200);
      await report(phases[1][2], { state: "installed", version: "v2", from_version: "v1" });
      // 2 of 3 installed < 100 %, every device finished: the gate is stuck, a person decides.
      assert.equal((await deployment(created.id)).gate, "stuck");
      const advanced = await call("POST", `/api/v2/deployments/${created.id}/advance`);
      assert.equal(advanced.body.current_phase, 2);
      const last = await call("POST", `/api/v2/deployments/${created.id}/advance`);
      assert.equal(last.status, 409);

      // Phase 2: one is already at v2, one has no package for its type, three install.
      const [at2, otherType, ...rest] = phases[2];
      assert.equal((await check(at2, "v2")).status, 204);
      assert.equal((await check(otherType, "v1", "stranger")).status, 204);
      for (const d of rest) {
        assert.equal((await check(d, "v1")).status, 200);
        await report(d, { state: "installed", version: "v2", from_version: "v1" });
      }
      await stream.next((e) => e.event === "deployment" && e.data.deployment === created.id && e.data.status === "completed_with_failures", 5000, "completed with failures");
      const done = await deployment(created.id);
      assert.equal(done.status, "completed_with_failures");
      assert.equal(done.counts.installed, 7);
      assert.equal(done.counts.failed, 1);
      assert.equal(done.counts.already_installed, 1);
      assert.equal(done.counts.no_package, 1);
      assert.deepEqual(done.phases.map((p: { succeeded: number }) => p.succeeded), [2, 2, 4]);
      assert.equal((await call("GET", `/api/v2/groups/${g}`)).body.policy, "exact_match,v2");
      // The steady state, without the device failed for good: the group's policy does not offer it v2.
      assert.equal((await check(phases[1][0], "v1")).status, 204);

      // Its history.
      const history = await call("GET", `/api/v2/devices/${phases[1][0].id}/update-history`);
      assert.equal(history.status, 200);
      assert.deepEqual(
        history.body.map((h: Record<string, unknown>) => [h.deployment, h.from_version, h.to_version, h.outcome, h.reason]),
        [[created.id, "v1", "v2", "failed", "install command exited with 3"]],
      );
      // Kept after it ended, found by filters.
      const list = await call("GET", `/api/v2/deployments?group=${g}&status=completed_with_failures`);
      assert.equal(list.headers.get("x-total-count"), "1");
      assert.equal(list.body[0].id, created.id);

      // A person asks for a retry: the deployment reopens and offers the device a new attempt.
      assert.equal((await call("POST", `/api/v2/deployments/${created.id}/retry`, { devices: [phases[2][0].id] })).status, 400, "not a failed device");
      const retried = await call("POST", `/api/v2/deployments/${created.id}/retry`);
      assert.equal(retried.status, 200, JSON.stringify(retried.body));
      assert.equal(retried.body.status, "running");
      assert.equal(retried.body.counts.retrying, 1);
      const [asked] = (await call("GET", `/api/v1/audit?target=deployment:${created.id}&action=deployment.retry`)).body as Array<{ actor_kind: string; actor: string; detail: Record<string, unknown> }>;
      assert.deepEqual([asked.actor_kind, asked.actor, asked.detail], ["token", "deploy-admin", { devices: [phases[1][0].id], count: 1, reopened: true }]);
      const offer = await check(phases[1][0], "v1");
      assert.equal(offer.status, 200);
      assert.deepEqual([offer.body.version, (offer.body as Record<string, unknown>).deployment, (offer.body as Record<string, unknown>).attempt], ["v2", created.id, 2]);
      await report(phases[1][0], { state: "installed", version: "v2", from_version: "v1", deployment: created.id, attempt: 2 });
      await stream.next((e) => e.event === "deployment" && e.data.deployment === created.id && e.data.status === "completed", 5000, "completed after the retry");
      assert.equal((await call("POST", `/api/v2/deployments/${created.id}/retry`)).status, 409, "no failed devices left");
    } finally {
      stream.close();
    }
  });

  test("abort: no more offers, devices downloading are told to stop, the policy stays", async () => {
    const pk = await packagesReady();
    const devices = await devicesOf(4);
    const g = await group(devices.map((d) => d.id), [pk.v2], "no_update,");
    const created = await create({ group: g, version: "v2", phases: [50, 100] });
    const [first] = await byPhase(created.id, devices);
    assert.equal((await check(first[0], "v1")).status, 200);
    const socket = await socketOf(first[0]);
    const stream = await openStream(server, admin());
    socket.send({ method: "update_progress", progress: 10 });
    await stream.next((e) => e.event === "deployment_device" && e.data.deployment === created.id && e.data.state === "downloading", 5000, "downloading");
    stream.close();
    const stop = socket.next("update_abort");
    const aborted = await call("POST", `/api/v2/deployments/${created.id}/abort`);
    assert.equal(aborted.body.status, "aborted");
    assert.deepEqual(await stop, { method: "update_abort", version: "v2" });
    for (const d of devices) assert.equal((await check(d, "v1")).status, 204, "no offer after abort");
    assert.equal((await members(created.id, "&state=aborted")).length, 4);
    assert.equal((await call("GET", `/api/v2/groups/${g}`)).body.policy, "no_update,");
    assert.equal((await call("POST", `/api/v2/deployments/${created.id}/resume`)).status, 409);
    // The group is free for the next one.
    const next = await create({ group: g, version: "v2" });
    assert.equal(next.status, "running");
    await call("POST", `/api/v2/deployments/${next.id}/abort`);
  });

  test("a device deleted mid-deployment leaves it: the others complete it", async () => {
    const pk = await packagesReady();
    const devices = await devicesOf(2);
    const g = await group(devices.map((d) => d.id), [pk.v2], "no_update,");
    const created = await create({ group: g, version: "v2" });
    assert.equal((await check(devices[0], "v1")).status, 200);
    await report(devices[0], { state: "installed", version: "v2", from_version: "v1" });
    assert.equal((await deployment(created.id)).status, "running");
    const stream = await openStream(server, admin());
    assert.equal((await call("DELETE", `/api/v2/devices/${devices[1].id}`)).status, 200);
    await stream.next((e) => e.event === "deployment" && e.data.deployment === created.id && e.data.status === "completed", 5000, "completed without the deleted device");
    stream.close();
    assert.equal((await deployment(created.id)).devices, 1);
  });

  test("multi-hop: the resolver's path leads to the target; an intermediate hop is not the end", async () => {
    const pk = await packagesReady();
    const [device] = await devicesOf(1);
    const g = await group([device.id], [pk.v2, pk.v3], "no_update,");
    const created = await create({ group: g, version: "v3" });
    const hop1 = await check(device, "v1");
    assert.equal(hop1.body.version, "v2");
    await report(device, { state: "installed", version: "v2", from_version: "v1" });
    assert.equal((await members(created.id))[0].state, "offered");
    const hop2 = await check(device, "v2");
    assert.equal(hop2.body.version, "v3");
    await report(device, { state: "installed", version: "v3", from_version: "v2" });
    assert.equal((await deployment(created.id)).status, "completed");
    // The same report again (its acknowledgement was lost): nothing new.
    await report(device, { state: "installed", version: "v3", from_version: "v2" });
    const history = (await call("GET", `/api/v2/devices/${device.id}/update-history`)).body;
    assert.deepEqual(history.map((h: { to_version: string }) => h.to_version), ["v3", "v2"]);
  });

  test("an intermediate hop's report sent again (its acknowledgement was lost) changes nothing: no second history row, no step back", async () => {
    const pk = await packagesReady();
    const [device] = await devicesOf(1);
    const g = await group([device.id], [pk.v2, pk.v3], "no_update,");
    const created = await create({ group: g, version: "v3" });
    assert.equal((await check(device, "v1")).body.version, "v2");
    await report(device, { state: "installed", version: "v2", from_version: "v1" }, "hop-1");
    assert.equal((await check(device, "v2")).body.version, "v3");
    await report(device, { state: "installing", version: "v3", from_version: "v2" }, "hop-2-installing");
    assert.equal((await members(created.id))[0].state, "installing");
    // The connection broke before the first hop's acknowledgement: the device sends it again.
    await report(device, { state: "installed", version: "v2", from_version: "v1" }, "hop-1");
    assert.equal((await members(created.id))[0].state, "installing");
    await report(device, { state: "installed", version: "v3", from_version: "v2" }, "hop-2");
    await report(device, { state: "installed", version: "v2", from_version: "v1" }, "hop-1");
    assert.equal((await deployment(created.id)).status, "completed");
    const history = (await call("GET", `/api/v2/devices/${device.id}/update-history`)).body;
    assert.deepEqual(history.map((h: { to_version: string; outcome: string }) => `${h.outcome} ${h.to_version}`), ["installed v3", "installed v2"]);
  });

  test("permissions: read on the group to read, update on it to change; events and lists follow", async () => {
    const pk = await packagesReady();
    const devices = await devicesOf(2);
    const g = await group(devices.map((d) => d.id), [pk.v2], "no_update,");
    const reader = server.token([], "deploy-reader");
    const stranger = server.token([], "deploy-stranger");
    const grant = await call("POST", "/api/v1/permissions", { resource: "group", resource_id: g, user_id: "deploy-reader", permission: "read" });
    assert.equal(grant.status, 200, JSON.stringify(grant.body));
    // Only update on the group (or admin) creates.
    const refused = await call("POST", "/api/v2/deployments", { group: g, version: "v2" }, reader);
    assert.equal(refused.status, 403);
    const created = await create({ group: g, version: "v2" });
    assert.equal((await call("GET", `/api/v2/deployments/${created.id}`, undefined, reader)).status, 200);
    assert.equal((await call("GET", `/api/v2/deployments/${created.id}/devices`, undefined, reader)).status, 200);
    assert.equal((await call("POST", `/api/v2/deployments/${created.id}/pause`, undefined, reader)).status, 403);
    assert.equal((await call("GET", `/api/v2/deployments/${created.id}`, undefined, stranger)).status, 404);
    assert.equal((await call("POST", `/api/v2/deployments/${created.id}/abort`, undefined, stranger)).status, 404);
    const strangerList = await call("GET", "/api/v2/deployments", undefined, stranger);
    assert.deepEqual(strangerList.body, []);
    assert.ok((await call("GET", "/api/v2/deployments", undefined, reader)).body.some((d: { id: number }) => d.id === created.id));

    const readerStream = await openStream(server, reader);
    const strangerStream = await openStream(server, stranger);
    try {
      const paused = await call("POST", `/api/v2/deployments/${created.id}/pause`);
      assert.equal(paused.body.status, "paused");
      await readerStream.next((e) => e.event === "deployment" && e.data.deployment === created.id && e.data.status === "paused", 5000, "reader sees it");
      await call("POST", `/api/v2/deployments/${created.id}/abort`);
      await readerStream.next((e) => e.event === "deployment" && e.data.deployment === created.id && e.data.status === "aborted", 5000, "reader sees the abort");
      assert.ok(!strangerStream.events.some((e) => e.event.startsWith("deployment")), "the stranger sees nothing");
    } finally {
      readerStream.close();
      strangerStream.close();
    }
  });

  test("malformed update_outcome messages are ignored; outcomes outside deployments make history for what was offered", async () => {
    const pk = await packagesReady();
    const [device] = await devicesOf(1);
    await group([device.id], [pk.v2], "exact_match,v2");
    const socket = await socketOf(device);
    try {
      socket.send({ method: "update_outcome", id: "", state: "installed", version: "v2" });
      socket.send({ method: "update_outcome", id: "x", state: "exploded", version: "v2" });
      // Not offered: acknowledged (the device may forget it) and dropped.
      let ack = socket.next("update_outcome_ack");
      socket.send({ method: "update_outcome", id: "unasked", state: "failed", version: "v2", from_version: "v1", reason: "never offered" });
      assert.equal((await ack).id, "unasked", "only the well-formed one is acknowledged");
      // The group's policy offers v2: its outcome is history; the offer is answered, another failure is not.
      assert.equal((await check(device, "v1")).status, 200);
      ack = socket.next("update_outcome_ack");
      socket.send({ method: "update_outcome", id: "good", state: "failed", version: "v2", from_version: "v1", reason: "checksum mismatch" });
      assert.equal((await ack).id, "good");
      ack = socket.next("update_outcome_ack");
      socket.send({ method: "update_outcome", id: "again", state: "failed", version: "v2", from_version: "v1", reason: "checksum mismatch, again" });
      assert.equal((await ack).id, "again");
    } finally {
      socket.close();
      sockets.clear();
    }
    const history = (await call("GET", `/api/v2/devices/${device.id}/update-history`)).body;
    assert.deepEqual(history.map((h: Record<string, unknown>) => [h.deployment, h.outcome, h.reason]), [[null, "failed", "checksum mismatch"]]);
  });
  test("attempts: an outcome counts only for the attempt it answers; a retry is a new attempt; another version than offered fails it", async () => {
    const pk = await packagesReady();
    const [device, other] = await devicesOf(2);
    const g = await group([device.id, other.id], [pk.v2], "no_update,");
    const created = await create({ group: g, version: "v2", retries: 1, retry_backoff_seconds: 0 });
    const member = async (d: Device) => (await members(created.id)).find((m) => m.device === d.id)!;
    const first = await check(device, "v1");
    assert.deepEqual([first.status, (first.body as Record<string, unknown>).deployment, (first.body as Record<string, unknown>).attempt], [200, created.id, 1]);
    assert.equal(((await check(device, "v1")).body as Record<string, unknown>).attempt, 1, "the same offer again is the same attempt");
    await report(device, { state: "failed", version: "v2", from_version: "v1", reason: "exit 3", deployment: created.id, attempt: 1 });
    assert.deepEqual([(await member(device)).state, (await member(device)).failures], ["retrying", 1]);
    const second = await check(device, "v1");
    assert.equal((second.body as Record<string, unknown>).attempt, 2);
    // A late report of attempt 1 (sent again, say) changes nothing in attempt 2, and makes no row.
    await report(device, { state: "failed", version: "v2", from_version: "v1", reason: "exit 3, late", deployment: created.id, attempt: 1 });
    assert.deepEqual([(await member(device)).state, (await member(device)).attempt], ["offered", 2]);
    await report(device, { state: "installed", version: "v2", from_version: "v1", deployment: created.id, attempt: 2 });
    assert.equal((await member(device)).state, "installed");
    const history = (await call("GET", `/api/v2/devices/${device.id}/update-history`)).body as Array<{ outcome: string; attempt: number; reason: string | null }>;
    assert.deepEqual(history.map((h) => [h.outcome, h.attempt, h.reason]), [["installed", 2, null], ["failed", 1, "exit 3"]]);

    // A device that reports no attempt (the reference's clients): any outcome while its offer is out, checked against the offer.
    assert.equal((await check(other, "v1")).status, 200);
    await report(other, { state: "installed", version: "v3", from_version: "v1", output: "wrote v3" });
    const mismatch = await member(other);
    assert.deepEqual([mismatch.state, mismatch.reason, mismatch.output], ["retrying", "reported v3, offered v2", "wrote v3"]);
    assert.equal((await deployment(created.id)).counts.failed, 0, "not failed for good while it has retries");
    // Its second attempt fails too: failed for good, held out; a person retries it on the running deployment.
    assert.equal(((await check(other, "v1")).body as Record<string, unknown>).attempt, 2);
    await report(other, { state: "failed", version: "v2", from_version: "v1", reason: "exit 3" });
    assert.deepEqual([(await member(other)).state, (await member(other)).failures], ["failed", 2]);
    assert.equal((await check(other, "v1")).status, 204);
    const retried = await call("POST", `/api/v2/deployments/${created.id}/retry`, { devices: [other.id] });
    assert.deepEqual([retried.status, retried.body.status, retried.body.counts.retrying], [200, "running", 1]);
    assert.equal(((await check(other, "v1")).body as Record<string, unknown>).attempt, 3);
    assert.deepEqual([(await member(other)).state, (await member(other)).failures], ["offered", 0]);
    await call("POST", `/api/v2/deployments/${created.id}/abort`);
    assert.equal((await call("POST", `/api/v2/deployments/${created.id}/retry`)).status, 409, "an aborted deployment is not reopened");
  });

  test("automatic steps are audited as system:deployment on the deployment: start, advance, pause with its figures, timeouts, completion, policy", async () => {
    const pk = await packagesReady();
    const devices = await devicesOf(5);
    const g = await group(devices.map((d) => d.id), [pk.v2], "no_update,");
    const clock = server.clock;
    const stream = await openStream(server, admin());
    try {
      const created = await create({ group: g, version: "v2", phases: [20, 100], success_percent: 100, error_percent: 50, retries: 0, device_timeout_minutes: 60, start_at: new Date(clock.now() + 60_000).toISOString() });
      const target = `deployment:${created.id}`;
      const automatic = async (action: string) => {
        const entries = (await call("GET", `/api/v1/audit?target=${target}&action=${action}`)).body as Array<{ actor_kind: string; actor: string; outcome: string; detail: Record<string, unknown> }>;
        for (const e of entries) assert.deepEqual([e.actor_kind, e.actor, e.outcome], ["system", "deployment", "ok"], action);
        return entries.map((e) => e.detail);
      };
      clock.advance(60_000);
      await stream.next((e) => e.event === "deployment" && e.data.deployment === created.id && e.data.status === "running", 5000, "started");
      assert.equal((await automatic("deployment.start")).length, 1);

      const [[first], rest] = await byPhase(created.id, devices);
      assert.equal((await check(first, "v1")).status, 200);
      await report(first, { state: "installed", version: "v2", from_version: "v1" });
      await stream.next((e) => e.event === "deployment" && e.data.deployment === created.id && e.data.current_phase === 1, 5000, "phase 2");
      assert.deepEqual(await automatic("deployment.advance"), [{ phase: 1, succeeded: 1, devices: 1, success_percent: 100 }]);

      // Two failures of the four started (offered or further): 50 % is not more than 50 %; the third is.
      for (const d of rest.slice(0, 3)) assert.equal((await check(d, "v1")).status, 200);
      await report(rest[0], { state: "failed", version: "v2", from_version: "v1", reason: "exit 3" });
      await report(rest[1], { state: "failed", version: "v2", from_version: "v1", reason: "exit 3" });
      assert.equal((await deployment(created.id)).status, "running");
      await report(rest[2], { state: "failed", version: "v2", from_version: "v1", reason: "exit 3" });
      assert.equal((await deployment(created.id)).status, "paused");
      const [pause] = await automatic("deployment.pause");
      assert.deepEqual([pause.failed, pause.started, pause.error_percent], [3, 4, 50]);
      assert.match(String(pause.reason), /error threshold: 3 of the 4 devices offered so far failed/);
      // A person resumes: the log shows the pause before it.
      assert.equal((await call("POST", `/api/v2/deployments/${created.id}/resume`)).status, 200);

      // The last device never checks: not reached after the device timeout; then it completes.
      clock.advance(60 * 60_000);
      await stream.next((e) => e.event === "deployment" && e.data.deployment === created.id && e.data.status === "completed_with_failures", 5000, "completed");
      assert.deepEqual(await automatic("deployment.timeout"), [{ devices: [rest[3].id], count: 1, minutes: 60 }]);
      assert.deepEqual(await automatic("deployment.complete"), [{ status: "completed_with_failures", counts: { installed: 1, failed: 3, not_reached: 1 } }]);
      assert.deepEqual(await automatic("deployment.policy"), [{ group: g, from: "no_update,", to: "exact_match,v2" }]);
      const order = ((await call("GET", `/api/v1/audit?target=${target}`)).body as Array<{ action: string }>).map((e) => e.action).reverse();
      assert.deepEqual(order, ["deployment.create", "deployment.start", "deployment.advance", "deployment.pause", "deployment.resume", "deployment.timeout", "deployment.complete", "deployment.policy"]);
    } finally {
      stream.close();
    }
  });

  test("time: start time, success wait, device timeout and the window follow the server's clock", async () => {
    const pk = await packagesReady();
    const devices = await devicesOf(4);
    const g = await group(devices.map((d) => d.id), [pk.v2], "no_update,");
    const clock = server.clock;
    const stream = await openStream(server, admin());
    try {
      const startAt = new Date(clock.now() + 3600_000).toISOString();
      const created = await create({ group: g, version: "v2", phases: [50, 100], success_percent: 50, success_wait_minutes: 30, device_timeout_minutes: 60, start_at: startAt });
      assert.equal(created.status, "scheduled");
      for (const d of devices) assert.equal((await check(d, "v1")).status, 204, "not before its start time");
      clock.advance(3600_000);
      await stream.next((e) => e.event === "deployment" && e.data.deployment === created.id && e.data.status === "running", 5000, "started at its time");
      const [first, second] = await byPhase(created.id, devices);
      assert.equal((await check(first[0], "v1")).status, 200);
      await report(first[0], { state: "installed", version: "v2", from_version: "v1" });
      // 50 % installed, but the 30 minutes have not passed.
      assert.equal((await deployment(created.id)).gate, "wait");
      clock.advance(30 * 60_000);
      await stream.next((e) => e.event === "deployment" && e.data.deployment === created.id && e.data.current_phase === 1, 5000, "phase 1 after the wait");
      // first[1] never checked in: 60 minutes after its phase started, it is not reached (not failed).
      assert.equal((await check(second[0], "v1")).status, 200);
      clock.advance(60 * 60_000);
      await stream.next((e) => e.event === "deployment_device" && e.data.device === second[0].mac && e.data.state === "not_reached", 5000, "offered device not reached");
      await stream.next((e) => e.event === "deployment_device" && e.data.device === second[1].mac && e.data.state === "not_reached", 5000, "never-offered device not reached");
      await stream.next((e) => e.event === "deployment" && e.data.deployment === created.id && e.data.status === "completed_with_failures", 5000, "completed with failures");
      const done = await deployment(created.id);
      assert.equal(done.status, "completed_with_failures", "devices not reached are failures of the deployment");
      assert.equal(done.counts.not_reached, 3);
      assert.equal(done.counts.failed, 0);

      // A window: closed now (it opens in an hour's time, UTC), open after the clock moves.
      const devices2 = await devicesOf(1);
      const g2 = await group(devices2.map((d) => d.id), [pk.v2], "no_update,");
      const now = new Date(clock.now());
      const hhmm = (d: Date) => `${String(d.getUTCHours()).padStart(2, "0")}:${String(d.getUTCMinutes()).padStart(2, "0")}`;
      const opens = new Date(now.getTime() + 3600_000);
      const closes = new Date(now.getTime() + 3 * 3600_000);
      const all = ["sun", "mon", "tue", "wed", "thu", "fri", "sat"];
      const windowed = await create({ group: g2, version: "v2", window: { days: all, from: hhmm(opens), to: hhmm(closes), timezone: "UTC" } });
      assert.equal((await deployment(windowed.id)).window_open, false);
      assert.equal((await check(devices2[0], "v1")).status, 204, "outside the window");
      clock.advance(3600_000 + 60_000);
      assert.equal((await deployment(windowed.id)).window_open, true);
      assert.equal((await check(devices2[0], "v1")).status, 200, "inside the window");
      await call("POST", `/api/v2/deployments/${windowed.id}/abort`);
    } finally {
      stream.close();
    }
  });
});

