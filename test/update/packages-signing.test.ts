/*
 * update_server.signing at upload: a required signature refuses unsigned and tampered packages
 * (400 naming why, nothing stored); otherwise packages are stored and marked; a deployment of a
 * package that the group's devices would refuse for its signature is warned about first.
 */
import assert from "node:assert/strict";
import { readdirSync } from "node:fs";
import { join } from "node:path";
import { after, describe, test } from "node:test";
import { useTestServer } from "../helpers/server.ts";
import { approveAgent, startAgent, untilConnected } from "./helpers/agents.ts";
import { makeArtifact, makeKey, flipSignatureBit, tamperMember, tamperPayload } from "./helpers/mender.ts";
import { offerGroup, upload, uploadOk } from "./helpers/packages.ts";

const rsa = makeKey("rsa");
const ec = makeKey("ec");
const stranger = makeKey("rsa");
const payload = Buffer.alloc(100_000, "an image ");

/** Object files in the server's storage (the temp area aside). */
const storedObjects = (dataDir: string) => readdirSync(join(dataDir, "storage")).filter((name) => !name.startsWith("."));

describe("a gateway that requires signatures", () => {
  const server = useTestServer({ update_server: { signing: { keys: [rsa.pub, ec.pub], required: true } } });

  test("refuses unsigned, wrongly signed and tampered uploads with 400 naming why, and stores nothing", async () => {
    const signed = await makeArtifact({ name: "r", deviceType: "board", payload, key: rsa });
    const cases: Array<[string, Buffer, RegExp]> = [
      ["unsigned", await makeArtifact({ name: "r", deviceType: "board", payload }), /^signature: unsigned: the artifact has no manifest\.sig/],
      ["a plain file", Buffer.from("not an artifact"), /^signature: unsigned: not a Mender artifact/],
      ["another key", await makeArtifact({ name: "r", deviceType: "board", payload, key: stranger }), /^signature: no key matches: manifest\.sig verifies with none of the 2 key/],
      ["a changed signature", await tamperMember(signed, "manifest.sig", flipSignatureBit), /^signature: no key matches: /],
      ["a changed manifest", await tamperMember(signed, "manifest", (m) => Buffer.from(m.toString().replace(/^./, (c) => (c === "f" ? "e" : "f")))), /^signature: no key matches: /],
      ["a changed payload byte", await tamperPayload(signed), /^signature: payload checksum: data\/0000\/image\.bin does not match its manifest checksum/],
      ["a changed header", await tamperMember(signed, "header.tar.gz", (h) => Buffer.concat([h, Buffer.from("!")])), /^signature: manifest: header\.tar\.gz does not match its manifest checksum/],
    ];
    for (const [name, file, reason] of cases) {
      const res = await upload(server, { token: server.adminToken, version: "v2", file });
      assert.equal(res.status, 400, name);
      const body = (await res.json()) as { error: string };
      assert.match(body.error, reason, name);
      assert.match(body.error, /update_server\.signing\.keys/, `${name}: says what the gateway wants`);
    }
    assert.deepEqual((await server.call("GET", "/api/v1/packages")).body, [], "no package row");
    assert.deepEqual(storedObjects(server.dataDir), [], "no stored object");
  });

  test("stores a signed package, marked with the fingerprint of the key that signed it; the mark cannot be forged", async () => {
    const artifact = await makeArtifact({ name: "r2", deviceType: "board", payload, key: ec });
    const pkg = await uploadOk(server, { token: server.adminToken, version: "v2", file: artifact });
    assert.equal(pkg.metadata["svc.signature.status"], "signed");
    assert.equal(pkg.metadata["svc.signature.key"], ec.fingerprint);
    const forged = await upload(server, { token: server.adminToken, version: "v3", file: artifact, fields: { "svc.signature.key": "0".repeat(64) } });
    assert.equal(forged.status, 400);
    assert.match(((await forged.json()) as { error: string }).error, /reserved key: svc\.signature\.key/);
  });
});

describe("a gateway that checks signatures without requiring them", () => {
  const started: Array<{ stop(): Promise<void> }> = [];
  after(async () => {
    for (const agent of started) await agent.stop();
  });
  const server = useTestServer({ update_server: { signing: { keys: [rsa.pub, ec.pub], required: false } } });

  test("stores unsigned and badly signed packages, marked with why", async () => {
    const unsigned = await uploadOk(server, { token: server.adminToken, version: "u1", file: await makeArtifact({ name: "u", deviceType: "board", payload }) });
    assert.equal(unsigned.metadata["svc.signature.status"], "unsigned");
    assert.match(String(unsigned.metadata["svc.signature.reason"]), /^unsigned: the artifact has no manifest\.sig/);
    assert.equal(unsigned.metadata["svc.signature.key"], undefined);
    const bad = await uploadOk(server, { token: server.adminToken, version: "u2", file: await tamperPayload(await makeArtifact({ name: "u", deviceType: "board", payload, key: rsa })) });
    assert.equal(bad.metadata["svc.signature.status"], "invalid");
    assert.match(String(bad.metadata["svc.signature.reason"]), /^payload checksum: /);
  });

  test("a deployment of a package the group's devices would refuse for its signature is warned about before it is made", async () => {
    // The device trusts the EC key only, and says so in its metadata.
    const agent = startAgent(server, { device_type: "strict", software_version: "v1", verify_keys: [ec.pub] });
    started.push(agent);
    const id = await approveAgent(server, agent);
    await untilConnected(server, id);
    const unsigned = await uploadOk(server, { token: server.adminToken, version: "w1", devtype: "strict", file: await makeArtifact({ name: "w1", deviceType: "strict", payload }) });
    const byRsa = await uploadOk(server, { token: server.adminToken, version: "w2", devtype: "strict", file: await makeArtifact({ name: "w2", deviceType: "strict", payload, key: rsa }) });
    const byEc = await uploadOk(server, { token: server.adminToken, version: "w3", devtype: "strict", file: await makeArtifact({ name: "w3", deviceType: "strict", payload, key: ec }) });
    const group = await offerGroup(server, { policy: "no_update,", packages: [unsigned.id, byRsa.id], devices: [id] });
    const preflight = async (query: string) => {
      const res = await server.call<{ warnings: Array<{ code: string; message: string; package: number; devices: number[] }> }>("GET", `/api/v2/deployments/preflight?${query}`);
      assert.equal(res.status, 200, JSON.stringify(res.body));
      return res.body.warnings;
    };
    const [w1] = await preflight(`group=${group}&version=w1`);
    assert.deepEqual([w1.code, w1.package, w1.devices], ["unsigned_package", unsigned.id, [id]]);
    assert.match(w1.message, /is not signed: unsigned: .*1 device\(s\) of the group require signed updates/);
    const [w2] = await preflight(`group=${group}&version=w2`);
    assert.deepEqual([w2.code, w2.package, w2.devices], ["untrusted_key", byRsa.id, [id]]);
    assert.ok(w2.message.includes(rsa.fingerprint));
    assert.deepEqual(await preflight(`group=${group}&version=w3&packages=${byEc.id}`), [], "signed by a key the device trusts: nothing to warn about");
    assert.equal((await server.call("GET", `/api/v2/deployments/preflight?group=${group}`)).status, 400, "the version is required");
  });
});
