import assert from "node:assert/strict";
import { scrypt } from "node:crypto";
import { request } from "node:http";
import { describe, test } from "node:test";
import { LoginThrottle } from "../../src/accounts/throttle.ts";
import { DUMMY_HASH } from "../../src/accounts/passwords.ts";
import { removeDir, startTestServer, type TestServer, useTestServer } from "../helpers/server.ts";
import { adminPassword, login, sessionCookie } from "./helpers.ts";

const THROTTLED = { error: "too many failed logins, try again later" };

/** A login sent from the loopback address `from` (127.0.0.0/8 all reaches the server): status, Retry-After and how long the answer took. */
function loginFrom(server: TestServer, from: string, username: string, password: string): Promise<{ status: number; retryAfter: string | undefined; ms: number }> {
  const url = new URL("/api/v1/auth/login", server.url);
  const body = JSON.stringify({ username, password });
  const started = performance.now();
  return new Promise((resolve, reject) => {
    const req = request(url, { method: "POST", localAddress: from, headers: { "content-type": "application/json", "content-length": Buffer.byteLength(body) } }, (res) => {
      res.resume();
      res.on("end", () => resolve({ status: res.statusCode ?? 0, retryAfter: res.headers["retry-after"], ms: performance.now() - started }));
    });
    req.on("error", reject);
    req.end(body);
  });
}

describe("accounts: login throttling over HTTP", () => {
  const server = useTestServer({}, async (server) => {
    const made = await server.request("/api/v1/users", { method: "POST", token: server.adminToken, json: { name: "bob", password: "bob-password", scopes: [] } });
    assert.equal(made.status, 201);
  });

  test("per name and address: after 5 failures that address waits (429, Retry-After), even with the right password; the owner elsewhere signs in", async () => {
    for (let i = 0; i < 5; i++) assert.equal((await login(server, "admin", `wrong-${i}`)).status, 401);
    for (const name of ["admin", "ADMIN"]) {
      const res = await login(server, name, adminPassword(server));
      assert.equal(res.status, 429, name);
      assert.deepEqual(await res.json(), THROTTLED);
      assert.ok(Number(res.headers.get("retry-after")) >= 1, "Retry-After in seconds");
      assert.equal(sessionCookie(res), undefined);
    }
    const owner = await loginFrom(server, "127.0.0.2", "admin", adminPassword(server));
    assert.equal(owner.status, 200, "the right password from an address that has not been failing");
    const bob = await login(server, "bob", "bob-password");
    assert.equal(bob.status, 200, "the wait is per name and address");
    assert.ok(sessionCookie(bob));
  });

  test("per client address: 20 failures over any names, then every name waits there (unknown names the same as known)", async () => {
    // 5 from the test above, 1 success (taken back); 15 more reach 20.
    for (let i = 0; i < 15; i++) {
      const res = await login(server, `guess${i}`, "whatever1");
      assert.equal(res.status, 401);
      assert.deepEqual(await res.json(), { error: "invalid username or password" });
    }
    for (const name of ["bob", "nobody"]) {
      const res = await login(server, name, name === "bob" ? "bob-password" : "whatever1");
      assert.equal(res.status, 429, name);
      assert.deepEqual(await res.json(), THROTTLED);
      assert.ok(res.headers.get("retry-after"));
    }
    assert.equal((await loginFrom(server, "127.0.0.3", "bob", "bob-password")).status, 200, "another address");
  });
});

describe("accounts: the per-name cap over HTTP", () => {
  test("past it a wrong password's 401 is held, while a right one from a fresh address answers at once", async () => {
    const server = await startTestServer();
    try {
      // 105 failures for admin from 53 addresses (two each: no address waits), as a spread-out guesser leaves them.
      const throttle = server.server.domains.accounts.throttle;
      for (let i = 0; i < 105; i++) {
        throttle.attempt("admin", `10.3.0.${i >> 1}`);
        throttle.failed("admin", `10.3.0.${i >> 1}`);
      }
      let answered = false;
      const wrong = loginFrom(server, "127.0.0.4", "admin", "not-the-password").then((res) => ((answered = true), res));
      await server.clock.sleepOf(15_000, 10_000); // the wrong password's answer held 15 s
      const owner = await loginFrom(server, "127.0.0.5", "admin", adminPassword(server));
      assert.equal(owner.status, 200);
      assert.equal(answered, false, "the guess is still held while the owner is signed in");
      server.clock.advance(15_000);
      assert.equal((await wrong).status, 401);
    } finally {
      await server.close();
      removeDir(server.dataDir);
    }
  });
});

describe("accounts: the password hash", () => {
  test("the first admin's hash has every account's parameters; an older one is made again at the next login", async () => {
    const server = await startTestServer();
    try {
      const stored = async () => (await server.db.get<{ password_hash: string }>("SELECT password_hash FROM accounts WHERE name = 'admin'"))!.password_hash;
      // The same parameters as the hash an unknown name is checked against: a failure costs the same.
      assert.equal((await stored()).split("$").slice(0, 4).join("$"), DUMMY_HASH.split("$").slice(0, 4).join("$"));
      assert.match(await stored(), /^scrypt\$32768\$8\$1\$/);
      // A data dir from before: the first admin's hash made with N=1024.
      const old = await new Promise<Buffer>((resolve, reject) =>
        scrypt(adminPassword(server).normalize("NFC"), Buffer.alloc(16, 7), 32, { N: 1024, r: 8, p: 1 }, (error, key) => (error ? reject(error) : resolve(key))),
      );
      const oldHash = `scrypt$1024$8$1$${Buffer.alloc(16, 7).toString("base64")}$${old.toString("base64")}`;
      await server.db.run("UPDATE accounts SET password_hash = ? WHERE name = 'admin'", [oldHash]);
      assert.equal((await login(server, "admin", adminPassword(server))).status, 200);
      assert.match(await stored(), /^scrypt\$32768\$8\$1\$/);
      assert.equal((await login(server, "admin", adminPassword(server))).status, 200, "the new hash checks the same password");
    } finally {
      await server.close();
      removeDir(server.dataDir);
    }
  });
});

describe("accounts: LoginThrottle", () => {
  test("the wait doubles with each failure past the free ones and starts when the attempt failed; a success clears the account", () => {
    let now = 1_000_000;
    const throttle = new LoginThrottle({ pair: { free: 2, capacity: 100 }, address: { free: 100, capacity: 100 }, name: { free: 100, capacity: 100 } }, () => now);
    const fail = () => {
      throttle.attempt("alice", "10.0.0.1");
      now += 500; // the password check
      throttle.failed("alice", "10.0.0.1");
    };
    fail();
    assert.equal(throttle.retryAfter("alice", "10.0.0.1"), 0, "the first failure is free");
    fail();
    assert.equal(throttle.retryAfter("Alice", "10.0.0.1"), 1, "after two: 1 s (names ignore case)");
    now += 1000;
    fail();
    assert.equal(throttle.retryAfter("alice", "10.0.0.1"), 2);
    now += 2000;
    fail();
    assert.equal(throttle.retryAfter("alice", "10.0.0.1"), 4);
    now += 4000;
    throttle.attempt("alice", "10.0.0.1");
    throttle.succeeded("alice", "10.0.0.1");
    assert.equal(throttle.retryAfter("alice", "10.0.0.1"), 0);
  });

  test("memory is bounded: at most `capacity` names and addresses, the least recently failed go first", () => {
    const throttle = new LoginThrottle({ pair: { free: 1, capacity: 1000 }, address: { free: 1, capacity: 500 }, name: { free: 1, capacity: 200 } });
    for (let i = 0; i < 20_000; i++) throttle.attempt(`user${i}`, `10.0.${i >> 8}.${i & 255}`);
    assert.deepEqual(throttle.size, { pairs: 1000, addresses: 500, names: 200 });
    throttle.attempt("user19999", "10.0.78.31");
    assert.ok(throttle.retryAfter("user19999", "10.0.78.31") > 0, "the newest are kept");
    assert.equal(throttle.retryAfter("user0", "10.0.0.0"), 0, "the oldest went");
  });

  test("past the per-name cap a wrong password is answered late, doubling up to 15 s; nobody elsewhere is refused", () => {
    let now = 1_000_000;
    const throttle = new LoginThrottle({ pair: { free: 5, capacity: 100 }, address: { free: 20, capacity: 100 }, name: { free: 10, capacity: 100 } }, () => now);
    const holds: number[] = [];
    // A guesser spread over many addresses, two guesses each: no address ever waits.
    for (let i = 0; i < 20; i++) {
      const from = `10.1.0.${i >> 1}`;
      assert.equal(throttle.retryAfter("admin", from), 0);
      throttle.attempt("admin", from);
      holds.push(throttle.failed("admin", from));
      now += 100;
    }
    assert.deepEqual(holds.slice(0, 10), Array(10).fill(0), "the first ten are free");
    assert.deepEqual(holds.slice(10), [1000, 2000, 4000, 8000, 15000, 15000, 15000, 15000, 15000, 15000]);
    // The owner, from an address that has not been failing: no wait, and a success is not held.
    assert.equal(throttle.retryAfter("admin", "10.2.0.1"), 0);
    throttle.attempt("admin", "10.2.0.1");
    throttle.succeeded("admin", "10.2.0.1");
    assert.equal(throttle.retryAfter("admin", "10.2.0.1"), 0);
  });
});
