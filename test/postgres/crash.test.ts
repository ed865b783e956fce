import { strict as assert } from "node:assert";
import { createHash } from "node:crypto";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { describe, test } from "node:test";
import { sql } from "kysely";
import { postgresQueryLayer } from "../../src/db/query/postgres.ts";
import { startServe, type ServeProcess } from "../helpers/cli.ts";
import { usePostgres } from "../helpers/postgres.ts";
import { tempDir } from "../helpers/server.ts";

const postgres = usePostgres();

interface Acknowledged {
  groups: Map<number, string>;
  packages: Map<number, string>;
}

/**
 * Writes as fast as the server acknowledges, from several clients at once (groups from four, package
 * uploads from one: a row and an object in the data dir), and kills the server with SIGKILL once
 * `killAfter` more groups were acknowledged, while requests are still in flight.
 */
async function writeUntilKilled(server: ServeProcess, token: string, round: number, killAfter: number, acked: Acknowledged): Promise<void> {
  const stop = { now: false };
  const start = acked.groups.size;
  const call = async (path: string, body: BodyInit, json: boolean) => {
    try {
      const response = await fetch(server.url + path, {
        method: "POST",
        headers: { authorization: `Bearer token=${token}`, ...(json ? { "content-type": "application/json" } : {}) },
        body,
      });
      return response.status === 200 ? ((await response.json()) as { id: number }) : undefined;
    } catch {
      return undefined; // the server died under us: this request was never acknowledged
    }
  };
  const groupWriter = async (worker: number) => {
    for (let i = 0; !stop.now; i++) {
      const name = `r${round}-w${worker}-g${i}`;
      const group = await call("/api/v2/groups", JSON.stringify({ metadata: { name } }), true);
      if (!group) return;
      acked.groups.set(group.id, name);
      if (acked.groups.size - start === killAfter && !stop.now) {
        stop.now = true;
        server.child.kill("SIGKILL");
      }
    }
  };
  const packageWriter = async () => {
    for (let i = 0; !stop.now; i++) {
      const content = `image r${round} ${i} `.repeat(200);
      const form = new FormData();
      form.set("svc.software.version", `r${round}-v${i}`);
      form.set("svc.hardware.devtype", "board");
      form.set("file", new Blob([content]), "image.bin");
      const pkg = await call("/api/v1/packages", form, false);
      if (!pkg) return;
      acked.packages.set(pkg.id, createHash("sha256").update(content).digest("hex"));
    }
  };
  await Promise.all([0, 1, 2, 3].map(groupWriter).concat(packageWriter()));
  await server.stop("SIGKILL");
}

/** Every acknowledged group and package is served after the restart, and every package downloads whole. */
async function assertAllServed(server: ServeProcess, token: string, acked: Acknowledged): Promise<void> {
  const get = async (path: string) => {
    const response = await fetch(server.url + path, { headers: { authorization: `Bearer token=${token}` } });
    assert.equal(response.status, 200, path);
    return response.json() as Promise<unknown>;
  };
  const groups = (await get("/api/v2/groups")) as Array<{ id: number; metadata: { name?: string } }>;
  const stored = new Map(groups.map((g) => [g.id, g.metadata.name]));
  for (const [id, name] of acked.groups) assert.equal(stored.get(id), name, `acknowledged group ${id} (${name}) is missing after kill -9`);
  for (const [id, sha256] of acked.packages) {
    const { download_url } = (await get(`/api/v1/packages/${id}/download`)) as { download_url: string };
    const download = await fetch(download_url);
    assert.equal(download.status, 200, `acknowledged package ${id}: its download answers ${download.status} after kill -9`);
    const bytes = Buffer.from(await download.arrayBuffer());
    assert.equal(createHash("sha256").update(bytes).digest("hex"), sha256, `acknowledged package ${id} does not download whole after kill -9`);
  }
}

describe("kill -9 of labgate on PostgreSQL", () => {
  test("every write the API acknowledged survives kill -9 and a restart, twice over; no change is there in part", async () => {
    const url = await postgres.createDatabase("killed");
    const dataDir = tempDir();
    const serve = () => startServe(["serve", "--database-url", url, "--data-dir", dataDir, "--listen", "127.0.0.1:0"]);
    const acked: Acknowledged = { groups: new Map(), packages: new Map() };
    let token = "";
    for (let round = 0; round < 2; round++) {
      const server = await serve();
      try {
        token ||= readFileSync(join(dataDir, "admin.token"), "utf8").trim();
        if (round > 0) await assertAllServed(server, token, acked);
        await writeUntilKilled(server, token, round, 200, acked);
      } finally {
        await server.stop("SIGKILL");
      }
    }
    assert.ok(acked.groups.size >= 400);
    assert.ok(acked.packages.size > 0, "some package uploads were acknowledged");

    const last = await serve();
    try {
      await assertAllServed(last, token, acked);
      // A group and its audit entry commit together: the server died between none of them.
      const db = await postgresQueryLayer<Record<string, Record<string, unknown>>>(url);
      const unpaired = await sql<{ id: number }>`
        SELECT g.id FROM groups g FULL JOIN (SELECT target FROM audit_log WHERE action = 'group.create') a ON a.target = 'group:' || g.id
        WHERE g.id IS NULL OR a.target IS NULL`.execute(db);
      assert.deepEqual(unpaired.rows, []);
      await db.destroy();
    } finally {
      assert.equal(await last.stop(), 0);
    }
  });
});
