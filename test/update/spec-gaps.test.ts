import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { useTestServer } from "../helpers/server.ts";
import { registerDevice } from "./helpers/devices.ts";
import { offerGroup, sha256, uploadOk } from "./helpers/packages.ts";

/** Cases of update-server.md sections 4-8 and 14 that the other suites do not reach over HTTP. */
describe("update server: spec cases found by the audit", () => {
  const server = useTestServer();
  const admin = () => server.adminToken;

  it("an empty package downloads through its link even with the reference client's Range: bytes=0- (14.3)", async () => {
    const pkg = await uploadOk(server, { token: admin(), file: Buffer.alloc(0) });
    assert.equal(pkg.sha256, sha256(Buffer.alloc(0)));
    assert.equal(pkg.metadata["svc.storage.local.length"], 0);
    const { download_url } = (await server.call("GET", `/api/v1/packages/${pkg.id}/download`)).body as { download_url: string };
    for (const range of [undefined, "bytes=0-", "bytes=-10"]) {
      const res = await fetch(download_url, { headers: range ? { range } : {} });
      assert.equal(res.status, 200, String(range));
      assert.equal(res.headers.get("content-length"), "0");
      assert.equal(res.headers.get("accept-ranges"), "bytes");
      assert.equal((await res.arrayBuffer()).byteLength, 0);
    }
  });

  it("update check over HTTP: a device already at the policy's target gets 204 and no progress record (6.2)", async () => {
    const device = await registerDevice(server);
    const v2 = await uploadOk(server, { token: admin(), version: "t2" });
    await offerGroup(server, { policy: "exact_match,t2", packages: [v2.id], devices: [device.id] });
    const check = (version: string) =>
      device.client.request("/api/v1/update/check", {
        method: "POST",
        json: { "svc.software.version": version, "svc.hardware.devtype": "board", "svc.hardware.macaddr": device.client.mac },
      });
    const at = await check("t2");
    assert.equal(at.status, 204);
    assert.equal(await at.text(), "");
    assert.equal((await server.call("GET", `/api/v2/devices/${device.id}/progress`)).status, 404);
    assert.equal((await check("t1")).status, 200, "one version below the target is offered the package");
  });
});
