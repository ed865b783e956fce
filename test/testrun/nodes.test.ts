import assert from "node:assert/strict";
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { describe, test } from "node:test";
import { ConfigError, loadConfig } from "../../src/config/config.ts";
import { removeDir, startTestServer, tempDir } from "../helpers/server.ts";

describe("test_server.nodes and test_server.nodes_file (11.1)", () => {
  test("addresses are normalised as protoplaster does and both lists are served at /api/v1/test-nodes", async () => {
    const dataDir = tempDir();
    // protoplaster's --external-devices format, as the spec's example gives it.
    writeFileSync(join(dataDir, "devices.yml"), "node1: 10.0.1.2\nnode2: 10.0.1.3:2100\nlab: http://192.168.1.50:8037\nb: http://b:5000/\n");
    writeFileSync(join(dataDir, "appliance.config.yaml"), "test_server:\n  nodes_file: devices.yml\n  nodes:\n    b: {url: b, token: secret}\n    v6: '[fd00::1]'\n    tls: https://dut.lab\n");
    const s = await startTestServer({}, dataDir);
    try {
      const res = await s.request("/api/v1/test-nodes", { token: s.adminToken });
      assert.equal(res.status, 200);
      assert.deepEqual(await res.json(), [
        { name: "b", url: "http://b:5000" },
        { name: "v6", url: "http://[fd00::1]:5000" },
        { name: "tls", url: "https://dut.lab:5000" },
        { name: "node1", url: "http://10.0.1.2:5000" },
        { name: "node2", url: "http://10.0.1.3:2100" },
        { name: "lab", url: "http://192.168.1.50:8037" },
      ]);
      // The same name and URL in both places is one node; its token stays.
      assert.equal(s.server.ctx.config.test_server.nodes.b.token, "secret");
    } finally {
      await s.close();
      removeDir(dataDir);
    }
  });

  test("conflicting names or URLs, reserved names and a missing file are config errors naming the key", () => {
    const dir = tempDir();
    const load = (config: string, devices?: string) => {
      writeFileSync(join(dir, "appliance.config.yaml"), config);
      if (devices !== undefined) writeFileSync(join(dir, "devices.yml"), devices);
      return () => loadConfig({ cwd: dir, env: {} });
    };
    const error = (pattern: RegExp) => (e: unknown) => e instanceof ConfigError && pattern.test(e.message);
    assert.throws(load("test_server:\n  nodes:\n    a: 10.0.0.1\n    b: http://10.0.0.1:5000\n"), error(/test_server\.nodes\.b: http:\/\/10\.0\.0\.1:5000 is already defined as node 'a'/));
    assert.throws(load("test_server:\n  nodes:\n    localhost: 10.0.0.1\n"), error(/test_server\.nodes\.localhost: 'localhost' is reserved/));
    assert.throws(load("test_server:\n  nodes_file: devices.yml\n  nodes:\n    a: 10.0.0.1\n", "a: 10.0.0.2\n"), error(/nodes_file.*\.a: node 'a' is already defined with http:\/\/10\.0\.0\.1:5000/));
    assert.throws(load("test_server:\n  nodes_file: devices.yml\n", "Local device: 10.0.0.2\n"), error(/reserved/));
    assert.throws(load("test_server:\n  nodes_file: devices.yml\n", "- a\n"), error(/nodes_file.*expected a mapping/));
    assert.throws(load("test_server:\n  nodes_file: missing.yml\n"), error(/test_server\.nodes_file: cannot read .*missing\.yml: ENOENT/));
    assert.throws(load("test_server:\n  nodes:\n    a: ftp://x\n"), error(/test_server\.nodes\.a: expected an http\(s\) URL/));
    removeDir(dir);
  });
});
