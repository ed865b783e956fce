import { strict as assert } from "node:assert";
import { after, before, test } from "node:test";
import type { AddressInfo } from "node:net";
import type { Readable } from "node:stream";
import { serve, type ServerType } from "@hono/node-server";
import { Hono } from "hono";
import { errorAnswer, errorResponse } from "../../src/http/errors.ts";
import { readMultipart, type FilePart } from "../../src/http/multipart.ts";
import { LabgateError } from "../../src/util/errors.ts";

// The one multipart reader behind package and config uploads, driven over real HTTP with
// receivers that misbehave the way disks and validators do.

interface Received {
  bytes: number;
}

const events: string[] = [];
const receivers: Record<string, FilePart<Received>["receive"]> = {
  // Reads everything.
  whole: async (stream) => {
    let bytes = 0;
    for await (const chunk of stream) bytes += (chunk as Buffer).length;
    return { bytes };
  },
  // A disk that fills up after the first chunk: stops reading (destroys its source) and rejects.
  full: (stream) =>
    new Promise<Received>((_, reject) => {
      stream.once("data", () => {
        stream.destroy();
        reject(Object.assign(new Error("ENOSPC: no space left on device, write"), { code: "ENOSPC" }));
      });
    }),
  // A validator refusing the part by its name, before reading it.
  refuse: () => {
    throw new LabgateError("invalid", "Only YAML (.yaml, .yml) files are allowed");
  },
};

let server: ServerType;
let base: string;

before(async () => {
  const app = new Hono();
  app.post("/upload/:receiver", async (c) => {
    const receive = receivers[c.req.param("receiver")];
    const form = await readMultipart(c, {
      file: {
        field: "file",
        receive: (stream: Readable, filename) => {
          events.push(`receive ${filename}`);
          return receive(stream, filename);
        },
        discard: async (received) => void events.push(`discard ${received.bytes}`),
      },
      limits: { fieldSize: 16, fields: 3, fieldsTotal: 40 },
      texts: { notMultipart: "not a form", malformed: "malformed form", interrupted: "upload interrupted" },
    });
    return c.json({ fields: Object.fromEntries(form.fields), bytes: form.file?.bytes ?? null });
  });
  app.onError((error, c) => {
    const answer = errorAnswer(error);
    return answer ? errorResponse(c, answer.status, answer.message) : c.json({ error: "internal error" }, 500);
  });
  server = serve({ fetch: app.fetch, port: 0, hostname: "127.0.0.1" });
  await new Promise((resolve) => server.once("listening", resolve));
  base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
});

after(() => new Promise((resolve) => server.close(resolve)));

const MiB = 1024 * 1024;

function form(entries: Array<[string, string | Blob, string?]>): FormData {
  const body = new FormData();
  for (const [name, value, filename] of entries) {
    if (typeof value === "string") body.append(name, value);
    else body.append(name, value, filename);
  }
  return body;
}

async function post(receiver: string, body: BodyInit, headers?: Record<string, string>): Promise<{ status: number; body: Record<string, unknown> }> {
  events.length = 0;
  const res = await fetch(`${base}/upload/${receiver}`, { method: "POST", body, headers });
  return { status: res.status, body: (await res.json()) as Record<string, unknown> };
}

test("fields and the file part arrive; other file parts are drained", async () => {
  const answer = await post("whole", form([["version", "1.0"], ["other", new Blob(["x".repeat(1000)]), "b.bin"], ["file", new Blob([new Uint8Array(3 * MiB)]), "a.bin"], ["version", "2.0"]]));
  assert.deepEqual(answer, { status: 200, body: { fields: { version: "1.0" }, bytes: 3 * MiB } });
  assert.deepEqual(events, ["receive a.bin"]);
});

test("a receiver that gives up mid-file (a full disk) is answered at once, 507, and the server goes on", async () => {
  // 32 MiB: far more than the socket buffers, so the answer cannot wait for the whole body to be read.
  const answer = await post("full", form([["file", new Blob([new Uint8Array(32 * MiB)]), "big.bin"]]));
  assert.deepEqual(answer, { status: 507, body: { error: "no space left in the data dir" } });
  assert.deepEqual(events, ["receive big.bin"], "a receiver that failed cleans up after itself: no discard");
  assert.equal((await post("whole", form([["file", new Blob(["ok"]), "a.bin"]]))).status, 200);
});

test("a refused file part is drained and the refusal answered once the form is read", async () => {
  const answer = await post("refuse", form([["file", new Blob([new Uint8Array(MiB)]), "a.exe"]]));
  assert.deepEqual(answer, { status: 400, body: { error: "Only YAML (.yaml, .yml) files are allowed" } });
});

test("a field refused after the file was received undoes the file", async () => {
  const tooLong = await post("whole", form([["file", new Blob(["abc"]), "a.bin"], ["note", "x".repeat(17)]]));
  assert.deepEqual(tooLong, { status: 400, body: { error: 'form field "note" is too long (limit 16 bytes)' } });
  assert.deepEqual(events, ["receive a.bin", "discard 3"]);

  const tooMany = await post("whole", form([["file", new Blob(["abcd"]), "a.bin"], ["a", "1"], ["b", "2"], ["c", "3"], ["d", "4"]]));
  assert.deepEqual(tooMany, { status: 400, body: { error: "too many form fields (limit 3)" } });
  assert.deepEqual(events, ["receive a.bin", "discard 4"]);

  const tooBig = await post("whole", form([["a", "x".repeat(15)], ["b", "y".repeat(15)], ["c", "z".repeat(15)]]));
  assert.deepEqual(tooBig, { status: 400, body: { error: "form fields are larger than 40 bytes in total" } });
});

test("a form cut short or not a form at all is a 400 in the API's words", async () => {
  const boundary = "----labgate";
  const cut = `--${boundary}\r\ncontent-disposition: form-data; name="file"; filename="a.bin"\r\n\r\nsome bytes and no end`;
  const truncated = await post("whole", cut, { "content-type": `multipart/form-data; boundary=${boundary}` });
  assert.deepEqual(truncated, { status: 400, body: { error: "malformed form: Unexpected end of form" } });

  assert.deepEqual(await post("whole", "a=1", { "content-type": "application/x-www-form-urlencoded" }), { status: 400, body: { error: "not a form" } });
  const noBoundary = await post("whole", "x", { "content-type": "multipart/form-data" });
  assert.equal(noBoundary.status, 400);
  assert.match(String(noBoundary.body.error), /^malformed form: /);
});
