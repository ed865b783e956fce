// Every file the server answers with (package downloads, device files, configs, reports,
// artifacts) goes through one sender: byte ranges (206, 416) and validators (ETag, 304) on each.
import assert from "node:assert/strict";
import { after, describe, test } from "node:test";
import { useTestServer } from "../helpers/server.ts";
import { approveAgent, FAST_SERVER, startAgent, untilConnected } from "../update/helpers/agents.ts";
import { uploadOk } from "../update/helpers/packages.ts";
import { trigger, uploadConfig, waitRun } from "../testrun/run-helpers.ts";
import type { Agent } from "../../src/agent/agent.ts";

type Get = (headers?: Record<string, string>, method?: string) => Promise<Response>;

/** The whole file, a range, a range past the end, If-None-Match, If-Range with another validator, HEAD. */
async function checkFileAnswer(get: Get, bytes: Buffer): Promise<void> {
  const whole = await get();
  assert.equal(whole.status, 200);
  assert.equal(whole.headers.get("accept-ranges"), "bytes");
  assert.equal(whole.headers.get("content-length"), String(bytes.length));
  const etag = whole.headers.get("etag");
  assert.match(etag ?? "", /^"[0-9a-f]+-[0-9a-f]+"$/);
  assert.ok(whole.headers.get("last-modified"));
  assert.deepEqual(Buffer.from(await whole.arrayBuffer()), bytes);

  const part = await get({ range: "bytes=1-3" });
  assert.equal(part.status, 206);
  assert.equal(part.headers.get("content-range"), `bytes 1-3/${bytes.length}`);
  assert.deepEqual(Buffer.from(await part.arrayBuffer()), bytes.subarray(1, 4));
  const tail = await get({ range: "bytes=-2" });
  assert.equal(tail.status, 206);
  assert.deepEqual(Buffer.from(await tail.arrayBuffer()), bytes.subarray(-2));

  const past = await get({ range: `bytes=${bytes.length}-` });
  assert.equal(past.status, 416);
  assert.equal(past.headers.get("content-range"), `bytes */${bytes.length}`);
  assert.match(((await past.json()) as { error: string }).error, /range not satisfiable/);

  const unchanged = await get({ "if-none-match": etag! });
  assert.equal(unchanged.status, 304);
  assert.equal(unchanged.headers.get("etag"), etag);
  assert.equal(await unchanged.text(), "");
  const other = await get({ "if-none-match": '"other"' });
  assert.equal(other.status, 200);
  await other.arrayBuffer();

  // A range against a validator that no longer holds: the whole file instead.
  const stale = await get({ range: "bytes=1-3", "if-range": '"stale"' });
  assert.equal(stale.status, 200);
  assert.deepEqual(Buffer.from(await stale.arrayBuffer()), bytes);

  const head = await get({}, "HEAD");
  assert.equal(head.status, 200);
  assert.equal(head.headers.get("content-length"), String(bytes.length));
  assert.equal(head.headers.get("etag"), etag);
}

describe("file answers: Range and ETag on every kind", () => {
  let agent: Agent;
  const authed = (path: string): Get => (headers = {}, method = "GET") => server.request(path, { method, headers, token: server.adminToken });
  const signed = (url: string): Get => (headers = {}, method = "GET") => fetch(url, { method, headers });

  after(async () => {
    await agent?.stop();
  });
  const server = useTestServer({ ...FAST_SERVER, test_server: { compat_modules: true } as never }, async (server) => {
    agent = startAgent(server, { actions: [{ id: "say", name: "Say", command: ["printf", "%s", "output of an action"], timeout: 5 }] });
    await untilConnected(server, await approveAgent(server, agent));
  });

  test("a package download (signed link)", async () => {
    const bytes = Buffer.from("package bytes, a few of them");
    const pkg = await uploadOk(server, { token: server.adminToken, file: bytes });
    const { body } = await server.call<{ download_url: string }>("GET", `/api/v1/packages/${pkg.id}/download`);
    await checkFileAnswer(signed(body.download_url), bytes);
  });

  test("a device file (an action's output behind its signed link)", async () => {
    assert.equal((await server.call("GET", `/api/v2/devices/${agent.mac}/action/exec/say`)).status, 200);
    const { body } = await server.call<Array<{ download_url: string }>>("GET", `/api/v2/devices/${agent.mac}/action/log`);
    await checkFileAnswer(signed(body[0].download_url), Buffer.from("output of an action"));
  });

  test("a config download, a run's CSV report and an artifact; the JSON report has a validator too", async () => {
    const yaml = "tests:\n  g:\n  - exec:\n      command: printf 'artifact bytes' > out.txt\n";
    await uploadConfig(server, "files.yml", yaml);
    await checkFileAnswer(authed("/api/v1/configs/files.yml/file"), Buffer.from(yaml));

    const run = await waitRun(server, (await trigger(server, { config_name: "files.yml" })).id);
    assert.equal(run.status, "finished", JSON.stringify(run));
    const csv = await server.request(`/api/v1/test-runs/${run.id}/report`, { token: server.adminToken });
    await checkFileAnswer(authed(`/api/v1/test-runs/${run.id}/report`), Buffer.from(await csv.arrayBuffer()));
    await checkFileAnswer(authed(`/api/v1/test-runs/${run.id}/artifacts/out.txt`), Buffer.from("artifact bytes"));

    const json = authed(`/api/v1/test-runs/${run.id}/report?format=json`);
    const first = await json();
    assert.equal(first.status, 200);
    const etag = first.headers.get("etag");
    assert.match(etag ?? "", /-json"$/);
    assert.notEqual(etag, csv.headers.get("etag"));
    assert.equal(((await first.json()) as unknown[]).length, 1);
    assert.equal((await json({ "if-none-match": etag! })).status, 304);
  });
});
