import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { once } from "node:events";
import { request as httpRequest, type IncomingMessage } from "node:http";
import { connect, createServer as createNetServer, type AddressInfo } from "node:net";
import { test } from "node:test";
import { removeDir, startTestServer, tempDir } from "../helpers/server.ts";
import { uploadOk } from "../update/helpers/packages.ts";

test("shutdown: a download in flight finishes; a connection that never sent a request does not hold the server", async () => {
  const server = await startTestServer();
  try {
    const bytes = randomBytes(4 * 1024 * 1024);
    const pkg = await uploadOk(server, { token: server.adminToken, file: bytes });
    const link = await server.request(`/api/v1/packages/${pkg.id}/download`, { token: server.adminToken });
    const url = ((await link.json()) as { download_url: string }).download_url;

    // A download that has started and is read slowly: more bytes than the socket buffers hold wait.
    const download = await new Promise<IncomingMessage>((resolve, reject) => httpRequest(url, resolve).on("error", reject).end());
    assert.equal(download.statusCode, 200);
    download.pause();
    // A client's spare connection (a browser's preconnect) that sends nothing.
    const silent = connect(Number(new URL(server.url).port), "127.0.0.1");
    await once(silent, "connect");

    const closed = server.close();
    // The silent connection goes at once, while the download still waits for its reader: before,
    // it held server.close() for the whole grace period, which then cut the download off.
    await once(silent, "close");
    const chunks: Buffer[] = [];
    download.on("data", (chunk: Buffer) => chunks.push(chunk));
    download.resume();
    await once(download, "end");
    assert.ok(Buffer.concat(chunks).equals(bytes), "the download in flight got every byte");
    await closed;
  } finally {
    await server.close();
    removeDir(server.dataDir);
  }
});

test("a start that fails after the domains started (the port is taken) stops them: no timer is left behind", async () => {
  const blocker = createNetServer();
  blocker.listen(0, "127.0.0.1");
  await once(blocker, "listening");
  const port = (blocker.address() as AddressInfo).port;
  const timers = () => process.getActiveResourcesInfo().filter((kind) => kind === "Timeout").length;
  const dataDir = tempDir();
  try {
    const before = timers();
    await assert.rejects(startTestServer({ listen: { host: "127.0.0.1", port } }, dataDir), /EADDRINUSE/);
    assert.equal(timers(), before, "the sweeps, pings and node polls the domains started are stopped");
    // The data dir is released: a start on a free port works at once.
    const server = await startTestServer({}, dataDir);
    await server.close();
  } finally {
    blocker.close();
    removeDir(dataDir);
  }
});
