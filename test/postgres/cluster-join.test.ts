/*
 * `labgate cluster join`: a new node takes the signing key and the link secret from a running one
 * (admin_rw, audited, only on PostgreSQL, never over plain http off this machine), and then
 * accepts the first node's device tokens and signed links.
 */
import { strict as assert } from "node:assert";
import { createHash } from "node:crypto";
import { mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { test } from "node:test";
import { KEY_FILES, KEYS_DIR, loadOrCreateKeys } from "../../src/auth/keys.ts";
import { TokenService } from "../../src/auth/tokens.ts";
import { startNode, type NodeProcess } from "../helpers/cluster.ts";
import { runCli } from "../helpers/cli.ts";
import { openDeviceSocket } from "../helpers/device-socket.ts";
import { usePostgres } from "../helpers/postgres.ts";
import { startTestServer, tempDir, waitFor, type TestServer } from "../helpers/server.ts";
import { registerDevice } from "../update/helpers/devices.ts";
import { makeCert } from "../helpers/tls.ts";
import { uploadOk } from "../update/helpers/packages.ts";

const nodes: NodeProcess[] = [];
const postgres = usePostgres({
  async teardown() {
    for (const node of nodes) await node.stop("SIGKILL");
  },
});

const keyFiles = (dataDir: string) => KEY_FILES.map((file) => readFileSync(join(dataDir, KEYS_DIR, file), "utf8"));
const join_ = (from: string, tokenFile: string, dataDir: string) => runCli(["cluster", "join", "--from", from, "--token-file", tokenFile, "--data-dir", dataDir], { env: { LABGATE_DATABASE_URL: "" } });

test("a node joined with labgate cluster join accepts the first node's tokens and signed links; the endpoint is admin_rw only and audited, plain http off loopback and a data dir with other keys are refused", async () => {
  const url = await postgres.createDatabase("join");
  const shared = tempDir("labgate-shared-storage-");
  const storage = ["storage:", "  driver: local", "  local:", `    dir: ${shared}`];
  const one = await startNode(url, "node-1", { config: storage });
  nodes.push(one);
  const tokens = new TokenService(loadOrCreateKeys(one.dataDir), "svc");
  const tokenFile = (scopes: Parameters<TokenService["issueManagement"]>[1]) => {
    const file = join(tempDir(), "token");
    writeFileSync(file, tokens.issueManagement("joiner", scopes, 600) + "\n");
    return file;
  };

  // The endpoint never answers without an admin_rw token.
  assert.equal((await one.request("/api/v1/cluster/join", { method: "POST" })).status, 401);
  assert.equal((await one.request("/api/v1/cluster/join", { method: "POST", token: tokens.issueManagement("ro", ["admin_ro"], 60) })).status, 403);

  // Plain http to another machine is refused before anything is sent.
  const offLoopback = await join_("http://192.0.2.1:5000", tokenFile(["admin_rw"]), tempDir());
  assert.equal(offLoopback.code, 2, offLoopback.stderr);
  assert.match(offLoopback.stderr, /refusing plain http to 192\.0\.2\.1:5000.*loopback/);
  // A token the node does not take: refused by the node, nothing written.
  const refusedDir = tempDir();
  const refused = await join_(one.url, tokenFile(["admin_ro"]), refusedDir);
  assert.equal(refused.code, 1, refused.stderr);
  assert.match(refused.stderr, /refused \(403\)/);
  assert.throws(() => readFileSync(join(refusedDir, KEYS_DIR, KEY_FILES[0])), /ENOENT/);

  // Joined: node 2's keys are node 1's; a second run says so and changes nothing.
  const twoDir = tempDir();
  const joined = await join_(one.url, tokenFile(["admin_rw"]), twoDir);
  assert.equal(joined.code, 0, joined.stderr);
  assert.match(joined.stdout, /^joined: /);
  assert.deepEqual(keyFiles(twoDir), keyFiles(one.dataDir));
  const again = await join_(one.url, tokenFile(["admin_rw"]), twoDir);
  assert.equal(again.code, 0, again.stderr);
  assert.match(again.stdout, /already holds the keys/);
  // A data dir with keys of its own is never overwritten.
  const otherDir = tempDir();
  loadOrCreateKeys(otherDir);
  const before = keyFiles(otherDir);
  const other = await join_(one.url, tokenFile(["admin_rw"]), otherDir);
  assert.equal(other.code, 1, other.stderr);
  assert.match(other.stderr, /holds other keys already/);
  assert.deepEqual(keyFiles(otherDir), before);

  // Each copy is in the audit log, with who asked.
  const audit = await one.call<Array<{ action: string; actor: string; target: string }>>("GET", "/api/v1/audit?action=cluster.join");
  assert.deepEqual(audit.body.map((e) => [e.action, e.actor, e.target]), [
    ["cluster.join", "joiner", "keys"],
    ["cluster.join", "joiner", "keys"],
    ["cluster.join", "joiner", "keys"],
  ]);

  const two = await startNode(url, "node-2", { first: one, joined: true, dataDir: twoDir, config: storage });
  nodes.push(two);
  // A device registered through node 1 connects to node 2 with node 1's token.
  const device = await registerDevice(one as unknown as TestServer);
  const socket = await openDeviceSocket(two.url, device.token);
  try {
    await waitFor(async () => (await two.call<{ connected: boolean }>("GET", `/api/v2/devices/${device.id}`)).body.connected, 5000, "the device connected to node 2");
  } finally {
    socket.ws.close();
  }
  // A download link signed by node 1 is good on node 2.
  const pkg = await uploadOk(one as unknown as TestServer, { token: one.adminToken, version: "v7" });
  const link = await one.call<{ download_url: string }>("GET", `/api/v1/packages/${pkg.id}/download`);
  assert.equal(link.status, 200, JSON.stringify(link.body));
  const onTwo = new URL(link.body.download_url);
  onTwo.host = new URL(two.url).host;
  const fetched = await fetch(onTwo);
  assert.equal(fetched.status, 200);
  assert.equal(createHash("sha256").update(Buffer.from(await fetched.arrayBuffer())).digest("hex"), pkg.sha256);
  const forged = new URL(onTwo);
  forged.searchParams.set("signature", "A".repeat(43));
  assert.equal((await fetch(forged)).status, 403);
});

test("on the embedded database there is no cluster to join: 404 with a reason, and still 401 without a token", async () => {
  const server = await startTestServer({ database: { url: "" } });
  try {
    assert.equal((await server.request("/api/v1/cluster/join", { method: "POST" })).status, 401);
    const answer = await server.call<{ error: string }>("POST", "/api/v1/cluster/join");
    assert.equal(answer.status, 404);
    assert.match(answer.body.error, /no cluster to join/);
    const dir = tempDir();
    mkdirSync(dir, { recursive: true });
    const file = join(dir, "token");
    writeFileSync(file, server.adminToken);
    const joined = await join_(server.url, file, tempDir());
    assert.equal(joined.code, 1);
    assert.match(joined.stderr, /refused \(404\): .*no cluster to join/);
  } finally {
    await server.close();
  }
});

test("over https the join trusts the system's CAs, or only --ca-file's certificates", async () => {
  const url = await postgres.createDatabase("join_tls");
  const cert = makeCert(tempDir(), "node-tls");
  const node = await startTestServer({ database: { url }, tls: { cert_file: cert.cert, key_file: cert.key }, cluster: { node_name: "tls-1", advertise_url: "" } });
  try {
    assert.match(node.url, /^https:/);
    const file = join(tempDir(), "token");
    writeFileSync(file, node.adminToken);
    const untrusted = await runCli(["cluster", "join", "--from", node.url, "--token-file", file, "--data-dir", tempDir()], { env: { LABGATE_DATABASE_URL: "" } });
    assert.equal(untrusted.code, 1, untrusted.stderr);
    assert.match(untrusted.stderr, /cannot reach https:\/\/127\.0\.0\.1:\d+: .*certificate/);
    const target = tempDir();
    const trusted = await runCli(["cluster", "join", "--from", node.url, "--token-file", file, "--ca-file", cert.cert, "--data-dir", target], { env: { LABGATE_DATABASE_URL: "" } });
    assert.equal(trusted.code, 0, trusted.stderr);
    assert.deepEqual(keyFiles(target), keyFiles(node.dataDir));
  } finally {
    await node.close();
  }
});
