import assert from "node:assert/strict";
import type { TestServer } from "../helpers/server.ts";

/** An entry of GET /api/v1/audit. */
export interface Entry {
  id: number;
  time: string;
  actor_kind: string;
  actor: string;
  token_id: string | null;
  client: string;
  action: string;
  target: string;
  outcome: string;
  detail: Record<string, unknown> | null;
}

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
