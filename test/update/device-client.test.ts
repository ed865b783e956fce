import assert from "node:assert/strict";
import { statSync } from "node:fs";
import { join } from "node:path";
import { test } from "node:test";
import { removeDir, tempDir } from "../helpers/server.ts";
import { loadOrCreateDeviceKey, publicKeyPem } from "../../src/update/client/device-client.ts";

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
