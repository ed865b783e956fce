import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { startTestServer, type TestServer } from "../helpers/server.ts";
import { approveAgent, device, FAST_SERVER, openStream, rawDevice, startAgent, until, untilConnected } from "./helpers/agents.ts";

let server: TestServer;

before(async () => {
  server = await startTestServer(FAST_SERVER);
});
after(async () => {
  await server.close();
});

test("connect, disconnect and update events arrive on /api/stream", async () => {
  const stream = await openStream(server);
  assert.equal(stream.status, 200);
  const agent = startAgent(server);
  try {
    const id = await approveAgent(server, agent);
    await untilConnected(server, id);
    await until(() => stream.events.some((e) => e.event === "connect" && e.data.device === agent.mac), 3000, "connect event");
    await agent.stop();
    await until(() => stream.events.some((e) => e.event === "disconnect" && e.data.device === agent.mac), 3000, "disconnect event");

    // Progress without an update record: broadcast with version null, nothing stored.
    const dev = await rawDevice(server, agent);
    dev.ws.send(JSON.stringify({ method: "update_progress", progress: 42 }));
    await until(() => stream.events.some((e) => e.event === "update"), 3000, "update event");
    assert.deepEqual(stream.events.find((e) => e.event === "update")!.data, { device: agent.mac, progress: 42, version: null });
    dev.ws.send(JSON.stringify({ method: "update_progress", progress: 250 }));
    await until(() => stream.events.filter((e) => e.event === "update").length === 2, 3000, "clamped update event");
    assert.equal(stream.events.filter((e) => e.event === "update")[1].data.progress, 100);
    dev.ws.send(JSON.stringify({ method: "update_version", version: "v7" }));
    await until(async () => (await device(server, id)).metadata["svc.software.version"] === "v7", 3000, "version stored");
    dev.ws.close();
    assert.deepEqual(
      stream.events.filter((e) => e.data.device === agent.mac).map((e) => e.event),
      ["connect", "disconnect", "connect", "update", "update"],
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
    await until(() => admin.events.some((e) => e.event === "connect" && e.data.device === agent.mac), 3000, "admin sees connect");
    await new Promise((resolve) => setTimeout(resolve, 100));
    assert.deepEqual(stranger.events, []);
  } finally {
    stranger.close();
    admin.close();
    await agent.stop();
  }
});
