import assert from "node:assert/strict";
import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { describe, test } from "node:test";
import { runProcess } from "../../src/util/process.ts";
import { removeDir, tempDir, waitFor } from "../helpers/server.ts";
import { alive } from "./run-helpers.ts";

describe("process helper", () => {
  test("a program that ignores SIGTERM gets SIGKILL after the grace period, with its whole group", async () => {
    const dir = tempDir();
    try {
      const controller = new AbortController();
      const running = runProcess({ command: "trap '' TERM; sleep 30 & echo $! > child.pid; wait", cwd: dir, signal: controller.signal, killGraceMs: 200 });
      const pid = await waitFor(() => (existsSync(join(dir, "child.pid")) ? Number(readFileSync(join(dir, "child.pid"), "utf8").trim()) : 0), 5000, "the child's pid");
      controller.abort();
      const result = await running;
      assert.equal(result.aborted, true);
      assert.equal(result.exitSignal, "SIGKILL");
      await waitFor(() => !alive(pid), 1000, "the child's end");
    } finally {
      removeDir(dir);
    }
  });

  test("output beyond the limit is cut in memory but kept whole in the output file; argv runs without a shell", async () => {
    const dir = tempDir();
    try {
      const result = await runProcess({ command: ["sh", "-c", "head -c 3000 /dev/zero | tr '\\0' a"], cwd: dir, outputLimit: 1000, outputFile: join(dir, "out.log") });
      assert.equal(result.exitCode, 0);
      assert.equal(result.stdout.length, 1000);
      assert.equal(result.truncated, true);
      assert.equal(readFileSync(join(dir, "out.log"), "utf8").length, 3000);
      const literal = await runProcess({ command: ["echo", "$(id); `id`"], cwd: dir });
      assert.equal(literal.stdout, "$(id); `id`\n");
      const missing = await runProcess({ command: ["/nonexistent/tool"], cwd: dir });
      assert.equal(missing.startError, "tool not found");
      const timed = await runProcess({ command: "sleep 5", cwd: dir, timeoutMs: 100 });
      assert.equal(timed.timedOut, true);
      assert.equal(timed.exitSignal, "SIGTERM");
    } finally {
      removeDir(dir);
    }
  });
});
