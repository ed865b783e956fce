import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import { existsSync, readdirSync, statSync } from "node:fs";
import { request as httpRequest } from "node:http";
import { join } from "node:path";
import { before, describe, it } from "node:test";
import { removeDir, startTestServer, useTestServer, waitFor } from "../helpers/server.ts";
import { sha256, uploadOk } from "./helpers/packages.ts";

const BOUNDARY = "----labgate-test-boundary";

function multipartHead(fields: Record<string, string>): Buffer {
  let text = "";
  for (const [name, value] of Object.entries(fields)) {
    text += `--${BOUNDARY}\r\nContent-Disposition: form-data; name="${name}"\r\n\r\n${value}\r\n`;
  }
  text += `--${BOUNDARY}\r\nContent-Disposition: form-data; name="file"; filename="big.bin"\r\nContent-Type: application/octet-stream\r\n\r\n`;
  return Buffer.from(text);
}
const multipartTail = Buffer.from(`\r\n--${BOUNDARY}--\r\n`);

/** Deterministic pseudo-random chunk i (so the client can hash without keeping the bytes), into `out` when given. */
function chunk(i: number, size: number, out = Buffer.alloc(size)): Buffer {
  let x = (i * 2654435761) >>> 0;
  for (let j = 0; j < size; j += 4) {
    x = (x * 1664525 + 1013904223) >>> 0;
    out.writeUInt32LE(x, j);
  }
  return out;
}

/** The files staged under the temp area (on PostgreSQL each node stages in its own directory there), as paths relative to it. */
function stagedFiles(dataDir: string): string[] {
  const dir = join(dataDir, "storage", ".tmp");
  if (!existsSync(dir)) return [];
  return readdirSync(dir, { recursive: true })
    .map(String)
    .filter((name) => {
      try {
        return statSync(join(dir, name)).isFile();
      } catch {
        return false; // renamed into place meanwhile
      }
    });
}

describe("packages: storage, download links and large uploads", () => {
  const server = useTestServer();
  let pkg: { id: number; sha256: string; metadata: Record<string, unknown> };
  const bytes = Buffer.from(Array.from({ length: 10_000 }, (_, i) => i % 251));
  before(async () => {
    pkg = await uploadOk(server, { token: server.adminToken, file: bytes });
  });

  const link = async (token = server.adminToken): Promise<string> => {
    const res = await server.request(`/api/v1/packages/${pkg.id}/download`, { token });
    assert.equal(res.status, 200);
    const body = (await res.json()) as { id: number; download_url: string };
    assert.equal(body.id, pkg.id);
    return body.download_url;
  };

  it("a signed link downloads the exact bytes with Content-Length, ETag and Accept-Ranges", async () => {
    const url = await link();
    assert.ok(url.startsWith(`${server.url}/local_storage/${pkg.metadata["svc.storage.local.uuid"]}?`), url);
    const res = await fetch(url);
    assert.equal(res.status, 200);
    assert.equal(res.headers.get("content-length"), String(bytes.length));
    assert.equal(res.headers.get("accept-ranges"), "bytes");
    const etag = res.headers.get("etag");
    assert.ok(etag);
    const body = Buffer.from(await res.arrayBuffer());
    assert.deepEqual(body, bytes);
    assert.equal(sha256(body), pkg.sha256);
    const again = await fetch(url, { headers: { "if-none-match": etag! } });
    assert.equal(again.status, 304);
    const head = await fetch(url, { method: "HEAD" });
    assert.equal(head.status, 200);
    assert.equal(head.headers.get("content-length"), String(bytes.length));
    assert.equal(head.headers.get("etag"), etag);
  });

  it("a database write failure after the bytes arrived leaves no object and no row", async () => {
    // The embedded engine's journal (PostgreSQL's own durability is its own: test/postgres/serve).
    const other = await startTestServer({ database: { url: "" } });
    const embedded = other.server.embedded!;
    try {
      embedded.failNextJournalWrite(new Error("simulated full disk"));
      const res = await other.request("/api/v1/packages", {
        method: "POST",
        token: other.adminToken,
        body: (() => {
          const f = new FormData();
          f.set("svc.software.version", "v1");
          f.set("svc.hardware.devtype", "board");
          f.set("file", new Blob([new Uint8Array(4096)]), "x.bin");
          return f;
        })(),
      });
      assert.equal(res.status, 503, await res.clone().text());
      const leftovers = () => readdirSync(join(other.dataDir, "storage"), { recursive: true }).filter((n) => !String(n).startsWith(".tmp"));
      await waitFor(() => leftovers().length === 0, 5000, "no object left");
      assert.deepEqual(stagedFiles(other.dataDir), []);
      // Once the database has reloaded, nothing of the upload is there.
      await waitFor(() => embedded.status().state === "ok", 5000, "the database reloaded");
      assert.deepEqual(embedded.all("SELECT id FROM packages"), []);
    } finally {
      await other.close();
      removeDir(other.dataDir);
    }
  });

  it("refuses an oversized form field with 400 and keeps nothing", async () => {
    const form = new FormData();
    form.set("svc.software.version", "v1");
    form.set("svc.hardware.devtype", "board");
    form.set("file", new Blob([new Uint8Array(1000)]), "x.bin");
    form.set("svc.notes", "x".repeat(70 * 1024));
    const res = await server.request("/api/v1/packages", { method: "POST", token: server.adminToken, body: form });
    assert.equal(res.status, 400);
    assert.match(((await res.json()) as { error: string }).error, /too long/);
    assert.deepEqual(stagedFiles(server.dataDir), []);
  });

  it("serves Range requests (206) and refuses unsatisfiable ones (416)", async () => {
    const url = await link();
    const mid = await fetch(url, { headers: { range: "bytes=100-199" } });
    assert.equal(mid.status, 206);
    assert.equal(mid.headers.get("content-range"), `bytes 100-199/${bytes.length}`);
    assert.equal(mid.headers.get("content-length"), "100");
    assert.deepEqual(Buffer.from(await mid.arrayBuffer()), bytes.subarray(100, 200));
    const open = await fetch(url, { headers: { range: "bytes=9990-" } });
    assert.equal(open.status, 206);
    assert.deepEqual(Buffer.from(await open.arrayBuffer()), bytes.subarray(9990));
    const suffix = await fetch(url, { headers: { range: "bytes=-5" } });
    assert.equal(suffix.status, 206);
    assert.deepEqual(Buffer.from(await suffix.arrayBuffer()), bytes.subarray(bytes.length - 5));
    const beyond = await fetch(url, { headers: { range: "bytes=20000-" } });
    assert.equal(beyond.status, 416);
    assert.equal(beyond.headers.get("content-range"), `bytes */${bytes.length}`);
    assert.equal(typeof ((await beyond.json()) as { error: string }).error, "string");
    // If-Range with a stale validator: the whole object.
    const stale = await fetch(url, { headers: { range: "bytes=0-9", "if-range": '"stale"' } });
    assert.equal(stale.status, 200);
    assert.equal(Buffer.from(await stale.arrayBuffer()).length, bytes.length);
  });

  it("refuses a forged, tampered, unsigned or expired link with 403 and an unknown object with 404", async () => {
    const url = new URL(await link());
    const signature = url.searchParams.get("signature")!;
    const tampered = new URL(url);
    tampered.searchParams.set("signature", (signature[0] === "A" ? "B" : "A") + signature.slice(1));
    assert.equal((await fetch(tampered)).status, 403);
    const longer = new URL(url);
    longer.searchParams.set("expires", String(Number(url.searchParams.get("expires")) + 3600));
    assert.equal((await fetch(longer)).status, 403);
    const unsigned = new URL(url);
    unsigned.search = "";
    assert.equal((await fetch(unsigned)).status, 403);
    // A signature for one object does not open another.
    const other = new URL(url);
    other.pathname = "/local_storage/00000000-0000-4000-8000-000000000000";
    assert.equal((await fetch(other)).status, 403);

    const tokens = server.server.ctx.tokens;
    const uuid = pkg.metadata["svc.storage.local.uuid"] as string;
    const expired = tokens.signLink("local_storage", uuid, -1);
    const res = await fetch(`${server.url}/local_storage/${uuid}?expires=${expired.expires}&signature=${expired.signature}`);
    assert.equal(res.status, 403);
    assert.match(((await res.json()) as { error: string }).error, /expired/);

    const missing = tokens.signLink("local_storage", "00000000-0000-4000-8000-000000000000", 60);
    assert.equal((await fetch(`${server.url}/local_storage/00000000-0000-4000-8000-000000000000?expires=${missing.expires}&signature=${missing.signature}`)).status, 404);
    // Even a validly signed name cannot leave the storage directory.
    for (const name of ["../labgate.db", "..%2Flabgate.db", ".tmp/x", "%2e%2e/admin.token"]) {
      const decoded = decodeURIComponent(name);
      const signed = tokens.signLink("local_storage", decoded, 60);
      const escape = await fetch(`${server.url}/local_storage/${name}?expires=${signed.expires}&signature=${signed.signature}`);
      assert.ok(escape.status === 404 || escape.status === 403, `${name}: ${escape.status}`);
    }
  });

  it("builds links from public_url when it is set", async () => {
    const other = await startTestServer({ public_url: "https://gateway.lab:8443" });
    try {
      const p = await uploadOk(other, { token: other.adminToken });
      const res = await other.request(`/api/v1/packages/${p.id}/download`, { token: other.adminToken });
      const { download_url } = (await res.json()) as { download_url: string };
      assert.match(download_url, /^https:\/\/gateway\.lab:8443\/local_storage\/[0-9a-f-]{36}\?expires=\d+&signature=[\w-]+$/);
    } finally {
      await other.close();
      removeDir(other.dataDir);
    }
  });

  it("links expire after update_server.download_link_ttl", async () => {
    const other = await startTestServer({ update_server: { download_link_ttl: 60 } as never });
    try {
      const p = await uploadOk(other, { token: other.adminToken });
      const res = await other.request(`/api/v1/packages/${p.id}/download`, { token: other.adminToken });
      const { download_url } = (await res.json()) as { download_url: string };
      const expires = Number(new URL(download_url).searchParams.get("expires"));
      assert.ok(expires <= Math.floor(other.clock.now() / 1000) + 60);
      other.clock.advance(50_000);
      assert.equal((await fetch(download_url)).status, 200, "still valid before the ttl");
      other.clock.advance(11_000);
      const expired = await fetch(download_url);
      assert.equal(expired.status, 403);
      assert.match(((await expired.json()) as { error: string }).error, /expired/);
    } finally {
      await other.close();
      removeDir(other.dataDir);
    }
  });

  it("streams a 200 MB upload to disk as it arrives, and the download back (memory: npm run bench:upload)", async () => {
    const CHUNK = 1024 * 1024;
    const COUNT = 200;
    const hash = createHash("sha256");
    const head = multipartHead({ "svc.software.version": "big", "svc.hardware.devtype": "board" });
    let halfOnDisk = false;
    // node:http with drain-based backpressure, the chunks from a pool of four reused once written:
    // the client in this process adds 4 MB, not 200 MB of garbage for V8 to collect when it sees fit.
    const free = Array.from({ length: 4 }, () => Buffer.alloc(CHUNK));
    const { status, text } = await new Promise<{ status: number; text: string }>((resolve, reject) => {
      const req = httpRequest(`${server.url}/api/v1/packages`, {
        method: "POST",
        headers: {
          authorization: `Bearer token=${server.adminToken}`,
          "content-type": `multipart/form-data; boundary=${BOUNDARY}`,
          "content-length": String(head.length + CHUNK * COUNT + multipartTail.length),
        },
      });
      req.on("error", reject);
      req.on("response", (res) => {
        let text = "";
        res.setEncoding("utf8");
        res.on("data", (d: string) => (text += d));
        res.on("end", () => resolve({ status: res.statusCode!, text }));
      });
      req.write(head);
      let i = 0;
      let waiting = false;
      const pump = () => {
        waiting = false;
        while (i < COUNT) {
          if (i === COUNT / 2 && !halfOnDisk) {
            // Halfway, the bytes sent so far are on disk (less what the socket and the writer hold):
            // the server streams to its staged file instead of keeping the body.
            const staged = () => stagedFiles(server.dataDir).reduce((sum, name) => sum + statSync(join(server.dataDir, "storage", ".tmp", name)).size, 0);
            return void waitFor(() => staged() >= (COUNT / 2 - 16) * CHUNK, 10_000, "half the upload on disk").then(() => ((halfOnDisk = true), pump()), reject);
          }
          const buffer = free.pop();
          if (!buffer) return void (waiting = true);
          const c = chunk(i++, CHUNK, buffer);
          hash.update(c);
          const more = req.write(c, () => {
            free.push(buffer);
            if (waiting) pump();
          });
          if (!more) return void req.once("drain", pump);
        }
        req.end(multipartTail);
      };
      pump();
    });
    assert.equal(status, 200, text);
    const big = JSON.parse(text) as { id: number; sha256: string; metadata: Record<string, unknown> };
    const digest = hash.digest("hex");
    assert.equal(big.sha256, digest);
    assert.equal(big.metadata["svc.storage.local.length"], CHUNK * COUNT);

    const linkRes = await server.request(`/api/v1/packages/${big.id}/download`, { token: server.adminToken });
    const { download_url } = (await linkRes.json()) as { download_url: string };
    const check = createHash("sha256");
    const length = await new Promise<string | undefined>((resolve, reject) => {
      httpRequest(download_url, (res) => {
        res.on("data", (d: Buffer) => check.update(d));
        res.on("end", () => resolve(res.headers["content-length"]));
        res.on("error", reject);
      })
        .on("error", reject)
        .end();
    });
    assert.equal(length, String(CHUNK * COUNT));
    assert.equal(check.digest("hex"), digest);
    assert.ok(halfOnDisk, "the bytes reached the disk while the upload went on: the server streams the body, it does not keep it");
  });

  it("an aborted upload leaves no file and no row", async () => {
    const before = ((await (await server.request("/api/v1/packages", { token: server.adminToken })).json()) as unknown[]).length;
    await new Promise<void>((resolve, reject) => {
      const req = httpRequest(`${server.url}/api/v1/packages`, {
        method: "POST",
        headers: {
          authorization: `Bearer token=${server.adminToken}`,
          "content-type": `multipart/form-data; boundary=${BOUNDARY}`,
          "content-length": String(50 * 1024 * 1024),
        },
      });
      req.on("error", () => resolve());
      req.on("response", () => resolve());
      req.write(multipartHead({ "svc.software.version": "v1", "svc.hardware.devtype": "board" }));
      let sent = 0;
      const pump = () => {
        if (sent >= 8) {
          // Wait until the server has staged a temp file, then cut the connection.
          waitFor(() => stagedFiles(server.dataDir).length > 0, 5000, "a staged temp file").then(() => {
            req.destroy();
            resolve();
          }, reject);
          return;
        }
        sent++;
        req.write(chunk(sent, 1024 * 1024), pump);
      };
      pump();
    });
    await waitFor(() => stagedFiles(server.dataDir).length === 0, 5000, "no temp file left");
    const list = (await (await server.request("/api/v1/packages", { token: server.adminToken })).json()) as unknown[];
    assert.equal(list.length, before);
    const objects = readdirSync(join(server.dataDir, "storage")).filter((n) => !n.startsWith("."));
    assert.equal(objects.length, before);
  });
});
