import assert from "node:assert/strict";
import { once } from "node:events";
import { createServer } from "node:http";
import type { AddressInfo } from "node:net";
import { test } from "node:test";
import { frameResponse, runLoad } from "../../scripts/bench/loadgen.ts";

test("loadgen: answers are framed by Content-Length, chunked encoding or their absence", () => {
  const withLength = Buffer.from("HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhelloHTTP/1.1 204 No Content\r\n\r\n");
  assert.deepEqual(frameResponse(withLength), { status: 200, length: withLength.indexOf("hello") + 5 });
  assert.deepEqual(frameResponse(withLength.subarray(withLength.indexOf("hello") + 5)), { status: 204, length: "HTTP/1.1 204 No Content\r\n\r\n".length });
  assert.equal(frameResponse(withLength.subarray(0, 40)), undefined, "body incomplete");
  assert.equal(frameResponse(Buffer.from("HTTP/1.1 200 OK\r\nContent-")), undefined, "head incomplete");

  const chunked = Buffer.from("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n10\r\n0123456789abcdef\r\n0\r\n\r\n");
  assert.deepEqual(frameResponse(chunked), { status: 200, length: chunked.length });
  assert.equal(frameResponse(chunked.subarray(0, chunked.length - 2)), undefined);
});

test("loadgen: both clients count every answer by status against a real server", async () => {
  let seen = 0;
  const server = createServer((req, res) => {
    seen++;
    let body = "";
    req.on("data", (d) => (body += d));
    req.on("end", () => {
      if (req.url === "/empty") return void res.writeHead(204).end();
      res.writeHead(req.headers.authorization === "Bearer token=t" && body === '{"a":1}' ? 200 : 400, { "content-type": "application/json" });
      res.end(JSON.stringify({ ok: true }));
    });
  }).listen(0, "127.0.0.1");
  await once(server, "listening");
  const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  try {
    for (const client of ["raw", "http"] as const) {
      seen = 0;
      const result = await runLoad({
        url,
        client,
        connections: 4,
        seconds: 0.3,
        requests: [
          { method: "POST", path: "/check", token: "t", body: '{"a":1}' },
          { method: "GET", path: "/empty" },
        ],
      });
      assert.equal(result.errors, 0);
      // Both kinds were answered (how many in 0.3 s depends on the machine's load: no count asserted).
      assert.deepEqual(Object.keys(result.statuses).sort(), ["200", "204"], `${client}: ${JSON.stringify(result.statuses)}`);
      assert.equal(result.statuses["200"] + result.statuses["204"], result.requests);
      assert.ok(seen >= result.requests, "every counted answer was served");
      assert.ok(result.p50 <= result.p99 && result.p99 <= result.max);
    }
  } finally {
    server.closeAllConnections();
    server.close();
  }
});
