import { strict as assert } from "node:assert";
import { spawn } from "node:child_process";
import { watch } from "node:fs";
import { describe, test } from "node:test";
import { Database } from "../../src/db/index.ts";
import { bundledFixture } from "../helpers/cli.ts";
import { tempDir } from "../helpers/server.ts";

/**
 * Runs the writer (test/fixtures/crash-writer.ts) until `killWhen` says so (or, with `killOnImageTemp`, until the image temp file
 * of a checkpoint it announced appears), SIGKILLs it, and returns the highest acknowledged batch.
 */
async function runAndKill(
  dir: string,
  env: Record<string, string>,
  killWhen: (line: string, acked: number) => boolean,
  killOnImageTemp = false,
): Promise<number> {
  // Bundled as dist/labgate.cjs is (its checkpoint worker too): starts without loading the source through tsx.
  const [node, writer] = await bundledFixture("crash-writer");
  return new Promise((resolve, reject) => {
    const child = spawn(node, [writer, dir], {
      env: { ...process.env, ...env },
      stdio: ["ignore", "pipe", "inherit"],
    });
    let acked = 0;
    let buffer = "";
    let killed = false;
    let announced = false;
    const watcher = killOnImageTemp
      ? watch(dir, (_event, name) => {
          if (!killed && announced && name && /^labgate\.db\..*\.tmp$/.test(String(name))) {
            killed = true;
            child.kill("SIGKILL");
          }
        })
      : undefined;
    child.stdout.on("data", (chunk: Buffer) => {
      buffer += chunk.toString();
      let newline;
      while ((newline = buffer.indexOf("\n")) >= 0) {
        const line = buffer.slice(0, newline);
        buffer = buffer.slice(newline + 1);
        const ack = /^ack (\d+)$/.exec(line);
        if (ack) acked = Number(ack[1]);
        if (line === "checkpoint") announced = true;
        if (!killed && killWhen(line, acked)) {
          killed = true;
          child.kill("SIGKILL");
        }
      }
    });
    child.on("error", reject);
    child.on("exit", () => {
      watcher?.close();
      resolve(acked);
    });
  });
}

async function assertAllAcked(dir: string, acked: number) {
  const db = await Database.open(dir);
  for (let batch = 1; batch <= acked; batch++) {
    for (let i = 0; i < 3; i++) {
      assert.ok(db.get("SELECT n FROM rows WHERE n = ?", [batch * 3 + i]), `acknowledged row ${batch * 3 + i} is missing after the crash`);
    }
  }
  await db.close();
}

describe("crash safety (SIGKILL)", () => {
  test("every acknowledged write survives kill -9 in the middle of writing", async () => {
    const dir = tempDir();
    const acked = await runAndKill(dir, {}, (_line, n) => n >= 150);
    assert.ok(acked >= 150);
    await assertAllAcked(dir, acked);
  });

  test("every acknowledged write survives kill -9 during checkpoints (also while the worker writes the image), several times over", async () => {
    const dir = tempDir();
    // A ~2 MB image makes each checkpoint's file write long enough for the kill to land in it.
    const env = { PAD: "2000", CHECKPOINT_EVERY: "25" };
    let total = 0;
    for (let round = 0; round < 4; round++) {
      let seen = 0;
      // Rounds 0-1 kill as a checkpoint starts; rounds 2-3 as the checkpoint worker creates the image temp file.
      const acked = await runAndKill(dir, env, (line) => round < 2 && line === "checkpoint" && ++seen === 2 + round, round >= 2);
      await assertAllAcked(dir, acked);
      assert.ok(acked > total, "each round adds rows on top of the recovered state");
      total = acked;
    }
  });

  test("frequent size-triggered checkpoints under load lose nothing", async () => {
    const dir = tempDir();
    const acked = await runAndKill(dir, { CHECKPOINT_BYTES: "20000", PAD: "500" }, (_line, n) => n >= 300);
    await assertAllAcked(dir, acked);
  });
});
