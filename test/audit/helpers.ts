import assert from "node:assert/strict";
import { Agent as HttpAgent, request as httpRequest } from "node:http";
import type { AuditEntry } from "../../src/audit/schema.ts";
import { isoTime } from "../../src/util/time.ts";
import type { TestServer } from "../helpers/server.ts";

/** An entry of GET /api/v1/audit (its schema's type). */
export type Entry = AuditEntry;

/** The newest entries matching `query` (admin). */
export async function entries(server: Pick<TestServer, "call">, query: string): Promise<Entry[]> {
  const res = await server.call<Entry[]>("GET", `/api/v1/audit?${query}`);
  assert.equal(res.status, 200, JSON.stringify(res.body));
  return res.body;
}

/** The newest entry of `action`; there must be one. */
export async function newest(server: Pick<TestServer, "call">, action: string): Promise<Entry> {
  const [entry] = await entries(server, `action=${action}&limit=1`);
  assert.ok(entry, `an entry ${action}`);
  return entry;
}

/**
 * Writes `count` rows as recordAudit writes them (actor `bulk`, targets `row:0`..., at the server's
 * time) with one statement: a round trip per row would be most of a test on PostgreSQL.
 */
export async function bulkRows(server: Pick<TestServer, "db" | "clock">, count: number, action = "bulk.row"): Promise<void> {
  await server.db.run(
    `WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i < ?)
     INSERT INTO audit_log (time, actor_kind, actor, token_id, client, action, target, outcome, detail)
     SELECT ?, 'system', 'bulk', NULL, '', ?, 'row:' || i, 'ok', '{"i":' || i || ',"note":"a \\"quoted\\", text"}' FROM n ORDER BY i`,
    [count - 1, isoTime(new Date(server.clock.now())), action],
  );
}

/** One request of a flood: method, path and headers (no body). */
export interface FloodRequest {
  method: string;
  path: string;
  headers?: Record<string, string>;
}

/**
 * Sends `count` requests made by `make` to the server at `url`, `concurrency` at a time over
 * keep-alive connections from `localAddress` (any 127.x.y.z is this machine: clients of their
 * own); resolves with how many got each status.
 */
export async function flood(url: string, count: number, make: (i: number) => FloodRequest, options: { concurrency?: number; localAddress?: string } = {}): Promise<Record<number, number>> {
  const { concurrency = 16, localAddress } = options;
  const agent = new HttpAgent({ keepAlive: true, maxSockets: concurrency });
  const statuses: Record<number, number> = {};
  let next = 0;
  const one = (r: FloodRequest) =>
    new Promise<number>((resolve, reject) => {
      const req = httpRequest(new URL(r.path, url), { method: r.method, headers: r.headers, agent, localAddress }, (res) => {
        res.resume();
        res.on("end", () => resolve(res.statusCode ?? 0));
      });
      req.on("error", reject);
      req.end();
    });
  try {
    await Promise.all(
      Array.from({ length: concurrency }, async () => {
        while (next < count) {
          const status = await one(make(next++));
          statuses[status] = (statuses[status] ?? 0) + 1;
        }
      }),
    );
  } finally {
    agent.destroy();
  }
  return statuses;
}
