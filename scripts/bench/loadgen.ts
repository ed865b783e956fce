/**
 * A small closed-loop HTTP/1.1 load generator for the benchmarks: C keep-alive connections, each
 * sending its next request as soon as the previous answer is complete (no pipelining).
 *
 * Two clients, so that the generator's own cost can be told apart from the server's:
 * - "raw": requests are pre-serialised bytes written straight to a net.Socket and answers are
 *   framed by Content-Length or chunked encoding, with no header objects (like wrk/autocannon);
 *   this leaves most of the CPU to the server when both share two cores.
 * - "http": node:http with a keep-alive Agent (what a Node client would do; heavier per request).
 *
 * Run as its own process (`node --import tsx scripts/bench/loadgen.ts SPEC.json`): it prints one
 * JSON Result on stdout. The request list is cycled round-robin across all connections.
 */
import { readFileSync } from "node:fs";
import { Agent, request as httpRequest } from "node:http";
import { connect, type Socket } from "node:net";
import { resolve as resolvePath } from "node:path";
import { pathToFileURL } from "node:url";

export interface LoadRequest {
  method: "GET" | "POST";
  path: string;
  token?: string;
  /** A JSON body, sent as application/json. */
  body?: string;
}

export interface LoadSpec {
  url: string;
  requests: LoadRequest[];
  connections: number;
  seconds: number;
  /** Seconds of load before measuring (JIT, caches); not counted. */
  warmupSeconds?: number;
  client?: "raw" | "http";
  /** At most this many requests per second over all connections (raw client; default: as fast as answered). */
  rate?: number;
}

/** Set once a line arrives on stdin (runLoad's `stop`): the phase under way ends, and any after it. */
let stopped = false;

export interface LoadResult {
  client: "raw" | "http";
  requests: number;
  seconds: number;
  perSecond: number;
  p50: number;
  p90: number;
  p99: number;
  max: number;
  statuses: Record<string, number>;
  errors: number;
  /** CPU time the generator itself used while measuring (user + system), as a share of one core. */
  cpuCores: number;
}

interface Phase {
  deadline: number;
  latencies: number[];
  statuses: Map<number, number>;
  errors: number;
}

function serialise(host: string, r: LoadRequest): Buffer {
  const body = r.body === undefined ? undefined : Buffer.from(r.body);
  let head = `${r.method} ${r.path} HTTP/1.1\r\nHost: ${host}\r\nConnection: keep-alive\r\n`;
  if (r.token) head += `Authorization: Bearer token=${r.token}\r\n`;
  if (body) head += `Content-Type: application/json\r\nContent-Length: ${body.length}\r\n`;
  head += "\r\n";
  return body ? Buffer.concat([Buffer.from(head, "latin1"), body]) : Buffer.from(head, "latin1");
}

/**
 * Parses answers off one connection. Returns the status of a complete answer at the front of
 * `buf` and how many bytes it took, or undefined while incomplete.
 */
export function frameResponse(buf: Buffer): { status: number; length: number } | undefined {
  const headEnd = buf.indexOf("\r\n\r\n");
  if (headEnd < 0) return undefined;
  const head = buf.toString("latin1", 0, headEnd);
  const status = Number(head.slice(9, 12));
  const bodyStart = headEnd + 4;
  const lengthMatch = /\r\ncontent-length:\s*(\d+)/i.exec(head);
  if (lengthMatch) {
    const end = bodyStart + Number(lengthMatch[1]);
    return buf.length >= end ? { status, length: end } : undefined;
  }
  if (/\r\ntransfer-encoding:\s*chunked/i.test(head)) {
    let at = bodyStart;
    for (;;) {
      const lineEnd = buf.indexOf("\r\n", at);
      if (lineEnd < 0) return undefined;
      const size = parseInt(buf.toString("latin1", at, lineEnd), 16);
      const next = lineEnd + 2 + size + 2;
      if (buf.length < next) return undefined;
      if (size === 0) return { status, length: next };
      at = next;
    }
  }
  // 204/304 or a body-less answer.
  return { status, length: bodyStart };
}

async function runRaw(spec: LoadSpec, phase: Phase, next: () => number, raw: Buffer[]): Promise<void> {
  const { hostname, port } = new URL(spec.url);
  /** Each connection's least time between two requests (spec.rate). */
  const interval = spec.rate ? (spec.connections * 1000) / spec.rate : 0;
  const one = (socket: Socket) =>
    new Promise<void>((resolve) => {
      let pending: Buffer = Buffer.alloc(0);
      let started = 0;
      const send = () => {
        if (stopped || performance.now() >= phase.deadline) {
          socket.removeAllListeners("data");
          socket.end();
          return resolve();
        }
        const wait = started + interval - performance.now();
        if (started > 0 && wait > 0) return void setTimeout(send, wait);
        started = performance.now();
        socket.write(raw[next()]);
      };
      socket.on("data", (chunk: Buffer) => {
        pending = pending.length === 0 ? chunk : Buffer.concat([pending, chunk]);
        for (;;) {
          const framed = frameResponse(pending);
          if (!framed) return;
          phase.latencies.push(performance.now() - started);
          phase.statuses.set(framed.status, (phase.statuses.get(framed.status) ?? 0) + 1);
          pending = pending.subarray(framed.length);
          send();
        }
      });
      socket.on("error", () => {
        phase.errors++;
        resolve();
      });
      socket.on("close", () => resolve());
      send();
    });
  await Promise.all(
    Array.from({ length: spec.connections }, async () => {
      const socket = connect({ host: hostname, port: Number(port), noDelay: true });
      await new Promise<void>((resolve, reject) => socket.once("connect", resolve).once("error", reject));
      await one(socket);
      socket.destroy();
    }),
  );
}

async function runHttp(spec: LoadSpec, phase: Phase, next: () => number): Promise<void> {
  const agent = new Agent({ keepAlive: true, maxSockets: spec.connections });
  const { hostname, port } = new URL(spec.url);
  const one = () =>
    new Promise<void>((resolve) => {
      const r = spec.requests[next()];
      const started = performance.now();
      const headers: Record<string, string | number> = {};
      if (r.token) headers.authorization = `Bearer token=${r.token}`;
      if (r.body !== undefined) Object.assign(headers, { "content-type": "application/json", "content-length": Buffer.byteLength(r.body) });
      const req = httpRequest({ agent, hostname, port, path: r.path, method: r.method, headers }, (res) => {
        res.resume();
        res.on("end", () => {
          phase.latencies.push(performance.now() - started);
          phase.statuses.set(res.statusCode!, (phase.statuses.get(res.statusCode!) ?? 0) + 1);
          resolve();
        });
      });
      req.on("error", () => {
        phase.errors++;
        resolve();
      });
      req.end(r.body);
    });
  await Promise.all(
    Array.from({ length: spec.connections }, async () => {
      while (!stopped && performance.now() < phase.deadline) await one();
    }),
  );
  agent.destroy();
}

const percentile = (sorted: number[], p: number) => sorted[Math.min(sorted.length - 1, Math.floor(sorted.length * p))] ?? NaN;

/** Runs the load (warm-up, then the measured phase) and summarises the measured phase. */
export async function runLoad(spec: LoadSpec): Promise<LoadResult> {
  const client = spec.client ?? "raw";
  const host = new URL(spec.url).host;
  const raw = client === "raw" ? spec.requests.map((r) => serialise(host, r)) : [];
  let i = 0;
  const next = () => i++ % spec.requests.length;
  const run = (phase: Phase) => (client === "raw" ? runRaw(spec, phase, next, raw) : runHttp(spec, phase, next));

  if (spec.warmupSeconds) await run({ deadline: performance.now() + spec.warmupSeconds * 1000, latencies: [], statuses: new Map(), errors: 0 });
  const phase: Phase = { deadline: performance.now() + spec.seconds * 1000, latencies: [], statuses: new Map(), errors: 0 };
  const cpu = process.cpuUsage();
  const started = performance.now();
  await run(phase);
  const elapsed = (performance.now() - started) / 1000;
  const used = process.cpuUsage(cpu);
  const sorted = phase.latencies.sort((a, b) => a - b);
  return {
    client,
    requests: sorted.length,
    seconds: elapsed,
    perSecond: sorted.length / elapsed,
    p50: percentile(sorted, 0.5),
    p90: percentile(sorted, 0.9),
    p99: percentile(sorted, 0.99),
    max: sorted[sorted.length - 1] ?? NaN,
    statuses: Object.fromEntries([...phase.statuses].map(([s, n]) => [String(s), n])),
    errors: phase.errors,
    cpuCores: (used.user + used.system) / 1e6 / elapsed,
  };
}

if (process.argv[1] && import.meta.url === pathToFileURL(resolvePath(process.argv[1])).href) {
  const spec = JSON.parse(readFileSync(process.argv[2], "utf8")) as LoadSpec;
  process.stdin.on("data", () => (stopped = true)).on("error", () => {});
  (process.stdin as { unref?: () => void }).unref?.();
  process.stdout.write(JSON.stringify(await runLoad(spec)) + "\n");
}
