import { strict as assert } from "node:assert";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { describe, test } from "node:test";
import { startServe } from "../helpers/cli.ts";
import { tempDir } from "../helpers/server.ts";

/** Creates groups as fast as the server acknowledges them, from several clients at once. */
async function createGroupsUntilKilled(url: string, token: string, onAck: (id: number, name: string) => void, stop: { now: boolean }) {
  const client = async (worker: number) => {
    for (let i = 0; !stop.now; i++) {
      const name = `w${worker}-g${i}`;
      let response: Response;
      try {
        response = await fetch(`${url}/api/v2/groups`, {
          method: "POST",
          headers: { authorization: `Bearer token=${token}`, "content-type": "application/json" },
          body: JSON.stringify({ metadata: { name } }),
        });
      } catch {
        return; // the server died under us: this request was never acknowledged
      }
      if (response.status !== 200) return;
      const group = (await response.json()) as { id: number };
      onAck(group.id, name);
    }
  };
  await Promise.all([0, 1, 2, 3].map(client));
}

describe("durability over HTTP", () => {
  test("every write the API acknowledged survives kill -9 and a restart", async () => {
    const dir = tempDir();
    const first = await startServe(["serve", "--data-dir", dir, "--listen", "127.0.0.1:0"]);
    const token = readFileSync(join(dir, "admin.token"), "utf8").trim();
    const acked = new Map<number, string>();
    const stop = { now: false };
    const writers = createGroupsUntilKilled(first.url, token, (id, name) => {
      acked.set(id, name);
      if (acked.size === 300) {
        // Kill while requests are still in flight.
        first.child.kill("SIGKILL");
        stop.now = true;
      }
    }, stop);
    await writers;
    await first.stop("SIGKILL");
    assert.ok(acked.size >= 300);

    const second = await startServe(["serve", "--data-dir", dir, "--listen", "127.0.0.1:0"]);
    try {
      const response = await fetch(`${second.url}/api/v2/groups`, { headers: { authorization: `Bearer token=${token}` } });
      assert.equal(response.status, 200);
      const groups = (await response.json()) as Array<{ id: number; metadata: { name?: string } }>;
      const stored = new Map(groups.map((g) => [g.id, g.metadata.name]));
      for (const [id, name] of acked) assert.equal(stored.get(id), name, `acknowledged group ${id} (${name}) is missing after kill -9`);
    } finally {
      assert.equal(await second.stop(), 0);
    }
  });
});
