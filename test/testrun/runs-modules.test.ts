import assert from "node:assert/strict";
import { chmodSync, existsSync, mkdirSync, readFileSync, symlinkSync, writeFileSync } from "node:fs";
import { createServer as createHttpServer, type Server as HttpServer } from "node:http";
import { createServer as createTcpServer, type AddressInfo, type Server as TcpServer, type Socket } from "node:net";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";
import { removeDir, tempDir, useTestServer, waitFor } from "../helpers/server.ts";
import { alive, reportRows, trigger, uploadConfig, waitRun, serverErrors } from "./run-helpers.ts";

type Row = Record<string, string>;
const brief = (rows: Row[]) => rows.map((r) => [r["test name"], r.status, r.message]);

describe("modules", () => {
  let errors: string[] = [];
  let tree: string;
  let fakeBin: string;
  let http: HttpServer;
  let tcp: TcpServer;
  let httpPort: number;
  let tcpPort: number;
  const savedPath = process.env.PATH;

  /** Uploads `yaml` as a config, runs it to the end, returns the run and its rows. */
  const run = async (name: string, yaml: string, extra: Record<string, unknown> = {}) => {
    await uploadConfig(s, name, yaml);
    const created = await trigger(s, { config_name: name, ...extra });
    const done = await waitRun(s, created.id);
    return { run: done, rows: await reportRows(s, created.id) };
  };

  before(async () => {
    // A stand-in `ping` so the module is tested the same on every box.
    fakeBin = tempDir("labgate-bin-");
    writeFileSync(
      join(fakeBin, "ping"),
      '#!/bin/sh\nfor a; do host=$a; done\nif [ "$host" = 10.255.255.1 ]; then echo "3 packets transmitted, 0 received, 100% packet loss, time 2002ms"; exit 1; fi\n' +
        'echo "3 packets transmitted, 3 received, 0% packet loss, time 2003ms"\necho "rtt min/avg/max/mdev = 0.031/0.045/0.060/0.012 ms"\n',
    );
    chmodSync(join(fakeBin, "ping"), 0o755);
    process.env.PATH = `${fakeBin}:${savedPath}`;

    tree = tempDir("labgate-tree-");
    writeFileSync(join(tree, "value"), "42\n");
    chmodSync(join(tree, "value"), 0o640);
    writeFileSync(join(tree, "name"), "gateway-01\n");
    mkdirSync(join(tree, "sub"));
    symlinkSync(join(tree, "value"), join(tree, "link"));
    writeFileSync(join(tree, "knob"), "0");

    http = createHttpServer((req, res) => {
      if (req.url === "/status") {
        res.setHeader("content-type", "application/json");
        res.end(JSON.stringify({ state: "ok", nested: { count: 3, list: ["a", "b"] }, "version.major": 2 }));
      } else if (req.url === "/echo" && req.method === "POST") {
        let body = "";
        req.on("data", (c) => (body += c));
        req.on("end", () => res.end(`got ${req.headers["content-type"]} ${body}`));
      } else {
        res.statusCode = 404;
        res.end("nope");
      }
    });
    await new Promise<void>((r) => http.listen(0, "127.0.0.1", r));
    httpPort = (http.address() as AddressInfo).port;
    tcp = createTcpServer((socket) => {
      socket.write("HELLO labgate\r\n");
      socket.on("data", (d) => socket.write(`echo:${d}`));
      socket.on("error", () => {});
    });
    await new Promise<void>((r) => tcp.listen(0, "127.0.0.1", r));
    tcpPort = (tcp.address() as AddressInfo).port;
  });
  const s = useTestServer({}, async (s) => {
    errors = serverErrors(s);
    // A script module with a nested key, placed by the administrator.
    mkdirSync(join(s.dataDir, "testrun", "modules", "nested", "impl1"), { recursive: true });
    writeFileSync(
      join(s.dataDir, "testrun", "modules", "nested", "impl1", "hello.yaml"),
      [
        "class: TestHello",
        'device_name: "Hello Test (impl1): {message}"',
        "params:",
        "  message: {required: true}",
        "cases:",
        "  - name: hello",
        "    command: 'test \"$PARAM_MESSAGE\" = Hello'",
        "    expect_exit: 0",
        '    fail_message: "Expected `Hello` message attribute, got: {message}"',
        "",
      ].join("\n"),
    );
  });

  after(async () => {
    assert.deepEqual(errors, [], "no request was answered 5xx");
    process.env.PATH = savedPath;
    await new Promise((r) => http.close(r));
    await new Promise((r) => tcp.close(r));
    removeDir(tree);
    removeDir(fakeBin);
  });

  test("exec: exit codes, output patterns, argv without a shell, missing program, saved output", async () => {
    const { run: r, rows } = await run(
      "exec.yml",
      `
tests:
  g:
  - exec:
      command: "echo out-line; echo err-line >&2; exit 3"
      expect_exit: [0, 3]
      stdout_regex: "^out-"
      stderr_contains: err-line
      save_output: both.log
  - exec:
      command: "exit 2"
  - exec:
      command: [echo, "$HOME; echo injected"]
      stdout_contains: "$HOME; echo injected"
      stdout_not_regex: "^injected"
  - exec:
      command: "echo hello"
      stdout_contains: goodbye
  - exec:
      command: [no-such-program-xyz, --flag]
`,
    );
    assert.equal(r.status, "failed");
    assert.deepEqual(brief(rows), [
      ["exit_code[test_config0]", "passed", ""],
      ["stdout[test_config0]", "passed", ""],
      ["stderr[test_config0]", "passed", ""],
      ["exit_code[test_config1]", "failed", "exit status 2, expected 0"],
      ["exit_code[test_config2]", "passed", ""],
      ["stdout[test_config2]", "passed", ""],
      ["exit_code[test_config3]", "passed", ""],
      ["stdout[test_config3]", "failed", 'stdout does not contain "goodbye"'],
      ["exit_code[test_config4]", "failed", "no-such-program-xyz not found"],
    ]);
    assert.equal(rows[0]["device name"], "exec(echo)");
    assert.equal(rows[0].module, "test.py::TestExec::test_exit_code[test_config0]");
    const saved = await s.request(`/api/v1/test-runs/${r.id}/artifacts/both.log`, { token: s.adminToken });
    assert.equal(await saved.text(), "out-line\nerr-line\n");
  });

  test("exec: a timeout fails every case and stops the program", async () => {
    const { run: r, rows } = await run(
      "exec-timeout.yml",
      `
tests:
  g:
  - exec:
      command: "sleep 20"
      timeout: 0.3
      stdout_contains: never
      max_seconds: 10
`,
    );
    assert.equal(r.status, "failed");
    assert.deepEqual(brief(rows), [
      ["exit_code[test_config0]", "failed", "timed out after 0.3 s"],
      ["stdout[test_config0]", "failed", "timed out after 0.3 s"],
      ["duration[test_config0]", "failed", "timed out after 0.3 s"],
    ]);
  });

  test("exec: aborting a running program kills its process group", async () => {
    await uploadConfig(s, "exec-abort.yml", 'tests:\n  g:\n  - exec:\n      command: "sleep 30 & echo $! > child.pid; wait"\n');
    const created = await trigger(s, { config_name: "exec-abort.yml" });
    await waitRun(s, created.id, (r) => r.status === "running");
    const pidFile = join(s.dataDir, "testrun", "artifacts", created.id, "child.pid");
    const pid = await waitFor(() => (existsSync(pidFile) ? Number(readFileSync(pidFile, "utf8").trim()) : 0), 5000, "the child's pid");
    assert.ok(pid > 0 && alive(pid));
    const res = await s.request(`/api/v1/test-runs/${created.id}`, { method: "DELETE", token: s.adminToken });
    assert.equal(res.status, 200);
    const done = await waitRun(s, created.id);
    assert.equal(done.status, "aborted");
    await waitFor(() => !alive(pid), 1000, "the child process to be gone");
    assert.deepEqual(brief(await reportRows(s, created.id)), [["exit_code[test_config0]", "skipped", "Aborted by user"]]);
  });

  test("junit: ingests the JUnit XML of node's test runner", async () => {
    const suiteDir = tempDir("labgate-junit-");
    try {
      // (env -u: this suite itself runs under node's test runner, whose context variable would
      // make the inner runner report to us instead of writing the XML.)
      writeFileSync(
        join(suiteDir, "sample.test.mjs"),
        [
          'import test, { describe, it } from "node:test";',
          'import assert from "node:assert";',
          'test("adds numbers", () => assert.equal(1 + 1, 2));',
          'test("compares strings", () => assert.strictEqual("a", "b", "strings differ"));',
          'test("not ready", { skip: "needs hardware" }, () => {});',
          'describe("group one", () => { it("inner works", () => {}); });',
          "",
        ].join("\n"),
      );
      const { run: r, rows } = await run(
        "junit.yml",
        `
tests:
  g:
  - junit:
      command: [env, -u, NODE_TEST_CONTEXT, ${JSON.stringify(process.execPath)}, --test, --test-reporter=junit, --test-reporter-destination=junit.xml, ${JSON.stringify(join(suiteDir, "sample.test.mjs"))}]
      timeout: 60
`,
      );
      assert.equal(r.status, "failed");
      assert.deepEqual(
        rows.map((x) => [x["test name"], x.status]),
        [
          ["command[test_config0]", "passed"],
          ["test.adds_numbers[test_config0]", "passed"],
          ["test.compares_strings[test_config0]", "failed"],
          ["test.not_ready[test_config0]", "skipped"],
          ["test.inner_works[test_config0]", "passed"],
        ],
      );
      assert.match(rows[2].message, /strings differ/);
      assert.equal(rows[3].message, "Skipped: needs hardware");
      assert.equal(rows[1].module, "test.py::TestJunit::test_test.adds_numbers[test_config0]");
      const artifacts = (await (await s.request(`/api/v1/test-runs/${r.id}/artifacts`, { token: s.adminToken })).json()) as { name: string }[];
      assert.deepEqual(
        artifacts.map((a) => a.name),
        ["junit.log", "junit.xml"],
      );

      // Only the report, without a command; a missing report fails the command case.
      const missing = await run("junit-missing.yml", "tests:\n  g:\n  - junit:\n      report: nothing-*.xml\n");
      assert.deepEqual(brief(missing.rows), [["command[test_config0]", "failed", "no JUnit report found at nothing-*.xml"]]);
    } finally {
      removeDir(suiteDir);
    }
  });

  test("http: status, body and JSON checks against a local server", async () => {
    const base = `http://127.0.0.1:${httpPort}`;
    const { run: r, rows } = await run(
      "http.yml",
      `
tests:
  g:
  - http:
      url: ${base}/status
      json:
      - {path: state, equals: ok}
      - {path: nested.count, equals: 3}
      - {path: nested.list.1, equals: b}
      - {path: /version.major, equals: 2}
      body_contains: nested
      max_ms: 5000
  - http:
      url: ${base}/echo
      method: post
      body: {a: 1}
      body_regex: 'got application/json \\{"a":1\\}'
  - http:
      url: ${base}/missing
  - http:
      url: ${base}/missing
      expect_status: [404]
      json: {x: 1}
  - http:
      url: http://127.0.0.1:1/
      timeout: 2
  - http:
      url: ${base}/status
      json: {state: ok, /nested/count: 4}
`,
    );
    assert.equal(r.status, "failed");
    assert.deepEqual(brief(rows), [
      ["status[test_config0]", "passed", ""],
      ["body[test_config0]", "passed", ""],
      ["latency[test_config0]", "passed", ""],
      ["status[test_config1]", "passed", ""],
      ["body[test_config1]", "passed", ""],
      ["status[test_config2]", "failed", "status 404, expected 200"],
      ["status[test_config3]", "passed", ""],
      ["body[test_config3]", "failed", "body is not JSON"],
      ["status[test_config4]", "failed", "request failed: ECONNREFUSED"],
      ["status[test_config5]", "passed", ""],
      ["body[test_config5]", "failed", "JSON path /nested/count is 3, expected 4"],
    ]);
    assert.equal(rows[0]["device name"], `http(${base}/status)`);

    // A mapping key with a `.` is an in-file override (3.2): checks written that way would vanish, so 422.
    await uploadConfig(s, "http-dotted.yml", `tests:\n  g:\n  - http:\n      url: ${base}/status\n      json: {nested.count: 3}\n`);
    const refused = await s.request("/api/v1/test-runs", { method: "POST", json: { config_name: "http-dotted.yml" }, token: s.adminToken });
    assert.equal(refused.status, 422);
    assert.match(((await refused.json()) as { error: string }).error, /tests\.g\.0\.http: parameter 'json': .*JSON Pointer/);
  });

  test("tcp: connect, response and closed ports against a local server", async () => {
    const { run: r, rows } = await run(
      "tcp.yml",
      `
tests:
  g:
  - tcp:
      host: 127.0.0.1
      port: ${tcpPort}
      expect_regex: "^HELLO"
  - tcp:
      host: 127.0.0.1
      port: ${tcpPort}
      send: ping
      expect_regex: "echo:ping"
  - tcp:
      host: 127.0.0.1
      port: 1
      expect: closed
  - tcp:
      host: 127.0.0.1
      port: 1
`,
    );
    assert.equal(r.status, "failed");
    assert.deepEqual(brief(rows), [
      ["connect[test_config0]", "passed", ""],
      ["response[test_config0]", "passed", ""],
      ["connect[test_config1]", "passed", ""],
      ["response[test_config1]", "passed", ""],
      ["connect[test_config2]", "passed", ""],
      ["connect[test_config3]", "failed", "connection failed: ECONNREFUSED"],
    ]);
    assert.equal(rows[0]["device name"], `tcp(127.0.0.1:${tcpPort})`);
  });

  test("tcp: the connect and read deadlines are on the server's clock", async () => {
    // Ten minutes (and a second) each: the run can only end because the clock is moved.
    await uploadConfig(s, "tcp-slow.yml", `tests:\n  g:\n  - tcp: {host: 127.0.0.1, port: ${tcpPort}, timeout: 601, read_timeout: 602, expect_regex: never}\n`);
    const created = await trigger(s, { config_name: "tcp-slow.yml" });
    await s.clock.sleepOf(602_000); // connected, reading
    s.clock.advance(602_000);
    await waitRun(s, created.id);
    const rows = await reportRows(s, created.id);
    assert.deepEqual(brief(rows).map(([name, status]) => [name, status]), [
      ["connect[test_config0]", "passed"],
      ["response[test_config0]", "failed"],
    ]);
    // What arrived before the clock moved (the greeting or nothing yet) did not match.
    assert.match(rows[1].message, /^response "(HELLO labgate\\r\\n)?" does not match \/never\/$/);
  });

  test("tcp: once connected, only read_timeout bounds the read (a timeout shorter than it does not cut the answer)", async () => {
    // A peer that answers only when the test says so: after the connect deadline has passed.
    const held: Socket[] = [];
    const quiet = createTcpServer((socket) => held.push(socket));
    quiet.listen(0, "127.0.0.1");
    await new Promise((resolve) => quiet.once("listening", resolve));
    try {
      const port = (quiet.address() as AddressInfo).port;
      await uploadConfig(s, "tcp-late.yml", `tests:\n  g:\n  - tcp: {host: 127.0.0.1, port: ${port}, timeout: 60, read_timeout: 603, expect_regex: LATE}\n`);
      const created = await trigger(s, { config_name: "tcp-late.yml" });
      await s.clock.sleepOf(603_000); // connected, reading
      s.clock.advance(61_000); // past the connect deadline, well within the read one
      await waitFor(() => held.length === 1, 5000, "the probe's connection");
      held[0]!.write("LATE answer\n");
      await waitRun(s, created.id);
      assert.deepEqual(brief(await reportRows(s, created.id)).map(([name, status]) => [name, status]), [
        ["connect[test_config0]", "passed"],
        ["response[test_config0]", "passed"],
      ]);
    } finally {
      for (const socket of held) socket.destroy();
      quiet.close();
    }
  });

  test("file: existence, type, mode, access, write and content checks on a temp tree", async () => {
    const { run: r, rows } = await run(
      "file.yml",
      `
tests:
  g:
  - file:
      path: ${tree}/value
      type: file
      mode: "0640"
      readable: true
      equals: 42
      min: 40
      max: 50
  - file:
      path: ${tree}/sub
      type: dir
  - file:
      path: ${tree}/link
      type: link
  - file:
      path: ${tree}/absent
      exists: false
  - file:
      name: knob
      path: ${tree}/knob
      write: 1
      equals: "1"
  - file:
      path: ${tree}/name
      regex: "^gateway-\\\\d+$"
      max: 10
  - file:
      path: ${tree}/nothing-here
`,
    );
    assert.equal(r.status, "failed");
    assert.deepEqual(brief(rows), [
      ["exists[test_config0]", "passed", ""],
      ["type[test_config0]", "passed", ""],
      ["mode[test_config0]", "passed", ""],
      ["access[test_config0]", "passed", ""],
      ["content[test_config0]", "passed", ""],
      ["range[test_config0]", "passed", ""],
      ["exists[test_config1]", "passed", ""],
      ["type[test_config1]", "passed", ""],
      ["exists[test_config2]", "passed", ""],
      ["type[test_config2]", "passed", ""],
      ["exists[test_config3]", "passed", ""],
      ["exists[test_config4]", "passed", ""],
      ["write[test_config4]", "passed", ""],
      ["content[test_config4]", "passed", ""],
      ["exists[test_config5]", "passed", ""],
      ["content[test_config5]", "passed", ""],
      ["range[test_config5]", "failed", 'content "gateway-01" is not a number'],
      ["exists[test_config6]", "failed", `${tree}/nothing-here does not exist`],
    ]);
    assert.equal(rows[0]["device name"], `${tree}/value`);
    assert.equal(rows[11]["device name"], "knob");
    assert.equal(readFileSync(join(tree, "knob"), "utf8"), "1");
  });

  test("ping: reachability and round-trip time from the system ping", async () => {
    const { rows } = await run("ping.yml", "tests:\n  g:\n  - ping:\n      host: 127.0.0.1\n      max_rtt_ms: 5\n  - ping:\n      host: 10.255.255.1\n      count: 1\n");
    assert.deepEqual(brief(rows), [
      ["reachable[test_config0]", "passed", ""],
      ["rtt[test_config0]", "passed", ""],
      ["reachable[test_config1]", "failed", "100% packet loss, at most 0% allowed"],
    ]);
    assert.equal(rows[0]["device name"], "ping(127.0.0.1)");
  });

  test("script modules from the data dir; compatibility modules hidden by default", async () => {
    const { run: r, rows } = await run("script.yml", "tests:\n  g:\n  - nested/impl1/hello:\n      message: Hello\n  - nested/impl1/hello:\n      message: Bye\n");
    assert.equal(r.status, "failed");
    assert.deepEqual(
      rows.map((x) => [x["device name"], x.module, x.status, x.message]),
      [
        ["Hello Test (impl1): Hello", "test.py::TestHello::test_hello[test_config0]", "passed", ""],
        ["Hello Test (impl1): Bye", "test.py::TestHello::test_hello[test_config1]", "failed", "Expected `Hello` message attribute, got: Bye"],
      ],
    );
    await uploadConfig(s, "needs-compat.yml", "tests:\n  g:\n  - simple:\n      device: a\n");
    const res = await s.request("/api/v1/test-runs", { method: "POST", json: { config_name: "needs-compat.yml" }, token: s.adminToken });
    assert.equal(res.status, 422);
    assert.match(((await res.json()) as { error: string }).error, /tests\.g\.0\.simple: unknown module 'simple'/);
    await uploadConfig(s, "script-missing-param.yml", "tests:\n  g:\n  - nested/impl1/hello:\n      other: 1\n");
    const bad = await s.request("/api/v1/test-runs", { method: "POST", json: { config_name: "script-missing-param.yml" }, token: s.adminToken });
    assert.equal(bad.status, 422);
    assert.match(((await bad.json()) as { error: string }).error, /'message' is required/);
  });
});
