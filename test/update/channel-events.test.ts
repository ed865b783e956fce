import assert from "node:assert/strict";
import { test } from "node:test";
import { startTestServer, useTestServer, waitFor } from "../helpers/server.ts";
import { agentClient, approveAgent, device, FAST_SERVER, offlineDeviceOfferedV9, rawDevice, startAgent, untilConnected } from "./helpers/agents.ts";
import { openStream } from "../helpers/events.ts";

const server = useTestServer(FAST_SERVER);

test("connect, disconnect, update and version events arrive on /api/stream", async () => {
  const stream = await openStream(server);
  assert.equal(stream.status, 200);
  const agent = startAgent(server);
  try {
    const id = await approveAgent(server, agent);
    await untilConnected(server, id);
    await stream.next((e) => e.event === "connect" && e.data.device === agent.mac, 3000, "connect event");
    await agent.stop();
    await stream.next((e) => e.event === "disconnect" && e.data.device === agent.mac, 3000, "disconnect event");

    // Progress without an update record: broadcast with version null, nothing stored.
    const dev = await rawDevice(server, agent);
    dev.ws.send(JSON.stringify({ method: "update_progress", progress: 42 }));
    const first = await stream.next((e) => e.event === "update", 3000, "update event");
    assert.deepEqual(first.data, { device: agent.mac, progress: 42, version: null });
    dev.ws.send(JSON.stringify({ method: "update_progress", progress: 250 }));
    const clamped = await stream.next((e) => e.event === "update" && e !== first, 3000, "clamped update event");
    assert.equal(clamped.data.progress, 100);
    // A new version: stored before its event goes out.
    dev.ws.send(JSON.stringify({ method: "update_version", version: "v7" }));
    const version = await stream.next((e) => e.event === "version", 3000, "version event");
    assert.deepEqual(version.data, { device: agent.mac, version: "v7" });
    assert.equal((await device(server, id)).metadata["svc.software.version"], "v7");
    dev.ws.close();
    assert.deepEqual(
      stream.events.filter((e) => e.data.device === agent.mac).map((e) => e.event),
      ["connect", "disconnect", "connect", "update", "update", "version"],
    );
  } finally {
    stream.close();
    await agent.stop();
  }
});

test("the stream needs a management token; other users see only their devices' events", async () => {
  assert.equal((await fetch(`${server.url}/api/stream`)).status, 401);
  const stranger = await openStream(server, server.token([], "carol"));
  assert.equal(stranger.status, 200);
  const admin = await openStream(server);
  const agent = startAgent(server);
  try {
    const id = await approveAgent(server, agent);
    await untilConnected(server, id);
    await admin.next((e) => e.event === "connect" && e.data.device === agent.mac, 3000, "admin sees connect");
    // With read on the device, its events show.
    const grant = await server.request("/api/v1/permissions", { method: "POST", token: server.adminToken, json: { user_id: "carol", resource: "device", resource_id: id, permission: "read" } });
    assert.equal(grant.status, 200);
    await agent.stop();
    await stranger.next((e) => e.event === "disconnect" && e.data.device === agent.mac, 3000, "reader sees disconnect");
    // Events come in order: the connect before the grant never reached the reader.
    assert.deepEqual(stranger.events.map((e) => e.event), ["disconnect"]);
    // A device token is not a management token.
    const dev = await rawDevice(server, agent);
    dev.ws.close();
    assert.equal((await fetch(`${server.url}/api/stream`, { headers: { authorization: `Bearer token=${dev.token}` } })).status, 401);
  } finally {
    stranger.close();
    admin.close();
    await agent.stop();
  }
});

test("update_progress moves the device's progress record; 100 or a new version ends it", async () => {
  const agent = startAgent(server, { device_type: "board", software_version: "v1" });
  const id = await offlineDeviceOfferedV9(server, agent);

  const dev = await rawDevice(server, agent);
  const stream = await openStream(server);
  try {
    const client = await agentClient(server, agent, 20);
    /** The next `update` event of this device with `progress`, once the record holds it. */
    const reported = (progress: number) => {
      const seen = stream.events.length;
      return stream.next((e) => stream.events.indexOf(e) >= seen && e.event === "update" && e.data.device === agent.mac && e.data.progress === progress, 3000, `progress ${progress}`);
    };
    const progress = async () => {
      const res = await server.call<{ progress: number; version: string }>("GET", `/api/v2/devices/${id}/progress`);
      return res.status === 200 ? res.body : res.status;
    };
    for (const [report, end] of [[100, "progress 100"], [-1, "new version"]] as const) {
      assert.equal((await client.request("/api/v1/update/check", { method: "POST", json: agent.metadata() })).status, 200);
      assert.deepEqual(await progress().then((p) => typeof p === "object" && [p.progress, p.version]), [0, "v9"]);
      let update = reported(40);
      dev.ws.send(JSON.stringify({ method: "update_progress", progress: 40 }));
      await update;
      assert.equal(((await progress()) as { progress: number }).progress, 40);
      if (report === 100) {
        update = reported(100);
        dev.ws.send(JSON.stringify({ method: "update_progress", progress: 100 }));
        await update;
        assert.equal(await progress(), 404, `record ended by ${end}`);
      } else {
        // No event tells that the version is stored.
        dev.ws.send(JSON.stringify({ method: "update_version", version: "v1" }));
        await waitFor(async () => (await progress()) === 404, 3000, `record ended by ${end}`);
      }
    }
  } finally {
    stream.close();
    dev.ws.close();
  }
});

test("a progress record without news for the idle time is removed (17.11); a report keeps it alive", async () => {
  const idleServer = await startTestServer({ update_server: { ...FAST_SERVER.update_server, progress_idle_timeout: 60 } });
  const agent = startAgent(idleServer, { device_type: "board", software_version: "v1" });
  try {
    const id = await offlineDeviceOfferedV9(idleServer, agent);
    const dev = await rawDevice(idleServer, agent);
    const stream = await openStream(idleServer);
    try {
      const client = await agentClient(idleServer, agent, 20);
      assert.equal((await client.request("/api/v1/update/check", { method: "POST", json: agent.metadata() })).status, 200);
      idleServer.clock.advance(40_000);
      dev.ws.send(JSON.stringify({ method: "update_progress", progress: 30 }));
      await stream.next((e) => e.event === "update" && e.data.progress === 30, 2000, "progress 30");
      assert.equal((await idleServer.call("GET", `/api/v2/devices/${id}/progress`)).body.progress, 30);
      idleServer.clock.advance(30_000);
      assert.equal((await idleServer.call("GET", `/api/v2/devices/${id}/progress`)).status, 200, "older than the idle time, but a report came since");
      idleServer.clock.advance(31_000);
      assert.equal((await idleServer.call("GET", `/api/v2/devices/${id}/progress`)).status, 404, "idle record removed");
      // The next check starts a new record (the sweep also forgot it was waiting at 0).
      assert.equal((await client.request("/api/v1/update/check", { method: "POST", json: agent.metadata() })).status, 200);
      assert.equal((await idleServer.call("GET", `/api/v2/devices/${id}/progress`)).status, 200);
    } finally {
      stream.close();
      dev.ws.close();
    }
  } finally {
    await agent.stop();
    await idleServer.close();
  }
});

test("a client that stops reading the stream is cut off instead of queueing events without bound", async () => {
  const { request } = await import("node:http");
  const { MAX_BACKLOG } = await import("../../src/update/events/routes.ts");
  const res = await new Promise<import("node:http").IncomingMessage>((resolve, reject) => {
    const req = request(`${server.url}/api/stream`, { headers: { authorization: `Bearer token=${server.adminToken}` } }, resolve);
    req.on("error", reject);
    req.end();
  });
  assert.equal(res.statusCode, 200);
  res.pause();
  // 16 MiB of events while the client reads nothing: more than sockets buffer and the backlog allows.
  const pad = "x".repeat(16 * 1024);
  const events = server.server.domains.update.events;
  for (let i = 0; i < 1024; i++) events.publish("update", { device: "aa:aa:aa:aa:aa:aa", progress: 1, version: null, pad });
  // Still reading nothing until the server has ended the stream: delivery reads the database first, so on PostgreSQL it takes a while.
  await waitFor(() => events.subscribers === 0, 60_000, "the stream of a client that reads nothing to end");
  let received = 0;
  res.on("data", (chunk: Buffer) => (received += chunk.length));
  res.resume();
  await new Promise<void>((resolve) => res.once("end", () => resolve()));
  assert.ok(received < 16 * 1024 * 1024 && received > MAX_BACKLOG / 2, `received ${received} bytes`);
});
