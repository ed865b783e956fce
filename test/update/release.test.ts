import assert from "node:assert/strict";
import { request as httpRequest } from "node:http";
import { before, describe, it } from "node:test";
import { useTestServer, waitFor } from "../helpers/server.ts";
import { openFds, parseRaw, rawRequest } from "../helpers/raw.ts";
import { uploadOk } from "./helpers/packages.ts";

const upgrade = (path: string, headers: Record<string, string> = {}, upgradeTo = "websocket") =>
  [
    `GET ${path} HTTP/1.1`,
    "Host: 127.0.0.1",
    "Connection: Upgrade",
    `Upgrade: ${upgradeTo}`,
    "Sec-WebSocket-Version: 13",
    "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==",
    ...Object.entries(headers).map(([k, v]) => `${k}: ${v}`),
    "",
    "",
  ].join("\r\n");

/**
 * Issue 9 item 3: upgrade requests reach only the WebSocket routes, and every response body (a
 * file, an event stream) is released when its request ends, whether it ends by an upgrade, the
 * client going away or an error. Counts this process's open files and the event subscribers.
 */
describe("responses release what they hold however the request ends", () => {
  const server = useTestServer();
  let downloadPath = "";
  const subscribers = () => server.server.domains.update.events.subscribers;

  before(async () => {
    const pkg = await uploadOk(server, { token: server.adminToken, file: Buffer.alloc(4 * 1024 * 1024, 7) });
    const link = (await (await server.request(`/api/v1/packages/${pkg.id}/download`, { token: server.adminToken })).json()) as { download_url: string };
    downloadPath = link.download_url.slice(server.url.length);
    const form = new FormData();
    form.append("file", new Blob(["tests:\n  base:\n  - simple:\n      device: simple\n"]), "leak.yml");
    assert.equal((await server.request("/api/v1/configs", { method: "POST", body: form, token: server.adminToken })).status, 200);
  });

  it("an upgrade of an ordinary route is a 400 JSON error before any handler runs; nothing stays open", async () => {
    const auth = { Authorization: `Bearer token=${server.adminToken}` };
    const fds = openFds();
    for (let i = 0; i < 40; i++) {
      for (const [path, headers] of [
        ["/api/v1/configs/leak.yml/file", auth],
        [downloadPath, {}],
        ["/api/stream", auth],
        ["/api/health", {}],
        ["//api/v1/configs/leak.yml/file", auth],
      ] as [string, Record<string, string>][]) {
        const answer = await rawRequest(server.url, upgrade(path, headers));
        assert.equal(answer.closedByServer, true, path);
        const { status, json } = parseRaw(answer.text);
        assert.equal(status, 400, `${path}: ${answer.text}`);
        assert.match((json as { error: string }).error, /not a WebSocket/);
      }
    }
    // Other protocols (curl's h2c) are refused the same way instead of holding the socket.
    const h2c = await rawRequest(server.url, upgrade("/api/health", {}, "h2c"));
    assert.equal(h2c.closedByServer, true);
    assert.equal(parseRaw(h2c.text).status, 400);
    assert.equal(subscribers(), 0);
    await waitFor(() => openFds() <= fds, 5000, "open files back to their count");
    assert.equal((await server.request("/api/health")).status, 200);
  });

  it("a WebSocket route refusing the upgrade (no token) answers its status and holds nothing", async () => {
    const fds = openFds();
    for (let i = 0; i < 20; i++) {
      const answer = await rawRequest(server.url, upgrade("/api/v1/devices/ws"));
      assert.equal(parseRaw(answer.text).status, 401);
      assert.equal(answer.closedByServer, true);
    }
    await waitFor(() => openFds() <= fds, 5000, "open files back to their count");
  });

  it("a client leaving an event stream or a download midway releases the subscriber and the file", async () => {
    const fds = openFds();
    const leave = (path: string, headers: Record<string, string>) =>
      new Promise<void>((resolve, reject) => {
        const req = httpRequest(server.url + path, { headers }, (res) => {
          res.once("data", () => {
            req.destroy();
            resolve();
          });
        });
        req.on("error", (error: NodeJS.ErrnoException) => (error.code === "ECONNRESET" ? resolve() : reject(error)));
        req.end();
      });
    for (let i = 0; i < 20; i++) {
      await leave("/api/stream", { Authorization: `Bearer token=${server.adminToken}` });
      await leave(downloadPath, {});
      await leave("/api/v1/configs/leak.yml/file", { Authorization: `Bearer token=${server.adminToken}` });
    }
    await waitFor(() => subscribers() === 0, 5000, "event subscribers gone");
    await waitFor(() => openFds() <= fds, 5000, "open files back to their count");
    assert.equal((await server.request("/api/health")).status, 200);
  });
});
