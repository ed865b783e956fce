/*
 * The store every node reads: three nodes on one throwaway PostgreSQL and one S3-compatible
 * server (test/helpers/s3.ts), with presigned links and with proxy links; then two nodes sharing
 * one storage.local.dir. A package uploaded on node 1 downloads through nodes 2 and 3; a file
 * fetched through node 2 from node 1's device, and an action output too large for its log row,
 * are served by node 3; a node's start leaves the other nodes' staged uploads alone.
 */
import assert from "node:assert/strict";
import { cpSync, existsSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";
import type { Agent } from "../../src/agent/agent.ts";
import { KEYS_DIR } from "../../src/auth/keys.ts";
import { freePort } from "../helpers/cluster.ts";
import { usePostgres } from "../helpers/postgres.ts";
import { startS3, type TestS3 } from "../helpers/s3.ts";
import { startTestServer, tempDir, waitFor, type TestServer } from "../helpers/server.ts";
import { approveAgent, device, FAST_SERVER, startAgent } from "../update/helpers/agents.ts";
import { bytesOf, sha256, uploadOk } from "../update/helpers/packages.ts";

const postgres = usePostgres();

const BIG_OUTPUT = 5000;

/** Nodes `names` on database `url`, with the keys of `nodes[0]` (or the first of them), each with `patch`; added to `nodes`. */
async function startNodes(url: string, names: string[], patch: Record<string, unknown>, nodes: TestServer[] = []): Promise<TestServer[]> {
  for (const name of names) {
    const dataDir = tempDir();
    if (nodes[0]) cpSync(join(nodes[0].dataDir, KEYS_DIR), join(dataDir, KEYS_DIR), { recursive: true });
    const port = await freePort();
    nodes.push(await startTestServer({ ...FAST_SERVER, ...patch, listen: { host: "127.0.0.1", port }, database: { url }, cluster: { node_name: name, advertise_url: `http://127.0.0.1:${port}` } }, dataDir));
  }
  return nodes;
}

/** An agent on `node` with an action whose output goes to a file, approved, seen connected from every node. */
async function agentOn(node: TestServer, nodes: TestServer[], agents: Agent[]): Promise<{ agent: Agent & { dir: string }; id: number }> {
  const agent = startAgent(node, { actions: [{ id: "big", name: "Big", command: ["sh", "-c", `head -c ${BIG_OUTPUT} /dev/zero | tr '\\0' x`], timeout: 5 }] });
  agents.push(agent);
  const id = await approveAgent(node, agent);
  for (const other of nodes) await waitFor(async () => (await device(other, id)).connected, 5000, `device ${id} connected, seen from ${other.url}`);
  return { agent, id };
}

/** A package uploaded on node 1, downloaded whole and in part through each other node's link. */
async function packageThroughEveryNode(nodes: TestServer[], seed: number, linkStart: (node: TestServer) => string): Promise<void> {
  const file = bytesOf(200_000, seed);
  const pkg = await uploadOk(nodes[0], { token: nodes[0].adminToken, file });
  for (const node of nodes.slice(1)) {
    const res = await node.call<{ download_url: string }>("GET", `/api/v1/packages/${pkg.id}/download`);
    assert.equal(res.status, 200, JSON.stringify(res.body));
    assert.ok(res.body.download_url.startsWith(linkStart(node)), res.body.download_url);
    const whole = await fetch(res.body.download_url);
    assert.equal(whole.status, 200);
    assert.equal(sha256(Buffer.from(await whole.arrayBuffer())), pkg.sha256);
    const part = await fetch(res.body.download_url, { headers: { range: "bytes=100-199" } });
    assert.equal(part.status, 206);
    assert.ok(Buffer.from(await part.arrayBuffer()).equals(file.subarray(100, 200)));
  }
}

/** Node 1's device: a file fetched through node 2 and its action's large output are served by node 3. */
async function deviceFilesThroughOtherNodes(nodes: TestServer[], agents: Agent[]): Promise<void> {
  const [one, two, three] = nodes;
  const { agent, id } = await agentOn(one, nodes, agents);
  writeFileSync(join(agent.config.file_base_dir, "boot.log"), "booted on node 1\n");
  const fetched = await two.call<{ status: number; url: string }>("POST", `/api/v2/devices/${id}/fs/file`, { file: join(agent.config.file_base_dir, "boot.log") });
  assert.equal(fetched.status, 200, JSON.stringify(fetched.body));
  assert.equal(fetched.body.status, 0);
  assert.ok(fetched.body.url.startsWith(`${two.url}/`), `the link is the node asked's: ${fetched.body.url}`);
  assert.equal(await (await fetch(fetched.body.url)).text(), "booted on node 1\n");
  assert.equal(await (await fetch(fetched.body.url.replace(two.url, three.url))).text(), "booted on node 1\n", "node 3 serves it as well");

  const ran = await two.call<{ status_code: number; output: string }>("GET", `/api/v2/devices/${agent.mac}/action/exec/big`);
  assert.equal(ran.status, 200, JSON.stringify(ran.body));
  const log = await three.call<Array<{ output: string; download_url: string }>>("GET", `/api/v2/devices/${agent.mac}/action/log`);
  assert.equal(log.status, 200);
  assert.equal(Buffer.from(log.body[0].output, "base64").toString(), "x".repeat(BIG_OUTPUT), "node 3 reads the output node 1 stored");
  assert.equal(await (await fetch(log.body[0].download_url)).text(), "x".repeat(BIG_OUTPUT));
}

for (const proxy of [false, true]) {
  describe(`three nodes on one S3 store (${proxy ? "proxy links" : "presigned links"})`, () => {
    let s3: TestS3;
    let nodes: TestServer[] = [];
    const agents: Agent[] = [];
    before(async () => {
      s3 = await startS3();
      nodes = await startNodes(await postgres.createDatabase(proxy ? "s3proxy" : "s3presigned"), ["node-1", "node-2", "node-3"], { storage: { driver: "s3", s3: { ...s3.settings, proxy } } });
    });
    after(async () => {
      for (const agent of agents) await agent.stop();
      for (const node of nodes) await node.close();
      await s3?.stop();
    });

    test("a package uploaded on node 1 downloads through nodes 2 and 3", async () => {
      await packageThroughEveryNode(nodes, proxy ? 5 : 3, (node) => (proxy ? `${node.url}/local_storage/` : `${s3.endpoint}/${s3.bucket}/`));
    });

    test("a file fetched through node 2 from node 1's device, and an action output stored as a file, are served by node 3", async () => {
      await deviceFilesThroughOtherNodes(nodes, agents);
    });
  });
}

describe("three nodes sharing one storage.local.dir", () => {
  const nodes: TestServer[] = [];
  const agents: Agent[] = [];
  const shared = tempDir("labgate-shared-");
  let staged: string;
  before(async () => {
    const url = await postgres.createDatabase("localshared");
    const patch = { storage: { driver: "local", local: { dir: shared } } };
    await startNodes(url, ["node-1"], patch, nodes);
    // An upload node 1 is staging while the others start.
    staged = join(shared, ".tmp", "node-1", "an-upload-under-way");
    writeFileSync(staged, "half");
    await startNodes(url, ["node-2", "node-3"], patch, nodes);
  });
  after(async () => {
    for (const agent of agents) await agent.stop();
    for (const node of nodes) await node.close();
  });

  test("a node's start leaves the other nodes' staged uploads; a package uploaded on node 1 downloads through nodes 2 and 3", async () => {
    assert.ok(existsSync(staged), "node 2 and 3 left node 1's staged upload alone");
    await packageThroughEveryNode(nodes, 9, (node) => `${node.url}/local_storage/`);
  });

  test("a file fetched through node 2 from node 1's device, and an action output stored as a file, are served by node 3", async () => {
    await deviceFilesThroughOtherNodes(nodes, agents);
  });
});
