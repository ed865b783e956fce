/*
 * Issue 39.4: nobody can flush the audit trail. Refused requests are counted per client address,
 * actor and route in a window (one row each, its count brought up to date at the window's end),
 * every text from the request is cut, refusals beyond the keys of a window share one row, and
 * refusal rows have a retention budget of their own: the rows of changes all stay.
 */
import assert from "node:assert/strict";
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { describe, test } from "node:test";
import { loadConfig } from "../../src/config/config.ts";
import { recordAudit, systemActor } from "../../src/audit/audit.ts";
import { MAX_REQUEST_TEXT } from "../../src/audit/refusals.ts";
import { tempDir, useTestServer, waitFor } from "../helpers/server.ts";
import { login } from "../accounts/helpers.ts";
import { entries, flood, type Entry } from "./helpers.ts";

const WINDOW_S = 60;
const limits = { max_rows: 1000, max_refusal_rows: 100, refusal_window: WINDOW_S, refusal_keys: 10 };
const evil = { Origin: "http://evil.example" };

/** The anonymous refusal rows, by route (and client when it is not 127.0.0.1), with their counts. */
async function refusals(server: Parameters<typeof entries>[0], query = ""): Promise<Record<string, number>> {
  const rows = await entries(server, `action=auth.refused&limit=1000${query}`);
  const byKey: Record<string, number> = {};
  for (const row of rows.filter((r: Entry) => r.actor_kind === "anonymous")) {
    const key = `${row.client === "127.0.0.1" ? "" : `${row.client} `}${row.target}`;
    assert.equal(byKey[key], undefined, `one row for ${key} in the window`);
    byKey[key] = Number(row.detail?.count);
  }
  return byKey;
}

describe("refusals are counted per client, actor and route in a window", () => {
  const server = useTestServer({ audit: limits });

  /** Ends the current window: its counts are written (the window's timer runs on the server's clock). */
  const endWindow = async (before: () => Promise<boolean>) => {
    server.clock.advance(WINDOW_S * 1000);
    await waitFor(before, 5000, "the window's counts written");
  };

  test("a flood of unauthenticated cross-site and bad-token requests writes one row per client and route, with its count; the rows of changes all stay", async (t) => {
    for (let i = 0; i < 30; i++) assert.equal((await server.call("POST", "/api/v2/groups", { metadata: { name: `before-${i}` } })).status, 200);
    const changes = (await entries(server, "outcome=ok&limit=1000")).map((e) => e.id);
    assert.ok(changes.length >= 30);
    // A window that starts now: the flood is well inside it.
    server.clock.advance(WINDOW_S * 1000);

    const started = Date.now();
    const sent = await Promise.all([
      flood(server.url, 1000, () => ({ method: "POST", path: "/api/v2/groups", headers: evil })),
      // Every path another: still one route (no route serves them).
      flood(server.url, 1000, (i) => ({ method: "POST", path: `/nothing/${i}/${"x".repeat(i % 50)}`, headers: evil })),
      // A session cookie that is no token, from another site.
      flood(server.url, 1000, (i) => ({ method: "DELETE", path: `/api/v1/packages/${i}`, headers: { ...evil, Cookie: `labgate_session=forged${i}` } })),
      // Bad tokens: 401, which is no refusal of an authorization, and is not recorded.
      flood(server.url, 500, (i) => ({ method: "GET", path: "/api/v1/devices", headers: { Authorization: `Bearer token=forged.${i}.x` } })),
      // Another client: rows of its own.
      flood(server.url, 500, () => ({ method: "POST", path: "/api/v2/groups", headers: evil }), { localAddress: "127.0.0.2" }),
    ]);
    t.diagnostic(`4,000 requests in ${Date.now() - started} ms`);
    assert.deepEqual(sent, [{ 403: 1000 }, { 403: 1000 }, { 403: 1000 }, { 401: 500 }, { 403: 500 }]);

    // Each key's first refusal is in the log at once; the rest are counted when the window ends.
    const routes = ["POST /api/v2/groups", "POST *", "DELETE /api/v1/packages/:id", "127.0.0.2 POST /api/v2/groups"];
    assert.deepEqual(await refusals(server), Object.fromEntries(routes.map((r) => [r, 1])));
    await endWindow(async () => (await refusals(server))["POST *"] === 1000);
    assert.deepEqual(await refusals(server), { "POST /api/v2/groups": 1000, "POST *": 1000, "DELETE /api/v1/packages/:id": 1000, "127.0.0.2 POST /api/v2/groups": 500 });
    const [row] = await entries(server, "action=auth.refused&target=POST%20*&limit=1");
    assert.deepEqual(Object.keys(row.detail ?? {}).sort(), ["count", "error", "first", "last", "path", "user_agent"]);
    assert.deepEqual([row.detail?.path, row.detail?.error, row.outcome, row.actor], ["/nothing/0/", "cross-site request refused", "refused", "anonymous"]);

    // The next window starts rows of its own.
    await flood(server.url, 10, () => ({ method: "POST", path: "/api/v2/groups", headers: evil }));
    assert.equal((await entries(server, "action=auth.refused&target=POST%20/api/v2/groups&limit=10")).filter((e) => e.client === "127.0.0.1").length, 2);

    await server.server.domains.shared.auditRetention.sweep();
    const kept = new Set((await entries(server, "outcome=ok&limit=1000")).map((e) => e.id));
    assert.deepEqual(changes.filter((id) => !kept.has(id)), [], "every row of a change is still there");
  });

  test("the refusals of clients and routes beyond refusal_keys in a window share one row", async () => {
    await endWindow(async () => true);
    const before = (await entries(server, "action=auth.refused&limit=1"))[0].id;
    // 20 clients, 5 refusals each: 10 keys of their own, the other 10 clients' 50 refusals in one row.
    await Promise.all(Array.from({ length: 20 }, (_, i) => flood(server.url, 5, () => ({ method: "PUT", path: "/api/v1/users/x", headers: evil }), { localAddress: `127.0.1.${i + 1}`, concurrency: 1 })));
    const fresh = async () => (await entries(server, "action=auth.refused&limit=100")).filter((e) => e.id > before);
    assert.equal((await fresh()).length, 10);
    await endWindow(async () => (await fresh()).length === 11);
    const rows = await fresh();
    const more = rows.find((e) => e.target === "*");
    assert.deepEqual([more?.actor_kind, more?.actor, more?.detail?.count], ["system", "server", 50]);
    assert.deepEqual(
      rows.filter((e) => e !== more).map((e) => e.detail?.count),
      Array(10).fill(5),
    );
  });

  test("every text from the request is cut: path, user agent, a failed login's name", async () => {
    await endWindow(async () => true);
    const path = `/api/v2/groups/${"9".repeat(3000)}`;
    await flood(server.url, 1, () => ({ method: "DELETE", path, headers: { ...evil, "User-Agent": "u".repeat(6000) } }));
    const [row] = await entries(server, "action=auth.refused&target=DELETE%20/api/v2/groups/:id&limit=1");
    assert.equal(row.detail?.path, path.slice(0, MAX_REQUEST_TEXT));
    assert.equal(row.detail?.user_agent, "u".repeat(MAX_REQUEST_TEXT));
    assert.equal((await login(server, "n".repeat(1000), "wrong")).status, 401);
    const [failure] = await entries(server, "action=login.failure&limit=1");
    assert.deepEqual([failure.actor_kind, failure.target, failure.detail], ["anonymous", `user:${"n".repeat(MAX_REQUEST_TEXT)}`, { tried: "n".repeat(MAX_REQUEST_TEXT) }]);
  });

  test("a server that stops writes the counts of its last window", async () => {
    await endWindow(async () => true);
    await flood(server.url, 7, () => ({ method: "PATCH", path: "/api/v1/users/x", headers: evil }));
    await server.restart();
    const [row] = await entries(server, "action=auth.refused&target=PATCH%20/api/v1/users/:name&limit=1");
    assert.equal(row.detail?.count, 7);
  });
});

describe("audit retention keeps refusals within a budget of their own", () => {
  const server = useTestServer({ audit: { ...limits, retention_interval: 86_400 } });

  test("max_rows counts the rows of changes only; beyond max_refusal_rows the oldest refusals go", async () => {
    const { store } = server.server.ctx;
    const at = new Date(server.clock.now());
    // Changes up to max_rows, and three refusals after each third of them: refusals are the newest rows.
    await store.transact(async (tx) => {
      for (let i = 0; i < 1000; i++) {
        await recordAudit(tx, systemActor("bulk", at), "bulk.row", `row:${i}`);
        if (i % 3 === 2) for (let k = 0; k < 3; k++) await recordAudit(tx, systemActor("bulk", at), "auth.refused", `refusal:${i}:${k}`, { count: 1 }, "refused");
      }
    });
    const count = async (outcome: string) => Number((await server.db.get<{ n: number }>("SELECT COUNT(*) AS n FROM audit_log WHERE outcome = ?", [outcome]))?.n);
    const changesBefore = await count("ok");
    assert.ok(changesBefore >= 1000);
    await server.server.domains.shared.auditRetention.sweep();
    assert.equal(await count("ok"), 1000, "the newest 1,000 changes, whatever the refusals between them");
    assert.equal(await count("refused"), 100);
    const oldestRefusal = (await server.db.get<{ target: string }>("SELECT target FROM audit_log WHERE outcome = 'refused' ORDER BY id LIMIT 1"))!.target;
    assert.equal(oldestRefusal, "refusal:899:2", "the newest refusals stay");
    const oldestChange = (await server.db.get<{ target: string }>("SELECT target FROM audit_log WHERE outcome = 'ok' ORDER BY id LIMIT 1"))!.target;
    assert.equal(oldestChange, "row:0", "the changes before these went first");
    // Refusals written after that push nothing out.
    await store.transact(async (tx) => {
      for (let i = 0; i < 5000; i++) await recordAudit(tx, systemActor("bulk", at), "auth.refused", `late:${i}`, { count: 1 }, "refused");
    });
    await server.server.domains.shared.auditRetention.sweep();
    assert.deepEqual([await count("ok"), await count("refused")], [1000, 100]);
  });
});

test("the refusal bounds are config keys with their ranges; a bad one names its key", () => {
  const dir = tempDir();
  const load = (yaml: string) => {
    writeFileSync(join(dir, "appliance.config.yaml"), yaml);
    return loadConfig({ cwd: dir, env: {} }).config.audit;
  };
  assert.deepEqual(load(""), { retention_days: 365, max_rows: 1_000_000, retention_interval: 600, max_refusal_rows: 100_000, refusal_window: 60, refusal_keys: 1000 });
  assert.deepEqual(load("audit:\n  max_refusal_rows: 500\n  refusal_window: 5\n  refusal_keys: 20\n"), { retention_days: 365, max_rows: 1_000_000, retention_interval: 600, max_refusal_rows: 500, refusal_window: 5, refusal_keys: 20 });
  for (const [key, value] of [["max_refusal_rows", "10"], ["refusal_window", "0"], ["refusal_window", "7200"], ["refusal_keys", "1"], ["refusal_keys", "many"], ["refusal_budget", "5"]]) {
    assert.throws(() => load(`audit:\n  ${key}: ${value}\n`), new RegExp(`audit\\.${key}`), `${key}: ${value}`);
  }
});
