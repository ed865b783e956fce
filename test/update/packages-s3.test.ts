/*
 * Packages on an S3 store (storage.driver: s3) against a real S3-compatible server on loopback
 * that checks every signature (test/helpers/s3.ts): uploads (one part and multipart), the
 * reference's svc.storage.s3.* keys, presigned links and proxy links downloaded with ranges and
 * by a real `labgate agent` update, deletes, and a store that goes away.
 */
import assert from "node:assert/strict";
import { existsSync, readdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { after, describe, test } from "node:test";
import { S3Objects } from "../../src/storage/s3.ts";
import { LabgateError } from "../../src/util/errors.ts";
import { ConfigError } from "../../src/config/read.ts";
import { startS3, type TestS3 } from "../helpers/s3.ts";
import { runCli } from "../helpers/cli.ts";
import { removeDir, startTestServer, tempDir, useTestServer, waitFor, type TestServer } from "../helpers/server.ts";
import { FAST_SERVER, spawnConnectedAgent, type AgentProcess } from "./helpers/agents.ts";
import { bytesOf, offerGroup, sha256, upload, uploadOk } from "./helpers/packages.ts";

/** The store as the tests see it: the same driver, with the test account. */
const storeOf = (s3: TestS3) => new S3Objects(s3.settings, { config: (m) => new ConfigError(m), unavailable: (m) => new LabgateError("unavailable", m) });


const linkOf = async (server: TestServer, id: number): Promise<string> => {
  const res = await server.call<{ id: number; download_url: string }>("GET", `/api/v1/packages/${id}/download`);
  assert.equal(res.status, 200, JSON.stringify(res.body));
  return res.body.download_url;
};

/** A real agent installs `version` from `file` through whatever link the server hands out. */
async function agentInstalls(server: TestServer, spawned: AgentProcess[], version: string, file: Buffer): Promise<void> {
  const installed = join(tempDir("labgate-s3-agent-"), "installed");
  const agent = await spawnConnectedAgent(server, ["software_version: v0", "device_type: s3-board", "update_check_interval: 0.3", `install_command: [sh, -c, 'cp "$1" "$2"', install, "{file}", ${installed}]`]);
  spawned.push(agent);
  const pkg = await uploadOk(server, { token: server.adminToken, version, devtype: "s3-board", file });
  await offerGroup(server, { policy: `exact_match,${version}`, packages: [pkg.id], devices: [agent.id] });
  await waitFor(() => existsSync(installed) && readFileSync(installed).length === file.length, 30_000, `the agent installed ${version} (${agent.stderr()})`);
  assert.ok(readFileSync(installed).equals(file), "the agent installed the uploaded bytes");
}

describe("packages on S3 with presigned links", () => {
  let s3: TestS3;
  const spawned: AgentProcess[] = [];
  after(() => {
    for (const agent of spawned) agent.child.kill("SIGTERM");
  });
  const server = useTestServer(async () => {
    s3 = await startS3();
    return { ...FAST_SERVER, storage: { driver: "s3", s3: s3.settings } };
  });
  after(() => s3?.stop());

  test("an upload goes to the bucket under its uuid with the reference's keys, is listed, and its presigned link serves it with ranges", async () => {
    const file = bytesOf(100_000);
    const pkg = await uploadOk(server, { token: server.adminToken, file });
    assert.equal((pkg as unknown as { driver: string }).driver, "s3");
    const uuid = pkg.metadata["svc.storage.s3.uuid"] as string;
    assert.match(uuid, /^[0-9a-f-]{36}$/);
    assert.equal(pkg.metadata["svc.storage.s3.size"], file.length);
    assert.equal(pkg.metadata["svc.storage.s3.directory"], "");
    assert.equal(pkg.metadata["svc.storage.local.uuid"], undefined);
    assert.equal(pkg.sha256, sha256(file));
    assert.deepEqual(await storeOf(s3).stat(uuid).then((s) => s?.size), file.length);
    const listed = await server.call<Array<{ id: number; driver: string }>>("GET", "/api/v1/packages");
    assert.ok(listed.body.some((p) => p.id === pkg.id && p.driver === "s3"));
    assert.deepEqual(readdirSync(join(server.dataDir, "storage", ".tmp")), [], "nothing is left staged");

    const url = await linkOf(server, pkg.id);
    assert.ok(url.startsWith(`${s3.endpoint}/${s3.bucket}/${uuid}?`), url);
    assert.match(url, /X-Amz-Signature=/);
    assert.match(url, /X-Amz-Expires=3600/);
    const whole = await fetch(url);
    assert.equal(whole.status, 200);
    assert.ok(Buffer.from(await whole.arrayBuffer()).equals(file));
    const part = await fetch(url, { headers: { range: "bytes=1000-1999" } });
    assert.equal(part.status, 206);
    assert.equal(part.headers.get("content-range"), `bytes 1000-1999/${file.length}`);
    assert.ok(Buffer.from(await part.arrayBuffer()).equals(file.subarray(1000, 2000)));
    const forged = url.replace(/X-Amz-Expires=3600/, "X-Amz-Expires=86400");
    assert.equal((await fetch(forged)).status, 403, "the store checks the link's signature");
  });

  test("a storage directory becomes the key's prefix and svc.storage.s3.directory", async () => {
    const pkg = await uploadOk(server, { token: server.adminToken, fields: { "svc.storage.directory": "fw/board-a" } });
    assert.equal(pkg.metadata["svc.storage.s3.directory"], "fw/board-a");
    const key = `fw/board-a/${pkg.metadata["svc.storage.s3.uuid"]}`;
    assert.ok(await storeOf(s3).stat(key));
    assert.equal((await upload(server, { token: server.adminToken, fields: { "svc.storage.directory": "../up" } })).status, 400);
  });

  test("a package larger than one part goes up as a multipart upload and comes back whole", async () => {
    const file = bytesOf(20 * 1024 * 1024 + 123, 11);
    const pkg = await uploadOk(server, { token: server.adminToken, file });
    assert.equal(pkg.metadata["svc.storage.s3.size"], file.length);
    const res = await fetch(await linkOf(server, pkg.id));
    assert.equal(res.status, 200);
    assert.equal(sha256(Buffer.from(await res.arrayBuffer())), sha256(file));
  });

  test("a delete removes the row and the object", async () => {
    const pkg = await uploadOk(server, { token: server.adminToken });
    const uuid = pkg.metadata["svc.storage.s3.uuid"] as string;
    const url = await linkOf(server, pkg.id);
    assert.equal((await server.call("DELETE", `/api/v1/packages/${pkg.id}`)).status, 200);
    assert.equal((await server.call("GET", `/api/v1/packages/${pkg.id}`)).status, 404);
    assert.equal(await storeOf(s3).stat(uuid), undefined);
    assert.equal((await fetch(url)).status, 404);
  });

  test("a real labgate agent installs an update through the store's presigned link", async () => {
    await agentInstalls(server, spawned, "s3-v1", bytesOf(300_000, 3));
  });
});

describe("packages on S3 through labgate (storage.s3.proxy)", () => {
  let s3: TestS3;
  const spawned: AgentProcess[] = [];
  after(() => {
    for (const agent of spawned) agent.child.kill("SIGTERM");
  });
  const server = useTestServer(async () => {
    s3 = await startS3();
    return { ...FAST_SERVER, storage: { driver: "s3", s3: { ...s3.settings, proxy: true } } };
  });
  after(() => s3?.stop());

  test("links are labgate's signed links, streamed from the store with ranges and validators", async () => {
    const file = bytesOf(50_000, 5);
    const pkg = await uploadOk(server, { token: server.adminToken, file });
    const url = await linkOf(server, pkg.id);
    assert.ok(url.startsWith(`${server.url}/local_storage/${pkg.metadata["svc.storage.s3.uuid"]}?expires=`), url);
    const whole = await fetch(url);
    assert.equal(whole.status, 200);
    assert.equal(whole.headers.get("content-length"), String(file.length));
    assert.equal(whole.headers.get("accept-ranges"), "bytes");
    assert.equal(whole.headers.get("content-security-policy"), "sandbox; default-src 'none'");
    assert.ok(Buffer.from(await whole.arrayBuffer()).equals(file));
    const etag = whole.headers.get("etag")!;
    const tail = await fetch(url, { headers: { range: "bytes=-100" } });
    assert.equal(tail.status, 206);
    assert.equal(tail.headers.get("content-range"), `bytes ${file.length - 100}-${file.length - 1}/${file.length}`);
    assert.ok(Buffer.from(await tail.arrayBuffer()).equals(file.subarray(file.length - 100)));
    assert.equal((await fetch(url, { headers: { "if-none-match": etag } })).status, 304);
    const beyond = await fetch(url, { headers: { range: `bytes=${file.length}-` } });
    assert.equal(beyond.status, 416);
    assert.equal(beyond.headers.get("content-range"), `bytes */${file.length}`);
    const head = await fetch(url, { method: "HEAD" });
    assert.equal(head.status, 200);
    assert.equal(head.headers.get("content-length"), String(file.length));
    assert.equal((await fetch(url.replace(/signature=[^&]+/, "signature=AAAA"))).status, 403);
  });

  test("a real labgate agent installs an update through labgate's link", async () => {
    await agentInstalls(server, spawned, "proxy-v1", bytesOf(300_000, 9));
  });
});

describe("an S3 store that is misconfigured or goes away", () => {
  test("a bucket that does not exist, or credentials the store refuses, stop the start naming the key", async () => {
    const s3 = await startS3();
    try {
      await assert.rejects(startTestServer({ storage: { driver: "s3", s3: { ...s3.settings, bucket: "no-such-bucket" } } }), (error: Error) => {
        assert.ok(error instanceof ConfigError);
        assert.match(error.message, /^config key storage\.s3\.bucket: the store at http:\/\/127\.0\.0\.1:\d+ has no bucket "no-such-bucket"$/);
        return true;
      });
      await assert.rejects(startTestServer({ storage: { driver: "s3", s3: { ...s3.settings, secret_access_key: "not-the-secret" } } }), (error: Error) => {
        assert.ok(error instanceof ConfigError);
        assert.match(error.message, /^config key storage\.s3\.access_key_id: the store refused labgate's credentials for bucket "labgate" \(HTTP 403\)$/);
        assert.ok(!error.message.includes("not-the-secret"));
        return true;
      });
    } finally {
      await s3.stop();
    }
  });

  test("labgate serve (the bundle, which loads the S3 part of its own) exits 2 with the message for a bucket that does not exist", async () => {
    const s3 = await startS3();
    const dir = tempDir("labgate-s3-cli-");
    try {
      const config = join(dir, "labgate.yaml");
      const { endpoint, access_key_id, secret_access_key } = s3.settings;
      writeFileSync(config, `listen: 127.0.0.1:0\ndata_dir: ${join(dir, "data")}\nstorage:\n  driver: s3\n  s3: {endpoint: "${endpoint}", bucket: other, access_key_id: ${access_key_id}, secret_access_key: ${secret_access_key}}\n`);
      const result = await runCli(["serve", "--config", config]);
      assert.equal(result.code, 2, result.stderr);
      assert.match(result.stderr, /config key storage\.s3\.bucket: the store at http:\/\/127\.0\.0\.1:\d+ has no bucket "other"/);
    } finally {
      await s3.stop();
      removeDir(dir);
    }
  });

  test("while the store cannot be reached an upload is a 503 that leaves no row and nothing staged; once it is back uploads work", async () => {
    const s3 = await startS3();
    const server = await startTestServer({ storage: { driver: "s3", s3: { ...s3.settings, proxy: true } } });
    try {
      const kept = await uploadOk(server, { token: server.adminToken });
      const link = await linkOf(server, kept.id);
      const before = (await server.call<unknown[]>("GET", "/api/v1/packages")).body.length;
      await s3.stop();

      const refused = await upload(server, { token: server.adminToken, version: "while-down" });
      assert.equal(refused.status, 503);
      assert.match(((await refused.json()) as { error: string }).error, /^the object store is unavailable: could not reach the store: /);
      const listed = (await server.call<Array<{ metadata: Record<string, unknown> }>>("GET", "/api/v1/packages")).body;
      assert.equal(listed.length, before, "no row without its object");
      assert.ok(!listed.some((p) => p.metadata["svc.software.version"] === "while-down"));
      assert.deepEqual(readdirSync(join(server.dataDir, "storage", ".tmp")), [], "the staged upload is gone");
      const download = await fetch(link);
      assert.equal(download.status, 503);
      assert.match(((await download.json()) as { error: string }).error, /^the object store is unavailable/);
      assert.equal((await server.call("GET", `/api/v1/packages/${kept.id}`)).status, 200, "the package row stays");

      const back = await startS3(s3.bucket, { port: s3.port, directory: s3.directory });
      try {
        assert.equal((await fetch(link)).status, 200, "the old object is served again");
        await uploadOk(server, { token: server.adminToken, version: "after" });
      } finally {
        await back.stop();
      }
    } finally {
      await server.close();
      removeDir(server.dataDir);
    }
  });
});
