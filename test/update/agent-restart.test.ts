import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { writeFileSync } from "node:fs";
import { test } from "node:test";
import { startTestServer, tempDir, TestClock, waitFor } from "../helpers/server.ts";
import { labgate } from "../helpers/cli.ts";
import { openStream } from "../helpers/events.ts";
import { approveAgent, approvePending, device, deviceId, FAST_SERVER, spawnAgent, startAgent, untilConnected } from "./helpers/agents.ts";
import { startProxy } from "./helpers/proxy.ts";

test("an agent survives a server restart without help", async () => {
  const dataDir = tempDir();
  let server = await startTestServer(FAST_SERVER, dataDir);
  const port = server.server.port;
  const agent = startAgent(server);
  try {
    const id = await approveAgent(server, agent);
    await untilConnected(server, id);
    const before = agent.connections;
    await server.close();
    await waitFor(() => !agent.connected, 3000, "agent notices");
    server = await startTestServer({ ...FAST_SERVER, listen: { host: "127.0.0.1", port } }, dataDir);
    await untilConnected(server, id);
    assert.ok(agent.connections > before);
    const res = await server.request(`/api/v2/devices/${agent.mac}/action/exec/ok`, { token: server.adminToken });
    assert.deepEqual(await res.json(), { status_code: 0, output: Buffer.from("fine\n").toString("base64") });
  } finally {
    await agent.stop();
    await server.close();
  }
});

test("labgate agent as a child process: registers, connects, runs an action; bad config exits 2", async () => {
  const server = await startTestServer(FAST_SERVER);
  const { child, mac, config, stderr: output } = await spawnAgent(server, ["name: bench-7", "actions:", "  - {id: hello, name: Hello, command: [echo, hi], timeout: 5}"]);
  try {
    const stream = await openStream(server);
    const id = await approveAgent(server, { mac, approved: Promise.resolve() } as never);
    await stream.next((e) => e.event === "connect" && e.data.device === mac, 10_000, "the child agent's connect").catch((error: Error) => {
      throw new Error(`${error.message} (${output()})`);
    });
    stream.close();
    assert.equal((await device(server, id)).metadata["svc.device.name"], "bench-7");
    const res = await server.request(`/api/v2/devices/${mac}/action/exec/hello`, { token: server.adminToken });
    assert.deepEqual(await res.json(), { status_code: 0, output: Buffer.from("hi\n").toString("base64") });
  } finally {
    try {
      if (child.exitCode === null && child.signalCode === null) {
        const exited = new Promise<number | null>((resolve) => child.once("exit", (code) => resolve(code)));
        child.kill("SIGTERM");
        assert.equal(await exited, 0, "SIGTERM stops the agent cleanly");
      }
    } finally {
      await server.close();
    }
  }

  writeFileSync(config, "server: http://x:1\nbogus_key: 1\n");
  const [node, ...entry] = await labgate();
  const bad = spawn(node, [...entry, "agent", "--config", config], { stdio: ["ignore", "ignore", "pipe"] });
  let message = "";
  bad.stderr.on("data", (chunk) => (message += chunk));
  const code = await new Promise<number | null>((resolve) => bad.once("exit", (c) => resolve(c)));
  assert.equal(code, 2);
  assert.match(message, /bogus_key: unknown key/);
});

test("an agent waiting for approval asks again with a growing delay (backoff), then connects once approved", async () => {
  const server = await startTestServer(FAST_SERVER);
  const proxy = await startProxy(server.url);
  // The agent waits on its clock: the test moves it instead of waiting (delays of many seconds,
  // which real time does not reach while the test runs).
  const clock = new TestClock();
  const agent = startAgent(proxy.url, { retry_min_delay: 10, retry_max_delay: 80 }, { clock });
  const attempts = () => proxy.seen.filter((r) => r.path === "/api/v1/auth/device").length;
  try {
    const delays: number[] = [];
    for (let i = 0; i < 6; i++) {
      delays.push(await clock.sleepBegun(i));
      // One authorization before each wait, none during a wait.
      assert.equal(attempts(), i + 1, `attempts before wait ${i}`);
      if (i < 5) clock.advance(delays[i]);
    }
    // 10, 20, 40, 80, 80, 80 s, each with ±20 % jitter.
    [10, 20, 40, 80, 80, 80].forEach((seconds, i) => {
      assert.ok(delays[i] >= seconds * 800 && delays[i] <= seconds * 1200, `wait ${i}: ${delays[i]} ms for ${seconds} s (${delays.join(", ")})`);
    });
    // Approved during the last wait: the next attempt, once it is over, is accepted.
    await approvePending(server, agent.mac);
    assert.equal(attempts(), 6);
    clock.advance(delays[5]);
    await agent.approved;
    assert.equal(attempts(), 7);
    await untilConnected(server, await deviceId(server, agent.mac));
  } finally {
    await agent.stop();
    await proxy.close();
    await server.close();
  }
});

test("an agent whose clock is hours off takes the server's time from its Date header and registers", async () => {
  const server = await startTestServer(FAST_SERVER);
  const behind = startAgent(server, {}, { clock: new TestClock(-2 * 3600_000) });
  const ahead = startAgent(server, {}, { clock: new TestClock(26 * 3600_000) });
  try {
    for (const agent of [behind, ahead]) {
      const id = await approveAgent(server, agent);
      await untilConnected(server, id);
    }
  } finally {
    await behind.stop();
    await ahead.stop();
    await server.close();
  }
});
