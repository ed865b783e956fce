/**
 * labgate's own Headers, Request and Response (src/http/web/), the globals every server process
 * answers with instead of Node's undici (issue 31): what the Fetch standard says of them, as far as
 * hono, @hono/node-server and labgate's routes use them. The whole suite runs on them too (the
 * test runner loads src/http/web/install.ts first, as src/main.ts does).
 */
import assert from "node:assert/strict";
import { test } from "node:test";
import { ReadableStream } from "node:stream/web";
import { Headers } from "../../src/http/web/headers.ts";
import { Request } from "../../src/http/web/request.ts";
import { Response } from "../../src/http/web/response.ts";

test("the test process answers with labgate's classes (src/http/web/install.ts ran first)", () => {
  assert.equal(globalThis.Headers as unknown, Headers);
  assert.equal(globalThis.Request as unknown, Request);
  // @hono/node-server, once serving, puts its lighter Response in front of the one it found.
  const response = globalThis.Response as unknown as { prototype: object };
  assert.ok(response === Response || Object.getPrototypeOf(response) === Response);
});

test("Headers: names in lower case, values joined, sorted iteration, each Set-Cookie on its own", () => {
  const headers = new Headers({ "X-B": "2", "x-a": " 1 " });
  headers.append("X-B", "3");
  headers.append("Set-Cookie", "a=1");
  headers.append("set-cookie", "b=2");
  assert.equal(headers.get("x-b"), "2, 3");
  assert.equal(headers.get("X-A"), "1", "edge whitespace goes");
  assert.equal(headers.get("missing"), null);
  assert.deepEqual([...headers], [
    ["set-cookie", "a=1"],
    ["set-cookie", "b=2"],
    ["x-a", "1"],
    ["x-b", "2, 3"],
  ]);
  assert.deepEqual(headers.getSetCookie(), ["a=1", "b=2"]);
  headers.set("x-b", "4");
  headers.delete("X-A");
  assert.deepEqual([...headers.keys()], ["set-cookie", "set-cookie", "x-b"]);
  assert.equal(headers.has("x-b"), true);
  const seen: string[] = [];
  headers.forEach((value, name, self) => (assert.equal(self, headers), seen.push(`${name}=${value}`)));
  assert.deepEqual(seen, ["set-cookie=a=1", "set-cookie=b=2", "x-b=4"]);
  assert.equal(Object.prototype.toString.call(headers), "[object Headers]");
});

test("Headers: from pairs, another Headers, Node's header object (arrays); invalid names and values refused", () => {
  assert.deepEqual([...new Headers([["A", "1"], ["a", "2"]])], [["a", "1, 2"]]);
  assert.deepEqual([...new Headers(new Headers({ b: "1" }))], [["b", "1"]]);
  assert.deepEqual(new Headers({ "set-cookie": ["x=1", "y=2"] }).getSetCookie(), ["x=1", "y=2"]);
  assert.throws(() => new Headers({ "bad name": "1" }), TypeError);
  assert.throws(() => new Headers({ a: "line\r\nbreak" }), TypeError);
  assert.throws(() => new Headers([["a"]] as never), TypeError);
});

test("Response: status, headers, the body's type; text read once; JSON, redirect and error", async () => {
  const response = new Response("héllo", { status: 201, statusText: "Created", headers: { "x-a": "1" } });
  assert.equal(response.status, 201);
  assert.equal(response.ok, true);
  assert.equal(response.statusText, "Created");
  assert.equal(response.headers.get("content-type"), "text/plain;charset=UTF-8");
  assert.equal(response.bodyUsed, false);
  assert.equal(await response.text(), "héllo");
  assert.equal(response.bodyUsed, true);
  await assert.rejects(response.text(), TypeError);

  const json = Response.json({ a: 1 }, { status: 422 });
  assert.equal(json.headers.get("content-type"), "application/json");
  assert.deepEqual(await json.json(), { a: 1 });
  const redirect = Response.redirect("http://127.0.0.1/x", 303);
  assert.equal(redirect.headers.get("location"), "http://127.0.0.1/x");
  assert.equal(Response.error().type, "error");
  assert.equal(Response.error().status, 0);

  assert.throws(() => new Response(null, { status: 99 }), RangeError);
  assert.throws(() => new Response("body", { status: 204 }), TypeError);
  assert.equal(new Response(null, { status: 204 }).body, null);
  assert.throws(() => Response.redirect("http://127.0.0.1/", 200), RangeError);
});

test("Response: bytes, a stream, a Blob and URLSearchParams as bodies; body as a stream; clone", async () => {
  assert.deepEqual(new Uint8Array(await new Response(new Uint8Array([1, 2, 3])).arrayBuffer()), new Uint8Array([1, 2, 3]));
  const stream = new ReadableStream<Uint8Array>({
    start(c) {
      c.enqueue(new TextEncoder().encode("a"));
      c.enqueue(new TextEncoder().encode("b"));
      c.close();
    },
  });
  const streamed = new Response(stream as never);
  const copy = streamed.clone();
  assert.equal(await streamed.text(), "ab");
  assert.equal(await copy.text(), "ab", "a clone reads its own branch");

  const blob = new Response(new Blob(["xyz"], { type: "text/csv" }));
  assert.equal(blob.headers.get("content-type"), "text/csv");
  assert.equal(await (await blob.blob()).text(), "xyz");
  const form = new Response(new URLSearchParams({ a: "1 2" }));
  assert.equal(form.headers.get("content-type"), "application/x-www-form-urlencoded;charset=UTF-8");
  assert.equal(await form.text(), "a=1+2");

  const body = new Response("chunk").body!;
  const chunks: Uint8Array[] = [];
  for await (const chunk of body as unknown as AsyncIterable<Uint8Array>) chunks.push(chunk);
  assert.equal(Buffer.concat(chunks).toString(), "chunk");
});

test("Request: URL, method normalized, headers, signal; a body only beside GET and HEAD; moved from another request", async () => {
  const controller = new AbortController();
  const request = new Request("http://127.0.0.1:5000/a/../b?q=1", { method: "post", headers: { "X-A": "1" }, body: '{"a":1}', signal: controller.signal });
  assert.equal(request.url, "http://127.0.0.1:5000/b?q=1");
  assert.equal(request.method, "POST");
  assert.equal(request.headers.get("x-a"), "1");
  assert.equal(request.headers.get("content-type"), "text/plain;charset=UTF-8");
  assert.equal(request.signal, controller.signal);
  assert.equal(new Request("http://127.0.0.1/", { method: "patch" }).method, "patch", "only the standard's six are upper-cased");

  const moved = new Request(request, { headers: { "x-b": "2" } });
  assert.equal(moved.method, "POST");
  assert.equal(moved.url, request.url);
  assert.equal(moved.headers.get("x-a"), null, "the init's headers replace the request's");
  assert.deepEqual(await moved.json(), { a: 1 });
  assert.equal(request.bodyUsed, true, "the body moved");

  assert.throws(() => new Request("/relative"), TypeError);
  assert.throws(() => new Request("http://127.0.0.1/", { method: "GET", body: "x" }), TypeError);
  assert.throws(() => new Request("http://127.0.0.1/", { method: "CONNECT" }), TypeError);
  assert.throws(() => new Request("http://127.0.0.1/", { method: "bad method" }), TypeError);
  assert.equal(new Request("http://127.0.0.1/").signal.aborted, false);
});

test("a FormData body is multipart/form-data, which formData() reads back (Node's own parser)", async () => {
  const form = new FormData();
  form.append("name", 'a "quoted"\nname');
  form.append("file", new File(["file bytes"], "notes.txt", { type: "text/plain" }));
  const request = new Request("http://127.0.0.1/upload", { method: "POST", body: form });
  assert.match(request.headers.get("content-type")!, /^multipart\/form-data; boundary=/);
  const parsed = await request.formData();
  assert.equal(parsed.get("name"), 'a "quoted"\r\nname');
  const file = parsed.get("file") as File;
  assert.equal(file.name, "notes.txt");
  assert.equal(await file.text(), "file bytes");
});
