/*
 * Deltas made by the gateway (POST /api/v1/packages/{id}/delta, xdelta3) and applied by real
 * agents: a device on the base version rebuilds the package from the delta, checks it and installs
 * it; a device whose base does not match falls back to the full package in the same attempt.
 */
import assert from "node:assert/strict";
import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { after, describe, test } from "node:test";
import { tempDir, useTestServer, waitFor } from "../helpers/server.ts";
import { approveAgent, FAST_SERVER, startAgent, untilConnected } from "./helpers/agents.ts";
import { offerGroup, sha256, uploadOk } from "./helpers/packages.ts";

const agents: Array<{ stop(): Promise<void> }> = [];
after(async () => {
  for (const agent of agents) await agent.stop();
});

/** A pseudo-random image, and the same with a few scattered blocks changed. */
function images(size: number): { v1: Buffer; v2: Buffer } {
  const v1 = Buffer.alloc(size);
  let x = 12345;
  for (let i = 0; i < size; i += 4) v1.writeUInt32LE((x = (x * 1103515245 + 12345) >>> 0), i);
  const v2 = Buffer.from(v1);
  for (let block = 7; block * 4096 < size; block += 50) v2.fill(0xab, block * 4096, block * 4096 + 512);
  return { v1, v2 };
}

interface Job {
  id: number;
  state: string;
  progress: number;
  package?: number;
  error?: string;
}

describe("deltas on request", () => {
  const server = useTestServer(FAST_SERVER);

  test("a delta is made in the background and offered beside the package; a device on the base applies it, one whose base differs falls back to the full package", async () => {
    const { v1, v2 } = images(1024 * 1024);
    const base = await uploadOk(server, { token: server.adminToken, version: "d1", devtype: "delta-board", file: v1 });
    const target = await uploadOk(server, { token: server.adminToken, version: "d2", devtype: "delta-board", file: v2 });
    const other = await uploadOk(server, { token: server.adminToken, version: "o1", devtype: "other-board", file: v1 });

    for (const [from, message] of [
      [target.id, /not made a delta of itself/],
      [other.id, /is for device type other-board, not delta-board/],
      [9999, /package 9999 does not exist/],
    ] as const) {
      const refused = await server.call("POST", `/api/v1/packages/${target.id}/delta`, { from });
      assert.equal(refused.status, 400, JSON.stringify(refused.body));
      assert.match(refused.body.error, message);
    }
    assert.equal((await server.call("POST", `/api/v1/packages/${target.id}/delta`, { from: base.id, extra: 1 })).status, 400, "unknown fields are refused");

    const queued = await server.call<Job>("POST", `/api/v1/packages/${target.id}/delta`, { from: base.id });
    assert.equal(queued.status, 202, JSON.stringify(queued.body));
    const job = await waitFor(async () => (await server.call<Job[]>("GET", "/api/v1/packages/deltas")).body.find((j) => j.id === queued.body.id && j.state !== "queued" && j.state !== "running"), 20_000, "the delta made");
    assert.equal(job.state, "done", job.error);
    assert.equal(job.progress, 100);
    const delta = (await server.call("GET", `/api/v1/packages/${job.package}`)).body as { sha256: string; metadata: Record<string, unknown> };
    assert.equal(delta.metadata["svc.software.version"], "d2");
    assert.equal(delta.metadata["requires:svc.software.version"], "d1");
    assert.equal(delta.metadata["svc.delta.target_sha256"], target.sha256);
    assert.ok(Number(delta.metadata["svc.storage.local.length"]) < v2.length / 4, `the delta is small (${delta.metadata["svc.storage.local.length"]} bytes)`);

    const dir = tempDir("labgate-delta-");
    const goodBase = join(dir, "slot-a");
    const wrongBase = join(dir, "slot-b");
    writeFileSync(goodBase, v1);
    writeFileSync(wrongBase, Buffer.alloc(1024 * 1024, "another image "));
    const started = [
      { base: goodBase, installed: join(dir, "installed-good") },
      // The base's path printed by a command, as for an inactive partition.
      { base: ["sh", "-c", `echo ${wrongBase}`], installed: join(dir, "installed-wrong") },
    ];
    const ids: number[] = [];
    const running = [];
    for (const each of started) {
      const agent = startAgent(server, { device_type: "delta-board", software_version: "d1", delta_base: each.base, install_command: ["cp", "{file}", each.installed], update_check_interval: 3600 });
      agents.push(agent);
      running.push(agent);
      const id = await approveAgent(server, agent);
      await untilConnected(server, id);
      ids.push(id);
    }
    await offerGroup(server, { policy: "exact_match,d2", packages: [target.id], devices: ids });
    for (const agent of running) await agent.checkNow();
    // An agent's check ends once it has sent its outcome; the server records it a moment later.
    const historyOf = (id: number) =>
      waitFor(async () => {
        const rows = (await server.call<Array<{ outcome: string; reason: string | null; to_version: string }>>("GET", `/api/v2/devices/${id}/update-history`)).body;
        return rows.length > 0 ? rows : undefined;
      }, 10_000, `device ${id}'s outcome recorded`);
    const [good] = await historyOf(ids[0]);
    assert.equal(good.outcome, "installed");
    assert.match(good.reason ?? "", /^installed from a delta of \d+ bytes$/);
    assert.equal(sha256(readFileSync(started[0].installed)), target.sha256, "the rebuilt file is the package");
    const [fallback] = await historyOf(ids[1]);
    assert.equal(fallback.outcome, "installed", JSON.stringify(fallback));
    assert.match(fallback.reason ?? "", /^the delta failed \(xdelta3 exited with 1: .*checksum mismatch.*\); installed from the full package$/);
    assert.equal(sha256(readFileSync(started[1].installed)), target.sha256, "the full package was installed in the same attempt");
  });
});

describe("update_server.deltas: auto", () => {
  const server = useTestServer({ ...FAST_SERVER, update_server: { ...FAST_SERVER.update_server, deltas: "auto" } });

  test("an upload makes deltas from the versions devices of its type run now", async () => {
    const { v1, v2 } = images(256 * 1024);
    const agent = startAgent(server, { device_type: "auto-board", software_version: "a1", update_check_interval: 3600 });
    agents.push(agent);
    const id = await approveAgent(server, agent);
    await untilConnected(server, id);
    const base = await uploadOk(server, { token: server.adminToken, version: "a1", devtype: "auto-board", file: v1 });
    assert.deepEqual((await server.call<Job[]>("GET", "/api/v1/packages/deltas")).body, [], "no delta of the version the device runs to itself");
    const target = await uploadOk(server, { token: server.adminToken, version: "a2", devtype: "auto-board", file: v2 });
    const job = await waitFor(async () => (await server.call<Array<Job & { base: number; target: number }>>("GET", "/api/v1/packages/deltas")).body.find((j) => j.state === "done" || j.state === "failed"), 20_000, "the delta made on upload");
    assert.deepEqual([job.state, job.base, job.target], ["done", base.id, target.id], job.error);
    const delta = (await server.call("GET", `/api/v1/packages/${job.package}`)).body as { metadata: Record<string, unknown> };
    assert.equal(delta.metadata["requires:svc.software.version"], "a1");
  });
});
