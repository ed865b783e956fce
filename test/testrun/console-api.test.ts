/*
 * Issue 12, the API the console's test-run pages need: the live run stream, filters and paging
 * of the run list, deleting a run, report counts, config sizes and problems with their line, and
 * lab nodes (state checked now, a trigger on several nodes, configs pushed to nodes, their runs
 * read through the gateway).
 */
import assert from "node:assert/strict";
import { once } from "node:events";
import { existsSync } from "node:fs";
import { createServer } from "node:http";
import type { AddressInfo } from "node:net";
import { join } from "node:path";
import { after, describe, test } from "node:test";
import { removeDir, startTestServer, useTestServer } from "../helpers/server.ts";
import { openStream } from "../helpers/events.ts";
import { getRun, serverErrors, trigger, uploadConfig, waitRun, waitTrigger, type RunObject } from "./run-helpers.ts";

const QUICK = "tests:\n  g:\n  - exec:\n      name: quick\n      command: 'echo hi > out.txt'\n";
const SLOW = "tests:\n  g:\n  - sleep:\n      seconds: 30\n";
const MIXED = "tests:\n  g:\n  - exec: {name: ok, command: 'true'}\n  - exec: {name: bad, command: 'false'}\n  - exec: {name: ok2, command: 'true'}\n";

const json = async <T>(res: Response, status = 200): Promise<T> => {
  const text = await res.text();
  assert.equal(res.status, status, text);
  return JSON.parse(text) as T;
};

describe("the console's test-run API on one server", () => {
  let errors: string[];
  let ro: string;
  const server = useTestServer({}, async (server) => {
    errors = serverErrors(server);
    ro = server.token(["tests_ro"], "reader");
    await uploadConfig(server, "quick.yml", QUICK);
    await uploadConfig(server, "slow.yml", SLOW);
    await uploadConfig(server, "mixed.yml", MIXED);
  });
  after(() => {
    assert.deepEqual(errors, []);
  });

  test("the run stream sends every state change of a run, to a read-only token too, and a deletion", async () => {
    const stream = await openStream(server, ro, "/api/v1/test-runs/stream");
    assert.equal(stream.status, 200);
    try {
      const run = await trigger(server, { config_name: "quick.yml" });
      await stream.next((e) => e.event === "run" && e.data.id === run.id && e.data.status === "finished", 15_000, "the finished event");
      const seen = stream.events.filter((e) => e.event === "run" && e.data.id === run.id).map((e) => e.data.status);
      assert.deepEqual([...new Set(seen)], ["pending", "running", "finished"]);
      // Each event is the run object as GET /test-runs/{id} answers it.
      assert.deepEqual(stream.events.filter((e) => e.data.id === run.id).pop()?.data, await getRun(server, run.id));
      assert.ok(stream.events.some((e) => e.event === "trigger" && e.data.trigger_id === run.trigger_id), "the trigger's changes too");

      assert.equal((await server.request(`/api/v1/test-runs/${run.id}/record`, { method: "DELETE", token: server.adminToken })).status, 200);
      await stream.next((e) => e.event === "run-deleted" && e.data.id === run.id, 15_000, "the deletion event");
    } finally {
      stream.close();
    }
    assert.equal((await openStream(server, server.token(["upload_single_file"]), "/api/v1/test-runs/stream")).status, 403);
    assert.equal((await fetch(`${server.url}/api/v1/test-runs/stream`)).status, 401);
  });

  test("the run stream ends when its token is revoked", async () => {
    const token = server.token(["tests_ro"], "leaver");
    const stream = await openStream(server, token, "/api/v1/test-runs/stream");
    const who = await json<{ id: string }>(await server.request("/api/whoami", { token }));
    assert.equal((await server.request("/api/v1/tokens/revoke", { method: "POST", json: { id: who.id }, token: server.adminToken })).status, 200);
    assert.match(await stream.ended, /^: token has been revoked$/m);
  });

  test("the run list filters by config and status and pages newest first; without parameters it is as before", async () => {
    const a = await trigger(server, { config_name: "quick.yml" });
    const b = await trigger(server, { config_name: "mixed.yml" });
    const c = await trigger(server, { config_name: "quick.yml" });
    for (const run of [a, b, c]) await waitRun(server, run.id);

    const plain = await server.request("/api/v1/test-runs", { token: ro });
    assert.equal(plain.headers.get("x-total-count"), null);
    const all = await json<RunObject[]>(plain);
    assert.deepEqual(all.slice(-3).map((r) => r.id), [a.id, b.id, c.id], "creation order, oldest first (6.8)");

    const page = await server.request("/api/v1/test-runs?config_name=quick.yml&order=desc&limit=1", { token: ro });
    assert.equal(page.headers.get("x-total-count"), String(all.filter((r) => r.config_name === "quick.yml").length));
    assert.deepEqual((await json<RunObject[]>(page)).map((r) => r.id), [c.id]);
    const second = await json<RunObject[]>(await server.request("/api/v1/test-runs?config_name=quick.yml&order=desc&limit=1&offset=1", { token: ro }));
    assert.deepEqual(second.map((r) => r.id), [a.id]);

    const failed = await server.request("/api/v1/test-runs?status=failed,aborted", { token: ro });
    assert.deepEqual((await json<RunObject[]>(failed)).map((r) => r.id), [b.id]);
    assert.equal(failed.headers.get("x-total-count"), "1");
    const byTrigger = await json<RunObject[]>(await server.request(`/api/v1/test-runs?trigger_id=${b.trigger_id}`, { token: ro }));
    assert.deepEqual(byTrigger.map((r) => r.id), [b.id]);

    for (const [query, message] of [
      ["status=done", /unknown status "done"/],
      ["limit=0", /"limit" must be an integer from 1 to 1000/],
      ["order=up", /"order" must be asc or desc/],
    ] as const) {
      const res = await server.request(`/api/v1/test-runs?${query}`, { token: ro });
      assert.match((await json<{ error: string }>(res, 400)).error, message);
    }
  });

  test("each run's cases by status are kept when it ends and answered in the list and the run object; a run that ended before they were kept has none, not zeros", async () => {
    const mixed = await waitRun(server, (await trigger(server, { config_name: "mixed.yml" })).id);
    assert.equal(mixed.status, "failed");
    assert.deepEqual(mixed.counts, { passed: 2, failed: 1, skipped: 0 });
    const quick = await waitRun(server, (await trigger(server, { config_name: "quick.yml" })).id);
    assert.deepEqual(quick.counts, { passed: 1, failed: 0, skipped: 0 });
    const listed = await json<RunObject[]>(await server.request("/api/v1/test-runs?order=desc&limit=2", { token: ro }));
    assert.deepEqual(listed.map((r) => [r.id, r.counts]), [[quick.id, quick.counts], [mixed.id, mixed.counts]]);
    assert.deepEqual((await json<RunObject[]>(await server.request("/api/v1/test-runs", { token: ro }))).find((r) => r.id === mixed.id)?.counts, mixed.counts);

    // What migration 034 leaves of a run that ended before it: the counts NULL.
    await server.db.run("UPDATE testrun_runs SET passed = NULL, failed = NULL, skipped = NULL WHERE id = ?", [quick.id]);
    const before = await getRun(server, quick.id);
    assert.equal(before.status, "finished");
    assert.equal("counts" in before, false, JSON.stringify(before));

    // Aborted before it ran: no report, no counts.
    const slow = await trigger(server, { config_name: "slow.yml" });
    const queued = await trigger(server, { config_name: "slow.yml" });
    assert.equal((await server.request(`/api/v1/test-runs/${queued.id}`, { method: "DELETE", token: server.adminToken })).status, 200);
    assert.equal((await server.request(`/api/v1/test-runs/${slow.id}`, { method: "DELETE", token: server.adminToken })).status, 200);
    const aborted = await waitRun(server, queued.id);
    assert.equal(aborted.status, "aborted");
    assert.equal("counts" in aborted, false);
    await waitRun(server, slow.id);
  });

  test("report counts, and deleting a run removes its record, report and artifacts; a running one is refused", async () => {
    const run = await waitRun(server, (await trigger(server, { config_name: "mixed.yml" })).id);
    assert.deepEqual(await json(await server.request(`/api/v1/test-runs/${run.id}/report/summary`, { token: ro })), {
      total: 3,
      passed: 2,
      failed: 1,
      skipped: 0,
      columns: ["device name", "test name", "module", "duration", "message", "status"],
    });

    const slow = await trigger(server, { config_name: "slow.yml" });
    await waitRun(server, slow.id, (r) => r.status === "running");
    assert.match((await json<{ error: string }>(await server.request(`/api/v1/test-runs/${slow.id}/record`, { method: "DELETE", token: server.adminToken }), 409)).error, /abort it first/);
    assert.equal((await server.request(`/api/v1/test-runs/${slow.id}/report/summary`, { token: ro })).status, 404, "not finished");
    assert.equal((await server.request(`/api/v1/test-runs/${slow.id}`, { method: "DELETE", token: server.adminToken })).status, 200);
    await waitRun(server, slow.id);

    const quick = await waitRun(server, (await trigger(server, { config_name: "quick.yml" })).id);
    const artifacts = join(server.dataDir, "testrun", "artifacts", quick.id);
    const report = join(server.dataDir, "testrun", "reports", `${quick.id}.csv`);
    assert.ok(existsSync(join(artifacts, "out.txt")) && existsSync(report));
    assert.equal((await server.request(`/api/v1/test-runs/${quick.id}/record`, { method: "DELETE", token: ro })).status, 403, "tests_ro may not delete");
    assert.deepEqual(await json(await server.request(`/api/v1/test-runs/${quick.id}/record`, { method: "DELETE", token: server.adminToken })), {});
    assert.equal(existsSync(artifacts) || existsSync(report), false, "report and artifacts are gone");
    assert.equal((await server.request(`/api/v1/test-runs/${quick.id}`, { token: ro })).status, 404);
    assert.equal((await server.request(`/api/v1/test-runs/${quick.id}/record`, { method: "DELETE", token: server.adminToken })).status, 404);
    const trig = await server.request(`/api/v1/test-runs/trigger/${quick.trigger_id}`, { token: ro });
    assert.equal(trig.status, 404, "its trigger, left without runs, is gone too");
  });

  test("config problems carry their line: invalid YAML at upload, an include cycle or undefined alias when used", async () => {
    const form = new FormData();
    form.append("file", new Blob(["tests:\n  g:\n    - exec: {command: a: b}\n"]), "bad.yml");
    const refused = await json<{ error: string; line: number }>(await server.request("/api/v1/configs", { method: "POST", body: form, token: server.adminToken }), 400);
    assert.match(refused.error, /^invalid YAML: .*\(line 3\)$/);
    assert.equal(refused.line, 3);

    await uploadConfig(server, "cycle-a.yml", "# a\nincludes:\n  - cycle-b.yml\n");
    await uploadConfig(server, "cycle-b.yml", "tests: {}\n\nincludes:\n  - cycle-a.yml\n");
    const cycle = await json<Record<string, unknown>>(await server.request("/api/v1/test-runs", { method: "POST", json: { config_name: "cycle-a.yml" }, token: server.adminToken }), 422);
    assert.deepEqual(cycle, { error: "include cycle: cycle-a.yml -> cycle-b.yml -> cycle-a.yml", file: "cycle-b.yml", line: 4 });
    await uploadConfig(server, "lost.yml", "tests: {}\nincludes: [quick.yml, other.yml]\n");
    const lost = await json<Record<string, unknown>>(await server.request("/api/v1/configs/lost.yml/override-hints", { token: ro }), 422);
    assert.deepEqual(lost, { error: "Failed to parse file: lost.yml: included config 'other.yml' not found", file: "lost.yml", line: 2 });

    await uploadConfig(server, "alias.yml", "tests:\n  g:\n  - exec: *nowhere\n");
    const alias = await json<Record<string, unknown>>(await server.request("/api/v1/configs/alias.yml/test-suites", { token: ro }), 422);
    assert.deepEqual(alias, { error: "Failed to parse file: alias.yml line 3: found undefined alias 'nowhere'", file: "alias.yml", line: 3 });
  });

  test("the config list with sizes on request", async () => {
    const list = await json<Array<{ name: string; size: number }>>(await server.request("/api/v1/configs?details=true", { token: ro }));
    assert.equal(list.find((c) => c.name === "quick.yml")?.size, Buffer.byteLength(QUICK));
    const plain = await json<Array<Record<string, unknown>>>(await server.request("/api/v1/configs", { token: ro }));
    assert.deepEqual(Object.keys(plain[0]), ["name", "created"]);
  });
});

describe("lab nodes through the gateway: state, several nodes at once, configs pushed, runs read", () => {
  let ro: string;
  const node = useTestServer();
  const gateway = useTestServer(
    () => ({
      test_server: { nodes: { node1: { url: node.url, token: node.adminToken }, locked: { url: node.url.replace("127.0.0.1", "localhost") }, dead: { url: "http://127.0.0.1:1" } } } as never,
    }),
    async (gateway) => {
      ro = gateway.token(["tests_ro"], "reader");
    },
  );

  test("node state: this gateway first, then each node checked now", async () => {
    const list = await json<Array<Record<string, unknown>>>(await gateway.request("/api/v1/test-nodes/status", { token: ro }));
    const version = gateway.server.ctx.version;
    assert.deepEqual(list[0], { name: "Local device", url: "", local: true, reachable: true, version, error: "", latency_ms: 0 });
    assert.deepEqual(
      list.slice(1).map((n) => [n.name, n.reachable, n.version]),
      [
        ["node1", true, version],
        ["locked", false, version],
        ["dead", false, ""],
      ],
    );
    assert.match(String(list[2].error), /^HTTP 401: /, "the node's refusal (no token)");
    assert.match(String(list[3].error), /^(bad port|ECONNREFUSED)$/);
    // The reference-compatible list is unchanged.
    assert.deepEqual(
      (await json<Array<Record<string, unknown>>>(await gateway.request("/api/v1/test-nodes", { token: ro }))).map((n) => Object.keys(n)),
      [["name", "url"], ["name", "url"], ["name", "url"]],
    );
  });

  test("a config is pushed with its includes; a trigger on several nodes runs it on each; their runs are read through the gateway", async () => {
    await uploadConfig(gateway, "base.yml", "tests:\n  shared:\n  - exec: {name: from-include, command: 'echo remote > r.txt'}\n");
    await uploadConfig(gateway, "main.yml", "includes: [base.yml]\ntests:\n  own:\n  - exec: {name: own, command: 'true'}\ntest-suites:\n  just-own: {tests: [own]}\n");
    const pushed = await json(await gateway.request("/api/v1/configs/main.yml/push", { method: "POST", json: { nodes: ["node1", "dead"] }, token: gateway.adminToken }));
    assert.deepEqual((pushed as Array<Record<string, unknown>>)[0], { node: "node1", pushed: ["main.yml", "base.yml"], error: "" });
    assert.match(String((pushed as Array<Record<string, unknown>>)[1].error), /^main\.yml: unreachable: (bad port|ECONNREFUSED)$/);
    assert.equal((await gateway.request("/api/v1/configs/main.yml/push", { method: "POST", json: { nodes: ["ghost"] }, token: gateway.adminToken })).status, 404);
    assert.equal((await gateway.request("/api/v1/configs/main.yml/push", { method: "POST", json: { nodes: ["node1"] }, token: ro })).status, 403);
    assert.equal((await node.request("/api/v1/configs/base.yml", { token: node.adminToken })).status, 200);

    const res = await gateway.request("/api/v1/test-runs", { method: "POST", json: { config_name: "main.yml", nodes: ["Local device", "node1"], overrides: "tests.shared.0.exec.name: renamed" }, token: gateway.adminToken });
    assert.equal(await res.text(), "{}\n");
    const id = res.headers.get("x-trigger-id")!;
    const t = await waitTrigger(gateway, id);
    assert.equal(t?.status, "finished", t?.error);
    assert.deepEqual(t!.runs.map((r) => [r.machine_target, r.status]), [["localhost", "finished"]]);
    assert.equal(t!.remote_runs.length, 1);
    const remote = t!.remote_runs[0];
    assert.equal(remote.machine, "node1");

    const through = `/api/v1/test-nodes/node1/test-runs/${remote.run_id}`;
    const run = await json<RunObject>(await gateway.request(through, { token: ro }));
    assert.deepEqual([run.status, run.trigger_id, run.machine_target], ["finished", id, "localhost"]);
    const rows = await json<Array<Record<string, string>>>(await gateway.request(`${through}/report?format=json`, { token: ro }));
    assert.deepEqual(rows.map((r) => [r["device name"], r.status]), [["renamed", "passed"], ["own", "passed"]], "includes first, the override applied on the node");
    assert.deepEqual((await json<Array<{ name: string }>>(await gateway.request(`${through}/artifacts`, { token: ro }))).map((a) => a.name), ["r.txt"]);
    const preview = await gateway.request(`${through}/artifacts/r.txt?preview=true`, { token: ro });
    assert.equal(preview.status, 200);
    assert.match(preview.headers.get("content-disposition") ?? "", /^inline/);
    assert.equal(await preview.text(), "remote\n");

    assert.match((await json<{ error: string }>(await gateway.request("/api/v1/test-nodes/node1/test-runs/nope", { token: ro }), 404)).error, /^node 'node1': Run not found/);
    assert.equal((await gateway.request("/api/v1/test-nodes/dead/test-runs/x", { token: ro })).status, 502);
    assert.equal((await gateway.request("/api/v1/test-nodes/locked/test-runs/x", { token: ro })).status, 502, "a node refusing the gateway is not the caller's 401");
    assert.equal((await gateway.request("/api/v1/test-nodes/ghost/test-runs/x", { token: ro })).status, 404);
    assert.equal((await fetch(`${gateway.url}${through}`)).status, 401);
  });

  test("a node's own refusal with a status labgate never sends (a protoplaster node's 410) reaches the caller as it is", async () => {
    const other = createServer((_req, res) => void res.writeHead(410, { "content-type": "application/json" }).end('{"error": "Run expired"}')).listen(0, "127.0.0.1");
    await once(other, "listening");
    const viaOther = await startTestServer({ test_server: { nodes: { old: { url: `http://127.0.0.1:${(other.address() as AddressInfo).port}` } } } as never });
    try {
      const res = await viaOther.request("/api/v1/test-nodes/old/test-runs/x", { token: viaOther.adminToken });
      assert.deepEqual([res.status, await res.json()], [410, { error: "node 'old': Run expired" }]);
    } finally {
      await viaOther.close();
      removeDir(viaOther.dataDir);
      other.close();
    }
  });

  test("a node that never answers is 'no answer in time' once the check's deadline passes on the gateway's clock", async () => {
    const silent = createServer(() => {}).listen(0, "127.0.0.1");
    await once(silent, "listening");
    const viaSilent = await startTestServer({ test_server: { nodes: { mute: { url: `http://127.0.0.1:${(silent.address() as AddressInfo).port}` } } } as never });
    try {
      const answer = viaSilent.request("/api/v1/test-nodes/status", { token: viaSilent.adminToken });
      await viaSilent.clock.sleepOf(3000);
      viaSilent.clock.advance(3000);
      const list = await json<Array<Record<string, unknown>>>(await answer);
      assert.deepEqual([list[1].name, list[1].reachable, list[1].error], ["mute", false, "no answer in time"]);
    } finally {
      await viaSilent.close();
      removeDir(viaSilent.dataDir);
      silent.closeAllConnections();
      silent.close();
    }
  });

  test("a trigger on nodes: unknown names, a machine target or a config with machines are refused", async () => {
    await uploadConfig(gateway, "placed.yml", "tests:\n  g:\n  - exec: {command: 'true', machines: node1}\n");
    for (const [body, message] of [
      [{ config_name: "main.yml", nodes: ["ghost"] }, /unknown node 'ghost'/],
      [{ config_name: "main.yml", nodes: ["node1"], machine_target: "node1" }, /either nodes or machine_target/],
      [{ config_name: "placed.yml", nodes: ["node1"] }, /assigns its entries to machines/],
      [{ config_name: "main.yml", nodes: "node1" }, /nodes must be a list of node names/],
    ] as const) {
      const res = await gateway.request("/api/v1/test-runs", { method: "POST", json: body, token: gateway.adminToken });
      assert.match((await json<{ error: string }>(res, 400)).error, message);
    }
    // Only this gateway: an ordinary local run.
    const local = await trigger(gateway, { config_name: "main.yml", nodes: ["Local device"], test_suite_name: "just-own" });
    assert.equal((await waitRun(gateway, local.id)).status, "finished");
  });
});
