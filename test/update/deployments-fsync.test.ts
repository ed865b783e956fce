/*
 * A deployment's first offers to devices checking at once share the journal's fsyncs: each waits
 * for its own durable write, not for one fsync per offer before it.
 */
import assert from "node:assert/strict";
import fs from "node:fs";
import { syncBuiltinESMExports } from "node:module";
import { test } from "node:test";
import { useTestServer } from "../helpers/server.ts";
import { deviceMetadata, seedDevices } from "./helpers/devices.ts";
import { uploadOk } from "./helpers/packages.ts";

// The embedded engine on either suite: what is measured is its journal's fsyncs (PostgreSQL makes its own).
const server = useTestServer({ database: { url: "" } });
const DEVICES = 20;
const FSYNC_MS = 200;

test("20 devices' first checks in a deployment, each fsync taking 200 ms, are all offered with a few fsyncs, not 20", async () => {
  const admin = server.adminToken;
  const devices = (await seedDevices(server, DEVICES)).map((d) => ({ ...d, token: server.server.ctx.tokens.issueDevice(d.mac, d.id, 86400) }));
  const v2 = (await uploadOk(server, { token: admin, version: "v2", devtype: "board", file: Buffer.from("v2 for boards") })).id;
  const group = (await server.call<{ id: number }>("POST", "/api/v2/groups", { metadata: {} })).body.id;
  for (const [method, path, json] of [
    ["POST", `/api/v2/groups/${group}/policy`, { policy: "no_update," }],
    ["POST", `/api/v2/groups/${group}/package`, { packages: [v2] }],
    ["PATCH", `/api/v2/groups/${group}/devices`, { add: devices.map((d) => d.id), remove: [] }],
  ] as const) assert.equal((await server.call(method, path, json)).status, 200);
  const created = await server.call<{ id: number }>("POST", "/api/v2/deployments", { group, version: "v2" });
  assert.equal(created.status, 201, JSON.stringify(created.body));

  const original = fs.fdatasync;
  let fsyncs = 0;
  const slow = (fd: number, callback: (error: NodeJS.ErrnoException | null) => void) => {
    fsyncs++;
    setTimeout(() => original(fd, callback), FSYNC_MS);
  };
  (fs as { fdatasync: unknown }).fdatasync = slow;
  syncBuiltinESMExports();
  let answers: Array<{ status: number; version?: string; deployment?: number }>;
  try {
    answers = await Promise.all(
      devices.map(async (d) => {
        const res = await server.request("/api/v1/update/check", { method: "POST", token: d.token, json: deviceMetadata(d.mac, { "svc.software.version": "v1", "svc.hardware.devtype": "board" }) });
        return { status: res.status, ...(res.status === 200 ? ((await res.json()) as { version: string; deployment: number }) : {}) };
      }),
    );
  } finally {
    (fs as { fdatasync: unknown }).fdatasync = original;
    syncBuiltinESMExports();
  }
  assert.deepEqual(answers.map((a) => [a.status, a.version, a.deployment]), devices.map(() => [200, "v2", created.body.id]));
  // Counted, not timed: one fsync per offer would be DEVICES of them; offers that wait for a running fsync share the next one.
  assert.ok(fsyncs <= DEVICES / 2, `the ${DEVICES} offers took ${fsyncs} fsyncs`);
  const offered = (await server.call<Array<{ state: string; attempt: number }>>("GET", `/api/v2/deployments/${created.body.id}/devices?limit=100`)).body;
  assert.deepEqual(offered.map((m) => [m.state, m.attempt]), devices.map(() => ["offered", 1]));
});
