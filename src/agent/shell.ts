/*
 * Shell sessions on the device. On `shell_attach` the agent opens the
 * session's socket and runs the configured command (argv, no shell interpolation, no PTY) in the
 * configured directory with a small environment; socket frames go to its stdin, its stdout and
 * stderr come back as binary frames. The session ends when either side ends, after the idle
 * timeout, or when the agent stops; the process group is killed then.
 */
import { spawn, type ChildProcess } from "node:child_process";
import WebSocket from "ws";
import { closeReason } from "../protocol/labgate/wire.ts";
import type { Logger } from "../util/log.ts";
import { after, type Clock } from "../util/time.ts";
import type { AgentShell } from "./config.ts";
import type { ServerTransport } from "./transport.ts";

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;
/** Output waiting for the socket above this pauses the process's pipes. */
const HIGH_WATER = 1024 * 1024;
const KILL_GRACE_MS = 2000;

/** Only what a shell needs: the agent's own environment (tokens, proxies, secrets) stays out. */
function sessionEnv(): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = { TERM: "dumb" };
  for (const key of ["PATH", "HOME", "USER", "LOGNAME", "LANG", "LC_ALL", "TZ"]) if (process.env[key] !== undefined) env[key] = process.env[key];
  return env;
}

interface Session {
  socket: WebSocket;
  child: ChildProcess | undefined;
  /** Cancels the idle deadline. */
  idle: (() => void) | undefined;
}

export class ShellSessions {
  private readonly config: AgentShell;
  private readonly mac: string;
  /** The server (base URL) the management socket is on. */
  private readonly server: () => string;
  private readonly ws: ServerTransport["ws"];
  private readonly log: Logger;
  private readonly clock: Clock;
  private readonly token: () => Promise<string | undefined>;
  private readonly sessions = new Set<Session>();

  constructor(options: { config: AgentShell; mac: string; server: () => string; ws: ServerTransport["ws"]; log: Logger; clock: Clock; token: () => Promise<string | undefined> }) {
    this.config = options.config;
    this.clock = options.clock;
    this.mac = options.mac;
    this.server = options.server;
    this.ws = options.ws;
    this.log = options.log;
    this.token = options.token;
  }

  get enabled(): boolean {
    return this.config.command.length > 0;
  }

  get count(): number {
    return this.sessions.size;
  }

  /** `shell_attach {mac_addr, uuid}` from the server. */
  async attach(macAddr: unknown, uuid: unknown): Promise<void> {
    if (!this.enabled) return this.log.warn("agent: shell_attach ignored: no shell command configured");
    if (typeof uuid !== "string" || !UUID.test(uuid) || typeof macAddr !== "string" || macAddr.toLowerCase() !== this.mac.toLowerCase()) {
      return this.log.warn(`agent: malformed shell_attach ignored`);
    }
    const token = await this.token().catch(() => undefined);
    if (!token) return this.log.warn("agent: shell_attach ignored: no device token");
    const url = `${this.server().replace(/^http/, "ws")}/api/v1/devices/${encodeURIComponent(this.mac)}/shell/attach/${uuid}`;
    const socket = new WebSocket(url, { headers: { authorization: `Bearer token=${token}` }, handshakeTimeout: 10_000, ...this.ws });
    const session: Session = { socket, child: undefined, idle: undefined };
    socket.on("error", (error) => this.log.debug(`agent: shell socket error: ${error.message}`));
    socket.on("unexpected-response", (_request, response) => {
      this.log.warn(`agent: shell attach answered ${response.statusCode}`);
      response.resume();
      socket.terminate();
    });
    socket.on("open", () => {
      if (this.sessions.size >= this.config.max_sessions) return socket.close(4001, "too many shell sessions on the device");
      this.sessions.add(session);
      this.start(session);
    });
    socket.on("close", () => this.end(session));
  }

  /** Ends every session (the agent stops). */
  closeAll(): void {
    for (const session of [...this.sessions]) {
      if (session.socket.readyState === WebSocket.OPEN) session.socket.close(1001, "agent stopping");
      this.end(session);
    }
  }

  private start(session: Session): void {
    const { socket } = session;
    const [program, ...args] = this.config.command;
    let child: ChildProcess;
    try {
      // Its own process group, so that whatever it starts goes with it.
      child = spawn(program, args, { cwd: this.config.cwd, env: sessionEnv(), stdio: ["pipe", "pipe", "pipe"], shell: false, detached: true });
    } catch (error) {
      socket.close(1000, closeReason(`cannot start the shell: ${(error as Error).message}`));
      return;
    }
    session.child = child;
    this.touch(session);
    this.log.info(`agent: shell session started (pid ${child.pid ?? "?"})`);
    const forward = (chunk: Buffer, from: NodeJS.ReadableStream) => {
      this.touch(session);
      if (socket.readyState !== WebSocket.OPEN) return;
      socket.send(chunk, { binary: true }, () => {
        if (socket.bufferedAmount < HIGH_WATER) from.resume();
      });
      if (socket.bufferedAmount > HIGH_WATER) from.pause();
    };
    child.stdout!.on("data", (chunk: Buffer) => forward(chunk, child.stdout!));
    child.stderr!.on("data", (chunk: Buffer) => forward(chunk, child.stderr!));
    child.stdin!.on("error", () => {}); // the process may exit with input pending
    child.stdin!.on("drain", () => socket.isPaused && socket.resume());
    // Text and binary frames alike are bytes for the process's stdin.
    socket.on("message", (data: Buffer | ArrayBuffer | Buffer[]) => {
      this.touch(session);
      const bytes = Array.isArray(data) ? Buffer.concat(data) : Buffer.from(data as ArrayBuffer);
      if (child.stdin!.writable && !child.stdin!.write(bytes)) socket.pause();
    });
    child.on("error", (error) => {
      if (socket.readyState === WebSocket.OPEN) socket.close(1000, closeReason(`cannot start the shell: ${error.message}`));
    });
    child.on("close", (code, signal) => {
      session.child = undefined;
      if (socket.readyState === WebSocket.OPEN) socket.close(1000, signal ? `killed by ${signal}` : `exit ${code}`);
    });
  }

  /** Traffic either way: the idle timeout starts again. */
  private touch(session: Session): void {
    if (this.config.idle_timeout <= 0) return;
    session.idle?.();
    session.idle = after(this.clock, this.config.idle_timeout * 1000, () => {
      if (session.socket.readyState === WebSocket.OPEN) session.socket.close(1000, "idle timeout");
      this.end(session);
    });
  }

  private end(session: Session): void {
    session.idle?.();
    this.sessions.delete(session);
    const child = session.child;
    if (!child || child.pid === undefined || child.exitCode !== null || child.signalCode !== null) return;
    const group = -child.pid;
    try {
      process.kill(group, "SIGTERM");
    } catch {
      return; // already gone
    }
    const force = after(this.clock, KILL_GRACE_MS, () => {
      try {
        process.kill(group, "SIGKILL");
      } catch {
        // Gone meanwhile.
      }
    });
    child.once("close", force);
  }
}
