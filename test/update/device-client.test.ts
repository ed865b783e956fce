import assert from "node:assert/strict";
import { statSync } from "node:fs";
import { join } from "node:path";
import { test } from "node:test";
import { removeDir, startTestServer, tempDir } from "../helpers/server.ts";
import { DeviceClient, loadOrCreateDeviceKey, publicKeyPem } from "../../src/update/client/device-client.ts";
import { deviceMetadata, key, nextMac } from "./helpers/devices.ts";

test("device client: the key is made once, kept with mode 0600 and reloaded", () => {
  const dir = tempDir();
  try {
    for (const type of ["rsa", "ed25519"] as const) {
      const path = join(dir, "keys", `${type}.pem`);
      const made = loadOrCreateDeviceKey(path, type);
      assert.equal(made.type, type);
      assert.equal(statSync(path).mode & 0o777, 0o600);
      const again = loadOrCreateDeviceKey(path, "rsa");
      assert.equal(again.type, type, "the stored key wins over the requested type");
      assert.equal(publicKeyPem(again.privateKeyPem), publicKeyPem(made.privateKeyPem));
    }
  } finally {
    removeDir(dir);
  }
});

test("device client: a clock corrected backwards never signs a timestamp again (the server would refuse the same body as a replay)", async () => {
  const server = await startTestServer();
  try {
    let now = Math.floor(server.clock.now() / 1000);
    const client = new DeviceClient({ server: server.url, privateKeyPem: key("ed25519", true).privateKeyPem, metadata: deviceMetadata(nextMac()), now: () => now });
    const statuses: string[] = [];
    for (let i = 0; i < 3; i++) {
      statuses.push((await client.authorize()).status);
      now += 80;
    }
    // The device learns that its clock runs 160 s ahead: its next timestamps are ones it has signed before.
    now -= 160;
    client.clockCorrected();
    for (let i = 0; i < 3; i++) {
      statuses.push((await client.authorize()).status);
      now += 80;
    }
    assert.deepEqual(statuses, Array(6).fill("pending"), "each request is new to the server: none is refused as a replay");
  } finally {
    await server.close();
  }
});
