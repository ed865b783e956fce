import assert from "node:assert/strict";
import { once } from "node:events";
import { chmodSync, chownSync, copyFileSync, writeFileSync } from "node:fs";
import { createServer as createHttpsServer } from "node:https";
import { connect as netConnect, type AddressInfo } from "node:net";
import { join } from "node:path";
import { after, describe, test } from "node:test";
import { connect as tlsConnect, type TLSSocket } from "node:tls";
import { X509Certificate } from "node:crypto";
import { readFileSync } from "node:fs";
import { serve } from "@hono/node-server";
import { Hono } from "hono";
import WebSocket from "ws";
import { Agent } from "../../src/agent/agent.ts";
import { buildAgentConfig } from "../../src/agent/config.ts";
import { ConfigError } from "../../src/config/config.ts";
import { isTls } from "../../src/http/transport.ts";
import { createLogger } from "../../src/util/log.ts";
import { runInProcess, startServe } from "../helpers/cli.ts";
import { removeDir, requestAt, startTestServer, tempDir, type TestServer, waitFor } from "../helpers/server.ts";
import { makeCert, trustingFetch, type KeyKind, type TestCert } from "../helpers/tls.ts";
import { agentMac, approveAgent, spawnConnectedAgent, startAgent, untilConnected } from "../update/helpers/agents.ts";
import { uploadOk } from "../update/helpers/packages.ts";

const dir = tempDir("labgate-tls-");
after(() => removeDir(dir));

async function startTls(cert: TestCert, trust = cert.cert): Promise<TestServer> {
  const server = await startTestServer({ tls: { cert_file: cert.cert, key_file: cert.key } });
  server.request = requestAt(server.url, trustingFetch(trust));
  return server;
}

/** Puts `from`'s files where the server reads its certificate and key. */
function place(from: TestCert, live: TestCert): void {
  copyFileSync(from.cert, live.cert);
  copyFileSync(from.key, live.key);
}

const fingerprint = (pemFile: string) => new X509Certificate(readFileSync(pemFile)).fingerprint256;

/** A TLS connection to `url` that trusts `ca`, once the handshake is done. */
function openTls(url: string, ca: string[]): Promise<TLSSocket> {
  const { hostname, port } = new URL(url);
  return new Promise((resolve, reject) => {
    const socket = tlsConnect({ host: hostname, port: Number(port), ca: ca.map((f) => readFileSync(f)), servername: "localhost" }, () => resolve(socket));
    socket.once("error", reject);
  });
}

/** One keep-alive request on an open socket; resolves with the status line. */
function requestOn(socket: TLSSocket | import("node:net").Socket, target: string): Promise<string> {
  return new Promise((resolve, reject) => {
    let text = "";
    const onData = (d: Buffer) => {
      text += d.toString("latin1");
      const head = text.indexOf("\r\n\r\n");
      const length = Number(/content-length: (\d+)/i.exec(text)?.[1] ?? "0");
      if (head >= 0 && text.length >= head + 4 + length) {
        socket.off("data", onData);
        resolve(text.slice(0, text.indexOf("\r\n")));
      }
    };
    socket.on("data", onData);
    socket.once("error", reject);
    socket.write(`GET ${target} HTTP/1.1\r\nHost: localhost\r\nConnection: keep-alive\r\n\r\n`);
  });
}

describe("HTTPS on the one listener", () => {
  for (const kind of ["rsa", "ec", "ed25519"] as KeyKind[]) {
    test(`an ${kind} certificate: https URL, API over TLS, plain HTTP on the port refused`, async () => {
      const cert = makeCert(dir, `self-${kind}`, kind);
      const server = await startTls(cert);
      try {
        assert.match(server.url, /^https:\/\/127\.0\.0\.1:\d+$/);
        const res = await server.request("/api/whoami", { token: server.adminToken });
        assert.equal(res.status, 200);
        assert.equal(res.headers.get("strict-transport-security"), "max-age=31536000");
        assert.equal(res.headers.get("x-content-type-options"), "nosniff");
        await assert.rejects(fetch(server.url.replace("https:", "http:") + "/api/health"));
        await assert.rejects(fetch(server.url + "/api/health"), "a client that does not trust the certificate refuses it");
      } finally {
        await server.close();
      }
    });
  }

  test("links handed out use https, and the download through one is byte-identical", async () => {
    const cert = makeCert(dir, "links", "rsa");
    const server = await startTls(cert);
    try {
      const data = Buffer.from("package over tls\n".repeat(1000));
      const pkg = await uploadOk(server, { token: server.adminToken, file: data });
      const link = (await (await server.request(`/api/v1/packages/${pkg.id}/download`, { token: server.adminToken })).json()) as { download_url: string };
      assert.ok(link.download_url.startsWith(`${server.url}/local_storage/`), link.download_url);
      const body = Buffer.from(await (await trustingFetch(cert.cert)(link.download_url)).arrayBuffer());
      assert.deepEqual(body, data);
    } finally {
      await server.close();
    }
  });

  test("SIGHUP's reload: new connections get the new certificate, open ones go on; a bad pair keeps the old", async () => {
    const first = makeCert(dir, "first", "ec");
    const second = makeCert(dir, "second", "ed25519");
    const live = { cert: join(dir, "live.pem"), key: join(dir, "live.key") };
    place(first, live);
    const server = await startTestServer({ tls: { cert_file: live.cert, key_file: live.key } });
    const trust = [first.cert, second.cert];
    try {
      const old = await openTls(server.url, trust);
      assert.equal(old.getPeerX509Certificate()!.fingerprint256, fingerprint(first.cert));
      assert.match(await requestOn(old, "/api/health"), /^HTTP\/1.1 200/);

      place(second, live);
      server.server.reloadTls();
      const fresh = await openTls(server.url, trust);
      assert.equal(fresh.getPeerX509Certificate()!.fingerprint256, fingerprint(second.cert));
      assert.match(await requestOn(old, "/api/health"), /^HTTP\/1.1 200/, "the connection opened before the reload still works");
      fresh.destroy();

      copyFileSync(first.key, live.key); // key of the other certificate
      assert.throws(() => server.server.reloadTls(), (e: Error) => e instanceof ConfigError && /tls\.key_file.*does not match/.test(e.message));
      const after = await openTls(server.url, trust);
      assert.equal(after.getPeerX509Certificate()!.fingerprint256, fingerprint(second.cert), "a bad pair is not taken");
      after.destroy();
      old.destroy();
    } finally {
      await server.close();
    }
  });

  test("the agent trusts only its ca_file: device socket and shell socket over WSS; another CA is refused", async () => {
    const ca = makeCert(dir, "lab-ca", "ec");
    const leaf = makeCert(dir, "gateway", "rsa", ca);
    const server = await startTls(leaf, ca.cert);
    try {
      const agent = startAgent(server, { ca_file: ca.cert, shell: { command: ["cat"], idle_timeout: 30 } });
      try {
        const id = await approveAgent(server, agent);
        await untilConnected(server, id);
        const shell = new WebSocket(`${server.url.replace("https", "wss")}/api/v1/devices/${agent.mac}/shell?token=${server.adminToken}`, { ca: readFileSync(ca.cert) });
        let echoed = "";
        shell.on("message", (d) => (echoed += d.toString()));
        await new Promise((resolve, reject) => (shell.once("open", resolve), shell.once("error", reject)));
        shell.send("over wss\n");
        await waitFor(() => echoed === "over wss\n", 5000, `shell echo (${echoed})`);
        shell.close();
      } finally {
        await agent.stop();
      }
      // The same from a `labgate agent` process, whose bundle loads tls and https only now (src/agent/bundle.ts).
      const child = await spawnConnectedAgent(server, [`ca_file: ${ca.cert}`]);
      child.child.kill("SIGTERM");
      await once(child.child, "exit");

      // Trusting another CA, or the system's store, the agent refuses this server and never registers.
      const stranger = makeCert(dir, "stranger", "ec");
      for (const caFile of [stranger.cert, ""]) {
        const lines: string[] = [];
        const config = buildAgentConfig({ server: server.url, ca_file: caFile, data_dir: join(tempDir("labgate-agent-"), "data"), mac_address: agentMac(), key_type: "ed25519", retry_min_delay: 0.05, retry_max_delay: 0.2 });
        const refused = new Agent(config, createLogger("warn", { write: (line) => lines.push(line) }));
        refused.start();
        try {
          await waitFor(() => lines.some((l) => /authorization failed: .*certificate/.test(l)), 5000, `a certificate error (${lines.join(" | ")})`);
          const pending = (await (await server.request("/api/v1/auth/pending", { token: server.adminToken })).json()) as Array<{ mac_address: string }>;
          assert.ok(!pending.some((p) => p.mac_address === refused.mac), "nothing reached the server");
        } finally {
          await refused.stop();
        }
      }
    } finally {
      await server.close();
    }
  });

  test("an unreadable ca_file stops the agent with the key named", () => {
    const config = buildAgentConfig({ server: "https://127.0.0.1:1", ca_file: join(dir, "missing.pem"), data_dir: join(dir, "agent-missing"), mac_address: agentMac() });
    const agent = new Agent(config, createLogger("error"));
    assert.throws(() => agent.start(), (e: Error) => e instanceof ConfigError && /agent config key ca_file/.test(e.message));
  });
});

/** A copy of `key` that every user may read (0644). */
function readableByAll(key: string): string {
  const copy = key.replace(/\.key$/, "-open.key");
  copyFileSync(key, copy);
  chmodSync(copy, 0o644);
  return copy;
}

describe("labgate serve with tls", () => {
  const config = (name: string, tls: Record<string, string>) => {
    const file = join(dir, `${name}.yaml`);
    writeFileSync(file, `data_dir: ${join(dir, `data-${name}`)}\nlisten: 127.0.0.1:0\ntls: ${JSON.stringify(tls)}\n`);
    return file;
  };

  test("a missing file, a lone setting or a key that is not the certificate's exits 2 naming the key", async () => {
    const a = makeCert(dir, "cli-a", "ec");
    const b = makeCert(dir, "cli-b", "ec");
    const cases: Array<[Record<string, string>, RegExp]> = [
      [{ cert_file: join(dir, "nope.pem"), key_file: a.key }, /config key tls\.cert_file: cannot read .*ENOENT/],
      [{ cert_file: a.cert, key_file: join(dir, "nope.key") }, /config key tls\.key_file: cannot read/],
      [{ cert_file: a.cert }, /config key tls\.key_file: give both/],
      [{ cert_file: a.cert, key_file: b.key }, /config key tls\.key_file: .* does not match the certificate/],
      [{ cert_file: a.key, key_file: a.key }, /config key tls\.cert_file: .* is not a PEM certificate/],
      [{ cert_file: a.cert, key_file: readableByAll(a.key) }, /config key tls\.key_file: .*open\.key is readable by every user of this machine: chmod o-rwx/],
    ];
    for (const [i, [tls, message]] of cases.entries()) {
      const result = await runInProcess(["serve", "--config", config(`bad${i}`, tls)]);
      assert.equal(result.code, 2, result.stderr);
      assert.match(result.stderr, message);
    }
  });

  test("the listening line says https; SIGHUP reloads the certificate in the running process", async () => {
    const first = makeCert(dir, "proc-first", "rsa");
    const second = makeCert(dir, "proc-second", "ec");
    const live = { cert: join(dir, "proc-live.pem"), key: join(dir, "proc-live.key") };
    place(first, live);
    // How the service reads its key: 0640, owned by root with the service's group.
    chmodSync(live.key, 0o640);
    if (process.getuid?.() === 0) chownSync(live.key, 0, 1);
    const proc = await startServe(["serve", "--config", config("proc", { cert_file: live.cert, key_file: live.key })]);
    try {
      assert.match(proc.url, /^https:\/\//);
      const trust = [first.cert, second.cert];
      const before = await openTls(proc.url, trust);
      assert.equal(before.getPeerX509Certificate()!.fingerprint256, fingerprint(first.cert));
      before.destroy();
      place(second, live);
      proc.child.kill("SIGHUP");
      await waitFor(() => proc.stderr().includes("TLS certificate reloaded"), 10_000, "the reload log line");
      const after = await openTls(proc.url, trust);
      assert.equal(after.getPeerX509Certificate()!.fingerprint256, fingerprint(second.cert));
      after.destroy();
    } finally {
      assert.equal(await proc.stop(), 0);
    }
  });
});

test("isTls asks the socket: true over HTTPS, false over HTTP even for an https absolute-form target", async () => {
  const cert = makeCert(dir, "helper", "ec");
  const app = new Hono().get("/tls", (c) => c.text(String(isTls(c))));
  const plain = serve({ fetch: app.fetch, hostname: "127.0.0.1", port: 0 });
  const secure = serve({ fetch: app.fetch, hostname: "127.0.0.1", port: 0, createServer: createHttpsServer, serverOptions: { cert: readFileSync(cert.cert), key: readFileSync(cert.key) } });
  await Promise.all([plain, secure].map((s) => new Promise((resolve) => (s.listening ? resolve(null) : s.once("listening", resolve)))));
  try {
    const securePort = (secure.address() as AddressInfo).port;
    const plainPort = (plain.address() as AddressInfo).port;
    assert.equal(await (await trustingFetch(cert.cert)(`https://127.0.0.1:${securePort}/tls`)).text(), "true");
    assert.equal(await (await fetch(`http://127.0.0.1:${plainPort}/tls`)).text(), "false");
    const socket = netConnect(plainPort, "127.0.0.1");
    let text = "";
    socket.on("data", (d) => (text += d));
    socket.write(`GET https://127.0.0.1:${plainPort}/tls HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n`);
    await new Promise((resolve) => socket.once("end", resolve));
    assert.match(text, /\r\n\r\nfalse$/);
  } finally {
    plain.close();
    secure.close();
  }
});
