import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { readdirSync, readlinkSync } from "node:fs";
import { request as httpRequest } from "node:http";
import { test } from "node:test";
import { useTestServer, waitFor } from "../helpers/server.ts";
import { uploadOk } from "./helpers/packages.ts";

// Package downloads go through storage/send.ts (a few reused buffers instead of a stream):
// bytes and ranges across its 256 KiB chunks, and a client that hangs up.

let url: string;
let uuid: string;
const SIZE = 3 * 1024 * 1024 + 12345;
const bytes = randomBytes(SIZE);

useTestServer({}, async (server) => {
  const pkg = await uploadOk(server, { token: server.adminToken, file: bytes });
  uuid = String(pkg.metadata["svc.storage.local.uuid"]);
  const res = await server.request(`/api/v1/packages/${pkg.id}/download`, { token: server.adminToken });
  url = ((await res.json()) as { download_url: string }).download_url;
});

/** Descriptors of this process (the server runs in it) open on the object's file. */
const openOnObject = () =>
  readdirSync("/proc/self/fd").filter((fd) => {
    try {
      return readlinkSync(`/proc/self/fd/${fd}`).endsWith(uuid);
    } catch {
      return false;
    }
  }).length;

/** Waits until no descriptor is open on the object: the sender closes its file just after the last byte goes out. */
const objectClosed = () => waitFor(() => openOnObject() === 0, 5000, "the object's file to be closed");

test("download: the whole object and ranges across chunk boundaries are the exact bytes", async () => {
  const whole = await fetch(url);
  assert.equal(whole.status, 200);
  assert.equal(whole.headers.get("content-length"), String(SIZE));
  assert.ok(Buffer.from(await whole.arrayBuffer()).equals(bytes));

  for (const [start, end] of [
    [262_140, 786_440],
    [0, 262_143],
    [262_144, 262_144],
    [SIZE - 300_000, SIZE - 1],
  ]) {
    const res = await fetch(url, { headers: { range: `bytes=${start}-${end}` } });
    assert.equal(res.status, 206);
    assert.equal(res.headers.get("content-range"), `bytes ${start}-${end}/${SIZE}`);
    assert.ok(Buffer.from(await res.arrayBuffer()).equals(bytes.subarray(start, end + 1)), `range ${start}-${end}`);
  }
  await objectClosed();
});

test("download: a client that hangs up mid-way stops the sending and the file is closed", async () => {
  await new Promise<void>((resolve, reject) => {
    const req = httpRequest(url, (res) => {
      assert.equal(res.statusCode, 200);
      res.once("data", () => {
        req.destroy();
        resolve();
      });
    });
    req.on("error", (error) => ((error as NodeJS.ErrnoException).code === "ECONNRESET" ? undefined : reject(error)));
    req.end();
  });
  await objectClosed();
  // The server goes on serving.
  assert.equal((await fetch(url, { headers: { range: "bytes=0-9" } })).status, 206);
});
