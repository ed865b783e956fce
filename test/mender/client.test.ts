/*
 * A real, unchanged `mender` daemon (Debian's mender-client 3.4) against labgate: it
 * authenticates, is approved through the API, is put in a group and installs a `single-file`
 * artifact made by `mender-artifact` through a two-phase deployment, in which a second client,
 * whose update module exits 1, fails with its log as the outcome's output.
 */
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { existsSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { after, test } from "node:test";
import { tempDir, useTestServer, waitFor } from "../helpers/server.ts";
import { startMender, type MenderClient } from "./helpers.ts";

const clients: MenderClient[] = [];
after(async () => {
  for (const client of clients) await client.stop();
});
const server = useTestServer();

const FAILING_MODULE = `#!/bin/sh
case "$1" in
  NeedsArtifactReboot) echo No ;;
  SupportsRollback) echo No ;;
  ArtifactInstall) echo "flash failed: partition too small" >&2; exit 1 ;;
esac
exit 0
`;

test("mender-client installs a single-file artifact through a deployment; a failing one reports its log", { timeout: 170_000 }, async () => {
  const work = tempDir("labgate-mender-artifact-");
  const target = tempDir("labgate-mender-target-");
  writeFileSync(join(work, "dest_dir"), `${target}\n`);
  writeFileSync(join(work, "filename"), "app.conf\n");
  writeFileSync(join(work, "app.conf"), "release 2\n");
  const artifact = join(work, "release-2.mender");
  execFileSync("mender-artifact", ["write", "module-image", "-T", "single-file", "-n", "release-2", "-t", "qemu-mender", "-o", artifact, "-f", join(work, "dest_dir"), "-f", join(work, "filename"), "-f", join(work, "app.conf")]);
  const form = new FormData();
  form.set("file", new Blob([new Uint8Array(readFileSync(artifact))]), "release-2.mender");
  const uploaded = await server.request("/api/v1/packages", { method: "POST", token: server.adminToken, body: form });
  assert.equal(uploaded.status, 200, await uploaded.clone().text());
  const pkg = (await uploaded.json()) as { id: number; metadata: Record<string, string> };
  assert.equal(pkg.metadata["svc.software.version"], "release-2");
  assert.equal(pkg.metadata["svc.hardware.devtype"], "qemu-mender");

  const good = startMender({ serverUrl: server.url, mac: "02:4d:45:00:00:01", deviceType: "qemu-mender", artifactName: "release-1" });
  const bad = startMender({ serverUrl: server.url, mac: "02:4d:45:00:00:02", deviceType: "qemu-mender", artifactName: "release-1", singleFileModule: FAILING_MODULE });
  clients.push(good, bad);

  const ids: number[] = [];
  for (const client of [good, bad]) {
    const entry = await waitFor(
      async () => (await server.call<any[]>("GET", "/api/v1/auth/pending?details=true")).body.find((p) => p.mac_address === client.mac),
      30_000,
      `${client.mac} pending\n${client.output()}`,
    );
    assert.equal(entry.protocol, "mender");
    assert.equal((await server.call("POST", "/api/v1/auth/register", { mac_address: entry.mac_address, public_key: entry.public_key })).status, 200);
    const device = await waitFor(async () => {
      const found = (await server.call<any[]>("GET", "/api/v2/devices")).body.find((d) => d.mac_address === client.mac);
      return found && found.metadata.artifact_name === "release-1" ? found : undefined;
    }, 30_000, `${client.mac} inventory\n${client.output()}`);
    assert.equal(device.metadata["svc.hardware.devtype"], "qemu-mender");
    ids.push(device.id);
  }

  const group = (await server.call("POST", "/api/v2/groups", { metadata: { name: "mender-lab" } })).body.id as number;
  assert.equal((await server.call("POST", `/api/v2/groups/${group}/package`, { packages: [pkg.id] })).status, 200);
  assert.equal((await server.call("PATCH", `/api/v2/groups/${group}/devices`, { add: ids, remove: [] })).status, 200);
  const created = await server.call("POST", "/api/v2/deployments", { group, version: "release-2", phases: [50, 100], success_percent: 0, error_percent: 100, retries: 0 });
  assert.equal(created.status, 201, JSON.stringify(created.body));
  const deployment = created.body.id as number;

  const done = await waitFor(
    async () => {
      const view = (await server.call("GET", `/api/v2/deployments/${deployment}`)).body;
      return view.status.startsWith("completed") ? view : undefined;
    },
    120_000,
    `deployment ${deployment} completed\n${good.output()}\n---\n${bad.output()}`,
  );
  assert.equal(done.status, "completed_with_failures");
  const members = (await server.call<any[]>("GET", `/api/v2/deployments/${deployment}/devices?limit=10`)).body;
  const of = (id: number) => members.find((m) => m.device === id);
  assert.equal(of(ids[0]).state, "installed");
  assert.equal(of(ids[1]).state, "failed");
  assert.match(of(ids[1]).output, /flash failed: partition too small/);
  assert.ok(existsSync(join(target, "app.conf")));
  assert.equal(readFileSync(join(target, "app.conf"), "utf8"), "release 2\n");
});
