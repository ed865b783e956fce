import { strict as assert } from "node:assert";
import { writeFileSync } from "node:fs";
import { join, resolve } from "node:path";
import { describe, test } from "node:test";
import { ConfigError, defaultConfig, loadConfig } from "../../src/config/config.ts";
import { tempDir } from "../helpers/server.ts";

describe("config", () => {
  test("appliance.config.yaml holds exactly the built-in defaults", () => {
    const { config, file } = loadConfig({ cwd: process.cwd(), env: {} });
    assert.equal(file, resolve("appliance.config.yaml"));
    assert.deepEqual(config, { ...defaultConfig(), data_dir: resolve("data") });
  });

  test("without a file the defaults apply", () => {
    const dir = tempDir();
    const { config, file } = loadConfig({ cwd: dir, env: {} });
    assert.equal(file, undefined);
    assert.deepEqual(config.listen, { host: "0.0.0.0", port: 5000 });
    assert.equal(config.data_dir, join(dir, "data"));
    assert.equal(config.prefix, "svc");
  });

  test("flags beat environment beat file", () => {
    const dir = tempDir();
    writeFileSync(join(dir, "appliance.config.yaml"), "listen: 127.0.0.1:1000\ndata_dir: from-file\n");
    const fileOnly = loadConfig({ cwd: dir, env: {} }).config;
    assert.equal(fileOnly.listen.port, 1000);
    assert.equal(fileOnly.data_dir, join(dir, "from-file"));
    const env = { LABGATE_LISTEN: "127.0.0.1:2000", LABGATE_DATA_DIR: "/tmp/from-env" };
    const withEnv = loadConfig({ cwd: dir, env }).config;
    assert.equal(withEnv.listen.port, 2000);
    assert.equal(withEnv.data_dir, "/tmp/from-env");
    const withFlags = loadConfig({ cwd: dir, env, flags: { listen: "[::1]:3000", dataDir: "flag-dir" } }).config;
    assert.deepEqual(withFlags.listen, { host: "::1", port: 3000 });
    assert.equal(withFlags.data_dir, join(dir, "flag-dir"));
  });

  test("LABGATE_CONFIG names the file", () => {
    const dir = tempDir();
    writeFileSync(join(dir, "other.yaml"), "prefix: acme\ntest_server:\n  nodes:\n    dut: http://10.0.0.2:5000/\n    b: {url: 'http://b:5000', token: t}\n");
    const { config } = loadConfig({ cwd: dir, env: { LABGATE_CONFIG: "other.yaml" } });
    assert.equal(config.prefix, "acme");
    assert.deepEqual(config.test_server.nodes, { dut: { url: "http://10.0.0.2:5000" }, b: { url: "http://b:5000", token: "t" } });
  });

  test("the compat section: safe defaults, and the timestamp window still read under its old name", () => {
    assert.deepEqual(defaultConfig().compat, {
      key_change_confirmation: true,
      package_device_type_required: true,
      action_log_status: "words",
      sse_comments: true,
      auth_timestamp_window: 600,
    });
    const dir = tempDir();
    const load = (yaml: string) => {
      writeFileSync(join(dir, "appliance.config.yaml"), yaml);
      return loadConfig({ cwd: dir, env: {} }).config;
    };
    const old = load("update_server:\n  auth_timestamp_window: 30\n  device_token_ttl: 60\n");
    assert.equal(old.compat.auth_timestamp_window, 30);
    assert.equal(old.update_server.device_token_ttl, 60);
    assert.equal("auth_timestamp_window" in old.update_server, false);
    assert.equal(load("update_server:\n  auth_timestamp_window: 30\ncompat:\n  auth_timestamp_window: 30\n").compat.auth_timestamp_window, 30);
    assert.throws(() => load("update_server:\n  auth_timestamp_window: 30\ncompat:\n  auth_timestamp_window: 0\n"), /update_server.auth_timestamp_window: moved to compat.auth_timestamp_window/);
    assert.throws(() => load("compat:\n  action_log_status: numbers\n"), /compat.action_log_status: expected one of words, exit_code/);
  });

  test("errors name the key", () => {
    const dir = tempDir();
    const bad = (yaml: string) => {
      writeFileSync(join(dir, "appliance.config.yaml"), yaml);
      return () => loadConfig({ cwd: dir, env: {} });
    };
    assert.throws(bad("prefix: 'Has Space'\n"), (e: Error) => e instanceof ConfigError && /config key prefix/.test(e.message));
    assert.throws(bad("update_server: 5\n"), /config key update_server: expected a mapping/);
    assert.throws(bad("test_server:\n  nodes:\n    x: {url: 'http://x', extra: 1}\n"), /test_server\.nodes\.x\.extra: unknown key/);
    assert.throws(bad("listen: 0.0.0.0:70000\n"), /config key listen/);
    assert.throws(bad("test_server:\n  device_artifacts_max_files: 0\n"), /config key test_server\.device_artifacts_max_files: expected an integer from 1 /);
    assert.throws(bad("test_server:\n  device_report_max_bytes: 100\n"), /config key test_server\.device_report_max_bytes: expected an integer from 1024 /);
    assert.throws(bad("test_server:\n  device_report_max_bytes: lots\n"), /config key test_server\.device_report_max_bytes: expected an integer/);
  });
  test("database.url: empty is the embedded database; only a postgres:// or postgresql:// URL is taken, from the file, LABGATE_DATABASE_URL or --database-url, and a bad one is named without its password", () => {
    const dir = tempDir();
    assert.equal(loadConfig({ cwd: dir, env: {} }).config.database.url, "");
    const url = "postgres://labgate:s3cret@db.lab:5432/labgate?sslmode=require";
    writeFileSync(join(dir, "appliance.config.yaml"), `database:\n  url: "${url}"\n  checkpoint_interval: 30\n`);
    assert.equal(loadConfig({ cwd: dir, env: {} }).config.database.url, url);
    const fromEnv = loadConfig({ cwd: dir, env: { LABGATE_DATABASE_URL: "postgresql://other@127.0.0.1/x" } }).config.database;
    assert.deepEqual([fromEnv.url, fromEnv.checkpoint_interval], ["postgresql://other@127.0.0.1/x", 30]);
    assert.equal(loadConfig({ cwd: dir, env: { LABGATE_DATABASE_URL: "postgresql://other@127.0.0.1/x" }, flags: { databaseUrl: "postgres://flag@127.0.0.1/y" } }).config.database.url, "postgres://flag@127.0.0.1/y");
    const refused = (thrower: () => unknown, name: RegExp) =>
      assert.throws(thrower, (e: Error) => e instanceof ConfigError && name.test(e.message) && /database\.url/.test(e.message) && !/hunter2/.test(e.message));
    refused(() => loadConfig({ cwd: dir, env: {}, flags: { databaseUrl: "mysql://root:hunter2@db/x" } }), /^--database-url \(database\.url\): expected postgres:\/\/USER:PASSWORD@HOST:PORT\/DB .*got "mysql:\/\/root:\*\*\*@db\/x"/);
    refused(() => loadConfig({ cwd: dir, env: { LABGATE_DATABASE_URL: "hunter2" } }), /^LABGATE_DATABASE_URL \(database\.url\): .*not a URL/);
    writeFileSync(join(dir, "appliance.config.yaml"), "database:\n  url: 'http://u:hunter2@db/x'\n");
    refused(() => loadConfig({ cwd: dir, env: {} }), /^config key database\.url: /);
  });

  test("test_server.report_columns: seed, reference or names like --csv-columns", () => {
    const dir = tempDir();
    const columns = (yaml: string) => {
      writeFileSync(join(dir, "appliance.config.yaml"), `test_server:\n  report_columns: ${yaml}\n`);
      return loadConfig({ cwd: dir, env: {} }).config.test_server.report_columns;
    };
    assert.deepEqual(columns("seed"), ["device name", "test name", "module", "duration", "message", "status"]);
    assert.deepEqual(columns("reference"), ["start time", "device name", "test name", "module", "duration", "message", "status", "artifacts"]);
    assert.deepEqual(columns("[start_time, test name, status]"), ["start time", "test name", "status"]);
    assert.deepEqual(columns('"status, artifacts"'), ["status", "artifacts"]);
    for (const bad of ["full", "[]", "[status, status]", "[colour]", "5"]) assert.throws(() => columns(bad), /config key test_server\.report_columns: /, bad);
  });

  test("test_server.configs_dir, reports_dir, artifacts_dir: absolute, and never one inside another", () => {
    const dir = tempDir();
    const load = (yaml: string) => {
      writeFileSync(join(dir, "appliance.config.yaml"), `test_server:\n${yaml}`);
      return loadConfig({ cwd: dir, env: {} }).config.test_server;
    };
    const ts = load("  configs_dir: pp/tests\n  reports_dir: pp/reports\n  artifacts_dir: /var/tmp/pp-artifacts\n");
    assert.deepEqual([ts.configs_dir, ts.reports_dir, ts.artifacts_dir], [join(dir, "pp/tests"), join(dir, "pp/reports"), "/var/tmp/pp-artifacts"]);
    assert.throws(() => load("  configs_dir: pp\n  reports_dir: pp/reports\n"), /config key test_server\.reports_dir: .* is inside the configs directory/);
    assert.throws(() => load("  artifacts_dir: pp\n  reports_dir: pp\n"), /must be separate/);
    // A configured directory around a default one (under the data dir) is refused too.
    assert.throws(() => load("  artifacts_dir: data\n"), /must be separate/);
  });

  test("storage: the S3 store named in full, unknown keys refused, credentials never shown, the local dir made absolute", () => {
    const dir = tempDir();
    const load = (yaml: string) => {
      writeFileSync(join(dir, "appliance.config.yaml"), yaml);
      return loadConfig({ cwd: dir, env: {} }).config;
    };
    const s3 = "storage:\n  driver: s3\n  s3:\n    endpoint: http://127.0.0.1:9000\n";
    assert.throws(() => load(s3), (e: Error) => e instanceof ConfigError && e.message === "config key storage.s3.bucket: needed with storage.driver: s3");
    assert.throws(() => load(`${s3}    bucket: Bad_Name\n`), /config key storage\.s3\.bucket: expected an S3 bucket name/);
    assert.throws(() => load(`${s3}    bucket: lab\n`), /config key storage\.s3\.access_key_id: needed with storage\.driver: s3/);
    assert.throws(() => load(`${s3}    bucket: lab\n    access_key_id: k\n`), /config key storage\.s3\.secret_access_key: needed with storage\.driver: s3/);
    assert.throws(() => load(`${s3}    acl: public\n`), /config key storage\.s3\.acl: unknown key/);
    assert.throws(() => load("storage:\n  driver: nfs\n"), /config key storage\.driver: expected one of local, s3, got "nfs"/);
    assert.throws(() => load("storage:\n  driver: s3\n  s3:\n    endpoint: ftp://x\n"), /config key storage\.s3\.endpoint: expected an http\(s\) URL/);
    assert.throws(() => load(`${s3}    secret_access_key: 918273645\n`), (e: Error) => /storage\.s3\.secret_access_key: expected a string \(its value is not shown\)/.test(e.message) && !e.message.includes("918273645"));
    const good = load(`${s3}    bucket: lab\n    access_key_id: k\n    secret_access_key: s\n    proxy: true\n`).storage;
    assert.deepEqual(good, { driver: "s3", local: { dir: "" }, s3: { endpoint: "http://127.0.0.1:9000", region: "us-east-1", bucket: "lab", access_key_id: "k", secret_access_key: "s", path_style: true, proxy: true } });
    assert.equal(load("storage:\n  local:\n    dir: shared/pkgs\n").storage.local.dir, join(dir, "shared/pkgs"));
    assert.equal(load("storage: {}\n").storage.driver, "local", "the S3 keys are read only with driver: s3");
  });
});
