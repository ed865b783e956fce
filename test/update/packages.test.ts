import assert from "node:assert/strict";
import { readdirSync, existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { describe, it } from "node:test";
import { removeDir, startTestServer, useTestServer } from "../helpers/server.ts";
import { artifact, sha256, tar, tarMember, upload, uploadOk } from "./helpers/packages.ts";

const objectsOn = (dataDir: string): string[] => {
  const out: string[] = [];
  const walk = (dir: string, rel: string) => {
    if (!existsSync(dir)) return;
    for (const e of readdirSync(dir, { withFileTypes: true })) {
      if (e.isDirectory()) walk(join(dir, e.name), `${rel}${e.name}/`);
      else out.push(`${rel}${e.name}`);
    }
  };
  walk(join(dataDir, "storage"), "");
  return out;
};

describe("packages: upload, list, get, delete", () => {
  const server = useTestServer();

  it("uploads a package: 200 with the Package object, bytes on disk, sha256 of the bytes", async () => {
    const bytes = Buffer.from("first package payload\n".repeat(100));
    const pkg = await uploadOk(server, { token: server.adminToken, version: "v1", devtype: "board", file: bytes, fields: { "svc.custom": "x" } });
    assert.equal(typeof pkg.id, "number");
    assert.match(pkg.created, /^[A-Z][a-z]{2}, \d{2} [A-Z][a-z]{2} \d{4} \d{2}:\d{2}:\d{2} GMT$/);
    assert.equal(pkg.sha256, sha256(bytes));
    const body = pkg as unknown as { driver: string; metadata: Record<string, unknown> };
    assert.equal(body.driver, "local");
    assert.equal(body.metadata["svc.software.version"], "v1");
    assert.equal(body.metadata["svc.hardware.devtype"], "board");
    assert.equal(body.metadata["svc.custom"], "x");
    assert.equal(body.metadata["svc.storage.local.length"], bytes.length);
    assert.equal(body.metadata["svc.storage.local.directory"], ".");
    const uuid = body.metadata["svc.storage.local.uuid"] as string;
    assert.match(uuid, /^[0-9a-f-]{36}$/);
    assert.deepEqual(readFileSync(join(server.dataDir, "storage", uuid)), bytes);

    const list = await server.request("/api/v1/packages", { token: server.adminToken });
    assert.equal(list.status, 200);
    assert.deepEqual(((await list.json()) as { id: number }[]).map((p) => p.id), [pkg.id]);
    const one = await server.request(`/api/v1/packages/${pkg.id}`, { token: server.adminToken });
    assert.equal(one.status, 200);
    assert.deepEqual(await one.json(), pkg);
  });

  it("refuses reserved metadata keys, missing version/devtype/file with 400 and stores nothing", async () => {
    const before = objectsOn(server.dataDir).length;
    const count = async () => ((await (await server.request("/api/v1/packages", { token: server.adminToken })).json()) as unknown[]).length;
    const packagesBefore = await count();
    const cases: [Parameters<typeof upload>[1], RegExp][] = [
      [{ token: server.adminToken, fields: { "svc.storage.local.uuid": "mine" } }, /reserved key/],
      [{ token: server.adminToken, fields: { "svc.storage.anything": "x" } }, /reserved key/],
      [{ token: server.adminToken, version: null }, /missing required metadata: svc\.software\.version/],
      [{ token: server.adminToken, devtype: null }, /missing required metadata: svc\.hardware\.devtype/],
      [{ token: server.adminToken, version: "" }, /svc\.software\.version/],
      [{ token: server.adminToken, file: null }, /missing package file/],
      [{ token: server.adminToken, fields: { "svc.storage.directory": "../escape" } }, /svc\.storage\.directory/],
      [{ token: server.adminToken, fields: { "svc.storage.directory": "a/../../b" } }, /svc\.storage\.directory/],
    ];
    for (const [options, message] of cases) {
      const res = await upload(server, options);
      assert.equal(res.status, 400, JSON.stringify(options.fields ?? options));
      assert.match(((await res.json()) as { error: string }).error, message);
    }
    // A `file` sent as a text field is not a file part.
    const form = new FormData();
    form.set("svc.software.version", "v1");
    form.set("svc.hardware.devtype", "board");
    form.set("file", "not a file part");
    const text = await server.request("/api/v1/packages", { method: "POST", token: server.adminToken, body: form });
    assert.equal(text.status, 400);
    const json = await server.request("/api/v1/packages", { method: "POST", token: server.adminToken, json: { file: "x" } });
    assert.equal(json.status, 400);
    const garbage = await server.request("/api/v1/packages", {
      method: "POST",
      token: server.adminToken,
      headers: { "content-type": "multipart/form-data; boundary=zzz" },
      body: "--zzz\r\nContent-Disposition: form-data; name=\"file\"; filename=\"a\"\r\n\r\nabc",
    });
    assert.equal(garbage.status, 400);
    assert.equal(objectsOn(server.dataDir).length, before);
    assert.equal(await count(), packagesBefore);
  });

  it("stores into svc.storage.directory inside the storage dir", async () => {
    const pkg = await uploadOk(server, { token: server.adminToken, fields: { "svc.storage.directory": "releases/2026" } });
    assert.equal(pkg.metadata["svc.storage.local.directory"], "releases/2026");
    assert.equal("svc.storage.directory" in pkg.metadata, false);
    assert.ok(existsSync(join(server.dataDir, "storage", "releases", "2026", pkg.metadata["svc.storage.local.uuid"] as string)));
    const link = await server.request(`/api/v1/packages/${pkg.id}/download`, { token: server.adminToken });
    const { download_url } = (await link.json()) as { download_url: string };
    assert.match(download_url, /\/local_storage\/releases\/2026\/[0-9a-f-]{36}\?/);
    assert.equal((await fetch(download_url)).status, 200);
  });

  it("answers 401 without a token, 403 without an upload scope, 404 for unknown ids", async () => {
    assert.equal((await server.request("/api/v1/packages")).status, 401);
    assert.equal((await upload(server, { token: "garbage" })).status, 401);
    const readOnly = server.token(["admin_ro"], "reader");
    assert.equal((await upload(server, { token: readOnly })).status, 403);
    assert.equal((await upload(server, { token: server.token(["create_group"], "g") })).status, 403);
    for (const path of ["/api/v1/packages/9999", "/api/v1/packages/abc", "/api/v1/packages/9999/download"]) {
      const res = await server.request(path, { token: server.adminToken });
      assert.equal(res.status, 404, path);
      assert.equal(typeof ((await res.json()) as { error: string }).error, "string");
    }
    assert.equal((await server.request("/api/v1/packages/9999", { method: "DELETE", token: server.adminToken })).status, 404);
  });

  it("chooses the upload scope from the artifact's payload types (D14)", async () => {
    const single = server.token(["upload_single_file"], "u-single");
    const rootfs = server.token(["upload_rootfs_image"], "u-rootfs");
    const nonstandard = server.token(["upload_nonstandard_artifact"], "u-other");
    const allThree = server.token(["upload_single_file", "upload_rootfs_image", "upload_nonstandard_artifact"], "u-all");
    const cases: [string, Buffer, string, number][] = [
      ["single-file artifact, single scope", artifact(["single-file"]), single, 200],
      ["single-file artifact, rootfs scope", artifact(["single-file"]), rootfs, 403],
      ["rootfs artifact (gzip), rootfs scope", artifact(["rootfs-image"], { gzip: true }), rootfs, 200],
      ["rootfs artifact, nonstandard scope", artifact(["rootfs-image"]), nonstandard, 403],
      ["delta rootfs artifact, rootfs scope", artifact(["delta-rootfs-image"]), rootfs, 200],
      ["mixed artifact, single scope only", artifact(["single-file", "rootfs-image"]), single, 403],
      ["mixed artifact, all upload scopes", artifact(["single-file", "rootfs-image"]), allThree, 200],
      ["unknown payload type, all upload scopes", artifact(["zephyr-image"]), allThree, 403],
      ["unknown payload type, admin", artifact(["zephyr-image"]), server.adminToken, 200],
      // An empty or missing payload list is an artifact of unknown type (issue 10 item 4).
      ["zero payloads, single scope", artifact([]), single, 403],
      ["zero payloads, rootfs scope", artifact([], { gzip: true }), rootfs, 403],
      ["zero payloads, nonstandard scope", artifact([]), nonstandard, 200],
      ["no payloads key, single scope", artifact([], { headerInfo: "{}" }), single, 403],
      ["no payloads key, nonstandard scope", artifact([], { headerInfo: "{}" }), nonstandard, 200],
      ["plain file, nonstandard scope", Buffer.from("just bytes"), nonstandard, 200],
      ["plain file, single scope", Buffer.from("just bytes"), single, 403],
      ["malformed header-info, nonstandard scope", artifact([], { headerInfo: "{not json" }), nonstandard, 200],
      ["malformed header-info, rootfs scope", artifact([], { headerInfo: "{not json" }), rootfs, 403],
      ["tar without header.tar, single scope", tar(tarMember("version", "{}")), single, 403],
    ];
    for (const [label, file, token, status] of cases) {
      const res = await upload(server, { token, file });
      assert.equal(res.status, status, `${label}: ${await res.clone().text()}`);
      if (status === 403) assert.match(((await res.json()) as { error: string }).error, /One of the scopes is required: svc_admin_rw/);
    }
  });

  it("deletes an unassigned package: row, permissions and the stored object", async () => {
    const pkg = await uploadOk(server, { token: server.adminToken });
    const file = join(server.dataDir, "storage", pkg.metadata["svc.storage.local.uuid"] as string);
    assert.ok(existsSync(file));
    const res = await server.request(`/api/v1/packages/${pkg.id}`, { method: "DELETE", token: server.adminToken });
    assert.equal(res.status, 200);
    assert.deepEqual(await res.json(), {});
    assert.equal(existsSync(file), false);
    assert.equal((await server.request(`/api/v1/packages/${pkg.id}`, { token: server.adminToken })).status, 404);
    assert.equal((await server.request(`/api/v1/packages/${pkg.id}`, { method: "DELETE", token: server.adminToken })).status, 404);
  });

  it("per-user permissions: the uploader sees and deletes its package, others do not", async () => {
    const alice = server.token(["upload_nonstandard_artifact"], "alice");
    const bob = server.token(["upload_nonstandard_artifact"], "bob");
    const pkg = await uploadOk(server, { token: alice });
    const aliceList = (await (await server.request("/api/v1/packages", { token: alice })).json()) as { id: number }[];
    assert.deepEqual(aliceList.map((p) => p.id), [pkg.id]);
    assert.deepEqual(await (await server.request("/api/v1/packages", { token: bob })).json(), []);
    assert.equal((await server.request(`/api/v1/packages/${pkg.id}`, { token: alice })).status, 200);
    assert.equal((await server.request(`/api/v1/packages/${pkg.id}`, { token: bob })).status, 404);
    assert.equal((await server.request(`/api/v1/packages/${pkg.id}/download`, { token: bob })).status, 404);
    assert.equal((await server.request(`/api/v1/packages/${pkg.id}/download`, { token: alice })).status, 200);
    assert.equal((await server.request(`/api/v1/packages/${pkg.id}`, { method: "DELETE", token: bob })).status, 403);
    // admin_ro reads everything but cannot delete.
    const ro = server.token(["admin_ro"], "auditor");
    assert.equal((await server.request(`/api/v1/packages/${pkg.id}`, { token: ro })).status, 200);
    assert.equal((await server.request(`/api/v1/packages/${pkg.id}`, { method: "DELETE", token: ro })).status, 403);
    assert.equal((await server.request(`/api/v1/packages/${pkg.id}`, { method: "DELETE", token: alice })).status, 200);
    // Cascade: the creator's rows went with the package.
    const rows = await server.db.all("SELECT * FROM permissions WHERE resource = 'package' AND resource_id = ?", [pkg.id]);
    assert.deepEqual(rows, []);
  });
});

describe("packages: configured prefix and start-up clean-up", () => {
  it("uses the configured prefix for metadata keys and scope names, never a literal svc", async () => {
    const server = await startTestServer({ prefix: "acme" });
    try {
      const form = (fields: Record<string, string>) => {
        const f = new FormData();
        for (const [k, v] of Object.entries(fields)) f.set(k, v);
        f.set("file", new Blob([new Uint8Array(Buffer.from("acme bytes"))]), "a.bin");
        return f;
      };
      const post = (fields: Record<string, string>, token = server.adminToken) => server.request("/api/v1/packages", { method: "POST", token, body: form(fields) });
      const ok = await post({ "acme.software.version": "1", "acme.hardware.devtype": "b", "svc.storage.local.uuid": "just metadata here", "acme.storage.directory": "d" });
      assert.equal(ok.status, 200, await ok.clone().text());
      const pkg = (await ok.json()) as { metadata: Record<string, unknown> };
      assert.equal(pkg.metadata["svc.storage.local.uuid"], "just metadata here");
      assert.equal(pkg.metadata["acme.storage.local.directory"], "d");
      assert.match(pkg.metadata["acme.storage.local.uuid"] as string, /^[0-9a-f-]{36}$/);
      const reserved = await post({ "acme.software.version": "1", "acme.hardware.devtype": "b", "acme.storage.local.length": "1" });
      assert.equal(reserved.status, 400);
      const missing = await post({ "svc.software.version": "1", "svc.hardware.devtype": "b" });
      assert.equal(missing.status, 400);
      assert.match(((await missing.json()) as { error: string }).error, /acme\.software\.version/);
      const refused = await post({ "acme.software.version": "1", "acme.hardware.devtype": "b" }, server.token(["upload_single_file"], "u"));
      assert.equal(refused.status, 403);
      assert.match(((await refused.json()) as { error: string }).error, /acme_upload_nonstandard_artifact/);
    } finally {
      await server.close();
      removeDir(server.dataDir);
    }
  });

  it("removes leftovers of interrupted uploads at start-up and keeps real objects", async () => {
    const { mkdirSync, writeFileSync } = await import("node:fs");
    const first = await startTestServer();
    const pkg = await uploadOk(first, { token: first.adminToken, fields: { "svc.storage.directory": "kept" } });
    await first.close();
    const storage = join(first.dataDir, "storage");
    const stray = "0b9d7e0c-1111-4222-8333-944455556666";
    writeFileSync(join(storage, stray), "object whose row never committed");
    mkdirSync(join(storage, "sub"), { recursive: true });
    writeFileSync(join(storage, "sub", stray), "another");
    writeFileSync(join(storage, ".tmp", "half-written"), "temp");
    writeFileSync(join(storage, "notes.txt"), "not an object name: left alone");
    const second = await startTestServer({}, first.dataDir);
    try {
      await second.server.domains.update.orphansSwept;
      assert.equal(existsSync(join(storage, stray)), false);
      assert.equal(existsSync(join(storage, "sub", stray)), false);
      assert.equal(existsSync(join(storage, ".tmp", "half-written")), false);
      assert.ok(existsSync(join(storage, "notes.txt")));
      assert.ok(existsSync(join(storage, "kept", pkg.metadata["svc.storage.local.uuid"] as string)));
      const res = await second.request(`/api/v1/packages/${pkg.id}/download`, { token: second.adminToken });
      const { download_url } = (await res.json()) as { download_url: string };
      assert.equal((await fetch(download_url)).status, 200);
    } finally {
      await second.close();
      removeDir(second.dataDir);
    }
  });
});
