import assert from "node:assert/strict";
import { randomBytes, createHash } from "node:crypto";
import { execFileSync } from "node:child_process";
import { subscribe, unsubscribe } from "node:diagnostics_channel";
import type { ClientRequest } from "node:http";
import { mkdirSync, readdirSync, symlinkSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { after, test } from "node:test";
import { useTestServer } from "../helpers/server.ts";
import { approveAgent, approvedThenStopped, FAST_SERVER, rawDevice, startAgent, untilConnected } from "./helpers/agents.ts";
import type { Agent } from "../../src/agent/agent.ts";

let agent: Agent & { dir: string };
let id: number;

after(async () => {
  await agent?.stop();
});
const server = useTestServer(FAST_SERVER, async (server) => {
  agent = startAgent(server);
  id = await approveAgent(server, agent);
  await untilConnected(server, id);
});

const base = () => agent.config.file_base_dir;
const fetchFile = (file: unknown, deviceId = id, token = server.adminToken) =>
  server.request(`/api/v2/devices/${deviceId}/fs/file`, { method: "POST", token, json: { file } });
const partsLeft = () => readdirSync(join(server.dataDir, "multipart", "parts"));
const sha = (data: Buffer) => createHash("sha256").update(data).digest("hex");

test("a small file and an empty file are fetched from the device", async () => {
  writeFileSync(join(base(), "small.log"), "line 1\nline 2\n");
  writeFileSync(join(base(), "empty.log"), "");
  let res = await fetchFile(join(base(), "small.log"));
  assert.equal(res.status, 200);
  let body = (await res.json()) as { status: number; url: string };
  assert.equal(body.status, 0);
  assert.match(body.url, /^http:\/\/127\.0\.0\.1:\d+\/local_storage_multipart\/multipart\/svc\.downloads\/[0-9a-f-]{36}\?expires=\d+&signature=/);
  const download = await fetch(body.url);
  assert.equal(download.status, 200);
  assert.equal(await download.text(), "line 1\nline 2\n");

  res = await fetchFile(join(base(), "empty.log"));
  body = (await res.json()) as { status: number; url: string };
  assert.equal(body.status, 0, "an empty file is a file");
  const empty = await fetch(body.url);
  assert.deepEqual([empty.status, empty.headers.get("content-length"), await empty.text()], [200, "0", ""]);
  assert.deepEqual(partsLeft(), []);
});

test("a file larger than one part (>10 MiB) arrives in parts, is assembled and the parts are removed", async () => {
  const data = randomBytes(12 * 1024 * 1024 + 123);
  writeFileSync(join(base(), "big.bin"), data);
  // The agent's requests (node:http, in this process) as Node reports them.
  const puts: string[] = [];
  const seen = ({ request }: { request: ClientRequest }) => void (request.method === "PUT" && puts.push(`${request.protocol}//${String(request.getHeader("host"))}${request.path}`));
  subscribe("http.client.request.start", seen as (message: unknown) => void);
  let body: { status: number; url: string };
  try {
    const res = await fetchFile(join(base(), "big.bin"));
    body = (await res.json()) as { status: number; url: string };
  } finally {
    unsubscribe("http.client.request.start", seen as (message: unknown) => void);
  }
  assert.equal(body.status, 0);
  assert.equal(puts.length, 2);
  const download = Buffer.from(await (await fetch(body.url)).arrayBuffer());
  assert.equal(download.length, data.length);
  assert.equal(sha(download), sha(data));
  // Range works on the assembled file.
  const part = await fetch(body.url, { headers: { range: "bytes=10-19" } });
  assert.equal(part.status, 206);
  assert.deepEqual(Buffer.from(await part.arrayBuffer()), data.subarray(10, 20));
  assert.deepEqual(partsLeft(), []);

  // Replaying a part upload after the transfer is refused, and nothing is written.
  const replay = await fetch(puts[0], { method: "PUT", body: "evil" });
  assert.equal(replay.status, 404);
  // A forged signature is refused.
  const forged = await fetch(puts[1].replace(/signature=[^&]+/, "signature=" + Buffer.alloc(32).toString("base64url")), { method: "PUT", body: "evil" });
  assert.equal(forged.status, 403);
  const unsigned = await fetch(puts[1].split("?")[0], { method: "PUT", body: "evil" });
  assert.equal(unsigned.status, 403);
  assert.deepEqual(partsLeft(), []);
});

test("a missing file, a directory, and paths outside the agent's base dir answer status 1", async () => {
  writeFileSync(join(agent.dir, "secret.txt"), "outside");
  mkdirSync(join(base(), "sub"), { recursive: true });
  symlinkSync(join(agent.dir, "secret.txt"), join(base(), "link.txt"));
  // A directory inside that is a symlink to outside, and a FIFO (a reader would block on it).
  symlinkSync(agent.dir, join(base(), "outdir"));
  execFileSync("mkfifo", [join(base(), "fifo")]);
  const outside = [join(agent.dir, "secret.txt"), `${base()}/../secret.txt`, join(base(), "link.txt"), join(base(), "outdir", "secret.txt"), "/etc/passwd"];
  for (const file of [join(base(), "missing.log"), join(base(), "sub"), join(base(), "fifo"), ...outside]) {
    const res = await fetchFile(file);
    assert.equal(res.status, 200, file);
    assert.deepEqual(await res.json(), { status: 1, url: "" }, file);
  }
});

test("bad requests, unknown and offline devices, permissions", async () => {
  for (const body of [{}, { file: 1 }, { file: "relative/path" }, { file: "/x", extra: true }]) {
    const res = await server.request(`/api/v2/devices/${id}/fs/file`, { method: "POST", token: server.adminToken, json: body });
    assert.equal(res.status, 400, JSON.stringify(body));
  }
  assert.equal((await fetchFile("/x", 99999)).status, 404);
  const user = server.token([], "bob");
  assert.equal((await fetchFile(join(base(), "small.log"), id, user)).status, 404);
  assert.equal((await server.request(`/api/v2/devices/${id}/fs/file`, { method: "POST", json: { file: "/x" } })).status, 401);
  const other = startAgent(server);
  const otherId = await approvedThenStopped(server, other);
  assert.equal((await fetchFile("/x", otherId)).status, 409);
});

test("with a hand-driven device: single-use parts, oversize parts, ETag mismatch and silence (504)", async () => {
  const other = startAgent(server);
  const otherId = await approvedThenStopped(server, other);
  const dev = await rawDevice(server, other);
  try {
    dev.ws.send(JSON.stringify({ method: "capability_report", capabilities: { file_transfer: true } }));
    // 1. A part may be uploaded once; a part larger than the part size is refused; wrong ETags -> status 1.
    let pending = fetchFile("/data/x.bin", otherId);
    let probe = await dev.next("fs_file_probe");
    dev.ws.send(JSON.stringify({ method: "fs_file_probe_reply", id: probe.id, status: 0, size: 5 }));
    let download = await dev.next("fs_file_download");
    const urls = download.upload_urls as string[];
    assert.equal(urls.length, 1);
    assert.equal(download.part_size, 10 * 1024 * 1024);
    let put = await fetch(urls[0], { method: "PUT", body: "hello" });
    assert.equal(put.status, 200);
    const etag = put.headers.get("etag");
    assert.match(etag!, /_part0$/);
    put = await fetch(urls[0], { method: "PUT", body: "again" });
    assert.equal(put.status, 409);
    dev.ws.send(JSON.stringify({ method: "fs_file_download_reply", id: download.id, status: 0, etags: ["wrong"] }));
    assert.deepEqual(await (await pending).json(), { status: 1, url: "" });
    assert.deepEqual(partsLeft(), []);

    // 2. Correct ETags: assembled.
    pending = fetchFile("/data/y.bin", otherId);
    probe = await dev.next("fs_file_probe");
    dev.ws.send(JSON.stringify({ method: "fs_file_probe_reply", id: probe.id, status: 0, size: 5 }));
    download = await dev.next("fs_file_download");
    const oversize = await fetch((download.upload_urls as string[])[0], { method: "PUT", body: Buffer.alloc(10 * 1024 * 1024 + 1) });
    assert.equal(oversize.status, 413);
    put = await fetch((download.upload_urls as string[])[0], { method: "PUT", body: "world" });
    assert.equal(put.status, 200);
    dev.ws.send(JSON.stringify({ method: "fs_file_download_reply", id: download.id, status: 0, etags: [put.headers.get("etag")] }));
    const done = (await (await pending).json()) as { status: number; url: string };
    assert.equal(done.status, 0);
    assert.equal(await (await fetch(done.url)).text(), "world");

    // 3. A device that never answers the probe: 504 after the reply timeout.
    const silent = await fetchFile("/data/z.bin", otherId);
    assert.equal(silent.status, 504);
  } finally {
    dev.ws.close();
  }
});

test("the multipart routes are contained: no traversal, no parts, no unsigned reads", async () => {
  writeFileSync(join(base(), "contained.log"), "x");
  const { url } = (await (await fetchFile(join(base(), "contained.log"))).json()) as { url: string };
  const query = url.slice(url.indexOf("?"));
  for (const path of ["..%2Flabgate.db", "../labgate.db", "%E0%A4%A", "parts/x", "svc.downloads/../../labgate.db", "svc.downloads/not-a-uuid"]) {
    const res = await fetch(`${server.url}/local_storage_multipart/multipart/${path}${query}`);
    assert.ok(res.status === 403 || res.status === 404, `${path}: ${res.status}`);
  }
  assert.equal((await fetch(url.split("?")[0])).status, 403);
  const bad = await fetch(`${server.url}/local_storage_multipart/parts/..%2F..%2Fx?expires=1&signature=x`, { method: "PUT", body: "x" });
  assert.ok(bad.status === 403 || bad.status === 404, String(bad.status));
});
