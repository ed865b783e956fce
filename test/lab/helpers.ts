/** Stand-ins for a lab's power hardware: Debian's pdudaemon with its localcmdline driver, Tasmota and Shelly plugs. */
import { spawn, type ChildProcess } from "node:child_process";
import { once } from "node:events";
import { readFileSync, writeFileSync } from "node:fs";
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { join } from "node:path";
import { labSection, type BoardConfig } from "../../src/config/lab.ts";
import { tempDir, waitFor } from "../helpers/server.ts";

/** `lab` as the config file would give it (defaults filled in), for startTestServer's patch. */
export const labConfig = (boards: unknown[], extra: Record<string, unknown> = {}) => labSection.parse({ boards, ...extra });
export type { BoardConfig };

/** A port nothing listens on (taken from the kernel, then released). */
export async function freePort(): Promise<number> {
  const server = createServer();
  server.listen(0, "127.0.0.1");
  await once(server, "listening");
  const { port } = server.address() as AddressInfo;
  await new Promise((resolve) => server.close(resolve));
  return port;
}

export interface Pdudaemon {
  url: string;
  /** What the PDU was asked, a line per port action (`3 on`), in order. */
  asked(): string[];
  close(): void;
}

/**
 * Debian's pdudaemon on a loopback port with one PDU, `pdu1`, whose localcmdline driver appends
 * `<port> on|off` to a file.
 */
export async function startPdudaemon(): Promise<Pdudaemon> {
  const dir = tempDir("labgate-pdu-");
  const out = join(dir, "asked");
  writeFileSync(out, "");
  const port = await freePort();
  const conf = {
    daemon: { hostname: "127.0.0.1", port, logging_level: "INFO", listener: "http" },
    pdus: { pdu1: { driver: "localcmdline", cmd_on: `echo '%s on' >> ${out}`, cmd_off: `echo '%s off' >> ${out}` } },
  };
  writeFileSync(join(dir, "pdudaemon.conf"), JSON.stringify(conf));
  const child: ChildProcess = spawn("pdudaemon", ["--conf", join(dir, "pdudaemon.conf")], { stdio: ["ignore", "ignore", "pipe"] });
  let log = "";
  child.stderr!.on("data", (d) => (log += d));
  const url = `http://127.0.0.1:${port}`;
  // A server in a child process: polled until it answers (an unknown PDU is its "Invalid request").
  await waitFor(
    async () => {
      if (child.exitCode !== null) throw new Error(`pdudaemon exited with ${child.exitCode}: ${log}`);
      return fetch(`${url}/power/control/on?hostname=none&port=1`).then(
        (r) => r.status === 500,
        () => false,
      );
    },
    15_000,
    "pdudaemon to listen",
  );
  return { url, asked: () => readFileSync(out, "utf8").split("\n").filter(Boolean), close: () => child.kill() };
}

export interface FakePlug {
  url: string;
  /** The request paths it got, in order. */
  requests: string[];
  /** The relay's state as the plug keeps it. */
  on: boolean;
  /** Answer every request with this status instead (a broken plug). */
  failWith?: number;
  /** Answer with the opposite of what was asked (a relay that did not switch). */
  stuck?: boolean;
  close(): Promise<void>;
}

/** A Tasmota (`/cm?cmnd=Power1 On`) or Shelly Gen1 (`/relay/0?turn=on`) plug on 127.0.0.1. */
export async function startPlug(kind: "tasmota" | "shelly"): Promise<FakePlug> {
  const plug: FakePlug = { url: "", requests: [], on: false, close: () => new Promise((resolve) => server.close(() => resolve())) };
  const server: Server = createServer((req, res) => {
    const url = new URL(req.url ?? "/", "http://plug");
    plug.requests.push(`${url.pathname}${url.search}`);
    if (plug.failWith) return res.writeHead(plug.failWith).end("broken");
    let answer: Record<string, unknown> | undefined;
    if (kind === "tasmota" && url.pathname === "/cm") {
      const match = /^Power(\d*) (On|Off)$/i.exec(url.searchParams.get("cmnd") ?? "");
      if (match) {
        plug.on = match[2]!.toLowerCase() === "on" !== Boolean(plug.stuck);
        answer = { [`POWER${match[1]}`]: plug.on ? "ON" : "OFF" };
      }
    }
    if (kind === "shelly" && /^\/relay\/\d+$/.test(url.pathname)) {
      const turn = url.searchParams.get("turn");
      if (turn === "on" || turn === "off") {
        plug.on = turn === "on" !== Boolean(plug.stuck);
        answer = { ison: plug.on, has_timer: false };
      }
    }
    if (!answer) return res.writeHead(404).end();
    res.writeHead(200, { "content-type": "application/json" }).end(JSON.stringify(answer));
  });
  server.listen(0, "127.0.0.1");
  await once(server, "listening");
  plug.url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  return plug;
}

export interface SerialPair {
  /** The end labgate reads (the board's console port as the gateway sees it). */
  port: string;
  /** The board's end: what is written here is what the board printed. */
  board: string;
  close(): Promise<void>;
}

/** A socat pseudo-terminal pair with stable names under `dir` (`<name>` and `<name>.board`). */
export async function serialPair(dir: string, name: string): Promise<SerialPair> {
  const port = join(dir, name);
  const board = `${port}.board`;
  const child = spawn("socat", ["-d", "-d", `pty,raw,echo=0,link=${port}`, `pty,raw,echo=0,link=${board}`], { stdio: ["ignore", "ignore", "pipe"] });
  let log = "";
  child.stderr!.on("data", (d) => (log += d));
  // A program in a child process: its links exist once it logs that it is transferring data.
  await waitFor(() => {
    if (child.exitCode !== null) throw new Error(`socat exited: ${log}`);
    return log.includes("starting data transfer loop");
  }, 10_000, "socat's pseudo-terminals");
  return {
    port,
    board,
    close: async () => {
      if (child.exitCode !== null) return;
      child.kill();
      await once(child, "exit");
    },
  };
}

/** A board printing to its console: `text` written to its end of the pair, as a running board does. */
export function boardPrints(pair: SerialPair, text: string): void {
  writeFileSync(pair.board, text);
}
