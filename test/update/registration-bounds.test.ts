// Issue 9 item 4: the public registration route is bounded (body, per key, per address, expiry),
// the pending list pages, and an admin removes pending registrations in bulk.
import assert from "node:assert/strict";
import { test } from "node:test";
import { useTestServer } from "../helpers/server.ts";
import { publicKeyPem, signBody } from "../../src/update/client/device-client.ts";
import { MAX_PENDING_PER_ADDRESS, MAX_PENDING_PER_KEY } from "../../src/update/registration/authorize.ts";
import { deviceMetadata, key, nextMac } from "./helpers/devices.ts";

const server = useTestServer();

/** A signed registration of `mac` with `keys`; `pad` makes the body larger. */
function register(keys: { privateKeyPem: string }, mac = nextMac(), pad = 0): Promise<Response> {
  const extra: Record<string, string> = pad ? { "svc.note": "x".repeat(pad) } : {};
  const body = JSON.stringify({ metadata: deviceMetadata(mac, extra), public_key: publicKeyPem(keys.privateKeyPem), timestamp: Math.floor(Date.now() / 1000) });
  return fetch(`${server.url}/api/v1/auth/device`, {
    method: "POST",
    headers: { "content-type": "application/json", "X-SVC-Device-Signature": signBody(keys.privateKeyPem, Buffer.from(body)) },
    body,
  });
}
const pendingRows = async () => (await server.db.get<{ n: number }>("SELECT COUNT(*) AS n FROM registrations"))?.n ?? 0;
const removeAll = () => server.request("/api/v1/auth/pending/remove", { method: "POST", token: server.adminToken, json: { all: true } });

test("a registration body over 16 KiB is a 413; one key waits with at most a few MAC addresses", async () => {
  const keys = key("ed25519", true);
  assert.equal((await register(keys, nextMac(), 17 * 1024)).status, 413);
  assert.equal((await register(keys, nextMac(), 4000)).status, 401, "a few KB of metadata are fine");
  for (let i = 1; i < MAX_PENDING_PER_KEY; i++) assert.equal((await register(keys)).status, 401);
  const refused = await register(keys);
  assert.equal(refused.status, 429);
  assert.match(((await refused.json()) as { error: string }).error, /this key has \d+ pending registrations/);
  assert.equal(await pendingRows(), MAX_PENDING_PER_KEY);
  assert.equal((await removeAll()).status, 200);
});

test("one client address holds a bounded number of pending registrations", async () => {
  await server.db.write(async (tx) => {
    for (let i = 0; i < MAX_PENDING_PER_ADDRESS; i++) {
      await tx.run("INSERT INTO registrations (mac_address, key_fingerprint, public_key, metadata, last_appeared, client_address) VALUES (?, ?, 'k', '{}', ?, '127.0.0.1')", [`m${i}`, `f${i}`, new Date().toISOString()]);
    }
  });
  const refused = await register(key("ed25519", true));
  assert.equal(refused.status, 429);
  assert.match(((await refused.json()) as { error: string }).error, /from 127\.0\.0\.1/);
  const removed = await server.request("/api/v1/auth/pending/remove", { method: "POST", token: server.adminToken, json: { client_address: "127.0.0.1" } });
  assert.deepEqual(await removed.json(), { removed: MAX_PENDING_PER_ADDRESS });
  assert.equal((await register(key("ed25519", true))).status, 401);
  assert.equal((await removeAll()).status, 200);
});

test("pending registrations are bounded in total (update_server.max_pending_registrations, 10,000): many addresses cannot pass it", async () => {
  const total = server.server.ctx.config.update_server.max_pending_registrations;
  assert.equal(total, 10_000);
  // A flood from 200 addresses, 50 each: under every per-address cap.
  await server.db.write(async (tx) => {
    for (let i = 0; i < total; i++) {
      await tx.run("INSERT INTO registrations (mac_address, key_fingerprint, public_key, metadata, last_appeared, client_address) VALUES (?, ?, 'k', '{}', ?, ?)", [`g${i}`, `f${i}`, new Date().toISOString(), `10.8.${i % 200}.1`]);
    }
  });
  const refused = await register(key("ed25519", true));
  assert.equal(refused.status, 429);
  assert.match(((await refused.json()) as { error: string }).error, /too many pending registrations \(10000, update_server\.max_pending_registrations\)/);
  assert.equal(await pendingRows(), total);
  const removed = await server.request("/api/v1/auth/pending/remove", { method: "POST", token: server.adminToken, json: { client_address: "10.8.0.1" } });
  assert.deepEqual(await removed.json(), { removed: 50 });
  assert.equal((await register(key("ed25519", true))).status, 401, "room again: pending");
  assert.equal((await removeAll()).status, 200);
});

test("pending registrations expire after update_server.pending_registration_ttl; the list pages; bulk removal by age", async () => {
  const macs = [nextMac(), nextMac(), nextMac()];
  for (const mac of macs) assert.equal((await register(key("ed25519", true), mac)).status, 401);
  const list = async (query = "") => {
    const res = await server.request(`/api/v1/auth/pending${query}`, { token: server.adminToken });
    return { status: res.status, total: res.headers.get("x-total-count"), macs: ((await res.json()) as Array<{ mac_address: string }>).map?.((p) => p.mac_address) };
  };
  assert.deepEqual(await list(), { status: 200, total: null, macs }, "without paging: the whole list, as before");
  assert.deepEqual(await list("?limit=2"), { status: 200, total: "3", macs: macs.slice(0, 2) });
  assert.deepEqual(await list("?limit=2&offset=2"), { status: 200, total: "3", macs: macs.slice(2) });
  assert.equal((await list("?limit=0")).status, 400);

  // The first one last appeared eight days ago: older than the default ttl of 7 days.
  const old = new Date(server.clock.now() - 8 * 86400 * 1000).toISOString();
  await server.db.run("UPDATE registrations SET last_appeared = ? WHERE mac_address = ?", [old, macs[0]]);
  assert.deepEqual((await list()).macs, macs.slice(1), "an expired registration is not listed");
  assert.equal(await pendingRows(), 3);
  assert.equal((await register(key("ed25519", true))).status, 401);
  assert.equal(await pendingRows(), 3, "and the next registration drops it");

  const refused = await server.request("/api/v1/auth/pending/remove", { method: "POST", token: server.adminToken, json: {} });
  assert.equal(refused.status, 400);
  const ro = await server.request("/api/v1/auth/pending/remove", { method: "POST", token: server.token(["admin_ro"]), json: { all: true } });
  assert.equal(ro.status, 403);
  const byAge = await server.request("/api/v1/auth/pending/remove", { method: "POST", token: server.adminToken, json: { older_than: 3600 } });
  assert.deepEqual(await byAge.json(), { removed: 0 });
  assert.deepEqual(await (await removeAll()).json(), { removed: 3 });
  assert.equal(await pendingRows(), 0);
});
