// Black-box tests of the config routes (test-run-server.md 12.1-12.6, 13) over HTTP.
import { after, describe, test } from "node:test";
import assert from "node:assert/strict";
import { existsSync, readdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { type TestServer, useTestServer } from "../helpers/server.ts";
import { API_TEST, serverErrors } from "./run-helpers.ts";

const RFC822 = /^(Mon|Tue|Wed|Thu|Fri|Sat|Sun), \d{2} (Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec) \d{4} \d{2}:\d{2}:\d{2} \+0000$/;

/** POSTs a multipart upload with one file part (or the given form). */
function upload(server: TestServer, name: string, content: string, token: string | undefined, field = "file"): Promise<Response> {
  const form = new FormData();
  form.append(field, new Blob([content]), name);
  return server.request("/api/v1/configs", { method: "POST", body: form, token });
}

async function expectError(response: Response, status: number, pattern?: RegExp): Promise<void> {
  const body = (await response.json()) as { error?: unknown };
  assert.equal(response.status, status, JSON.stringify(body));
  assert.equal(typeof body.error, "string");
  if (pattern) assert.match(body.error as string, pattern);
}

const storeDir = (server: TestServer) => join(server.dataDir, "testrun", "configs");

describe("config routes (token auth)", () => {
  let errors: string[] = [];
  let rw: string;
  let ro: string;
  const server = useTestServer({}, async (server) => {
    errors = serverErrors(server);
    rw = server.token(["tests_rw"]);
    ro = server.token(["tests_ro"]);
  });
  after(() => assert.deepEqual(errors, [], "no request was answered 5xx"));

  test("upload stores the file and answers its name and created; list, info and file download follow", async () => {
    const response = await upload(server, "api-test.yml", API_TEST, rw);
    assert.equal(response.status, 200);
    const stored = (await response.json()) as { name: string; created: string };
    assert.equal(stored.name, "api-test.yml");
    assert.match(stored.created, RFC822);
    assert.equal(readFileSync(join(storeDir(server), "api-test.yml"), "utf8"), API_TEST);

    const list = await server.request("/api/v1/configs", { token: ro });
    assert.equal(list.status, 200);
    assert.deepEqual(await list.json(), [{ name: "api-test.yml", created: stored.created }]);

    const info = await server.request("/api/v1/configs/api-test.yml", { token: ro });
    assert.equal(info.status, 200);
    assert.deepEqual(await info.json(), { name: "api-test.yml", config_name: "api-test.yml", created: stored.created });

    const file = await server.request("/api/v1/configs/api-test.yml/file", { token: ro });
    assert.equal(file.status, 200);
    assert.equal(file.headers.get("content-type"), "text/yaml; charset=utf-8");
    assert.equal(file.headers.get("content-disposition"), "attachment; filename=api-test.yml");
    assert.equal(await file.text(), API_TEST);

    const head = await server.request("/api/v1/configs/api-test.yml/file", { method: "HEAD", token: ro });
    assert.equal(head.status, 200);
    assert.equal(head.headers.get("content-type"), "text/yaml; charset=utf-8");

    // protoplaster-mgmt sends //api/v1/... with its default URL.
    const doubled = await server.request("//api/v1/configs", { token: ro });
    assert.equal(doubled.status, 200);
  });

  test("override hints and test-suites of the api-test.yml example", async () => {
    await upload(server, "api-test.yml", API_TEST, rw);
    const hints = await server.request("/api/v1/configs/api-test.yml/override-hints", { token: ro });
    assert.equal(hints.status, 200);
    assert.deepEqual(await hints.json(), ["tests.base.0.simple.device", "tests.ext.0.simple.device"]);
    const suites = await server.request("/api/v1/configs/api-test.yml/test-suites", { token: ro });
    assert.equal(suites.status, 200);
    assert.deepEqual(await suites.json(), ["compl"]);
  });

  test("suites with nesting and forward references, and hints through includes", async () => {
    assert.equal((await upload(server, "suites-inc.yml", "tests:\n  gi: [{simple: {device: i}}]\ntest-suites:\n  from-include: {tests: [gi]}\noverride: tests.gi.0.simple.device\n", rw)).status, 200);
    const main = "includes: [suites-inc.yml]\ntests:\n  g1: [{simple: {}}]\n  g2: [{simple: {}}]\ntest-suites:\n  A: {tests: [B, g1]}\n  B: {tests: [g2, from-include]}\noverride: [tests.g1.0.simple.device]\n";
    assert.equal((await upload(server, "suites.yml", main, rw)).status, 200);
    const suites = await server.request("/api/v1/configs/suites.yml/test-suites", { token: ro });
    assert.deepEqual(await suites.json(), ["A", "B", "from-include"]);
    const hints = await server.request("/api/v1/configs/suites.yml/override-hints", { token: ro });
    assert.deepEqual(await hints.json(), ["tests.g1.0.simple.device", "tests.gi.0.simple.device"]);
  });

  test("hints and suites: 404 for a missing config, 422 'Failed to parse file' for one that does not load", async () => {
    for (const view of ["override-hints", "test-suites"]) {
      await expectError(await server.request(`/api/v1/configs/none.yml/${view}`, { token: ro }), 404, /^Configuration file not found$/);
    }
    await upload(server, "cyclic-a.yml", "includes: [cyclic-b.yml]\n", rw);
    await upload(server, "cyclic-b.yml", "includes: [cyclic-a.yml]\n", rw);
    await upload(server, "missing-include.yml", "includes: [not-there.yml]\n", rw);
    await upload(server, "bad-hint.yml", "override: {a: 1}\n", rw);
    await upload(server, "conflict.yml", "tests: {g: []}\ntest-suites: {g: {tests: []}}\n", rw);
    await upload(server, "undefined-alias.yml", "tests: {g: [{simple: *nowhere}]}\n", rw);
    const cases: Array<[string, string, RegExp]> = [
      ["cyclic-a.yml", "test-suites", /^Failed to parse file: include cycle: cyclic-a\.yml -> cyclic-b\.yml -> cyclic-a\.yml$/],
      ["cyclic-a.yml", "override-hints", /include cycle/],
      ["missing-include.yml", "test-suites", /^Failed to parse file: .*not-there\.yml' not found/],
      ["bad-hint.yml", "override-hints", /^Failed to parse file: override: override hint must be a string or a list of strings$/],
      ["conflict.yml", "test-suites", /conflicts with test group/],
      ["undefined-alias.yml", "test-suites", /undefined alias 'nowhere'/],
    ];
    for (const [name, view, pattern] of cases) await expectError(await server.request(`/api/v1/configs/${name}/${view}`, { token: ro }), 422, pattern);
  });

  test("upload refusals are 400 and change nothing", async () => {
    const before = readdirSync(storeDir(server)).sort();
    const form = new FormData();
    form.append("other", "value");
    await expectError(await server.request("/api/v1/configs", { method: "POST", body: form, token: rw }), 400, /^No file part in the request$/);
    await expectError(await upload(server, "x.yml", "a: 1\n", rw, "notfile"), 400, /No file part/);
    await expectError(await server.request("/api/v1/configs", { method: "POST", json: { file: "a: 1" }, token: rw }), 400, /No file part/);
    await expectError(await server.request("/api/v1/configs", { method: "POST", token: rw }), 400);
    await expectError(await upload(server, "", "a: 1\n", rw), 400, /^Empty filename$/);
    await expectError(await upload(server, "config.txt", "a: 1\n", rw), 400, /^Only YAML \(\.yaml, \.yml\) files are allowed$/);
    await expectError(await upload(server, "noext", "a: 1\n", rw), 400, /Only YAML/);
    await expectError(await upload(server, "../../evil dir/My File.YML", "a: 1\n", rw), 400, /^invalid config name$/);
    await expectError(await upload(server, "ünïcode.yml", "a: 1\n", rw), 400, /^invalid config name$/);
    await expectError(await upload(server, ".hidden.yml", "a: 1\n", rw), 400, /^invalid config name$/);
    await expectError(await upload(server, "broken.yml", "a: [1, 2\n", rw), 400, /^invalid YAML: /);
    await expectError(await upload(server, "two-docs.yml", "a: 1\n---\nb: 2\n", rw), 400, /^invalid YAML: /);
    const truncated = new TextEncoder().encode('--b\r\nContent-Disposition: form-data; name="file"; filename="t.yml"\r\n\r\na: 1');
    await expectError(
      await server.request("/api/v1/configs", { method: "POST", body: truncated, headers: { "content-type": "multipart/form-data; boundary=b" }, token: rw }),
      400,
    );
    assert.deepEqual(readdirSync(storeDir(server)).sort(), before, "no file added, no temp file left");
    assert.ok(!existsSync(join(server.dataDir, "evil dir")));
  });

  test("a path in the uploaded file name keeps only its base name; .YML is accepted and listed; re-upload replaces", async () => {
    const response = await upload(server, "../../sub/Upper.YML", "tests: {}\n", rw);
    assert.equal(response.status, 200);
    assert.equal(((await response.json()) as { name: string }).name, "Upper.YML");
    assert.ok(existsSync(join(storeDir(server), "Upper.YML")));
    assert.ok(!existsSync(join(server.dataDir, "sub")));
    await upload(server, "windows.yaml", "v: 1\n", rw);
    assert.equal((await upload(server, "C:\\Users\\me\\windows.yaml", "v: 2\n", rw)).status, 200);
    assert.equal(readFileSync(join(storeDir(server), "windows.yaml"), "utf8"), "v: 2\n");
    const names = ((await (await server.request("/api/v1/configs", { token: ro })).json()) as Array<{ name: string }>).map((c) => c.name);
    assert.ok(names.includes("Upper.YML") && names.includes("windows.yaml"));
    assert.deepEqual(names, [...names].sort(), "sorted by name");
  });

  test("files in the store that are not configs are not listed", async () => {
    writeFileSync(join(storeDir(server), "notes.txt"), "x");
    writeFileSync(join(storeDir(server), ".upload-stale.tmp"), "x");
    const names = ((await (await server.request("/api/v1/configs", { token: ro })).json()) as Array<{ name: string }>).map((c) => c.name);
    assert.ok(!names.includes("notes.txt") && !names.includes(".upload-stale.tmp"));
  });

  test("info, file and delete of a missing config are 404; delete removes the file", async () => {
    await expectError(await server.request("/api/v1/configs/missing.yml", { token: ro }), 404, /^File not found: missing\.yml$/);
    await expectError(await server.request("/api/v1/configs/missing.yml/file", { token: ro }), 404, /^Configuration file not found$/);
    await expectError(await server.request("/api/v1/configs/missing.yml", { method: "DELETE", token: rw }), 404, /^Configuration file not found$/);
    await upload(server, "to-delete.yml", "a: 1\n", rw);
    const deleted = await server.request("/api/v1/configs/to-delete.yml", { method: "DELETE", token: rw });
    assert.equal(deleted.status, 200);
    assert.deepEqual(await deleted.json(), {});
    assert.ok(!existsSync(join(storeDir(server), "to-delete.yml")));
    await expectError(await server.request("/api/v1/configs/to-delete.yml", { token: ro }), 404);
  });

  test("path traversal in config names never reaches outside the store", async () => {
    const outside = join(server.dataDir, "testrun", "outside.yml");
    writeFileSync(outside, "secret: 1\n");
    const names = ["..%2Foutside.yml", "..%2F..%2Ftestrun%2Foutside.yml", "%2E%2E%2Foutside.yml", "%2Fetc%2Fpasswd", "..", "..%5Coutside.yml"];
    for (const name of names) {
      for (const suffix of ["", "/file", "/test-suites", "/override-hints"]) {
        const response = await server.request(`/api/v1/configs/${name}${suffix}`, { token: ro });
        assert.equal(response.status, 404, `${name}${suffix}`);
        assert.ok(!(await response.text()).includes("secret"));
      }
      assert.equal((await server.request(`/api/v1/configs/${name}`, { method: "DELETE", token: rw })).status, 404);
    }
    assert.ok(existsSync(outside), "nothing outside the store was deleted");
    // An include that tries to leave the store is refused too.
    await upload(server, "escape.yml", "includes: [../outside.yml]\n", rw);
    await expectError(await server.request("/api/v1/configs/escape.yml/test-suites", { token: ro }), 422, /invalid include name/);
  });

  test("401 without or with a bad token, 403 with the wrong scope; ro reads, rw writes, admin scopes imply both", async () => {
    await upload(server, "auth.yml", API_TEST, rw);
    const reads = ["/api/v1/configs", "/api/v1/configs/auth.yml", "/api/v1/configs/auth.yml/file", "/api/v1/configs/auth.yml/test-suites", "/api/v1/configs/auth.yml/override-hints"];
    const device = server.server.ctx.tokens.issueDevice("00:11:22:33:44:55", 1, 300);
    for (const path of reads) {
      await expectError(await server.request(path), 401);
      await expectError(await server.request(path, { token: "not-a-token" }), 401);
      await expectError(await server.request(path, { token: device }), 401);
      await expectError(await server.request(path, { token: server.token(["create_group"]) }), 403);
      for (const scopes of [["tests_ro"], ["tests_rw"], ["admin_ro"], ["admin_rw"]] as const) {
        assert.equal((await server.request(path, { token: server.token([...scopes]) })).status, 200, `${path} with ${scopes}`);
      }
    }
    await expectError(await upload(server, "auth2.yml", "a: 1\n", undefined), 401);
    await expectError(await upload(server, "auth2.yml", "a: 1\n", ro), 403);
    await expectError(await upload(server, "auth2.yml", "a: 1\n", server.token(["admin_ro"])), 403);
    assert.equal((await upload(server, "auth2.yml", "a: 1\n", server.token(["admin_rw"]))).status, 200);
    await expectError(await server.request("/api/v1/configs/auth2.yml", { method: "DELETE" }), 401);
    await expectError(await server.request("/api/v1/configs/auth2.yml", { method: "DELETE", token: ro }), 403);
    assert.ok(existsSync(join(storeDir(server), "auth2.yml")), "refused delete changed nothing");
    assert.equal((await server.request("/api/v1/configs/auth2.yml", { method: "DELETE", token: rw })).status, 200);
  });
});

describe("config routes with test_server.auth: none and a small size limit", () => {
  let errors: string[] = [];
  const server = useTestServer({ test_server: { auth: "none", max_config_bytes: 2048 } }, async (server) => {
    errors = serverErrors(server);
  });
  after(() => assert.deepEqual(errors, [], "no request was answered 5xx"));

  test("every config route works without a token", async () => {
    assert.equal((await upload(server, "open.yml", API_TEST, undefined)).status, 200);
    for (const path of ["/api/v1/configs", "/api/v1/configs/open.yml", "/api/v1/configs/open.yml/file", "/api/v1/configs/open.yml/test-suites", "/api/v1/configs/open.yml/override-hints"]) {
      assert.equal((await server.request(path)).status, 200, path);
    }
    assert.equal((await server.request("/api/v1/configs/open.yml", { method: "DELETE" })).status, 200);
  });

  test("configs survive a restart and temp files of interrupted uploads are removed at start", async () => {
    await upload(server, "kept.yml", "a: 1\n", undefined);
    writeFileSync(join(storeDir(server), ".upload-interrupted.tmp"), "partial");
    await server.restart();
    errors = serverErrors(server);
    assert.ok(!existsSync(join(storeDir(server), ".upload-interrupted.tmp")));
    assert.equal(readFileSync(join(storeDir(server), "kept.yml"), "utf8"), "a: 1\n");
    assert.equal((await server.request("/api/v1/configs/kept.yml")).status, 200);
    assert.equal((await server.request("/api/v1/configs/kept.yml", { method: "DELETE" })).status, 200);
  });

  test("413 above test_server.max_config_bytes, nothing stored; exactly the limit is accepted", async () => {
    const big = "a: " + "x".repeat(2100) + "\n";
    await expectError(await upload(server, "big.yml", big, undefined), 413);
    const huge = "a: " + "x".repeat(200_000) + "\n";
    await expectError(await upload(server, "huge.yml", huge, undefined), 413);
    assert.deepEqual(readdirSync(storeDir(server)).filter((n) => n !== "open.yml"), []);
    const exact = "a: " + "x".repeat(2048 - 4) + "\n";
    assert.equal(Buffer.byteLength(exact), 2048);
    assert.equal((await upload(server, "exact.yml", exact, undefined)).status, 200);
  });
});
