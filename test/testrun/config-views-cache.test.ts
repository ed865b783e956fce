// Issue 9 item 7: test-suites and override-hints are parsed once per version of the files they read.
import { test } from "node:test";
import assert from "node:assert/strict";
import { useTestServer } from "../helpers/server.ts";

const server = useTestServer();

const put = async (name: string, text: string) => {
  const form = new FormData();
  form.append("file", new Blob([text]), name);
  assert.equal((await server.request("/api/v1/configs", { method: "POST", body: form, token: server.adminToken })).status, 200);
};
const view = async (name: string, what: "test-suites" | "override-hints") => {
  const res = await server.request(`/api/v1/configs/${name}/${what}`, { token: server.adminToken });
  return { status: res.status, body: (await res.json()) as unknown };
};

test("a replaced config or include, a deleted include: the views follow; unchanged files answer the same", async () => {
  await put("inc.yml", "tests:\n  gi: [{simple: {}}]\ntest-suites:\n  I1: {tests: [gi]}\noverride: tests.gi.0.simple.device\n");
  await put("main.yml", "includes: [inc.yml]\ntests:\n  g: [{simple: {}}]\ntest-suites:\n  M: {tests: [g]}\n");
  for (let i = 0; i < 3; i++) {
    assert.deepEqual(await view("main.yml", "test-suites"), { status: 200, body: ["M", "I1"] });
    assert.deepEqual(await view("main.yml", "override-hints"), { status: 200, body: ["tests.gi.0.simple.device"] });
  }
  await put("inc.yml", "tests:\n  gi: [{simple: {}}]\ntest-suites:\n  I2: {tests: [gi]}\n");
  assert.deepEqual(await view("main.yml", "test-suites"), { status: 200, body: ["M", "I2"] });
  assert.deepEqual(await view("main.yml", "override-hints"), { status: 200, body: [] });
  await put("main.yml", "tests:\n  g: [{simple: {}}]\ntest-suites:\n  N: {tests: [g]}\n");
  assert.deepEqual(await view("main.yml", "test-suites"), { status: 200, body: ["N"] });
  await put("main.yml", "includes: [inc.yml]\ntests:\n  g: [{simple: {}}]\n");
  assert.deepEqual(await view("main.yml", "test-suites"), { status: 200, body: ["I2"] });
  assert.equal((await server.request("/api/v1/configs/inc.yml", { method: "DELETE", token: server.adminToken })).status, 200);
  assert.equal((await view("main.yml", "test-suites")).status, 422, "the missing include is noticed");
  await put("inc.yml", "tests:\n  gi: [{simple: {}}]\ntest-suites:\n  I3: {tests: [gi]}\n");
  assert.deepEqual(await view("main.yml", "test-suites"), { status: 200, body: ["I3"] }, "and its return");
});
