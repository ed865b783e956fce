/**
 * An answer sent before its request's body is in (src/server/early-answer.ts) says
 * `Connection: close`, and its connection closes as soon as it is written, without a reset;
 * connections whose requests were read keep alive.
 */
import assert from "node:assert/strict";
import { connect, type Socket } from "node:net";
import { test } from "node:test";
import { useTestServer } from "../helpers/server.ts";

const server = useTestServer();

/** One keep-alive connection, its answers parsed as they come (each with a Content-Length). */
class KeepAlive {
  readonly socket: Socket;
  /** When (ms since the connection opened) the server ended it, and the socket errors seen. */
  ended: number | undefined;
  readonly errors: string[] = [];
  readonly closed: Promise<void>;
  private readonly opened = Date.now();
  private buffer = Buffer.alloc(0);
  private readonly answers: Array<{ status: number; head: string; body: string }> = [];
  private wake: (() => void) | undefined;

  constructor() {
    const { hostname, port } = new URL(server.url);
    this.socket = connect(Number(port), hostname);
    this.socket.on("data", (data: Buffer) => {
      this.buffer = Buffer.concat([this.buffer, data]);
      this.parse();
    });
    this.socket.on("end", () => {
      this.ended = Date.now() - this.opened;
      this.wake?.();
    });
    this.socket.on("error", (error: NodeJS.ErrnoException) => this.errors.push(error.code ?? error.message));
    this.closed = new Promise((resolve) => this.socket.once("close", () => resolve()));
  }

  write(data: string | Buffer): void {
    this.socket.write(data);
  }

  /** The next answer; fails when the connection ends (or 5 s pass) first. */
  async answer(): Promise<{ status: number; head: string; body: string }> {
    const deadline = Date.now() + 5000;
    while (this.answers.length === 0) {
      if (this.ended !== undefined || this.socket.destroyed) throw new Error(`the connection ended without an answer (errors: ${this.errors.join(", ") || "none"})`);
      if (Date.now() > deadline) throw new Error("no answer within 5 s");
      await new Promise<void>((resolve) => {
        this.wake = resolve;
        setTimeout(resolve, 50);
      });
    }
    return this.answers.shift()!;
  }

  private parse(): void {
    for (;;) {
      const end = this.buffer.indexOf("\r\n\r\n");
      if (end === -1) return;
      const head = this.buffer.subarray(0, end).toString("latin1");
      const length = Number(/\r\ncontent-length: *(\d+)/i.exec(head)?.[1] ?? 0);
      if (this.buffer.length < end + 4 + length) return;
      const body = this.buffer.subarray(end + 4, end + 4 + length).toString();
      this.buffer = this.buffer.subarray(end + 4 + length);
      this.answers.push({ status: Number(head.slice(9, 12)), head, body });
      this.wake?.();
    }
  }
}

const LIMIT = 1024 * 1024;
const json = (body: string, headers = "") =>
  `POST /api/v2/groups HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer token=${server.adminToken}\r\nContent-Type: application/json\r\n${headers}Content-Length: ${Buffer.byteLength(body)}\r\n\r\n${body}`;
const health = "GET /api/health HTTP/1.1\r\nHost: x\r\n\r\n";
const connectionOf = (head: string) => /\r\nconnection: *([^\r]*)/i.exec(head)?.[1]?.toLowerCase();
const chunk = (data: Buffer) => Buffer.concat([Buffer.from(`${data.length.toString(16)}\r\n`), data, Buffer.from("\r\n")]);

/** Asserts an early 413 that closes its connection at once (under a second), without a reset. */
async function closesAfter413(client: KeepAlive, sentAt: number): Promise<void> {
  const answer = await client.answer();
  assert.equal(answer.status, 413, answer.head);
  assert.equal(connectionOf(answer.head), "close", answer.head);
  await client.closed;
  assert.ok(client.ended !== undefined, "the server ended the connection");
  assert.ok(client.ended - sentAt < 1000, `closed ${client.ended - sentAt} ms after the request`);
  assert.deepEqual(client.errors, [], "no reset, no broken pipe");
}

test("a 413 on a declared length, with the body partly sent, says Connection: close and closes at once", async () => {
  const client = new KeepAlive();
  client.write(`POST /api/v2/groups HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer token=${server.adminToken}\r\nContent-Type: application/json\r\nContent-Length: ${8 * LIMIT}\r\n\r\n`);
  client.write(Buffer.alloc(256 * 1024, 0x20));
  await closesAfter413(client, 0);
});

test("a 413 met half-way through a chunked body is answered (not a reset) and closes at once", async () => {
  const client = new KeepAlive();
  client.write(`POST /api/v2/groups HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer token=${server.adminToken}\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n`);
  for (let i = 0; i < 6; i++) client.write(chunk(Buffer.alloc(256 * 1024, 0x20)));
  await closesAfter413(client, 0);
});

test("a client that sends the whole oversized body gets the 413 and a clean close; a request after it is not served", async () => {
  const client = new KeepAlive();
  const name = `after-413-${Date.now()}`;
  // Pipelined behind the refused body: the connection closes after the 413 (RFC 9112 9.6), it does not act.
  client.write(json(" ".repeat(4 * LIMIT)) + json(JSON.stringify({ metadata: { "rdfm.group.name": name } })));
  await closesAfter413(client, 0);
  const groups = await server.call("GET", "/api/v2/groups");
  assert.equal(groups.status, 200);
  assert.ok(!JSON.stringify(groups.body).includes(name), "the pipelined request was not served");
});

test("requests whose bodies were read keep their connection alive, also while another connection is refused", async () => {
  const refused = new KeepAlive();
  refused.write(json(" ".repeat(2 * LIMIT)));
  const client = new KeepAlive();
  // A small body, read in full: the connection stays for the next request, and the one after.
  client.write(json(JSON.stringify({ metadata: { "rdfm.group.name": `kept-${Date.now()}` } })));
  const created = await client.answer();
  assert.equal(created.status, 200, created.body);
  assert.equal(connectionOf(created.head), "keep-alive", created.head);
  // A body the route refuses after reading it all (not JSON): still kept alive.
  client.write(json("{not json"));
  const invalid = await client.answer();
  assert.equal(invalid.status, 400, invalid.body);
  assert.equal(connectionOf(invalid.head), "keep-alive", invalid.head);
  client.write(health);
  const next = await client.answer();
  assert.equal(next.status, 200, next.body);
  assert.equal(connectionOf(next.head), "keep-alive", next.head);
  assert.equal((await refused.answer()).status, 413);
  await refused.closed;
  assert.equal(client.ended, undefined, "the kept connection is still open");
  assert.deepEqual(client.errors, []);
  client.socket.end();
  await client.closed;
});
