/*
 * Issue 9: a table-driven fuzz and abuse corpus over every route of the OpenAPI document and both
 * WebSockets. After every input: a 4xx JSON error or a clean close (never a 5xx), /api/health
 * answers, the server's open files (and, in-process, its event subscribers) are back to their
 * count before, and nothing new is in the data dir.
 *
 * Runs against the source in-process; with LABGATE_BIN=dist/labgate (.ci/run) it starts that
 * single executable (Node 24) as a child process and counts its /proc/<pid>/fd instead.
 */
import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { readdirSync, readFileSync, statSync } from "node:fs";
import { join, resolve } from "node:path";
import { after, before, describe, it } from "node:test";
import { executableCommand, startServe, type ServeProcess } from "../helpers/cli.ts";
import { openFds, openFdTargets, parseRaw, rawRequest } from "../helpers/raw.ts";
import { removeDir, requestAt, startTestServer, tempDir, type TestServer, waitFor } from "../helpers/server.ts";
import { protocolDevice } from "../testrun/device-helpers.ts";
import { waitRun } from "../testrun/run-helpers.ts";
import { registerDevice } from "./helpers/devices.ts";
import { flood } from "../audit/helpers.ts";

const BIN = process.env.LABGATE_BIN;
/** An arm64 executable runs under qemu (executableCommand): everything, a checkpoint holding its files included, takes many times longer. */
const EMULATED = BIN !== undefined && executableCommand(resolve(BIN)).length > 1;
/** Silence after which a client gives up on an answer it is owed. */
const PATIENCE_MS = EMULATED ? 60_000 : 5000;
/**
 * LABGATE_ABUSE_QUICK=1 (.ci/run, for the arm64 executable under qemu): only the inputs answered
 * at once, not those the server may rightly wait on until the client leaves (idleMs, together).
 */
const QUICK = process.env.LABGATE_ABUSE_QUICK === "1";

/** What an input may get back: "4xx" a 4xx JSON error, "no5xx" anything below 500 (a 4xx with JSON), "close" the socket closed (any status). */
type Expect = "4xx" | "no5xx" | "close";
interface Input {
  name: string;
  request: Buffer | string;
  expect: Expect;
  /** Silence after which the client gives up and closes (inputs the server may rightly wait on). */
  idleMs?: number;
  /**
   * Sent at the same time as the other inputs so marked, each on its own connection (inputs the
   * server may rightly wait on until the client leaves); the checks after them run once for all.
   */
  together?: boolean;
  /** WebSocket frames written after a 101 (then the client closes after idleMs). */
  frames?: Buffer[];
}

/** A masked client WebSocket frame (RFC 6455 5.2); `length` may claim more than is sent. */
function frame(opcode: number, payload: Buffer, options: { fin?: boolean; mask?: boolean; length?: number } = {}): Buffer {
  const { fin = true, mask = true } = options;
  const length = options.length ?? payload.length;
  const head: number[] = [(fin ? 0x80 : 0) | opcode];
  const maskBit = mask ? 0x80 : 0;
  if (length < 126) head.push(maskBit | length);
  else if (length < 65536) head.push(maskBit | 126, length >> 8, length & 0xff);
  else {
    head.push(maskBit | 127);
    const big = Buffer.alloc(8);
    big.writeBigUInt64BE(BigInt(length));
    head.push(...big);
  }
  if (!mask) return Buffer.concat([Buffer.from(head), payload]);
  const key = randomBytes(4);
  const masked = Buffer.from(payload.map((b, i) => b ^ key[i % 4]));
  return Buffer.concat([Buffer.from(head), key, masked]);
}

const CRLF = "\r\n";
function http(method: string, path: string, headers: Record<string, string> = {}, body?: Buffer | string): Buffer {
  const all: Record<string, string> = { Host: "127.0.0.1", Connection: "close", ...headers };
  if (body !== undefined && !Object.keys(all).some((k) => k.toLowerCase() === "content-length" || k.toLowerCase() === "transfer-encoding")) {
    all["Content-Length"] = String(Buffer.byteLength(body));
  }
  const head = `${method} ${path} HTTP/1.1${CRLF}${Object.entries(all).map(([k, v]) => `${k}: ${v}`).join(CRLF)}${CRLF}${CRLF}`;
  return Buffer.concat([Buffer.from(head, "latin1"), Buffer.from(body ?? "")]);
}
const wsHeaders = { Connection: "Upgrade", Upgrade: "websocket", "Sec-WebSocket-Version": "13", "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ==" };

/** A small deterministic generator, so that a failing input can be found again. */
function prng(seed: number): (n: number) => Buffer {
  let x = seed;
  return (n) => Buffer.from(Array.from({ length: n }, () => ((x = (x * 1103515245 + 12345) & 0x7fffffff), x >> 16) && x & 0xff));
}

interface Target {
  url: string;
  pid: number | "self";
  dataDir: string;
  adminToken: string;
  server: TestServer;
  /** Event subscribers (in-process only). */
  subscribers?: () => number;
  /** Error lines and 5xx answers the server logged. */
  logged: () => string[];
  close(): Promise<void>;
}

async function startTarget(): Promise<Target> {
  if (!BIN) {
    const server = await startTestServer();
    const lines: string[] = [];
    const log = server.server.ctx.log;
    log.error = (line: string) => void lines.push(`ERROR ${line}`);
    // Warnings about odd input (an unparsable device message) are fine; a 5xx is logged as one.
    log.warn = (line: string) => void (/ 5\d\d [\d.]+ms$/.test(line) && lines.push(`WARN ${line}`));
    return {
      url: server.url,
      pid: "self",
      dataDir: server.dataDir,
      adminToken: server.adminToken,
      server,
      subscribers: () => server.server.domains.update.events.subscribers,
      logged: () => lines,
      close: () => server.close().then(() => removeDir(server.dataDir)),
    };
  }
  const dataDir = tempDir();
  const serve: ServeProcess = await startServe(["serve", "--data-dir", dataDir, "--listen", "127.0.0.1:0"], {
    command: executableCommand(resolve(BIN)),
    startTimeoutMs: EMULATED ? 180_000 : undefined,
  });
  const adminToken = readFileSync(join(dataDir, "admin.token"), "utf8").trim();
  const server = { url: serve.url, dataDir, adminToken, request: requestAt(serve.url) } as unknown as TestServer;
  return {
    url: serve.url,
    pid: serve.child.pid!,
    dataDir,
    adminToken,
    server,
    logged: () => serve.stderr().split("\n").filter((line) => / ERROR |uncaught| 5\d\d [\d.]+ms/.test(line)),
    close: async () => {
      await serve.stop();
      removeDir(dataDir);
    },
  };
}

/** Every file under `dir`, relative. */
function files(dir: string, prefix = ""): string[] {
  return readdirSync(join(dir, prefix), { withFileTypes: true }).flatMap((entry) => {
    const name = join(prefix, entry.name);
    return entry.isDirectory() ? files(dir, name) : [name];
  });
}

interface Operation {
  method: string;
  path: string;
  body?: string;
  query: string[];
}

describe(`abuse corpus (${BIN ? `single executable ${BIN}${EMULATED ? " under qemu" : ""}` : "source, in-process"}${QUICK ? ", quick inputs" : ""})`, () => {
  let target: Target;
  let ops: Operation[] = [];
  let device: { mac: string; id: number; token: string };
  /** A session of an account without scopes or permissions (issue 25's unprivileged caller). */
  let nobody: string;

  before(async () => {
    target = await startTarget();
    const registered = await registerDevice(target.server);
    device = { mac: registered.client.mac, id: registered.id, token: registered.token };
    const account = { name: "nobody", password: "nobody-password" };
    assert.equal((await target.server.request("/api/v1/users", { method: "POST", token: target.adminToken, json: { ...account, scopes: [] } })).status, 201);
    const login = await target.server.request("/api/v1/auth/login", { method: "POST", json: { username: account.name, password: account.password } });
    nobody = login.headers.getSetCookie()[0].split(";")[0].slice("labgate_session=".length);
    // YAML bombs are stored (they are valid YAML); reading them must be bounded.
    const laughs = ["a: &a [x, x, x, x, x, x, x, x, x]", ...Array.from({ length: 9 }, (_, i) => `${String.fromCharCode(98 + i)}: &${String.fromCharCode(98 + i)} [*${String.fromCharCode(97 + i)}, *${String.fromCharCode(97 + i)}, *${String.fromCharCode(97 + i)}, *${String.fromCharCode(97 + i)}, *${String.fromCharCode(97 + i)}, *${String.fromCharCode(97 + i)}, *${String.fromCharCode(97 + i)}, *${String.fromCharCode(97 + i)}, *${String.fromCharCode(97 + i)}]`), "tests: *j"].join("\n");
    for (const [name, text] of [["bomb.yml", laughs], ["deep.yml", "tests: " + "[".repeat(5000) + "]".repeat(5000)], ["ok.yml", "tests:\n  base:\n  - simple: {}\n"]]) {
      const form = new FormData();
      form.append("file", new Blob([text]), name);
      const res = await target.server.request("/api/v1/configs", { method: "POST", body: form, token: target.adminToken });
      assert.ok(res.status === 200 || res.status === 400, `${name}: ${res.status}`);
    }
    const doc = (await (await target.server.request("/api/openapi.json")).json()) as {
      paths: Record<string, Record<string, { requestBody?: { content?: Record<string, unknown> }; parameters?: Array<{ in: string; name: string }> }>>;
    };
    for (const [path, methods] of Object.entries(doc.paths)) {
      for (const [method, op] of Object.entries(methods)) {
        if (typeof op !== "object" || op === null || !("responses" in op)) continue;
        ops.push({
          method: method.toUpperCase(),
          path,
          body: op.requestBody ? Object.keys(op.requestBody.content ?? {})[0] : undefined,
          query: (op.parameters ?? []).filter((p) => p.in === "query").map((p) => p.name),
        });
      }
    }
    assert.ok(ops.length > 80, `the OpenAPI document lists ${ops.length} operations`);
  });
  after(async () => {
    await target?.close();
  });

  const isWebSocket = (path: string) => /\/ws$|\/shell(\/attach\/\{uuid\})?$/.test(path);

  function corpus(): Input[] {
    const auth = { Authorization: `Bearer token=${target.adminToken}` };
    const deviceAuth = { Authorization: `Bearer token=${device.token}` };
    const random = prng(9);
    const inputs: Input[] = [];
    const fill = (path: string, value: (name: string) => string) => path.replace(/\{(\w+)\}/g, (_, name: string) => value(name));
    const real = (name: string) => (name === "mac" ? device.mac : name === "id" ? "999999" : name === "name" ? "none.yml" : name === "tag" ? "t" : name === "path" ? "x" : "1");

    // Path segments: NUL, traversal (raw and encoded), overlong, odd numbers.
    for (const op of ops) {
      if (!op.path.includes("{") || isWebSocket(op.path)) continue;
      for (const value of ["%00", "..%2F..%2Fetc%2Fpasswd", "9".repeat(400), "-1"]) {
        inputs.push({ name: `${op.method} ${op.path} param ${value.slice(0, 20)}`, request: http(op.method, fill(op.path, () => value), auth), expect: op.method === "DELETE" ? "4xx" : "no5xx" });
      }
      if (op.path.includes("{path}")) {
        inputs.push({ name: `${op.method} ${op.path} ../ path`, request: http(op.method, fill(op.path, (n) => (n === "path" ? "../../../etc/passwd" : real(n))), auth), expect: "4xx" });
      }
    }
    // Upgrade requests on every ordinary GET route.
    for (const op of ops) {
      if (op.method !== "GET" || isWebSocket(op.path)) continue;
      inputs.push({ name: `upgrade ${op.path}`, request: http("GET", fill(op.path, real), { ...auth, ...wsHeaders }), expect: "4xx" });
    }
    // Bodies: truncated, random, wrong types, wrong shapes and depths, multipart variants.
    const jsonBodies: Array<[string, string | Buffer, string]> = [
      ["truncated", '{"metadata": {"a": ', "application/json"],
      ["random bytes", random(300), "application/json"],
      ["empty", "", "application/json"],
      ["null", "null", "application/json"],
      ["array", "[]", "application/json"],
      ["string", '"x"', "application/json"],
      ["deep arrays", "[".repeat(20000) + "]".repeat(20000), "application/json"],
      ["deep objects", '{"a":'.repeat(5000) + "1" + "}".repeat(5000), "application/json"],
      ["text/plain", '{"a":1}', "text/plain"],
      ["form", "a=1&b=2", "application/x-www-form-urlencoded"],
      ["xml", "<a/>", "application/xml"],
    ];
    const boundary = "XyZ";
    const multipart: Array<[string, string, string]> = [
      ["no boundary", "multipart/form-data", `--${boundary}\r\n\r\n`],
      ["other boundary", `multipart/form-data; boundary=${boundary}`, "--other\r\nContent-Disposition: form-data; name=\"file\"; filename=\"a\"\r\n\r\nx\r\n--other--\r\n"],
      ["nameless part", `multipart/form-data; boundary=${boundary}`, `--${boundary}\r\nContent-Disposition: form-data\r\n\r\nx\r\n--${boundary}--\r\n`],
      ["truncated part", `multipart/form-data; boundary=${boundary}`, `--${boundary}\r\nContent-Disposition: form-data; name="file"; filename="a.yml"\r\n\r\ntests: {}`],
      ["header bomb", `multipart/form-data; boundary=${boundary}`, `--${boundary}\r\n${"X-A: b\r\n".repeat(2000)}Content-Disposition: form-data; name="file"; filename="a"\r\n\r\nx\r\n--${boundary}--\r\n`],
      ["traversal filename", `multipart/form-data; boundary=${boundary}`, `--${boundary}\r\nContent-Disposition: form-data; name="file"; filename="../../x.txt"\r\n\r\ntests: {}\r\n--${boundary}--\r\n`],
      ["only a field", `multipart/form-data; boundary=${boundary}`, `--${boundary}\r\nContent-Disposition: form-data; name="x"\r\n\r\ny\r\n--${boundary}--\r\n`],
      ["empty", `multipart/form-data; boundary=${boundary}`, ""],
      ["random", `multipart/form-data; boundary=${boundary}`, random(500).toString("latin1")],
      ["json instead", "application/json", '{"file": "x"}'],
    ];
    for (const op of ops) {
      if (!op.body) continue;
      const path = fill(op.path, real);
      const headers = op.path.startsWith("/api/v1/logs") || op.path === "/api/v1/update/check" ? deviceAuth : auth;
      if (op.body === "multipart/form-data") {
        for (const [name, type, body] of multipart) inputs.push({ name: `${op.method} ${op.path} multipart ${name}`, request: http(op.method, path, { ...headers, "Content-Type": type }, Buffer.from(body, "latin1")), expect: "4xx" });
      } else {
        for (const [name, body, type] of jsonBodies) inputs.push({ name: `${op.method} ${op.path} body ${name}`, request: http(op.method, path, { ...headers, "Content-Type": type }, body), expect: "4xx" });
      }
      // A body shorter than announced: the server may wait for the rest; the client leaves.
      inputs.push({ name: `${op.method} ${op.path} short body`, request: http(op.method, path, { ...headers, "Content-Type": "application/json", "Content-Length": "1000" }, '{"a":'), expect: "close", idleMs: 300, together: true });
    }
    // Headers: huge and whitespace-stuffed, on a few kinds of routes.
    const headerCases: Array<[string, Record<string, string>, Expect]> = [
      ["auth spaces", { Authorization: `Bearer a=b${" ".repeat(14000)}x` }, "4xx"],
      ["auth commas", { Authorization: `Bearer ${"a=b, ".repeat(2500)}` }, "4xx"],
      ["auth huge token", { Authorization: `Bearer token=${"a".repeat(5000)}.${"b".repeat(5000)}.${"c".repeat(3000)}` }, "4xx"],
      ["auth forged", { Authorization: `Bearer token=${target.adminToken.slice(0, -6)}AAAAAA` }, "4xx"],
      ["auth tabs", { Authorization: `Bearer\t\t\t${"\t".repeat(5000)}token=x` }, "4xx"],
      ["too large headers", { "X-Big": "x".repeat(20000) }, "close"],
      ["cookie junk", { ...auth, Cookie: `labgate_session=${"%".repeat(6000)}; a=${"b".repeat(3000)}` }, "no5xx"],
      ["request id junk", { ...auth, "X-Request-Id": "\x7f".repeat(1000) }, "no5xx"],
      ["range junk", { ...auth, Range: `bytes=${"0-1,".repeat(2000)}` }, "no5xx"],
      ["range overflow", { ...auth, Range: "bytes=99999999999999999999-" }, "no5xx"],
      ["if-none-match commas", { ...auth, "If-None-Match": ",".repeat(10000) }, "no5xx"],
      ["content-type params", { ...auth, "Content-Type": `application/json${"; a=b".repeat(1500)}` }, "no5xx"],
      ["bad content-length", { ...auth, "Content-Length": "-5" }, "close"],
      ["two content-lengths", { ...auth, "Content-Length": "1\r\nContent-Length: 2" }, "close"],
      ["odd transfer-encoding", { ...auth, "Transfer-Encoding": "gzip, chunked, identity" }, "close"],
    ];
    for (const path of ["/api/whoami", "/api/v1/devices", "/api/v1/configs/ok.yml/file", "/api/v1/packages"]) {
      for (const [name, headers, expect] of headerCases) inputs.push({ name: `${path} header ${name}`, request: http("GET", path, headers), expect, idleMs: expect === "close" ? 300 : undefined });
    }
    // Query strings on every operation that reads one.
    for (const op of ops) {
      if (op.query.length === 0 || isWebSocket(op.path)) continue;
      const path = fill(op.path, op.path.startsWith("/api/v1/logs") ? () => String(device.id) : real);
      for (const value of ["-1", "1e400", "%00", "x".repeat(6000), "%zz", "..%2F..%2Fx", "%5Bobject%20Object%5D"]) {
        const query = op.query.map((q) => `${q}=${value}`).join("&");
        inputs.push({ name: `${op.method} ${op.path}?${op.query.join(",")}=${value.slice(0, 12)}`, request: http(op.method, `${path}?${query}&${op.query[0]}=twice`, auth), expect: "no5xx" });
      }
    }
    // Both WebSockets: garbage frames after the handshake.
    const frames: Array<[string, Buffer[]]> = [
      ["broken JSON", [frame(1, Buffer.from("{"))]],
      ["JSON array", [frame(1, Buffer.from("[]"))]],
      ["unknown method", [frame(1, Buffer.from(JSON.stringify({ method: "x".repeat(5000), params: {} })))]],
      ["deep JSON", [frame(1, Buffer.from("[".repeat(20000) + "]".repeat(20000)))]],
      ["progress junk", [frame(1, Buffer.from(JSON.stringify({ method: "progress", params: { state: { a: 1 }, progress: "x" } })))]],
      ["invalid UTF-8", [frame(1, Buffer.from([0xff, 0xfe, 0xfd]))]],
      ["binary", [frame(2, randomBytes(200))]],
      ["unmasked", [frame(1, Buffer.from("hi"), { mask: false })]],
      ["reserved opcode", [frame(3, Buffer.from("x"))]],
      ["claims 1 TB", [frame(2, Buffer.from("x"), { length: 2 ** 40 })]],
      ["long ping", [frame(9, Buffer.alloc(200))]],
      ["bad close code", [frame(8, Buffer.from([0x03, 0xe7]))]],
      ["continuation first", [frame(0, Buffer.from("x"))]],
      ["fragment then text", [frame(1, Buffer.from("a"), { fin: false }), frame(1, Buffer.from("b"))]],
    ];
    const sockets: Array<[string, string, Record<string, string>]> = [
      ["device socket", "/api/v1/devices/ws", deviceAuth],
      ["shell socket", `/api/v1/devices/${device.mac}/shell?token=${target.adminToken}`, {}],
    ];
    for (const [label, path, headers] of sockets) {
      for (const [name, sent] of frames) inputs.push({ name: `${label}: ${name}`, request: http("GET", path, { ...headers, ...wsHeaders, Connection: "Upgrade" }), frames: sent, expect: "close", idleMs: 300 });
    }
    inputs.push({ name: "attach with a garbage uuid", request: http("GET", `/api/v1/devices/${device.mac}/shell/attach/${"%00".repeat(30)}`, { ...deviceAuth, ...wsHeaders, Connection: "Upgrade" }), frames: [frame(1, Buffer.from("x"))], expect: "close", idleMs: 300 });
    inputs.push({ name: "device socket with a management token", request: http("GET", "/api/v1/devices/ws", { ...auth, ...wsHeaders, Connection: "Upgrade" }), expect: "close" });
    // Issue 25: work bounded whoever asks.
    const macs = Array.from({ length: 10_000 }, (_, i) => `02:00:00:${(i >> 16).toString(16).padStart(2, "0")}:${((i >> 8) & 255).toString(16).padStart(2, "0")}:${(i & 255).toString(16).padStart(2, "0")}`);
    const nobodyAuth = { Authorization: `Bearer token=${nobody}`, "Content-Type": "application/json" };
    inputs.push({ name: "fan-out of 10,000 MACs by a caller without permissions", request: http("POST", "/api/v2/devices/action/exec", nobodyAuth, JSON.stringify({ action_id: "x", devices: [device.mac, ...macs.slice(1)] })), expect: "no5xx" });
    inputs.push({ name: "device stream of a caller without permissions", request: http("GET", "/api/stream", nobodyAuth), expect: "close", idleMs: 300 });
    const entry = (text: string) => JSON.stringify({ batch: [{ device_timestamp: "Wed, 02 Oct 2002 15:00:00 -0000", name: "n", entry: text }] });
    inputs.push({ name: "log entry of 4097 bytes in 1366 characters", request: http("POST", "/api/v1/logs", { ...deviceAuth, "Content-Type": "application/json" }, entry("€".repeat(1365) + "xx")), expect: "4xx" });
    inputs.push({ name: "log list paged past the end", request: http("GET", `/api/v1/logs/device/${device.id}?limit=1000&offset=9007199254740991`, auth), expect: "no5xx" });
    inputs.push({ name: "login with a name that cannot exist", request: http("POST", "/api/v1/auth/login", { "Content-Type": "application/json" }, JSON.stringify({ username: "../admin\u0000", password: "x".repeat(1024) })), expect: "4xx" });
    inputs.push({ name: "delete an account with a session of no scopes", request: http("DELETE", "/api/v1/users/admin", { ...nobodyAuth, Origin: "http://127.0.0.1" }), expect: "4xx" });
    inputs.push({ name: "upgrade to h2c", request: http("GET", "/api/health", { Connection: "Upgrade, HTTP2-Settings", Upgrade: "h2c", "HTTP2-Settings": "AAMAAABkAARAAAAAAAIAAAAA" }), expect: "4xx" });
    return inputs;
  }

  /** Node's HTTP parser refusing a request it cannot read (400, 413 or 431, no body, connection closed): a clean close. */
  const refusedByParser = (answer: { text: string; closedByServer: boolean }, status: number) =>
    (status === 400 || status === 413 || status === 431) && answer.closedByServer && answer.text.endsWith("Connection: close\r\n\r\n");

  /** Sends one input; with frames, writes them after the 101 and leaves after idleMs. */
  async function send(input: Input): Promise<{ text: string; closedByServer: boolean }> {
    if (!input.frames) return rawRequest(target.url, input.request, input.idleMs ?? PATIENCE_MS);
    return rawRequest(target.url, Buffer.concat([Buffer.from(input.request), ...input.frames]), input.idleMs ?? 300);
  }

  // Issue 24's probes, on both runtimes: nothing a page of another site sends acts, JSON routes
  // read only JSON, every answer is nosniff (no-store for JSON), files are never active content.
  it("security probes: cross-site requests refused, JSON routes need JSON, headers on every answer, artifacts inert", { timeout: 120_000 }, async () => {
    const auth = { Authorization: `Bearer token=${target.adminToken}` };
    const fill = (path: string) => path.replace(/\{(\w+)\}/g, (_, name: string) => (name === "mac" ? device.mac : name === "name" ? "ok.yml" : name === "path" ? "x" : "1"));
    const answer = async (request: Buffer) => {
      const { text } = await rawRequest(target.url, request);
      const head = text.slice(0, text.indexOf("\r\n\r\n")).toLowerCase();
      return { ...parseRaw(text), head };
    };
    const list = async (path: string) => (await (await target.server.request(path, { token: target.adminToken })).json()) as Array<{ name?: string }>;
    const configNames = async () => (await list("/api/v1/configs")).map((c) => (typeof c === "string" ? c : String(c.name))).sort();
    const configsBefore = await configNames();
    const usersBefore = (await list("/api/v1/users")).map((u) => u.name);
    const failures: string[] = [];
    const acting = ops.filter((op) => op.method !== "GET" || /\/action\/exec\/\{action_id\}$/.test(op.path));
    assert.ok(acting.length > 40, `${acting.length} acting operations`);
    const foreign: Array<[string, Record<string, string>]> = [
      ["Origin of another site", { Origin: "http://evil.example" }],
      ["Origin null", { Origin: "null" }],
      ["Origin of another port", { Origin: "http://127.0.0.1:1" }],
      ["Sec-Fetch-Site same-site", { "Sec-Fetch-Site": "same-site" }],
      ["Sec-Fetch-Site cross-site, own Origin", { "Sec-Fetch-Site": "cross-site", Origin: "http://127.0.0.1" }],
    ];
    for (const op of [...acting, ...ops.filter((op) => isWebSocket(op.path))]) {
      for (const [name, headers] of foreign) {
        const extra = isWebSocket(op.path) ? wsHeaders : { "Content-Type": op.body === "multipart/form-data" ? "multipart/form-data; boundary=x" : "text/plain" };
        const got = await answer(http(op.method, fill(op.path), { ...auth, ...extra, ...headers }, isWebSocket(op.path) ? undefined : "{}"));
        // An upgrade's refusal is its status alone (a browser reads no body there).
        const refused = got.status === 403 && (isWebSocket(op.path) || (got.json as { error?: string } | undefined)?.error === "cross-site request refused");
        if (!refused) failures.push(`${op.method} ${op.path} with ${name}: ${got.status}`);
      }
    }
    // A test's HTML and SVG files: downloads, or text when previewed; never HTML or SVG, always sandboxed.
    const form = new FormData();
    form.append("file", new Blob(["tests:\n  t:\n  - exec:\n      command: echo '<script>x()</script>' > a.html; echo '<svg onload=x()/>' > b.svg; env > env.txt\n"]), "probe.yml");
    assert.equal((await target.server.request("/api/v1/configs", { method: "POST", body: form, token: target.adminToken })).status, 200);
    const run = (await (await target.server.request("/api/v1/test-runs", { method: "POST", json: { config_name: "probe.yml" }, token: target.adminToken })).json()) as { id: string };
    await waitRun(target.server, run.id);
    for (const name of ["a.html", "b.svg"]) {
      for (const preview of ["", "?preview=true"]) {
        const got = await answer(http("GET", `/api/v1/test-runs/${run.id}/artifacts/${name}${preview}`, auth));
        const type = /\r\ncontent-type: ([^\r]*)/.exec(got.head)?.[1];
        if (got.status !== 200 || type !== "text/plain; charset=utf-8") failures.push(`${name}${preview}: ${got.status} ${type}`);
        if (!got.head.includes("\r\ncontent-security-policy: sandbox; default-src 'none'")) failures.push(`${name}${preview}: no sandbox`);
        if (!got.head.includes(`\r\ncontent-disposition: ${preview ? "inline" : "attachment"}; filename=${name}`)) failures.push(`${name}${preview}: disposition`);
      }
    }
    // A HEAD of the action route runs nothing; JSON routes refuse what a page can send unasked.
    const head = await answer(http("HEAD", `/api/v2/devices/${device.mac}/action/exec/uptime`, auth));
    if (head.status !== 405) failures.push(`HEAD action exec: ${head.status}`);
    // Objects that exist, so that a route's 404 does not come before its body is read.
    assert.equal((await target.server.request("/api/v2/groups", { method: "POST", json: { metadata: { name: "probe" } }, token: target.adminToken })).status, 200);
    const existing = (path: string) => path.replace("{id}", path.includes("/test-runs/") ? run.id : "1");
    // Device authorization is signed over its raw bytes and public: it reads any type (the reference's clients vary).
    const signedAuth = new Set(["/api/v1/auth/device", "/api/devices/v1/authentication/auth_requests"]);
    // A DDI target's routes read the body once its target token is checked.
    const ddi = await target.server.request("/api/v1/ddi/targets", { method: "POST", json: { controller_id: "probe-ddi", name: "probe", device_type: "probe" }, token: target.adminToken });
    assert.equal(ddi.status, 200);
    const { target_token: targetToken } = (await ddi.json()) as { target_token: string };
    const isDdi = (path: string) => path.startsWith("/{tenant}/controller/v1/");
    for (const op of ops.filter((op) => op.body === "application/json" && !signedAuth.has(op.path))) {
      const asDevice = op.path.startsWith("/api/v1/logs") || op.path === "/api/v1/update/check" || op.path.startsWith("/api/devices/") || op.path.startsWith("/api/v1/devices/test-runs/");
      const headers = isDdi(op.path) ? { Authorization: `TargetToken ${targetToken}` } : asDevice ? { Authorization: `Bearer token=${device.token}` } : auth;
      const path = isDdi(op.path) ? op.path.replace("{tenant}", "DEFAULT").replace("{controllerId}", "probe-ddi") : op.path;
      for (const type of [undefined, "text/plain", "application/x-www-form-urlencoded"]) {
        const got = await answer(http(op.method, fill(existing(path)), { ...headers, ...(type ? { "Content-Type": type } : {}) }, "{}"));
        if (got.status !== 415) failures.push(`${op.method} ${op.path} as ${type ?? "no type"}: ${got.status}`);
      }
    }
    // Every GET answers nosniff; JSON ones no-store unless they cache on purpose.
    for (const op of ops.filter((op) => op.method === "GET" && !isWebSocket(op.path) && !op.path.endsWith("/stream") && !op.path.includes("action/exec"))) {
      const got = await answer(http("GET", fill(op.path), auth));
      if (!got.head.includes("\r\nx-content-type-options: nosniff")) failures.push(`GET ${op.path}: no nosniff`);
      if (got.head.includes("\r\ncontent-type: application/json") && !/\r\ncache-control: (no-store|private)/.test(got.head)) failures.push(`GET ${op.path}: JSON without no-store`);
    }
    // The test's environment holds nothing of the server's.
    const env = await (await target.server.request(`/api/v1/test-runs/${run.id}/artifacts/env.txt`, { token: target.adminToken })).text();
    if (/LABGATE|^(?!PATH|HOME|TMPDIR|LANG|LC_|TZ|PWD|SHLVL|_=|OLDPWD)/m.test(env.trim())) failures.push(`a test's environment: ${env.replace(/\n/g, " ")}`);
    assert.deepEqual(failures, []);
    // The refused requests stored nothing: the configs are the ones before and the probe's, one group (the probe's), no new account.
    assert.deepEqual(await configNames(), [...configsBefore, "probe.yml"].sort());
    assert.deepEqual((await list("/api/v2/groups")).length, 1, "only the probe's own group");
    assert.deepEqual((await list("/api/v1/users")).map((u) => u.name), usersBefore, "no account made or removed");
  });

  it("every input gets a 4xx JSON error or a clean close; the server keeps answering and holds nothing more", { timeout: EMULATED ? 600_000 : 240_000 }, async (t) => {
    const inputs = corpus().filter((input) => !QUICK || (input.idleMs === undefined && !input.together));
    assert.ok(inputs.length >= (QUICK ? 200 : 300), `${inputs.length} inputs`);
    t.diagnostic(`${inputs.length} inputs`);
    const health = async () => parseRaw((await rawRequest(target.url, http("GET", "/api/health"), PATIENCE_MS)).text).status;
    assert.equal(await health(), 200);
    const fds = openFds(target.pid);
    const fdsBefore = openFdTargets(target.pid);
    // A checkpoint (every database.checkpoint_interval seconds after a change: a slow run sees one)
    // starts the next journal generation: the journal's number is not new data.
    const stored = () => [...new Set(files(target.dataDir).map((name) => name.replace(/^labgate\.journal\.\d+$/, "labgate.journal.N")))].sort().join("\n");
    const storedBefore = stored();
    const failures: string[] = [];
    const judge = (input: Input, answer: { text: string; closedByServer: boolean }) => {
      const { status, json } = parseRaw(answer.text);
      // labgate's and Mender's error bodies say `error`; hawkBit's (the DDI routes) `errorCode` and `message`.
      const body = json as { error?: unknown; errorCode?: unknown; message?: unknown } | undefined;
      const error = typeof body?.error === "string" || (typeof body?.errorCode === "string" && typeof body.message === "string");
      const problem =
        input.expect === "close"
          ? status >= 500 || (status >= 400 && !error && answer.text.includes("\r\n\r\n") && !answer.closedByServer)
          : input.expect === "4xx"
            ? !(status >= 400 && status < 500 && error)
            : !(status > 0 && status < 500 && (status < 400 || error));
      if (problem && !refusedByParser(answer, status)) failures.push(`${input.name}: ${status} ${answer.text.slice(answer.text.indexOf("\r\n\r\n") + 4, answer.text.indexOf("\r\n\r\n") + 120)}`);
    };
    /** The server answers, and holds no more open files or event subscribers than before. */
    const checkAfter = async (sent: string) => {
      assert.equal(await health(), 200, `health after ${sent}`);
      if (openFds(target.pid) > fds) {
        await waitFor(() => openFds(target.pid) <= fds, PATIENCE_MS, `open files back after ${sent}`).catch((error: Error) => {
          const extra = openFdTargets(target.pid).filter((t) => !fdsBefore.includes(t));
          throw new Error(`${error.message}; open since: ${extra.join(", ")}`);
        });
      }
      if (target.subscribers) assert.equal(target.subscribers(), 0, `event subscribers after ${sent}`);
    };
    for (const input of inputs.filter((i) => !i.together)) {
      judge(input, await send(input));
      await checkAfter(input.name);
    }
    const together = inputs.filter((i) => i.together);
    const answers = await Promise.all(together.map(send));
    together.forEach((input, i) => judge(input, answers[i]));
    await checkAfter(`the ${together.length} inputs sent together (${together.map((i) => i.name).join("; ")})`);
    assert.deepEqual(failures, []);
    assert.equal(stored(), storedBefore, "nothing new in the data dir");
    assert.deepEqual(target.logged(), [], "the server logged errors");
  });

  // Issue 39.4: a client without a token cannot flush the audit trail. Its refusals are counted
  // per client and route in a window: thousands of them are a few rows (what they cost in memory:
  // npm run bench:refusals).
  it("an unauthenticated refusal flood writes a few audit rows, however many requests", { timeout: EMULATED ? 300_000 : 60_000 }, async (t) => {
    const audit = async (query: string) => {
      const res = await target.server.request(`/api/v1/audit?${query}`, { token: target.adminToken });
      assert.equal(res.status, 200);
      return { total: Number(res.headers.get("x-total-count")), rows: (await res.json()) as Array<{ id: number; target: string; actor_kind: string; detail: { count?: number } | null }> };
    };
    const before = await audit("limit=1");
    const perRoute = EMULATED ? 200 : 1000;
    const evil = { Origin: "http://evil.example" };
    const started = Date.now();
    const sent = await Promise.all([
      flood(target.url, perRoute, () => ({ method: "POST", path: "/api/v2/groups", headers: evil })),
      flood(target.url, perRoute, (i) => ({ method: "PUT", path: `/no/such/route/${i}`, headers: { "Sec-Fetch-Site": "cross-site" } })),
      flood(target.url, perRoute, (i) => ({ method: "DELETE", path: `/api/v1/packages/${i}`, headers: { ...evil, Cookie: `labgate_session=forged${i}`, "User-Agent": "x".repeat(4000) } })),
      flood(target.url, perRoute / 2, (i) => ({ method: "GET", path: "/api/v1/devices", headers: { Authorization: `Bearer token=forged.${i}.x` } })),
    ]);
    t.diagnostic(`${perRoute * 3.5} requests in ${Date.now() - started} ms`);
    assert.deepEqual(sent, [{ 403: perRoute }, { 403: perRoute }, { 403: perRoute }, { 401: perRoute / 2 }]);
    const after = await audit(`limit=100`);
    const fresh = after.rows.filter((row) => row.id > (before.rows[0]?.id ?? 0));
    // Three routes, two windows at most (one may end during the flood; a key the inputs before
    // were refused on in this window writes none); the refused client is anonymous.
    const routes = ["DELETE /api/v1/packages/:id", "POST /api/v2/groups", "PUT *"];
    assert.ok(after.total - before.total <= 6, `${after.total - before.total} rows for ${perRoute * 3} refusals`);
    assert.ok(fresh.every((row) => routes.includes(row.target) && row.actor_kind === "anonymous"), JSON.stringify(fresh));
    for (const route of routes) {
      const [row] = (await audit(`action=auth.refused&target=${encodeURIComponent(route)}&actor=anonymous&limit=1`)).rows;
      assert.ok(row && JSON.stringify(row.detail).length < 1024, `${route}: ${JSON.stringify(row)}`);
    }
    assert.equal(parseRaw((await rawRequest(target.url, http("GET", "/api/health"), PATIENCE_MS)).text).status, 200);
  });
});

// Issue 39.9: one device's output in a run stays within its budget (test_server.device_artifacts_max_files,
// device_report_max_bytes, at their defaults): a flood of empty files and of 64 KiB rows is refused
// past them (413 for the files, the share failed and the device told to stop for the rows), and
// what is on disk stays bounded.
describe(`device output flood (${BIN ? `single executable ${BIN}` : "source, in-process"})`, () => {
  let target: Target;
  before(async () => {
    target = await startTarget();
  });
  after(async () => {
    await target?.close();
  });

  it("1,010 empty files and 1,040 rows of 64 KiB from one device: 1,000 files and 64 MiB of rows taken, the rest refused", { timeout: EMULATED ? 600_000 : 60_000 }, async () => {
    const device = await protocolDevice(target.server, "flood");
    try {
      const form = new FormData();
      form.append("file", new Blob(["tests:\n  g:\n  - exec:\n      command: [true]\n"]), "flood.yml");
      assert.equal((await target.server.request("/api/v1/configs", { method: "POST", body: form, token: target.adminToken })).status, 200);
      const started = await target.server.request("/api/v1/test-runs", { method: "POST", json: { config_name: "flood.yml", machine_target: `device:${device.mac}` }, token: target.adminToken });
      assert.equal(started.status, 200, await started.clone().text());
      const id = ((await started.json()) as { id: string }).id;
      await device.next("test_run_start", PATIENCE_MS);

      const statuses = new Map<number, number>();
      let next = 0;
      await Promise.all(
        Array.from({ length: 8 }, async () => {
          while (next < 1010) {
            const { status } = await device.upload(id, `empty-${next++}.txt`, "");
            statuses.set(status, (statuses.get(status) ?? 0) + 1);
          }
        }),
      );
      assert.deepEqual(Object.fromEntries(statuses), { 200: 1000, 413: 10 });
      assert.equal(readdirSync(join(target.dataDir, "testrun", "artifacts", id, "flood")).length, 1000);

      const message = "r".repeat(64 * 1024);
      for (let i = 0; i < 1040; i++) device.row(id, { test_name: `row-${i}`, message });
      // The server reads 65 MiB of rows first: a loaded machine takes its time.
      const abort = await device.next("test_run_abort", PATIENCE_MS * 12);
      assert.match(String(abort.reason), /test_server\.device_report_max_bytes/);
      const run = await waitRun(target.server, id, undefined, PATIENCE_MS * 2);
      assert.equal(run.status, "failed");
      assert.match(String(run.error), /device 'flood': the device's report rows went over 67108864 bytes/);
      const size = statSync(join(target.dataDir, "testrun", "reports", `${id}.csv`)).size;
      assert.ok(size <= 64 * 1048576 + 4096, `report of ${size} bytes`);
      assert.equal(parseRaw((await rawRequest(target.url, http("GET", "/api/health"), PATIENCE_MS)).text).status, 200);
      assert.deepEqual(target.logged(), [], "the server logged errors");
    } finally {
      device.close();
    }
  });
});

/*
 * Issue 39.5: one device token floods `update_outcome` outside any deployment. Only an outcome of
 * an open offer, or an installed version said once, is recorded, at most 30 a minute per device:
 * its history stays a handful of rows, the server keeps answering, and every report is
 * acknowledged (the device may forget it).
 */
describe(`abuse corpus: outcome flood (${BIN ? "single executable" : "source, in-process"})`, () => {
  let target: Target;
  before(async () => {
    target = await startTarget();
  });
  after(async () => {
    await target?.close();
  });

  it("5,000 update_outcome reports of a device outside a deployment write at most 30 history rows a minute", { timeout: EMULATED ? 300_000 : 60_000 }, async () => {
    const { id, token } = await registerDevice(target.server);
    const { default: WebSocket } = await import("ws");
    const ws = new WebSocket(`${target.url.replace("http", "ws")}/api/v1/devices/ws`, { headers: { authorization: `Bearer token=${token}` } });
    await new Promise((resolve, reject) => (ws.once("open", resolve), ws.once("error", reject)));
    const FLOOD = 5000;
    let acked = 0;
    const allAcked = new Promise<void>((resolve) =>
      ws.on("message", (data) => {
        if ((JSON.parse(data.toString()) as { method?: string }).method === "update_outcome_ack" && ++acked === FLOOD) resolve();
      }),
    );
    const started = Date.now();
    try {
      for (let i = 0; i < FLOOD; i++) {
        // Failures of versions never offered, and installs of ever new versions.
        const state = i % 2 === 0 ? "failed" : "installed";
        ws.send(JSON.stringify({ method: "update_outcome", id: `flood-${i}`, state, version: `v${i}`, from_version: "v0", reason: "flood", output: "x".repeat(4000) }));
      }
      await Promise.race([allAcked, new Promise((_, reject) => setTimeout(() => reject(new Error(`${acked} of ${FLOOD} acknowledged`)), PATIENCE_MS * 6))]);
      const history = await target.server.request(`/api/v2/devices/${id}/update-history?limit=1`, { token: target.adminToken });
      assert.equal(history.status, 200);
      const rows = Number(history.headers.get("x-total-count"));
      // 30 at once, and one more every 2 s of the flood (the allowance refills at 30 a minute).
      const allowed = 30 + Math.ceil((Date.now() - started) / 2000);
      assert.ok(rows <= allowed, `${rows} history rows from ${FLOOD} reports (at most ${allowed})`);
      assert.ok(rows >= 1, "an installed version reported once is history");
      assert.equal((await target.server.request("/api/health")).status, 200);
    } finally {
      ws.close();
    }
  });
});
