import assert from "node:assert/strict";
import { existsSync, readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { describe, test } from "node:test";
import { startServe } from "../helpers/cli.ts";
import { removeDir, requestAt, startTestServer, tempDir, waitFor, type TestServer } from "../helpers/server.ts";
import { getRun, reportRows, trigger, uploadConfig, waitRun } from "./run-helpers.ts";

const ROOT = join(dirname(fileURLToPath(import.meta.url)), "..", "..");
const SLEEPY = "tests:\n  g:\n  - exec:\n      name: first\n      command: 'true'\n  - sleep:\n      seconds: 30\n";

/** Starts `labgate serve` as a child process, so that it can be killed without any shutdown. */
async function spawnServer(dataDir: string) {
  const serve = await startServe(["serve", "--data-dir", dataDir, "--listen", "127.0.0.1:0"], { cwd: ROOT, env: { LABGATE_CONFIG: "" } });
  const token = readFileSync(join(dataDir, "admin.token"), "utf8").trim();
  // Just enough of TestServer for the helpers.
  const server = {
    url: serve.url,
    adminToken: token,
    request: requestAt(serve.url),
  } as unknown as TestServer;
  return { serve, server };
}

describe("server restart", () => {
  test("a run that was running when the server died is aborted after the restart; pending ones too", async () => {
    const dataDir = tempDir();
    let restarted: TestServer | undefined;
    try {
      const { serve, server } = await spawnServer(dataDir);
      await uploadConfig(server, "sleepy.yml", SLEEPY);
      const running = await trigger(server, { config_name: "sleepy.yml" });
      const pending = await trigger(server, { config_name: "sleepy.yml" });
      await waitRun(server, running.id, (r) => r.status === "running");
      // Let the first case reach the report before the crash.
      const report = join(dataDir, "testrun", "reports", `${running.id}.csv`);
      await waitFor(() => existsSync(report) && readFileSync(report, "utf8").includes("first"), 5000, "the first case in the report");
      await serve.stop("SIGKILL");

      restarted = await startTestServer({}, dataDir);
      const r = await getRun(restarted, running.id);
      assert.equal(r.status, "aborted");
      assert.equal(r.error, "interrupted by server restart");
      assert.notEqual(r.finished_at, "");
      assert.notEqual(r.started_at, "");
      const p = await getRun(restarted, pending.id);
      assert.equal(p.status, "aborted");
      assert.equal(p.started_at, "");
      // The partial report stays available.
      assert.deepEqual(
        (await reportRows(restarted, running.id)).map((x) => [x["device name"], x.status]),
        [["first", "passed"]],
      );
      // Nothing is re-queued, and the server runs new runs as usual.
      const next = await waitRun(restarted, (await trigger(restarted, { config_name: "sleepy.yml", overrides: "tests.g.1.sleep.seconds: 0" })).id);
      assert.equal(next.status, "finished");
      assert.equal((await getRun(restarted, pending.id)).status, "aborted");
    } finally {
      await restarted?.close();
      removeDir(dataDir);
    }
  });

  test("a graceful shutdown aborts the running and pending runs with 'server shutdown'", async () => {
    const dataDir = tempDir();
    let s = await startTestServer({}, dataDir);
    try {
      await uploadConfig(s, "sleepy.yml", SLEEPY);
      const running = await trigger(s, { config_name: "sleepy.yml" });
      const pending = await trigger(s, { config_name: "sleepy.yml" });
      await waitRun(s, running.id, (r) => r.status === "running");
      await s.close();
      s = await startTestServer({}, dataDir);
      for (const id of [running.id, pending.id]) {
        const r = await getRun(s, id);
        assert.equal(r.status, "aborted");
        assert.equal(r.error, "server shutdown");
      }
    } finally {
      await s.close();
      removeDir(dataDir);
    }
  });
});
