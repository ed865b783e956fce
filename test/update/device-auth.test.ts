import assert from "node:assert/strict";
import { generateKeyPairSync } from "node:crypto";
import { test } from "node:test";
import { startTestServer, useTestServer } from "../helpers/server.ts";
import { publicKeyPem, signBody } from "../../src/update/client/device-client.ts";
import { httpRequest, type HttpClient } from "../../src/update/client/http.ts";
import { approve, deviceClient, deviceMetadata, json, key, nextMac, registerDevice } from "./helpers/devices.ts";

const server = useTestServer();

/** Sends an auth request with an explicit body and signature. */
function sendAuth(body: string, signature: string | undefined, header = "X-SVC-Device-Signature"): Promise<Response> {
  const headers: Record<string, string> = { "content-type": "application/json" };
  if (signature !== undefined) headers[header] = signature;
  return fetch(`${server.url}/api/v1/auth/device`, { method: "POST", headers, body });
}

const now = () => Math.floor(Date.now() / 1000);

function authBody(privateKeyPem: string, options: { mac?: string; timestamp?: number; encoding?: "spki" | "pkcs1" | "pkcs1-in-spki-label"; extra?: object } = {}) {
  return JSON.stringify({
    metadata: deviceMetadata(options.mac ?? nextMac()),
    public_key: publicKeyPem(privateKeyPem, options.encoding ?? "spki"),
    timestamp: options.timestamp ?? now(),
    ...options.extra,
  });
}

/** The update check with a device token: the route devices use. */
const updateCheck = (token: string, mac: string) =>
  server.request("/api/v1/update/check", { method: "POST", token, json: deviceMetadata(mac) });

for (const type of ["rsa", "ed25519"] as const) {
  test(`a fresh ${type} device: 401 + pending, approval, 200 with a device token for device routes only`, async () => {
    const client = deviceClient(server, { keys: key(type, true) });
    const first = await fetch(`${server.url}/api/v1/auth/device`, { method: "POST" }).then((r) => r.status);
    assert.equal(first, 400);

    const { body, signature, header } = client.signedAuthRequest();
    const res = await sendAuth(body, signature, header);
    assert.equal(res.status, 401);
    assert.deepEqual(await res.json(), { error: "device unauthorized" });

    const pending = await json(server.request("/api/v1/auth/pending?details=true", { token: server.adminToken }));
    const entry = pending.find((p: { mac_address: string }) => p.mac_address === client.mac);
    assert.ok(entry, "the request is listed as pending");
    assert.equal(entry.public_key, client.publicKeyPem);
    assert.equal(entry.metadata["svc.hardware.macaddr"], client.mac);
    assert.equal(entry.key_change, false);
    assert.equal(entry.device_id, null);
    assert.match(entry.last_appeared, /^\w{3}, \d{2} \w{3} \d{4} \d{2}:\d{2}:\d{2} GMT$/);

    // Asking again refreshes the same entry instead of adding one.
    assert.equal((await client.authorize()).status, "pending");
    const again = await json(server.request("/api/v1/auth/pending", { token: server.adminToken }));
    assert.equal(again.filter((p: { mac_address: string }) => p.mac_address === client.mac).length, 1);

    assert.equal((await approve(server, client)).status, 200);
    const after = await json(server.request("/api/v1/auth/pending", { token: server.adminToken }));
    assert.equal(after.filter((p: { mac_address: string }) => p.mac_address === client.mac).length, 0);

    const signed = client.signedAuthRequest();
    const ok = await sendAuth(signed.body, signed.signature, signed.header);
    assert.equal(ok.status, 200);
    const answer = await ok.json();
    assert.equal(answer.expires, 300);
    assert.equal(typeof answer.token, "string");
    const payload = JSON.parse(Buffer.from(answer.token.split(".")[1], "base64url").toString());
    assert.equal(payload.typ, "device");
    assert.equal(payload.sub, client.mac);
    assert.equal(JSON.parse(Buffer.from(answer.token.split(".")[0], "base64url").toString()).alg, "HS256");

    const check = await updateCheck(answer.token, client.mac);
    assert.ok([200, 204].includes(check.status), `update check answered ${check.status}: ${await check.text()}`);
    for (const path of ["/api/v2/devices", "/api/v1/devices", "/api/v1/auth/pending", "/api/v1/permissions"]) {
      const refused = await server.request(path, { token: answer.token });
      assert.equal(refused.status, 401, path);
      assert.ok((await refused.json()).error);
    }
    // And a management token is no device token.
    assert.equal((await updateCheck(server.adminToken, client.mac)).status, 401);
  });
}

test("keys: PKCS#1 under a PUBLIC KEY label and under RSA PUBLIC KEY are accepted and are the same key as SPKI", async () => {
  const keys = key("rsa");
  const mac = nextMac();
  const legacy = deviceClient(server, { mac, keys, encoding: "pkcs1-in-spki-label" });
  assert.match(legacy.publicKeyPem, /^-----BEGIN PUBLIC KEY-----/);
  assert.equal((await legacy.authorize()).status, "pending");
  assert.equal((await approve(server, legacy)).status, 200);
  assert.equal((await legacy.authorize()).status, "accepted");

  // The same key material in another encoding (and with other line breaks) is the same device.
  for (const encoding of ["spki", "pkcs1"] as const) {
    const other = deviceClient(server, { mac, keys, encoding });
    assert.equal((await other.authorize()).status, "accepted", encoding);
  }
  const lines = publicKeyPem(keys.privateKeyPem, "spki").trim().split("\n");
  const oneLine = `${lines[0]}\n${lines.slice(1, -1).join("")}\n${lines.at(-1)}`;
  assert.notEqual(oneLine.trim(), publicKeyPem(keys.privateKeyPem, "spki").trim());
  const body = JSON.stringify({ metadata: deviceMetadata(mac), public_key: oneLine, timestamp: now() });
  assert.equal((await sendAuth(body, signBody(keys.privateKeyPem, Buffer.from(body)))).status, 200);
  const pending = await json(server.request("/api/v1/auth/pending", { token: server.adminToken }));
  assert.equal(pending.filter((p: { mac_address: string }) => p.mac_address === mac).length, 0);
});

test("refused auth requests: bad signature, body changed after signing, stale timestamp, replay, bad input", async () => {
  const keys = key("ed25519", true);
  const { client } = await registerDevice(server, { keys });
  const good = key("ed25519");
  const mine = (body: string) => signBody(keys.privateKeyPem, Buffer.from(body));

  const signed = client.signedAuthRequest();
  const expectRefused = async (res: Response, pattern: RegExp) => {
    assert.equal(res.status, 400);
    assert.match((await res.json()).error, pattern);
  };
  // Signed by another key.
  await expectRefused(await sendAuth(signed.body, signBody(good.privateKeyPem, Buffer.from(signed.body))), /signature verification failed/);
  // Body changed after signing: one byte of whitespace is enough.
  await expectRefused(await sendAuth(signed.body.replace(/}$/, " }"), signed.signature), /signature verification failed/);
  const tampered = signed.body.replace('"v1"', '"v2"');
  assert.notEqual(tampered, signed.body);
  await expectRefused(await sendAuth(tampered, signed.signature), /signature verification failed/);
  await expectRefused(await sendAuth(signed.body, "not base64!"), /signature verification failed/);
  await expectRefused(await sendAuth(signed.body, undefined), /missing device signature header \(X-SVC-Device-Signature\)/);
  // The genuine request still works once...
  assert.equal((await sendAuth(signed.body, signed.signature)).status, 200);
  // ... and not twice, also not with the same signature bytes written differently.
  await expectRefused(await sendAuth(signed.body, signed.signature), /replayed/);
  const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  const last = signed.signature.replace(/=+$/, "").length - 1;
  const reencoded = signed.signature.slice(0, last) + alphabet[alphabet.indexOf(signed.signature[last]) | 1] + signed.signature.slice(last + 1);
  assert.notEqual(reencoded, signed.signature);
  assert.deepEqual(Buffer.from(reencoded, "base64"), Buffer.from(signed.signature, "base64"));
  await expectRefused(await sendAuth(signed.body, reencoded), /replayed/);

  // Stale and future timestamps, correctly signed.
  for (const offset of [-601, 601, -86400]) {
    const body = JSON.stringify({ ...JSON.parse(signed.body), timestamp: now() + offset });
    await expectRefused(await sendAuth(body, mine(body)), /timestamp/);
  }
  const inWindow = JSON.stringify({ ...JSON.parse(signed.body), timestamp: now() - 500 });
  assert.equal((await sendAuth(inWindow, mine(inWindow))).status, 200);

  // Bad bodies and keys: 400 with the reason, never a pending entry.
  const ec = generateKeyPairSync("ec", { namedCurve: "P-256" });
  const ecPem = ec.publicKey.export({ type: "spki", format: "pem" }) as string;
  const smallRsa = generateKeyPairSync("rsa", { modulusLength: 512 });
  // Only the standard public exponents: a large one makes every signature check slow (issue 9 item 5).
  const oddExponent = generateKeyPairSync("rsa", { modulusLength: 1024, publicExponent: 65539 });
  const cases: [string, RegExp][] = [
    ["not json", /malformed JSON/],
    ["[]", /expected a JSON object/],
    [authBody(good.privateKeyPem, { extra: { extra: 1 } }), /unknown field "extra"/],
    [JSON.stringify({ public_key: publicKeyPem(good.privateKeyPem), timestamp: now() }), /metadata/],
    [JSON.stringify({ metadata: { "svc.software.version": "v1" }, public_key: publicKeyPem(good.privateKeyPem), timestamp: now() }), /svc.hardware/],
    [JSON.stringify({ metadata: deviceMetadata(nextMac()), public_key: publicKeyPem(good.privateKeyPem), timestamp: "now" }), /timestamp/],
    [JSON.stringify({ metadata: deviceMetadata(nextMac()), public_key: "garbage", timestamp: now() }), /public key/],
    [JSON.stringify({ metadata: deviceMetadata(nextMac()), public_key: ecPem, timestamp: now() }), /unsupported key type ec/],
    [
      JSON.stringify({ metadata: deviceMetadata(nextMac()), public_key: smallRsa.publicKey.export({ type: "spki", format: "pem" }), timestamp: now() }),
      /at least 1024 bits/,
    ],
    [
      JSON.stringify({ metadata: deviceMetadata(nextMac()), public_key: oddExponent.publicKey.export({ type: "spki", format: "pem" }), timestamp: now() }),
      /exponent must be 3 or 65537/,
    ],
    [
      JSON.stringify({ metadata: deviceMetadata(nextMac()), public_key: good.privateKeyPem, timestamp: now() }),
      /unsupported PEM type "PRIVATE KEY"/,
    ],
    [JSON.stringify({ metadata: deviceMetadata(nextMac()), public_key: "-----BEGIN A-----".repeat(900), timestamp: now() }), /malformed PEM/],
  ];
  const before = (await json(server.request("/api/v1/auth/pending", { token: server.adminToken }))).length;
  for (const [body, pattern] of cases) {
    await expectRefused(await sendAuth(body, signBody(good.privateKeyPem, Buffer.from(body))), pattern);
  }
  assert.equal((await json(server.request("/api/v1/auth/pending", { token: server.adminToken }))).length, before);
});

test("timestamp window 0 turns the timestamp and replay checks off", async () => {
  const lax = await startTestServer({ compat: { auth_timestamp_window: 0 } });
  try {
    const keys = key("ed25519");
    const body = JSON.stringify({ metadata: deviceMetadata(nextMac()), public_key: publicKeyPem(keys.privateKeyPem), timestamp: 1 });
    const signature = signBody(keys.privateKeyPem, Buffer.from(body));
    for (let i = 0; i < 2; i++) {
      const res = await fetch(`${lax.url}/api/v1/auth/device`, { method: "POST", headers: { "X-SVC-Device-Signature": signature }, body });
      assert.equal(res.status, 401);
    }
  } finally {
    await lax.close();
  }
});

test("pending registrations: listing needs a read scope, removal and approval need admin_rw, with their status codes", async () => {
  const client = deviceClient(server);
  assert.equal((await client.authorize()).status, "pending");
  const entry = { mac_address: client.mac, public_key: client.publicKeyPem };

  assert.equal((await server.request("/api/v1/auth/pending")).status, 401);
  assert.equal((await server.request("/api/v1/auth/pending", { token: server.token(["create_group"]) })).status, 403);
  assert.equal((await server.request("/api/v1/auth/pending", { token: server.token(["admin_ro"]) })).status, 200);

  const ro = server.token(["admin_ro"]);
  assert.equal((await server.request("/api/v1/auth/pending", { method: "DELETE", token: ro, json: entry })).status, 403);
  assert.equal((await server.request("/api/v1/auth/register", { method: "POST", token: ro, json: entry })).status, 403);
  assert.equal((await server.request("/api/v1/auth/register", { method: "POST", json: entry })).status, 401);

  const bad: [unknown, number][] = [
    [{ mac_address: client.mac }, 400],
    [{ public_key: client.publicKeyPem }, 400],
    [{ ...entry, more: true }, 400],
    [{ ...entry, public_key: "garbage" }, 400],
    [{ ...entry, mac_address: nextMac() }, 404],
    [{ ...entry, public_key: publicKeyPem(key("ed25519", true).privateKeyPem) }, 404],
  ];
  for (const [body, status] of bad) {
    assert.equal((await server.request("/api/v1/auth/pending", { method: "DELETE", token: server.adminToken, json: body })).status, status, JSON.stringify(body));
    assert.equal((await server.request("/api/v1/auth/register", { method: "POST", token: server.adminToken, json: body })).status, status, JSON.stringify(body));
  }
  const notJson = await server.request("/api/v1/auth/register", { method: "POST", token: server.adminToken, body: "{", headers: { "content-type": "application/json" } });
  assert.equal(notJson.status, 400);

  const removed = await server.request("/api/v1/auth/pending", { method: "DELETE", token: server.adminToken, json: entry });
  assert.equal(removed.status, 200);
  assert.deepEqual(await removed.json(), {});
  const list = await json(server.request("/api/v1/auth/pending", { token: server.adminToken }));
  assert.equal(list.filter((p: { mac_address: string }) => p.mac_address === client.mac).length, 0);
  assert.equal((await server.request("/api/v1/auth/pending", { method: "DELETE", token: server.adminToken, json: entry })).status, 404);
  assert.equal((await approve(server, client)).status, 404);
  // The device is still unknown: asking again makes a new pending entry.
  assert.equal((await client.authorize()).status, "pending");
});

test("a key change is flagged, needs confirm_key_change, keeps id, groups and tags; the old key is then pending", async () => {
  const mac = nextMac();
  const { client: oldClient, id } = await registerDevice(server, { mac, extra: { "svc.software.tags": ["lab", "rack-1"] } });
  assert.deepEqual(await json(server.request(`/api/v2/devices/${id}/tags`, { token: server.adminToken })), ["lab", "rack-1"]);
  assert.equal((await server.request(`/api/v2/devices/${id}/tag/extra`, { method: "POST", token: server.adminToken })).status, 200);
  // A group membership (made directly: groups are another issue's routes).
  const groupId = await server.db.write(async (tx) => {
    const g = (await tx.run("INSERT INTO groups (created, metadata) VALUES (?, '{}') RETURNING id", [new Date().toISOString()])).rows[0]!.id as number;
    await tx.run("INSERT INTO group_devices (group_id, device_id) VALUES (?, ?)", [g, id]);
    return g;
  });

  const newClient = deviceClient(server, { mac, keys: key("ed25519", true), extra: { "svc.software.version": "v2" } });
  assert.equal((await newClient.authorize()).status, "pending");
  const pending = (await json(server.request("/api/v1/auth/pending?details=true", { token: server.adminToken }))).filter(
    (p: { mac_address: string }) => p.mac_address === mac,
  );
  assert.equal(pending.length, 1);
  assert.equal(pending[0].key_change, true);
  assert.equal(pending[0].device_id, id);
  // The old key keeps working until the new one is approved.
  assert.equal((await oldClient.authorize()).status, "accepted");

  const refused = await approve(server, newClient);
  assert.equal(refused.status, 409);
  assert.match((await refused.json()).error, /confirm_key_change/);
  assert.equal((await approve(server, newClient, false)).status, 409);
  assert.equal((await approve(server, newClient, true)).status, 200);

  const device = await json(server.request(`/api/v2/devices/${id}`, { token: server.adminToken }));
  assert.equal(device.id, id);
  assert.equal(device.public_key, newClient.publicKeyPem);
  assert.equal(device.metadata["svc.software.version"], "v2");
  assert.deepEqual(device.groups, [groupId]);
  assert.deepEqual(await json(server.request(`/api/v2/devices/${id}/tags`, { token: server.adminToken })), ["extra", "lab", "rack-1"]);
  const devices = await json(server.request("/api/v1/devices", { token: server.adminToken }));
  assert.equal(devices.filter((d: { mac_address: string }) => d.mac_address === mac).length, 1);

  assert.equal((await newClient.authorize()).status, "accepted");
  assert.equal((await oldClient.authorize()).status, "pending");
  const now = (await json(server.request("/api/v1/auth/pending?details=true", { token: server.adminToken }))).filter(
    (p: { mac_address: string }) => p.mac_address === mac,
  );
  assert.deepEqual(
    now.map((p: { public_key: string; key_change: boolean }) => [p.public_key, p.key_change]),
    [[oldClient.publicKeyPem, true]],
  );
});

test("deleting a device refuses its unexpired token at once; it must register again", async () => {
  const { client, id, token } = await registerDevice(server);
  assert.ok([200, 204].includes((await updateCheck(token, client.mac)).status));

  const del = await server.request(`/api/v2/devices/${id}`, { method: "DELETE", token: server.adminToken });
  assert.equal(del.status, 200);
  assert.deepEqual(await del.json(), {});
  const refused = await updateCheck(token, client.mac);
  assert.equal(refused.status, 401);
  assert.equal((await server.request(`/api/v2/devices/${id}`, { token: server.adminToken })).status, 404);
  assert.equal((await server.request(`/api/v2/devices/${id}`, { method: "DELETE", token: server.adminToken })).status, 404);

  assert.equal((await client.authorize()).status, "pending");
  assert.equal((await approve(server, client)).status, 200);
  const again = await client.authorize();
  assert.equal(again.status, "accepted");
  const devices = await json(server.request("/api/v1/devices", { token: server.adminToken }));
  const newId = devices.find((d: { mac_address: string }) => d.mac_address === client.mac).id;
  assert.ok(newId > id, "ids are never reused");
  // The token of the first incarnation stays dead.
  assert.equal((await updateCheck(token, client.mac)).status, 401);
});

test("device client: refreshes the token before it expires and after a 401", async () => {
  let clock = now();
  let authRequests = 0;
  const counting: HttpClient = (url, request) => {
    if (url.endsWith("/api/v1/auth/device")) authRequests += 1;
    return httpRequest(url, request);
  };
  const { client } = await registerDevice(server, { now: () => clock, http: counting });
  const first = await client.getToken();
  assert.ok(first);
  const counted = authRequests;
  assert.equal(await client.getToken(), first, "a fresh token is reused");
  clock += 200;
  assert.equal(await client.getToken(), first, "still more than 5 s left");
  assert.equal(authRequests, counted);
  clock += 96; // fewer than 5 s left: authorize again before using it
  assert.ok(await client.getToken());
  assert.equal(authRequests, counted + 1);

  // A token the server refuses (here: garbage) is replaced after the 401, and the request repeated.
  (client as unknown as { token: string }).token = "x.y.z";
  clock = now();
  (client as unknown as { tokenExpiresAt: number }).tokenExpiresAt = clock + 300;
  const res = await client.request("/api/v1/update/check", { method: "POST", json: deviceMetadata(client.mac) });
  assert.ok([200, 204].includes(res.status), String(res.status));
  assert.equal(authRequests, counted + 2);
  assert.notEqual(await client.getToken(), "x.y.z");
});

test("last_access: null-free after approval, updated by device-token requests, RFC 822", async () => {
  const { client, id } = await registerDevice(server);
  const before = await json(server.request(`/api/v2/devices/${id}`, { token: server.adminToken }));
  assert.match(before.last_access, /^\w{3}, \d{2} \w{3} \d{4} \d{2}:\d{2}:\d{2} GMT$/);
  // Move the stored time back, then make a device request.
  await server.db.run("UPDATE devices SET last_access = ? WHERE id = ?", ["2020-01-01T00:00:00.000Z", id]);
  assert.match((await json(server.request(`/api/v2/devices/${id}`, { token: server.adminToken }))).last_access, /2020/);
  const from = server.clock.now();
  await client.request("/api/v1/update/check", { method: "POST", json: deviceMetadata(client.mac) });
  const to = server.clock.now();
  const after = await json(server.request(`/api/v2/devices/${id}`, { token: server.adminToken }));
  // The server's time of the request, in whole seconds.
  const stamped = Date.parse(after.last_access);
  assert.ok(stamped >= Math.floor(from / 1000) * 1000 && stamped <= to, after.last_access);
});

test("device name: the reported svc.device.name at approval, else the MAC; later auths replace the metadata, not the name", async () => {
  const { client, id } = await registerDevice(server, { extra: { "svc.device.name": "bench-7" } });
  let device = await json(server.request(`/api/v2/devices/${id}`, { token: server.adminToken }));
  assert.equal(device.name, "bench-7");
  client.setMetadata(deviceMetadata(client.mac, { "svc.software.version": "v9" }));
  assert.equal((await client.authorize()).status, "accepted");
  device = await json(server.request(`/api/v2/devices/${id}`, { token: server.adminToken }));
  assert.equal(device.name, "bench-7");
  assert.equal(device.metadata["svc.software.version"], "v9");
  const unnamed = await registerDevice(server);
  assert.equal((await json(server.request(`/api/v2/devices/${unnamed.id}`, { token: server.adminToken }))).name, unnamed.client.mac);
});

test("one MAC keeps at most its 8 newest pending keys (the route is public)", async () => {
  const mac = nextMac();
  const clients = Array.from({ length: 10 }, () => deviceClient(server, { mac }));
  for (const client of clients) {
    assert.equal((await client.authorize()).status, "pending");
    server.clock.advance(1); // distinct last_appeared
  }
  const pending = (await json(server.request("/api/v1/auth/pending", { token: server.adminToken }))).filter(
    (p: { mac_address: string }) => p.mac_address === mac,
  );
  assert.deepEqual(
    pending.map((p: { public_key: string }) => p.public_key).sort(),
    clients.slice(2).map((c) => c.publicKeyPem).sort(),
  );
});
