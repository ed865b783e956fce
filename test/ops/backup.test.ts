import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import { createReadStream, existsSync, mkdirSync, readdirSync, readFileSync, statSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { Readable } from "node:stream";
import { after, describe, test } from "node:test";
import tar from "tar-stream";
import { BackupError, INFO_ENTRY, MANIFEST_ENTRY } from "../../src/backup/archive.ts";
import { restoreBackup } from "../../src/backup/restore.ts";
import { runCli } from "../helpers/cli.ts";
import { databaseUrlFor } from "../helpers/test-database.ts";
import { removeDir, startTestServer, tempDir, type TestServer, waitFor } from "../helpers/server.ts";
import { trigger, uploadConfig, waitRun } from "../testrun/run-helpers.ts";
import { registerDevice } from "../update/helpers/devices.ts";
import { uploadOk } from "../update/helpers/packages.ts";

const dir = tempDir("labgate-backup-");
after(() => removeDir(dir));

const sha = (data: Uint8Array) => createHash("sha256").update(data).digest("hex");

async function getJson(server: TestServer, path: string): Promise<unknown> {
  const res = await server.request(path, { token: server.adminToken });
  assert.equal(res.status, 200, `${path}: ${await res.clone().text()}`);
  return res.json();
}

/** A package's bytes through its download link (what a device gets). */
async function download(server: TestServer, id: number): Promise<Buffer> {
  const { download_url } = (await getJson(server, `/api/v1/packages/${id}/download`)) as { download_url: string };
  const res = await fetch(download_url);
  assert.equal(res.status, 200);
  return Buffer.from(await res.arrayBuffer());
}

/** What a restored server must serve the same: devices, groups, packages and their bytes, configs, runs, reports, artifacts, accounts. */
async function served(server: TestServer) {
  const packages = (await getJson(server, "/api/v1/packages")) as Array<{ id: number; sha256: string }>;
  const configs = (await getJson(server, "/api/v1/configs")) as Array<{ name: string }>;
  const runs = (await getJson(server, "/api/v1/test-runs")) as Array<{ id: string }>;
  const text = async (path: string) => (await server.request(path, { token: server.adminToken })).text();
  return {
    devices: await getJson(server, "/api/v2/devices"),
    groups: await getJson(server, "/api/v2/groups"),
    packages,
    downloads: await Promise.all(packages.map(async (p) => sha(await download(server, p.id)))),
    configs,
    configFiles: await Promise.all(configs.map((c) => text(`/api/v1/configs/${c.name}/file`))),
    runs,
    reports: await Promise.all(runs.map((r) => text(`/api/v1/test-runs/${r.id}/report`))),
    artifacts: await Promise.all(runs.map((r) => getJson(server, `/api/v1/test-runs/${r.id}/artifacts`))),
    users: await getJson(server, "/api/v1/users"),
  };
}

/** A server with a bit of everything: an approved device, a group with packages, a config and a finished run with a report and artifacts. */
async function populate(server: TestServer) {
  await registerDevice(server);
  const one = await uploadOk(server, { token: server.adminToken, file: Buffer.alloc(300_000, 7), version: "v2" });
  await uploadOk(server, { token: server.adminToken, file: Buffer.from("second"), version: "v3", fields: { "svc.storage.directory": "releases/2026" } });
  const group = await server.request("/api/v2/groups", { method: "POST", token: server.adminToken, json: { metadata: { name: "lab" } } });
  assert.equal(group.status, 200, await group.clone().text());
  const { id: groupId } = (await group.json()) as { id: number };
  const assign = await server.request(`/api/v2/groups/${groupId}/package`, { method: "POST", token: server.adminToken, json: { packages: [one.id] } });
  assert.ok(assign.ok, await assign.text());
  await uploadConfig(server, "exec.yml", readFileSync("assets/testrun/samples/exec.yml", "utf8"));
  const run = await trigger(server, { config_name: "exec.yml" });
  await waitRun(server, run.id);
}

describe("backup and restore", () => {
  test("labgate backup while the server runs, and again once it has stopped: restore gives a data dir whose server serves the same", async () => {
    const source = join(dir, "source");
    let server = await startTestServer({}, source);
    let before;
    const adminToken = server.adminToken;
    try {
      await populate(server);
      before = await served(server);
      const running = await runCli(["backup", "--data-dir", source, "--out", join(dir, "running.tar")]);
      assert.equal(running.code, 0, running.stderr);
      assert.match(running.stderr, /backup written to .*running\.tar/);
      assert.equal(statSync(join(dir, "running.tar")).mode & 0o777, 0o600, "the backup holds the keys: only its owner reads it");
    } finally {
      await server.close();
    }
    const stopped = await runCli(["backup", "--data-dir", source, "--out", join(dir, "stopped.tar")]);
    assert.equal(stopped.code, 0, stopped.stderr);
    assert.equal(existsSync(join(source, "labgate.lock")), false, "the lock is released");

    for (const name of ["running", "stopped"]) {
      const target = join(dir, `restored-${name}`);
      if (name === "running") {
        const restored = await runCli(["restore", "--in", join(dir, `${name}.tar`), "--data-dir", target]);
        assert.equal(restored.code, 0, restored.stderr);
        assert.match(restored.stdout, /^restored into .*restored-running: \d+ files/);
      } else {
        await restoreBackup(createReadStream(join(dir, `${name}.tar`)), target, { databaseUrl: await databaseUrlFor(target) });
      }
      assert.equal(existsSync(join(target, "labgate.lock")) || existsSync(join(target, "server.url")), false);
      server = await startTestServer({}, target);
      try {
        assert.deepEqual(await served(server), before, `restored from the ${name} server's backup`);
        // Same keys: tokens issued before the backup are still good.
        assert.equal((await server.request("/api/whoami", { token: adminToken })).status, 200);
      } finally {
        await server.close();
      }
    }
  });

  test("a backup taken while uploads, group changes and deletions run restores to a consistent state", async () => {
    const server = await startTestServer({}, join(dir, "busy"));
    const file = join(dir, "busy.tar");
    const uploaded = new Map<string, Buffer>();
    let stop = false;
    const errors: unknown[] = [];
    let doomedIds: number[] = [];
    const worker = async (w: number) => {
      for (let i = 0; !stop; i++) {
        const bytes = Buffer.alloc(20_000 + ((w * 7919 + i * 104729) % 200_000), `${w}-${i}`);
        const pkg = await uploadOk(server, { token: server.adminToken, file: bytes, version: `w${w}-${i}` });
        uploaded.set(pkg.sha256, bytes);
        if (i % 3 === 2) {
          const res = await server.request(`/api/v1/packages/${pkg.id}`, { method: "DELETE", token: server.adminToken });
          assert.equal(res.status, 200, await res.text());
        } else {
          const group = (await (await server.request("/api/v2/groups", { method: "POST", token: server.adminToken, json: { metadata: { name: `g${w}-${i}` } } })).json()) as { id: number };
          await server.request(`/api/v2/groups/${group.id}/package`, { method: "POST", token: server.adminToken, json: { packages: [pkg.id] } });
        }
      }
    };
    const workers = [0, 1, 2].map((w) => worker(w).catch((error) => errors.push(error)));
    try {
      await waitFor(() => uploaded.size >= 6 || errors.length > 0, 60_000, "six uploads");
      const doomed = [];
      for (let i = 0; i < 2; i++) {
        const bytes = Buffer.alloc(1_500_000, `doomed-${i}`);
        const pkg = await uploadOk(server, { token: server.adminToken, file: bytes, version: `doomed-${i}` });
        uploaded.set(pkg.sha256, bytes);
        doomed.push(pkg);
      }
      const res = await server.request("/api/v1/backup", { method: "POST", token: server.adminToken });
      assert.equal(res.status, 200);
      assert.equal(res.headers.get("content-type"), "application/x-tar");
      // Deleted once the snapshot is taken, before the stream reaches them: the backup still holds them.
      for (const pkg of doomed) assert.equal((await server.request(`/api/v1/packages/${pkg.id}`, { method: "DELETE", token: server.adminToken })).status, 200);
      writeFileSync(file, Buffer.from(await res.arrayBuffer()));
      doomedIds = doomed.map((p) => p.id);
      const more = uploaded.size;
      await waitFor(() => uploaded.size >= more + 3 || errors.length > 0, 60_000, "three more uploads after the backup");
    } finally {
      stop = true;
      await Promise.all(workers);
      await server.close();
    }
    assert.deepEqual(errors, []);
    assert.deepEqual(readdirSync(join(dir, "busy", "storage")).filter((n) => n.startsWith(".backup-")), [], "the staging links are gone");

    const target = join(dir, "busy-restored");
    await restoreBackup(createReadStream(file), target, { databaseUrl: await databaseUrlFor(target) });
    const restored = await startTestServer({}, target);
    try {
      const packages = (await getJson(restored, "/api/v1/packages")) as Array<{ id: number; sha256: string }>;
      assert.ok(packages.length >= 4, `packages in the backup: ${packages.length}`);
      for (const id of doomedIds) assert.ok(packages.some((p) => p.id === id), `package ${id}, deleted while the backup streamed, is in it`);
      for (const p of packages) {
        const bytes = await download(restored, p.id);
        assert.equal(sha(bytes), p.sha256, `package ${p.id} has its own bytes`);
        assert.ok(uploaded.get(p.sha256)?.equals(bytes));
      }
      const ids = new Set(packages.map((p) => p.id));
      const groups = (await getJson(restored, "/api/v1/groups")) as Array<{ id: number }>;
      for (const g of groups) {
        const held = (await getJson(restored, `/api/v2/groups/${g.id}`)) as { packages?: number[] };
        for (const id of held.packages ?? []) assert.ok(ids.has(id), `group ${g.id} holds package ${id}, which exists`);
      }
      const objects = readdirSync(join(target, "storage")).filter((n) => !n.startsWith("."));
      assert.equal(objects.length, packages.length, "exactly the objects of the packages in the image");
    } finally {
      await restored.close();
    }
  });

  describe("restore refuses", () => {
    let good: Buffer;
    test("setup: a good backup; one whose reader goes away leaves no staging links; admin_rw only", async () => {
      const source = join(dir, "small");
      const server = await startTestServer({}, source);
      try {
        await uploadOk(server, { token: server.adminToken, file: Buffer.alloc(4_000_000, 1) });
        const abandoned = await server.request("/api/v1/backup", { method: "POST", token: server.adminToken });
        const reader = abandoned.body!.getReader();
        assert.equal((await reader.read()).done, false);
        await reader.cancel();
        const staging = () => readdirSync(join(source, "storage")).filter((n) => n.startsWith(".backup-"));
        await waitFor(() => staging().length === 0, 5000, "the abandoned backup's staging links to go");
        const res = await server.request("/api/v1/backup", { method: "POST", token: server.adminToken });
        good = Buffer.from(await res.arrayBuffer());
        writeFileSync(join(dir, "small.tar"), good);
        const unauthorized = await server.request("/api/v1/backup", { method: "POST", token: server.token(["admin_ro"]) });
        assert.equal(unauthorized.status, 403, "a backup holds the keys: admin_rw only");
      } finally {
        await server.close();
      }
    });

    /** Restores `bytes` into a fresh target; returns the error and checks nothing was left behind. */
    async function refused(bytes: Buffer, label: string): Promise<string> {
      const parent = join(dir, `refused-${label}`);
      mkdirSync(parent);
      const target = join(parent, "data");
      const error = await restoreBackup(Readable.from([bytes]), target).then(
        () => assert.fail(`${label}: restored`),
        (e: unknown) => e,
      );
      assert.ok(error instanceof BackupError, `${label}: ${String(error)}`);
      assert.deepEqual(readdirSync(parent), [], `${label}: nothing left in ${parent}`);
      return error.message;
    }

    test("a backup cut short anywhere, a flipped byte, entries outside the data dir, links, a foreign tar", async () => {
      // Cut inside the first entry, inside the image, at an entry boundary just before the manifest, inside the manifest.
      const manifestAt = good.indexOf(Buffer.from(MANIFEST_ENTRY)) - 0;
      for (const length of [100, 3000, manifestAt, manifestAt + 600, good.length - 1100]) {
        assert.match(await refused(good.subarray(0, length), `cut-${length}`), /truncated|damaged/);
      }
      const flipped = Buffer.from(good);
      flipped[Math.floor(good.length / 2)] ^= 0xff;
      assert.match(await refused(flipped, "flipped"), /damaged|checksum/);

      const pack = async (entries: Array<{ name: string; data?: string; type?: "file" | "symlink"; linkname?: string }>) => {
        const p = tar.pack();
        const chunks: Buffer[] = [];
        p.on("data", (c: Buffer) => chunks.push(c));
        for (const e of entries) p.entry({ name: e.name, type: e.type ?? "file", linkname: e.linkname }, e.data ?? "");
        p.finalize();
        await new Promise((r) => p.on("end", r));
        return Buffer.concat(chunks);
      };
      const info = JSON.stringify({ format: "labgate-backup", version: 1, created: "x", labgate: "x" });
      assert.match(await refused(await pack([{ name: INFO_ENTRY, data: info }, { name: "data/../escape", data: "x" }]), "traversal"), /unsafe path/);
      assert.match(await refused(await pack([{ name: INFO_ENTRY, data: info }, { name: "/etc/escape", data: "x" }]), "absolute"), /not under data/);
      assert.match(await refused(await pack([{ name: INFO_ENTRY, data: info }, { name: "data/link", type: "symlink", linkname: "/etc" }]), "symlink"), /regular files only/);
      assert.match(await refused(await pack([{ name: "etc/passwd", data: "root" }]), "foreign"), /not a labgate backup/);
      assert.match(await refused(Buffer.alloc(0), "empty"), /empty|truncated/);
    });

    test("labgate restore: a non-empty target (exit 1, nothing written)", async () => {
      const busy = join(dir, "busy-target");
      mkdirSync(busy);
      writeFileSync(join(busy, "keep"), "x");
      const res = await runCli(["restore", "--in", join(dir, "small.tar"), "--data-dir", busy]);
      assert.equal(res.code, 1);
      assert.match(res.stderr, /is not empty/);
      assert.deepEqual(readdirSync(busy), ["keep"]);
      assert.deepEqual(readdirSync(dir).filter((n) => n.includes(".restore-")), [], "no temp dir left next to it");

    });
  });
});
