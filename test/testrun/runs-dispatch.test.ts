import assert from "node:assert/strict";
import { createServer } from "node:http";
import type { AddressInfo } from "node:net";
import { after, describe, test } from "node:test";
import { openStream } from "../helpers/events.ts";
import { startTestServer, useTestServer, waitFor } from "../helpers/server.ts";
import { reportRows, serverErrors, trigger, uploadConfig, waitRun, waitTrigger as waitTriggerOn, type RunObject } from "./run-helpers.ts";

const MULTI = `
tests:
  local_group:
  - exec:
      name: local-a
      command: "true"
  remote_group:
    machines: node1
    tests:
    - exec:
        name: remote-b
        command: "true"
  mixed:
  - exec:
      name: local-c
      command: "true"
  - exec:
      name: remote-d
      command: "true"
      machines: [node1]
`;

const ABORTABLE = `
tests:
  remote_sleep:
  - sleep:
      seconds: 30
      machines: node1
  later:
  - exec:
      name: never
      command: "true"
`;

type Trigger = { trigger_id: string; status: string; is_aborted: boolean; error: string; runs: RunObject[]; remote_runs: { machine: string; group: string; run_id: string }[] };

describe("remote dispatch between two labgate servers", () => {
  let nodeErrors: string[] = [];
  let orchErrors: string[] = [];

  const dispatch = async (body: Record<string, unknown>) => {
    const res = await orch.request("/api/v1/test-runs", { method: "POST", json: body, token: orch.adminToken });
    const text = await res.text();
    assert.equal(res.status, 200, text);
    assert.equal(text, "{}\n");
    const id = res.headers.get("x-trigger-id");
    assert.ok(id);
    return id;
  };
  const waitTrigger = (id: string, until = (t: Trigger) => t.status !== "running") => waitTriggerOn(orch, id, until as never) as Promise<Trigger>;
  const nodeRuns = async () => (await (await node.request("/api/v1/test-runs", { token: node.adminToken })).json()) as RunObject[];

  const node = useTestServer({}, async (node) => {
    nodeErrors = serverErrors(node);
  });
  const orch = useTestServer(() => ({ test_server: { nodes: { node1: { url: node.url, token: node.adminToken }, dead: { url: "http://127.0.0.1:1" } } } as never }), async (orch) => {
    orchErrors = serverErrors(orch);
    for (const server of [node, orch]) {
      await uploadConfig(server, "multi.yml", MULTI);
      await uploadConfig(server, "abortable.yml", ABORTABLE);
    }
    await uploadConfig(orch, "local-first.yml", "tests:\n  here:\n  - sleep:\n      seconds: 30\n  there:\n  - exec:\n      command: 'true'\n      machines: node1\n");
    await uploadConfig(node, "local-first.yml", "tests: {}\n");
    const agg = "aggregate_results: true\ncombined_results_dir_prefix: all_\ntests:\n  here:\n  - exec:\n      command: 'echo local > local.txt'\n  there:\n  - exec:\n      command: 'mkdir -p d && echo remote > d/remote.txt'\n      machines: node1\n";
    await uploadConfig(orch, "agg.yml", agg);
    await uploadConfig(node, "agg.yml", agg);
    await uploadConfig(orch, "orch-only.yml", "tests:\n  g:\n  - exec:\n      command: 'true'\n      machines: node1\n");
    await uploadConfig(orch, "ghost.yml", "tests:\n  g:\n  - exec:\n      command: 'true'\n  h:\n  - exec:\n      command: 'true'\n      machines: [ghost]\n");
    await uploadConfig(orch, "dead.yml", "tests:\n  g:\n  - exec:\n      command: 'true'\n      machines: dead\n");
  });
  after(() => {
    assert.deepEqual(nodeErrors, [], "the node answered no request 5xx");
    // The orchestrator's only 500s are the deliberate ones of 11.4 (unknown machine, node not usable).
    assert.deepEqual(orchErrors.filter((line) => !/^POST \/api\/v1\/test-runs 500 /.test(line)), []);
  });

  test("a multi-node selection runs group by group on both servers", async () => {
    const id = await dispatch({ config_name: "multi.yml" });
    const t = await waitTrigger(id);
    assert.equal(t.status, "finished", t.error);
    assert.equal(t.is_aborted, false);
    // The local shares: one run per group with local entries, machine_target "localhost".
    assert.deepEqual(
      t.runs.map((r) => [r.test_suite_name, r.machine_target, r.status]),
      [
        ["local_group", "localhost", "finished"],
        ["mixed", "localhost", "finished"],
      ],
    );
    assert.deepEqual((await reportRows(orch, t.runs[1].id)).map((r) => r["device name"]), ["local-c"]);
    assert.deepEqual(
      t.remote_runs.map((r) => [r.machine, r.group]),
      [
        ["node1", "remote_group"],
        ["node1", "mixed"],
      ],
    );
    // The node ran its shares as node-role runs of the same trigger.
    const remote = (await nodeRuns()).filter((r) => r.trigger_id === id);
    assert.deepEqual(
      remote.map((r) => [r.test_suite_name, r.machine_target, r.status, r.id]),
      t.remote_runs.map((r) => [r.group, "node1", "finished", r.run_id]),
    );
    assert.deepEqual((await reportRows(node, remote[0].id)).map((r) => r["device name"]), ["remote-b"]);
    assert.deepEqual((await reportRows(node, remote[1].id)).map((r) => r["device name"]), ["remote-d"]);
    // Lockstep: the node's first share was created once the orchestrator's first group had ended.
    assert.ok(Date.parse(String(remote[0].created_at)) >= Date.parse(String(t.runs[0].finished_at)));
    const all = (await (await orch.request("/api/v1/test-runs/trigger", { token: orch.adminToken })).json()) as Trigger[];
    assert.ok(all.some((x) => x.trigger_id === id));
  });

  test("an unknown machine, an unreachable node or a config missing on the node: 500 before anything starts", async () => {
    const before = (await (await orch.request("/api/v1/test-runs", { token: orch.adminToken })).json()) as unknown[];
    const post = (config: string) => orch.request("/api/v1/test-runs", { method: "POST", json: { config_name: config }, token: orch.adminToken });
    const ghost = await post("ghost.yml");
    assert.equal(ghost.status, 500);
    assert.deepEqual(await ghost.json(), { error: "Machine 'ghost' not defined in devices list" });
    const dead = await post("dead.yml");
    assert.equal(dead.status, 500);
    assert.match(((await dead.json()) as { error: string }).error, /^Machine 'dead' unreachable: /);
    const missing = await post("orch-only.yml");
    assert.equal(missing.status, 500);
    assert.deepEqual(await missing.json(), { error: "Config 'orch-only.yml' not found on machine 'node1'" });
    const afterList = (await (await orch.request("/api/v1/test-runs", { token: orch.adminToken })).json()) as unknown[];
    assert.equal(afterList.length, before.length);
  });

  test("node role: machine_target selects that machine's share; localhost the local entries", async () => {
    const share = await trigger(node, { config_name: "multi.yml", machine_target: "node1", trigger_id: "given-trigger-1" });
    assert.equal(share.machine_target, "node1");
    assert.equal(share.trigger_id, "given-trigger-1");
    await waitRun(node, share.id);
    assert.deepEqual((await reportRows(node, share.id)).map((r) => r["device name"]), ["remote-b", "remote-d"]);
    const local = await waitRun(node, (await trigger(node, { config_name: "multi.yml", machine_target: "localhost" })).id);
    assert.deepEqual((await reportRows(node, local.id)).map((r) => r["device name"]), ["local-a", "local-c"]);
    const nobody = await waitRun(node, (await trigger(node, { config_name: "multi.yml", machine_target: "node9" })).id);
    assert.equal(nobody.status, "finished");
    assert.deepEqual(await reportRows(node, nobody.id), []);
    const nodes = await (await orch.request("/api/v1/test-nodes", { token: orch.adminToken })).json();
    assert.deepEqual(nodes, [
      { name: "node1", url: node.url },
      { name: "dead", url: "http://127.0.0.1:1" },
    ]);
  });

  test("aborting the trigger stops the remote run and dispatches nothing more", async () => {
    const runs = await openStream(node, node.adminToken, "/api/v1/test-runs/stream");
    const id = await dispatch({ config_name: "abortable.yml" });
    const started = await runs.next((e) => e.event === "run" && e.data.trigger_id === id && e.data.status === "running", 10_000, "the node's run to start");
    runs.close();
    const remoteId = String(started.data.id);
    const res = await orch.request(`/api/v1/test-runs/trigger/${id}`, { method: "DELETE", token: orch.adminToken });
    assert.equal(res.status, 200);
    const remote = await waitRun(node, remoteId);
    assert.equal(remote.status, "aborted");
    const t = await waitTrigger(id);
    assert.equal(t.status, "aborted");
    assert.equal(t.is_aborted, true);
    assert.deepEqual(t.runs, [], "the later local group was never started");
    const again = await orch.request(`/api/v1/test-runs/trigger/${id}`, { method: "DELETE", token: orch.adminToken });
    assert.equal(again.status, 400);
    assert.equal((await orch.request("/api/v1/test-runs/trigger/nope", { token: orch.adminToken })).status, 404);
  });

  test("aborting the local share of a multi-node trigger aborts the trigger", async () => {
    const id = await dispatch({ config_name: "local-first.yml" });
    const t0 = await waitTrigger(id, (t) => t.runs.some((r) => r.status === "running"));
    const res = await orch.request(`/api/v1/test-runs/${t0.runs[0].id}`, { method: "DELETE", token: orch.adminToken });
    assert.equal(res.status, 200);
    const t = await waitTrigger(id);
    assert.equal(t.status, "aborted");
    assert.deepEqual(t.remote_runs, [], "the remote group was never dispatched");
    assert.equal((await nodeRuns()).filter((r) => r.trigger_id === id).length, 0);
  });

  test("aggregate_results collects every run's report and artifacts under the trigger's results", async () => {
    const id = await dispatch({ config_name: "agg.yml" });
    const t = await waitTrigger(id);
    assert.equal(t.status, "finished", t.error);
    const local = t.runs[0].id;
    const remote = t.remote_runs[0].run_id;
    const res = await orch.request(`/api/v1/test-runs/trigger/${id}/results`, { token: orch.adminToken });
    assert.equal(res.status, 200);
    assert.deepEqual(
      ((await res.json()) as { name: string }[]).map((a) => a.name),
      [`local_${local}.csv`, `local_${local}/local.txt`, `remote_node1_${remote}.csv`, `remote_node1_${remote}/d/remote.txt`].sort(),
    );
    const file = await orch.request(`/api/v1/test-runs/trigger/${id}/results/remote_node1_${remote}/d/remote.txt`, { token: orch.adminToken });
    assert.equal(await file.text(), "remote\n");
    const csv = await orch.request(`/api/v1/test-runs/trigger/${id}/results/remote_node1_${remote}.csv`, { token: orch.adminToken });
    assert.match(await csv.text(), /^device name,test name,module,duration,message,status\r\nexec\(mkdir\),exit_code\[test_config0\]/);
    // Nothing outside the results directory is served.
    const missing = await orch.request(`/api/v1/test-runs/trigger/${id}/results/..%2F..%2Fadmin.token`, { token: orch.adminToken });
    assert.equal(missing.status, 404);
  });

  test("a protoplaster node speaks the same node protocol", async () => {
    // A stand-in for a protoplaster server (no auth, bare run objects), as the reference answers.
    const received: { method: string; url: string; auth: string | undefined; body: unknown }[] = [];
    const runs = new Map<string, number>();
    const pp = createServer((req, res) => {
      let text = "";
      req.on("data", (c) => (text += c));
      req.on("end", () => {
        received.push({ method: req.method!, url: req.url!, auth: req.headers.authorization, body: text ? JSON.parse(text) : undefined });
        res.setHeader("content-type", "application/json");
        const url = req.url!;
        if (req.method === "GET" && url === "/api/v1/configs/pp.yml") return res.end(JSON.stringify({ name: "pp.yml", created: "Sat, 21 Nov 2026 07:12:27 +0000" }));
        if (req.method === "POST" && url === "/api/v1/test-runs") {
          const id = `pp-run-${runs.size + 1}`;
          runs.set(id, 0);
          return res.end(JSON.stringify({ id, status: "pending", config_name: "pp.yml", started_at: "", finished_at: "" }));
        }
        const run = /^\/api\/v1\/test-runs\/([^/]+)$/.exec(url);
        if (req.method === "GET" && run && runs.has(run[1])) {
          const polls = runs.get(run[1])! + 1;
          runs.set(run[1], polls);
          return res.end(JSON.stringify({ id: run[1], status: polls > 1 ? "finished" : "running" }));
        }
        res.statusCode = 404;
        res.end(JSON.stringify({ error: "Run not found" }));
      });
    });
    await new Promise<void>((r) => pp.listen(0, "127.0.0.1", r));
    const ppUrl = `http://127.0.0.1:${(pp.address() as AddressInfo).port}`;
    const mixed = await startTestServer({ test_server: { nodes: { pp: { url: ppUrl } } } as never });
    try {
      await uploadConfig(mixed, "pp.yml", "tests:\n  g:\n  - exec:\n      name: on-pp\n      command: 'true'\n      machines: pp\n  h:\n  - exec:\n      name: here\n      command: 'true'\n");
      const res = await mixed.request("/api/v1/test-runs", { method: "POST", json: { config_name: "pp.yml", overrides: "tests.h.0.exec.name: local" }, token: mixed.adminToken });
      assert.equal(res.status, 200, await res.clone().text());
      const id = res.headers.get("x-trigger-id")!;
      const t = (await waitTriggerOn(mixed, id)) as unknown as Trigger;
      assert.equal(t!.status, "finished", t!.error);
      const post = received.find((r) => r.method === "POST")!;
      assert.equal(post.auth, undefined);
      assert.deepEqual(post.body, { config_name: "pp.yml", trigger_id: id, test_suite_name: "g", machine_target: "pp", overrides: "tests.h.0.exec.name: local" });
      assert.deepEqual(t!.remote_runs, [{ machine: "pp", group: "g", run_id: "pp-run-1" }]);
      assert.deepEqual((await reportRows(mixed, t!.runs[0].id)).map((r) => r["device name"]), ["local"]);
    } finally {
      await mixed.close();
      await new Promise((r) => pp.close(r));
    }
  });

  test("a node whose answers never end cannot hold the orchestrator or fill its memory", async () => {
    // Answers every request with 20 MiB of JSON-looking text and then never finishes.
    const sockets = new Set<import("node:net").Socket>();
    const flood = createServer((_req, res) => {
      res.setHeader("content-type", "application/json");
      res.write("[");
      const chunk = Buffer.alloc(1024 * 1024, 0x20);
      for (let i = 0; i < 20; i++) res.write(chunk);
    });
    flood.on("connection", (socket) => (sockets.add(socket), socket.on("close", () => sockets.delete(socket))));
    await new Promise<void>((r) => flood.listen(0, "127.0.0.1", r));
    const floodUrl = `http://127.0.0.1:${(flood.address() as AddressInfo).port}`;
    const o = await startTestServer({ test_server: { nodes: { flood: { url: floodUrl } } } as never });
    try {
      await uploadConfig(o, "flood.yml", "tests:\n  g:\n  - exec:\n      command: 'true'\n      machines: flood\n");
      const res = await o.request("/api/v1/test-runs", { method: "POST", json: { config_name: "flood.yml" }, token: o.adminToken });
      assert.equal(res.status, 200, await res.clone().text());
      const id = res.headers.get("x-trigger-id")!;
      const t = (await waitTriggerOn(o, id)) as unknown as Trigger;
      // The dispatch answer was cut off: no run id, so the trigger fails with a clear error.
      assert.equal(t!.status, "failed");
      assert.match(t!.error, /dispatch of group 'g' to 'flood' failed: HTTP 200/);
    } finally {
      await o.close();
      for (const socket of sockets) socket.destroy();
      await new Promise((r) => flood.close(r));
    }
  });

  test("aborting a trigger or its local share answers at once even when a node never answers the abort", async () => {
    // A protoplaster-like node that takes runs, reports them running forever and never answers DELETE.
    const sockets = new Set<import("node:net").Socket>();
    const deletes: string[] = [];
    const stuck = createServer((req, res) => {
      res.setHeader("content-type", "application/json");
      if (req.method === "DELETE") return void deletes.push(req.url!);
      if (req.method === "POST") return void req.resume().on("end", () => res.end(JSON.stringify({ id: "stuck-1", status: "running" })));
      res.end(JSON.stringify(req.url === "/api/v1/configs/stuck.yml" ? { name: "stuck.yml" } : { id: "stuck-1", status: "running" }));
    });
    stuck.on("connection", (socket) => (sockets.add(socket), socket.on("close", () => sockets.delete(socket))));
    await new Promise<void>((r) => stuck.listen(0, "127.0.0.1", r));
    const o = await startTestServer({ test_server: { nodes: { stuck: { url: `http://127.0.0.1:${(stuck.address() as AddressInfo).port}` } } } as never });
    try {
      await uploadConfig(o, "stuck.yml", "tests:\n  g:\n  - sleep:\n      seconds: 30\n  - exec:\n      command: 'true'\n      machines: stuck\n");
      for (const target of ["run", "trigger"] as const) {
        const res = await o.request("/api/v1/test-runs", { method: "POST", json: { config_name: "stuck.yml" }, token: o.adminToken });
        assert.equal(res.status, 200, await res.clone().text());
        const id = res.headers.get("x-trigger-id")!;
        const t = (await waitTriggerOn(o, id, (t) => t.runs.some((r) => r.status === "running") && t.remote_runs.length > 0)) as unknown as Trigger;
        const path = target === "run" ? `/api/v1/test-runs/${t!.runs[0].id}` : `/api/v1/test-runs/trigger/${id}`;
        const del = await o.request(path, { method: "DELETE", token: o.adminToken });
        assert.equal(del.status, 200, await del.clone().text());
        const body = (await del.json()) as { abort_requested?: boolean; is_aborted?: boolean };
        assert.equal(target === "run" ? body.abort_requested : body.is_aborted, true);
        assert.equal((await waitRun(o, t!.runs[0].id)).status, "aborted");
        await waitFor(() => deletes.includes(`/api/v1/test-runs/trigger/${id}`), 2000, "the node to be told");
      }
    } finally {
      // Stop listening first: the orchestrator's shutdown tells the node again and must not wait.
      const closed = new Promise((r) => stuck.close(r));
      for (const socket of sockets) socket.destroy();
      await o.close();
      await closed;
    }
  });

  test("a multi-node trigger's error names each node that failed and why: one that stops answering, one past remote_run_timeout, one whose run failed", async () => {
    // One fake node process plays three nodes; each run's answers depend on the node it was sent to.
    const fake = createServer((req, res) => {
      res.setHeader("content-type", "application/json");
      let body = "";
      req.on("data", (d) => (body += d)).on("end", () => {
        if (req.method === "POST") return res.end(JSON.stringify({ id: `${(JSON.parse(body) as { machine_target: string }).machine_target}-run` }));
        if (req.method === "DELETE") return res.end("{}");
        const run = /\/api\/v1\/test-runs\/(\w+)-run$/.exec(req.url ?? "")?.[1];
        if (run === "dying") return (res.statusCode = 500), res.end(JSON.stringify({ error: "node is shutting down" }));
        if (run === "slow") return res.end(JSON.stringify({ status: "running" }));
        if (run === "failing") return res.end(JSON.stringify({ status: "failed", error: "metadata command 'x' failed" }));
        res.end(JSON.stringify({ name: "three.yml" }));
      });
    });
    await new Promise<void>((r) => fake.listen(0, "127.0.0.1", r));
    const url = `http://127.0.0.1:${(fake.address() as AddressInfo).port}`;
    const o = await startTestServer({ test_server: { nodes: { dying: { url }, slow: { url }, failing: { url } }, remote_run_timeout: 60 } as never });
    try {
      await uploadConfig(o, "three.yml", "tests:\n  g:\n  - exec:\n      command: 'true'\n      machines: [dying, slow, failing]\n");
      const res = await o.request("/api/v1/test-runs", { method: "POST", json: { config_name: "three.yml" }, token: o.adminToken });
      assert.equal(res.status, 200, await res.clone().text());
      const ended = waitTriggerOn(o, res.headers.get("x-trigger-id")!) as unknown as Promise<Trigger>;
      // Each poll waits on the server's clock: move it on as soon as the pollers sleep.
      // Only the pollers' sleeps (500 ms) move it: other timers on the clock (deployments) do not speed time up.
      for (let i = 0; ; i++) {
        const began = await Promise.race([o.clock.sleepBegun(i, 10_000).catch(() => undefined), ended.then(() => undefined)]);
        if (began === undefined) break;
        if (began === 500) o.clock.advance(500);
      }
      const t = await ended;
      assert.equal(t.status, "failed");
      const errors = t.error.split("; ").sort();
      assert.deepEqual(errors, [
        "node 'dying' stopped answering while its run dying-run was polled (HTTP 500: node is shutting down)",
        "node 'failing': run failing-run failed: metadata command 'x' failed",
        "node 'slow': run slow-run did not end within remote_run_timeout (60 s) and was aborted",
      ]);
    } finally {
      await o.close();
      await new Promise((r) => fake.close(r));
    }
  });
});
