import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import { LoginThrottle } from "../../src/accounts/throttle.ts";
import { removeDir, startTestServer, type TestServer } from "../helpers/server.ts";
import { adminPassword, login, sessionCookie } from "./helpers.ts";

const THROTTLED = { error: "too many failed logins, try again later" };

describe("accounts: login throttling over HTTP", () => {
  let server: TestServer;
  before(async () => {
    server = await startTestServer();
    const made = await server.request("/api/v1/users", { method: "POST", token: server.adminToken, json: { name: "bob", password: "bob-password", scopes: [] } });
    assert.equal(made.status, 201);
  });
  after(async () => {
    await server.close();
    removeDir(server.dataDir);
  });

  test("per account: after 5 failures the next attempt is a 429 with Retry-After, even with the right password; other accounts still sign in", async () => {
    for (let i = 0; i < 5; i++) assert.equal((await login(server, "admin", `wrong-${i}`)).status, 401);
    for (const name of ["admin", "ADMIN"]) {
      const res = await login(server, name, adminPassword(server));
      assert.equal(res.status, 429, name);
      assert.deepEqual(await res.json(), THROTTLED);
      assert.ok(Number(res.headers.get("retry-after")) >= 1, "Retry-After in seconds");
      assert.equal(sessionCookie(res), undefined);
    }
    const bob = await login(server, "bob", "bob-password");
    assert.equal(bob.status, 200, "the throttle is per account");
    assert.ok(sessionCookie(bob));
  });

  test("per client address: 20 failures over any names, then every name waits (unknown names the same as known)", async () => {
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
  });
});

describe("accounts: LoginThrottle", () => {
  test("the wait doubles with each failure past the free ones and starts when the attempt failed; a success clears the account", () => {
    let now = 1_000_000;
    const throttle = new LoginThrottle({ account: { free: 2, capacity: 100 }, address: { free: 100, capacity: 100 } }, () => now);
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
    const throttle = new LoginThrottle({ account: { free: 1, capacity: 1000 }, address: { free: 1, capacity: 500 } });
    for (let i = 0; i < 20_000; i++) throttle.attempt(`user${i}`, `10.0.${i >> 8}.${i & 255}`);
    assert.deepEqual(throttle.size, { accounts: 1000, addresses: 500 });
    throttle.attempt("user19999", "10.0.78.31");
    assert.ok(throttle.retryAfter("user19999", "1.1.1.1") > 0, "the newest are kept");
    assert.equal(throttle.retryAfter("user0", "1.1.1.1"), 0, "the oldest went");
  });
});
