/**
 * The frames a WebSocket is sent as it opens wait for the client (src/server/upgrade.ts,
 * HandshakeFirstServer): until its first bytes, which it can only send once it has read the 101,
 * or until the hold is over. A client that speaks first is answered at once, not after the hold.
 */
import assert from "node:assert/strict";
import { once } from "node:events";
import { createServer } from "node:http";
import type { AddressInfo } from "node:net";
import { test } from "node:test";
import WebSocket from "ws";
import { HandshakeFirstServer } from "../../src/server/upgrade.ts";

/** A server that greets each socket as it opens and echoes what it is sent, holding first frames for `holdMs`. */
async function echoServer(holdMs: number) {
  const wss = new HandshakeFirstServer({ noServer: true, firstFramesAfterMs: holdMs });
  const http = createServer();
  http.on("upgrade", (request, socket, head) =>
    wss.handleUpgrade(request, socket, head, (ws) => {
      ws.send("welcome");
      ws.on("message", (data) => ws.send(`echo ${String(data)}`));
    }),
  );
  http.listen(0, "127.0.0.1");
  await once(http, "listening");
  return {
    url: `ws://127.0.0.1:${(http.address() as AddressInfo).port}`,
    async close() {
      for (const client of wss.clients) client.terminate();
      wss.close();
      http.close();
      await once(http, "close");
    },
  };
}

/** A client whose messages are collected; `next` waits for the next one. */
async function client(url: string) {
  const ws = new WebSocket(url);
  const inbox: string[] = [];
  const waiters: Array<() => void> = [];
  ws.on("message", (data) => {
    inbox.push(String(data));
    waiters.shift()?.();
  });
  await once(ws, "open");
  return {
    ws,
    inbox,
    next: async (): Promise<string> => {
      if (inbox.length === 0) await new Promise<void>((resolve) => waiters.push(resolve));
      return inbox.shift()!;
    },
  };
}

test("a client that says nothing hears nothing while its first frames are held", async (t) => {
  const server = await echoServer(60_000);
  t.after(() => server.close());
  const c = await client(server.url);
  await new Promise((resolve) => setTimeout(resolve, 300));
  assert.deepEqual(c.inbox, []);
  c.ws.terminate();
});

test("a client that speaks first gets the held frames and its answer at once, in order", { timeout: 10_000 }, async (t) => {
  const server = await echoServer(60_000);
  t.after(() => server.close());
  const c = await client(server.url);
  c.ws.send("report");
  assert.equal(await c.next(), "welcome");
  assert.equal(await c.next(), "echo report");
  c.ws.send("again");
  assert.equal(await c.next(), "echo again");
  c.ws.terminate();
});

test("without a word from the client the held frames leave once the hold is over", { timeout: 10_000 }, async (t) => {
  const server = await echoServer(50);
  t.after(() => server.close());
  const c = await client(server.url);
  assert.equal(await c.next(), "welcome");
  c.ws.terminate();
});
