/**
 * The server's connection tracking (src/server/connections.ts) costs nothing per request: it adds
 * no listener to requests or responses. A close listener on every response, whose closure held
 * the socket, made each update check's objects outlive V8's young generation under load (README,
 * Performance: issue 31's update checks). What shutdown does with the connections is in
 * shutdown.test.ts.
 */
import assert from "node:assert/strict";
import { once } from "node:events";
import { createServer, request, type IncomingMessage, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { test } from "node:test";
import { ConnectionTracker } from "../../src/server/connections.ts";

/** The listeners a request and its response carry when the handler runs, on a server with `track` applied. */
async function listenersSeen(track: (server: ReturnType<typeof createServer>) => void): Promise<Record<string, number>> {
  let seen: Record<string, number> = {};
  const server = createServer((req: IncomingMessage, res: ServerResponse) => {
    seen = Object.fromEntries([
      ...req.eventNames().map((name) => [`request ${String(name)}`, req.listenerCount(name)]),
      ...res.eventNames().map((name) => [`response ${String(name)}`, res.listenerCount(name)]),
      ["server request", server.listenerCount("request")],
    ]);
    res.end("ok");
  });
  track(server);
  server.listen(0, "127.0.0.1");
  await once(server, "listening");
  try {
    const answer = await new Promise<IncomingMessage>((resolve, reject) =>
      request(`http://127.0.0.1:${(server.address() as AddressInfo).port}/`, resolve).on("error", reject).end(),
    );
    answer.resume();
    await once(answer, "end");
  } finally {
    server.closeAllConnections();
    server.close();
  }
  return seen;
}

test("the connection tracker adds no listener to the server's requests or their responses", async () => {
  const bare = await listenersSeen(() => {});
  const tracked = await listenersSeen((server) => new ConnectionTracker(server, false));
  assert.deepEqual(tracked, bare);
});
