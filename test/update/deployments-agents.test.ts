/*
 * Issue 26's done-when run: a labgate server as a child process, 20 real agents (in-process), a
 * 3-phase deployment whose first phase has failing install commands and pauses at the error
 * threshold, its abort, and a second deployment that completes across a kill -9 of the server.
 */
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { open, rm } from "node:fs/promises";
import { readFileSync } from "node:fs";
import { createServer } from "node:net";
import { join } from "node:path";
import { test } from "node:test";
import type { Agent } from "../../src/agent/agent.ts";
import { startServe, type ServeProcess } from "../helpers/cli.ts";
import { openStream, untilDeployment } from "../helpers/events.ts";
import { callWith, requestAt, tempDir, type TestServer } from "../helpers/server.ts";
import { approveAgent, startAgent } from "./helpers/agents.ts";
import { uploadOk } from "./helpers/packages.ts";

const DEVICES = 20;

/** A free loopback port (the restarted server listens where the agents look). */
async function freePort(): Promise<number> {
  const probe = createServer();
  await new Promise<void>((resolve) => probe.listen(0, "127.0.0.1", resolve));
  const { port } = probe.address() as { port: number };
  await new Promise((resolve) => probe.close(resolve));
  return port;
}

/** The server child as the helpers speak to it. */
function speak(serve: ServeProcess, token: string): TestServer {
  const request = requestAt(serve.url);
  return { url: serve.url, adminToken: token, request, call: callWith(request, token) } as TestServer;
}

interface Member {
  device: number;
  mac_address: string;
  phase: number;
  state: string;
  reason: string | null;
  output: string | null;
}

test("20 agents, 3 phases: failures pause phase 1, abort stops offers, a second deployment completes across kill -9", async () => {
  const dir = tempDir();
  const port = await freePort();
  const args = ["serve", "--data-dir", join(dir, "data"), "--listen", `127.0.0.1:${port}`];
  let serve = await startServe(args);
  const token = readFileSync(join(dir, "data", "admin.token"), "utf8").trim();
  let server = speak(serve, token);
  const agents: Array<Agent & { dir: string }> = [];
  const fifoDirs: string[] = [];
  try {
    const pkg = await uploadOk(server, { token, version: "v2", devtype: "board", file: Buffer.from("the v2 image") });
    // An install command that fails (after waiting on its fifo) when the device's fifo exists, else installs.
    const installer = (agentDir: string) => [
      "sh",
      "-c",
      'if [ -p "$2" ]; then read go < "$2"; echo "flashing $1"; echo "error: partition too small" >&2; exit 3; fi; cp "$1" "$3"; echo installed',
      "install",
      "{file}",
      join(agentDir, "fail.fifo"),
      join(agentDir, "image.bin"),
    ];
    for (let i = 0; i < DEVICES; i++) {
      fifoDirs.push(tempDir("labgate-deploy-install-"));
      agents.push(startAgent(serve.url, { device_type: "board", software_version: "v1", update_check_interval: 0.5, install_command: installer(fifoDirs[i]), name: `board-${i}` }));
    }
    const ids: number[] = [];
    for (const agent of agents) ids.push(await approveAgent(server, agent));
    const byId = new Map(ids.map((id, i) => [id, agents[i]]));
    const fifoOf = (id: number) => join(fifoDirs[ids.indexOf(id)], "fail.fifo");

    const created = await server.call("POST", "/api/v2/groups", { metadata: { name: "boards" } });
    const group = created.body.id as number;
    assert.equal((await server.call("POST", `/api/v2/groups/${group}/package`, { packages: [pkg.id] })).status, 200);
    assert.equal((await server.call("PATCH", `/api/v2/groups/${group}/devices`, { add: ids, remove: [] })).status, 200);

    // --- the first deployment: phase 1 (4 devices, 2 failing) pauses at the threshold ---------------
    let stream = await openStream(server, token);
    const first = await server.call("POST", "/api/v2/deployments", { group, version: "v2", phases: [20, 60, 100], success_percent: 100, error_percent: 25, retries: 0 });
    assert.equal(first.status, 201, JSON.stringify(first.body));
    const d1 = first.body.id as number;
    const members = async (id: number, query = ""): Promise<Member[]> => (await server.call("GET", `/api/v2/deployments/${id}/devices?limit=100${query}`)).body;
    const phase0 = (await members(d1, "&phase=0")).map((m) => m.device);
    assert.equal(phase0.length, 4);
    const failing = phase0.slice(0, 2);
    // The fifos exist before any of these devices can be offered (they are offered at their next check).
    for (const id of failing) execFileSync("mkfifo", [fifoOf(id)]);
    // Both failing devices run their install command; then they fail.
    for (const id of failing) {
      const mac = byId.get(id)!.mac;
      await stream.next((e) => e.event === "deployment_device" && e.data.device === mac && e.data.state === "installing", 20_000, `${mac} installing`);
    }
    // The phase's other two devices have installed before the failures pause the deployment (a
    // device not yet offered then would stay unoffered, and the counts below would be off by it).
    for (const id of phase0.filter((id) => !failing.includes(id))) {
      const mac = byId.get(id)!.mac;
      await stream.next((e) => e.event === "deployment_device" && e.data.device === mac && e.data.state === "installed", 20_000, `${mac} installed`);
    }
    for (const id of failing) {
      const fifo = await open(fifoOf(id), "w");
      await fifo.write("go\n");
      await fifo.close();
    }
    await stream.next((e) => e.event === "deployment" && e.data.deployment === d1 && e.data.status === "paused", 20_000, "paused at the threshold");
    let view = (await server.call("GET", `/api/v2/deployments/${d1}`)).body;
    assert.equal(view.status, "paused");
    assert.equal(view.current_phase, 0);
    assert.match(view.pause_reason, /error threshold/);
    for (const id of failing) {
      const mac = byId.get(id)!.mac;
      await stream.next((e) => e.event === "deployment_device" && e.data.device === mac && e.data.state === "failed", 10_000, `${mac} failed`);
    }
    for (const m of await members(d1, "&state=failed")) {
      assert.ok(failing.includes(m.device));
      assert.equal(m.reason, "install command exited with 3");
      assert.match(m.output!, /flashing .*\nerror: partition too small\n$/);
    }

    // --- abort: nobody else is offered v2 -------------------------------------------------------------
    const aborted = await server.call("POST", `/api/v2/deployments/${d1}/abort`);
    assert.equal(aborted.body.status, "aborted");
    const others = ids.filter((id) => !phase0.includes(id));
    // Every other agent checks twice more (they check every 0.5 s on their own; this makes sure).
    for (const id of others) {
      await byId.get(id)!.checkNow();
      await byId.get(id)!.checkNow();
    }
    for (const id of others) assert.equal(byId.get(id)!.softwareVersion, "v1", `device ${id} was not offered v2 after the abort`);
    assert.equal((await members(d1, "&state=aborted")).length, 16);
    assert.equal((await server.call("GET", `/api/v2/groups/${group}`)).body.policy, "no_update,");
    stream.close();

    // --- the second deployment completes, across a kill -9 of the server ----------------------------
    for (const id of failing) await rm(fifoOf(id));
    const before = new Set(agents.filter((a) => a.softwareVersion === "v2").map((a) => a.mac));
    assert.equal(before.size, 2, "the two phase-1 devices that did not fail");
    const second = await server.call("POST", "/api/v2/deployments", { group, version: "v2", phases: [20, 60, 100], success_percent: 100, error_percent: 25 });
    assert.equal(second.status, 201, JSON.stringify(second.body));
    const d2 = second.body.id as number;
    // Mid-deployment: phase 2 runs and several devices have installed.
    await untilDeployment(server, d2, (view) => view.current_phase >= 1 && view.counts.installed >= 6, 30_000, "second deployment in phase 2 with installs");
    await serve.stop("SIGKILL");
    // What the agents hold as acknowledged: installed in this deployment, and no outcome waiting for the server.
    const acknowledged = agents.filter((a) => !before.has(a.mac) && a.softwareVersion === "v2" && (a as unknown as { outcomes: { size: number } }).outcomes.size === 0).map((a) => a.mac);
    assert.ok(acknowledged.length >= 3, `installs acknowledged before the kill: ${acknowledged.length}`);
    serve = await startServe(args);
    server = speak(serve, token);
    const after = await members(d2);
    for (const mac of acknowledged) {
      const m = after.find((x) => x.mac_address === mac)!;
      assert.ok(m.state === "installed" || m.state === "already_installed", `${mac}: acknowledged install lost (${m.state})`);
    }
    stream = await openStream(server, token);
    const done = (await server.call("GET", `/api/v2/deployments/${d2}`)).body;
    if (done.status !== "completed") await stream.next((e) => e.event === "deployment" && e.data.deployment === d2 && e.data.status === "completed", 60_000, "completed after the restart");
    stream.close();
    view = (await server.call("GET", `/api/v2/deployments/${d2}`)).body;
    assert.equal(view.status, "completed");
    assert.equal(view.counts.installed + view.counts.already_installed, DEVICES, JSON.stringify(view.counts));
    assert.equal((await server.call("GET", `/api/v2/groups/${group}`)).body.policy, "exact_match,v2");
    for (const agent of agents) assert.equal(agent.softwareVersion, "v2");
    // A failed device's history: failed in the first deployment, installed in the second.
    const history = (await server.call("GET", `/api/v2/devices/${failing[0]}/update-history`)).body;
    assert.deepEqual(history.map((h: { deployment: number; outcome: string }) => [h.deployment, h.outcome]), [[d2, "installed"], [d1, "failed"]]);
  } finally {
    await Promise.all(agents.map((a) => a.stop()));
    await serve.stop("SIGKILL");
    await rm(dir, { recursive: true, force: true });
    for (const fifoDir of fifoDirs) await rm(fifoDir, { recursive: true, force: true });
  }
});
