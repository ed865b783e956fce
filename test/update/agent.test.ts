import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { test } from "node:test";
import { tempDir, useTestServer, waitFor } from "../helpers/server.ts";
import { offerGroup, sha256, uploadOk } from "./helpers/packages.ts";
import { approveAgent, device, FAST_SERVER, startAgent, untilConnected } from "./helpers/agents.ts";
import { openStream } from "../helpers/events.ts";
import { startProxy } from "./helpers/proxy.ts";

const server = useTestServer(FAST_SERVER);

/** A group with policy exact_match,<version>, the package and the device. */
const pushUpdate = (deviceId: number, packageId: number, version: string): Promise<number> =>
  offerGroup(server, { policy: `exact_match,${version}`, packages: [packageId], devices: [deviceId], metadata: { name: `g-${deviceId}` } });

/** An install command that copies the package to a marker file (argv, no shell interpolation of the path). */
const installer = (marker: string) => ["sh", "-c", 'cp "$1" "$2"', "install", "{file}", marker];

test("an update pushed through a group is downloaded, verified, installed; version and progress follow", async () => {
  const payload = randomBytes(300_000);
  const pkg = await uploadOk(server, { token: server.adminToken, version: "v2", devtype: "board", file: payload });
  const stream = await openStream(server);
  const marker = join(tempDir("labgate-marker-"), "image");
  const agent = startAgent(server, { device_type: "board", software_version: "v1", install_command: installer(marker) });
  try {
    const id = await approveAgent(server, agent);
    await untilConnected(server, id);
    assert.equal((await device(server, id)).metadata["svc.software.version"], "v1");
    await pushUpdate(id, pkg.id, "v2");

    // On demand, through the built-in action.
    const res = await server.call("GET", `/api/v2/devices/${agent.mac}/action/exec/svc.builtins.trigger_update_check`);
    assert.deepEqual(res.body, { status_code: 0, output: Buffer.from("Update check queued").toString("base64") });

    await waitFor(async () => (await device(server, id)).metadata["svc.software.version"] === "v2", 10_000, "version v2 reported");
    assert.ok(existsSync(marker), "the install command ran");
    assert.equal(sha256(readFileSync(marker)), pkg.sha256);
    assert.equal(agent.softwareVersion, "v2");
    // The update is over: no progress record any more.
    assert.equal((await server.call("GET", `/api/v2/devices/${id}/progress`)).status, 404);
    // The events may still be on their way when the version is already stored.
    await stream.next((e) => e.event === "update" && e.data.device === agent.mac && e.data.progress === 100, 5000, "progress 100");
    const updates = stream.events.filter((e) => e.event === "update" && e.data.device === agent.mac);
    assert.ok(updates.length >= 2, JSON.stringify(updates));
    const steps = updates.map((e) => e.data.progress as number);
    assert.ok(steps[0] < 100 && updates[0].data.version === "v2", JSON.stringify(updates[0]));
    assert.deepEqual(steps, [...steps].sort((a, b) => a - b), "progress only grows");
    assert.equal(steps[steps.length - 1], 100);
    // The next check finds nothing to do: the device runs the target.
    await agent.checkNow();
    assert.equal((await server.call("GET", `/api/v2/devices/${id}/progress`)).status, 404);
    // The installed version survives an agent restart (state in its data dir).
    const { Agent } = await import("../../src/agent/agent.ts");
    const again = new Agent(agent.config, agent.log);
    assert.equal((again as unknown as { loadState(): { software_version: string } }).loadState().software_version, "v2");
  } finally {
    stream.close();
    await agent.stop();
  }
});

test("a download interrupted halfway resumes with Range", async () => {
  const payload = randomBytes(2 * 1024 * 1024);
  const pkg = await uploadOk(server, { token: server.adminToken, version: "v3", devtype: "board", file: payload });
  const proxy = await startProxy(server.url, { cut: { path: /^\/local_storage\//, after: 1024 * 1024 } });
  const marker = join(tempDir("labgate-marker-"), "image");
  const agent = startAgent(proxy.url, { device_type: "board", software_version: "v1", install_command: installer(marker) });
  try {
    const id = await approveAgent(server, agent);
    await untilConnected(server, id);
    await pushUpdate(id, pkg.id, "v3");
    await agent.checkNow();
    await waitFor(async () => (await device(server, id)).metadata["svc.software.version"] === "v3", 10_000, "version v3");
    const downloads = proxy.seen.filter((r) => r.path.startsWith("/local_storage/"));
    assert.equal(downloads.length, 2, JSON.stringify(downloads.map((d) => d.headers.range)));
    assert.equal(downloads[0].headers.range, undefined);
    const resumedAt = Number(/^bytes=(\d+)-$/.exec(String(downloads[1].headers.range))?.[1]);
    assert.ok(resumedAt > 0 && resumedAt <= 1024 * 1024, `resumed at ${resumedAt}`);
    assert.equal(sha256(readFileSync(marker)), pkg.sha256, "the resumed file verifies");
  } finally {
    await agent.stop();
    await proxy.close();
  }
});

test("a download that does not match its SHA-256 is discarded and fetched again", async () => {
  const payload = randomBytes(100_000);
  const pkg = await uploadOk(server, { token: server.adminToken, version: "v5", devtype: "board", file: payload });
  const proxy = await startProxy(server.url, { corrupt: { path: /^\/local_storage\// } });
  const marker = join(tempDir("labgate-marker-"), "image");
  const agent = startAgent(proxy.url, { device_type: "board", software_version: "v1", install_command: installer(marker) });
  try {
    const id = await approveAgent(server, agent);
    await untilConnected(server, id);
    await pushUpdate(id, pkg.id, "v5");
    await agent.checkNow();
    assert.equal(agent.softwareVersion, "v5");
    const downloads = proxy.seen.filter((r) => r.path.startsWith("/local_storage/"));
    assert.equal(downloads.length, 2, "the corrupt copy was not installed");
    assert.equal(downloads[1].headers.range, undefined, "a discarded file is fetched from the start");
    assert.equal(sha256(readFileSync(marker)), pkg.sha256);
  } finally {
    await agent.stop();
    await proxy.close();
  }
});

test("a failed install keeps the old version", async () => {
  const pkg = await uploadOk(server, { token: server.adminToken, version: "v4", devtype: "board", file: randomBytes(1000) });
  const agent = startAgent(server, { device_type: "board", software_version: "v1", install_command: ["sh", "-c", "exit 7"] });
  try {
    const id = await approveAgent(server, agent);
    await untilConnected(server, id);
    await pushUpdate(id, pkg.id, "v4");
    await agent.checkNow();
    assert.equal(agent.softwareVersion, "v1");
    assert.equal((await device(server, id)).metadata["svc.software.version"], "v1");
  } finally {
    await agent.stop();
  }
});

test("without an install command an offered update is neither downloaded nor reported as installed", async () => {
  const pkg = await uploadOk(server, { token: server.adminToken, version: "v6", devtype: "board", file: randomBytes(1000) });
  const proxy = await startProxy(server.url);
  const agent = startAgent(proxy.url, { device_type: "board", software_version: "v1" });
  try {
    const id = await approveAgent(server, agent);
    await untilConnected(server, id);
    await pushUpdate(id, pkg.id, "v6");
    await agent.checkNow();
    assert.ok(proxy.seen.some((r) => r.path === "/api/v1/update/check"));
    assert.equal(proxy.seen.filter((r) => r.path.startsWith("/local_storage/")).length, 0);
    assert.equal(agent.softwareVersion, "v1");
    assert.equal((await device(server, id)).metadata["svc.software.version"], "v1");
  } finally {
    await agent.stop();
    await proxy.close();
  }
});
