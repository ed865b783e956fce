/*
 * `labgate agent` with verify_keys: a Mender artifact signed by mender-artifact (RSA, ECDSA)
 * installs; unsigned, wrongly signed and tampered artifacts are each refused with a reason that
 * says which check failed, and none reaches the install command.
 */
import assert from "node:assert/strict";
import { existsSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { after, test } from "node:test";
import { tempDir, useTestServer, waitFor } from "../helpers/server.ts";
import { device, FAST_SERVER, spawnConnectedAgent, startAgent, type AgentProcess } from "./helpers/agents.ts";
import { offerGroup, uploadOk } from "./helpers/packages.ts";
import { flipSignatureBit, makeArtifact, makeKey, resign, tamperMember, tamperPayload } from "./helpers/mender.ts";

const server = useTestServer(FAST_SERVER);
const spawned: AgentProcess[] = [];
const started: Array<{ stop(): Promise<void> }> = [];
after(async () => {
  for (const agent of spawned) agent.child.kill("SIGTERM");
  for (const agent of started) await agent.stop();
});

const rsa = makeKey("rsa");
const ec = makeKey("ec");
const stranger = makeKey("ec");
const payload = Buffer.alloc(300_000, "a board image ");

interface History {
  to_version: string;
  outcome: string;
  reason: string | null;
}
const historyOf = async (id: number): Promise<History[]> => (await server.call("GET", `/api/v2/devices/${id}/update-history`)).body;

test("a real labgate agent with verify_keys refuses every unsigned or tampered artifact with its reason, installs none, and installs a signed one", async () => {
  const dir = tempDir("labgate-signed-");
  const installed = join(dir, "installed");
  const agent = await spawnConnectedAgent(server, [
    "software_version: v1",
    "device_type: signed-board",
    "update_check_interval: 0.3",
    `verify_keys: [${rsa.pub}, ${ec.pub}]`,
    `install_command: [sh, -c, 'cp "$1" "$2"', install, "{file}", ${installed}]`,
  ]);
  spawned.push(agent);
  const fingerprints = (await device(server, agent.id)).metadata["svc.update.verify_keys"];
  assert.deepEqual(fingerprints, [rsa.fingerprint, ec.fingerprint], "the device says which keys it requires");

  const good = await makeArtifact({ name: "v-good", deviceType: "signed-board", payload, key: ec });
  const byRsa = await makeArtifact({ name: "v-rsa", deviceType: "signed-board", payload, key: rsa });
  const cases: Array<[string, Buffer, RegExp]> = [
    ["unsigned", await makeArtifact({ name: "x", deviceType: "signed-board", payload }), /^signature: unsigned: the artifact has no manifest\.sig$/],
    ["not-an-artifact", Buffer.from("#!/bin/sh\necho an image\n"), /^signature: unsigned: not a Mender artifact/],
    ["other-key", await makeArtifact({ name: "x", deviceType: "signed-board", payload, key: stranger }), /^signature: no key matches: manifest\.sig verifies with none of the 2 key/],
    ["signature", await tamperMember(good, "manifest.sig", flipSignatureBit), /^signature: no key matches: /],
    ["manifest", await tamperMember(byRsa, "manifest", (m) => Buffer.from(m.toString().replace(/^./, (c) => (c === "a" ? "b" : "a")))), /^signature: no key matches: /],
    ["payload-byte", await tamperPayload(byRsa), /^signature: payload checksum: data\/0000\/image\.bin does not match its manifest checksum$/],
    ["header", await tamperMember(byRsa, "header.tar.gz", (h) => Buffer.concat([h, Buffer.from("x")])), /^signature: manifest: header\.tar\.gz does not match its manifest checksum$/],
    ["resigned-without-header", await resign(byRsa, rsa, (m) => m.replace(/^.*header\.tar\.gz\n/m, "")), /^signature: manifest: header\.tar\.gz is not in the manifest$/],
  ];
  const group = await offerGroup(server, { policy: "no_update,", packages: [], devices: [agent.id] });
  const offer = async (version: string, file: Buffer) => {
    const pkg = await uploadOk(server, { token: server.adminToken, version, devtype: "signed-board", file });
    for (const [path, json] of [[`/api/v2/groups/${group}/package`, { packages: [pkg.id] }], [`/api/v2/groups/${group}/policy`, { policy: `exact_match,${version}` }]] as const) {
      assert.equal((await server.call("POST", path, json)).status, 200);
    }
  };
  for (const [name, file, reason] of cases) {
    await offer(`t-${name}`, file);
    const entry = await waitFor(async () => (await historyOf(agent.id)).find((h) => h.to_version === `t-${name}`), 15_000, `the outcome of ${name}`);
    assert.equal(entry.outcome, "failed", name);
    assert.match(entry.reason ?? "", reason, name);
    assert.ok(!existsSync(installed), `${name}: nothing was installed`);
  }

  await offer("v-good", good);
  const entry = await waitFor(async () => (await historyOf(agent.id)).find((h) => h.to_version === "v-good"), 15_000, "the signed artifact's outcome");
  assert.equal(entry.outcome, "installed", JSON.stringify(entry));
  assert.deepEqual(readFileSync(installed), good, "the verified artifact reached the install command");
  await waitFor(async () => (await device(server, agent.id)).metadata["svc.software.version"] === "v-good", 10_000, "the new version reported");
});

test("verify_keys naming a file without a public key stops the agent at start", () => {
  const dir = tempDir("labgate-badkey-");
  const file = join(dir, "key.pem");
  writeFileSync(file, readFileSync(ec.key));
  assert.throws(() => startAgent(server, { verify_keys: [file] }), /agent config key verify_keys: .*key\.pem: holds a EC PRIVATE KEY, not a public key/);
});
