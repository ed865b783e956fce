/*
 * `labgate agent`: the device side of the update server for Linux lab devices. It keeps its key,
 * registers and waits for approval, keeps the management WebSocket open (reconnecting with
 * backoff, so a server restart needs no help), reports capabilities, runs configured actions,
 * serves file probes and uploads inside file_base_dir, and checks for, downloads, verifies and
 * installs updates, reporting progress and the new version.
 */
import { mkdirSync, readdirSync, readFileSync, rmSync, unlinkSync } from "node:fs";
import { join } from "node:path";
import WebSocket from "ws";
import { DeviceClient, loadOrCreateDeviceKey, type Metadata } from "../update/client/device-client.ts";
import { TRIGGER_UPDATE_CHECK } from "../update/channel/protocol.ts";
import { writeFileDurable } from "../util/files.ts";
import { createLogger, type Logger } from "../util/log.ts";
import { sleep } from "../util/time.ts";
import type { AgentConfig } from "./config.ts";
import { runCommand } from "./commands.ts";
import { confinedFile, openConfined, uploadParts } from "./files.ts";
import { download } from "./updater.ts";
import { serverTransport, type ServerTransport } from "./transport.ts";
import { ShellSessions } from "./shell.ts";

const KEY_FILE = "device-key.pem";
const STATE_FILE = "state.json";
const RECENT_RESULTS = 500;
/** fetch says only "fetch failed"; the cause says why (e.g. a certificate that does not verify). */
const reason = (error: unknown): string => {
  const { message, cause } = error as Error;
  return cause instanceof Error ? `${message}: ${cause.message}` : message;
};

/** A socket that saw nothing from the server (not even a ping) for this long is dead (half-open). */
const SILENCE_LIMIT_MS = 120_000;

interface State {
  software_version: string;
}

interface ExecResult {
  method: "action_exec_result";
  execution_id: string;
  status_code: number;
  output: string;
}

export class Agent {
  readonly config: AgentConfig;
  readonly log: Logger;
  private client!: DeviceClient;
  private transport!: ServerTransport;
  private shells!: ShellSessions;
  private state!: State;
  private socket: WebSocket | undefined;
  private stopped = false;
  private readonly stopController = new AbortController();
  private readonly timers = new Set<NodeJS.Timeout>();
  private readonly running = new Set<string>();
  /** Results kept for re-delivery: the server may send an execution again (at least once). */
  private readonly results = new Map<string, ExecResult>();
  /** Messages that could not be sent while disconnected (results), sent on the next connection. */
  private outbox: object[] = [];
  private checking: Promise<void> | undefined;
  private checkAgain = false;
  private registered = false;
  /** Resolves when the agent is approved and holds a token (tests wait on it). */
  readonly approved: Promise<void>;
  private markApproved!: () => void;
  /** Connection count, for tests and logs. */
  connections = 0;

  /** The device's clock in ms (tests skew it). */
  private readonly clock: () => number;
  /** Seconds to add to the device's clock to get the server's (learnt from `Date` headers). */
  private clockOffset = 0;

  constructor(config: AgentConfig, log: Logger = createLogger(config.log_level), options: { clock?: () => number } = {}) {
    this.config = config;
    this.log = log;
    this.clock = options.clock ?? Date.now;
    this.approved = new Promise((resolve) => (this.markApproved = resolve));
  }

  get mac(): string {
    return this.config.mac_address;
  }

  get softwareVersion(): string {
    return this.state.software_version;
  }

  get connected(): boolean {
    return this.socket?.readyState === WebSocket.OPEN;
  }

  /** Starts everything in the background; returns once the key and state are loaded. */
  start(): void {
    mkdirSync(join(this.config.data_dir, "downloads"), { recursive: true, mode: 0o700 });
    this.state = this.loadState();
    this.transport = serverTransport(this.config.ca_file);
    this.client = new DeviceClient({
      server: this.config.server,
      privateKeyPem: loadOrCreateDeviceKey(join(this.config.data_dir, KEY_FILE), this.config.key_type).privateKeyPem,
      metadata: this.metadata(),
      prefix: this.config.prefix,
      now: () => Math.floor(this.clock() / 1000) + this.clockOffset,
      fetch: (input, init) => this.fetchNoting(input, init),
    });
    this.shells = new ShellSessions({
      config: this.config.shell,
      mac: this.mac,
      server: this.config.server,
      ws: this.transport.ws,
      log: this.log,
      token: () => this.client.getToken(),
    });
    void this.run();
  }

  async stop(): Promise<void> {
    this.stopped = true;
    this.stopController.abort();
    for (const timer of this.timers) clearTimeout(timer);
    this.timers.clear();
    this.shells?.closeAll();
    const socket = this.socket;
    if (socket && socket.readyState !== WebSocket.CLOSED) {
      await new Promise<void>((resolve) => {
        socket.once("close", () => resolve());
        socket.close(1000, "agent stopping");
        setTimeout(() => (socket.terminate(), resolve()), 1000).unref();
      });
    }
    await this.checking?.catch(() => {});
  }

  /** Asks the server for an update now (the built-in action, or a test). */
  checkNow(): Promise<void> {
    if (this.checking) {
      this.checkAgain = true;
      return this.checking;
    }
    this.checking = (async () => {
      do {
        this.checkAgain = false;
        try {
          await this.updateCheck();
        } catch (error) {
          if (!this.stopped) this.log.warn(`update: ${(error as Error).message}`);
        }
      } while (this.checkAgain && !this.stopped);
    })().finally(() => (this.checking = undefined));
    return this.checking;
  }

  // --- key, state, metadata -------------------------------------------------------------

  private loadState(): State {
    const path = join(this.config.data_dir, STATE_FILE);
    try {
      const state = JSON.parse(readFileSync(path, "utf8")) as Partial<State>;
      if (typeof state.software_version === "string") return { software_version: state.software_version };
    } catch {
      // First start (or an unreadable file): the configured version.
    }
    return { software_version: this.config.software_version };
  }

  private saveState(): void {
    writeFileDurable(join(this.config.data_dir, STATE_FILE), JSON.stringify(this.state) + "\n", 0o600);
  }

  metadata(): Metadata {
    const p = this.config.prefix;
    const metadata: Metadata = {
      ...this.config.metadata,
      [`${p}.software.version`]: this.state.software_version,
      [`${p}.hardware.devtype`]: this.config.device_type,
      [`${p}.hardware.macaddr`]: this.config.mac_address,
    };
    if (this.config.name) metadata[`${p}.device.name`] = this.config.name;
    return metadata;
  }

  /**
   * Lab devices often boot without a real-time clock or NTP: the signed auth timestamp would fall
   * outside the server's window. The server's `Date` header tells how far off this clock is.
   */
  private async fetchNoting(input: string | URL | Request, init?: RequestInit): Promise<Response> {
    const response = await this.transport.fetch(input, init);
    const date = Date.parse(response.headers.get("date") ?? "");
    if (Number.isFinite(date)) {
      const offset = Math.round((date - this.clock()) / 1000);
      // Date has whole seconds: follow only a real difference.
      if (Math.abs(offset - this.clockOffset) > 30) {
        this.log.warn(`agent: the device clock is ${Math.abs(offset)} s ${offset > 0 ? "behind" : "ahead of"} the server's; using the server's time`);
        this.clockOffset = offset;
        this.client?.clockCorrected();
      }
    }
    return response;
  }

  // --- main loop --------------------------------------------------------------------------

  /** Waits, but never past stop(). */
  private sleep(seconds: number): Promise<void> {
    return sleep(seconds * 1000, this.stopController.signal);
  }

  /** Backoff: doubles from retry_min_delay to retry_max_delay, with a little jitter. */
  private nextDelay(previous: number): number {
    const { retry_min_delay: min, retry_max_delay: max } = this.config;
    return Math.min(max, Math.max(min, previous * 2));
  }

  private jitter(seconds: number): number {
    return seconds * (0.8 + Math.random() * 0.4);
  }

  private async run(): Promise<void> {
    await this.register();
    if (this.stopped) return;
    this.scheduleChecks();
    await this.socketLoop();
  }

  /** Authorizes until the server accepts the device (pending: someone has to approve it). */
  private async register(): Promise<void> {
    let delay = this.config.retry_min_delay;
    while (!this.stopped) {
      try {
        const outcome = await this.client.authorize();
        if (outcome.status === "accepted") {
          if (!this.registered) this.log.info(`agent: device ${this.mac} is accepted`);
          this.registered = true;
          this.markApproved();
          return;
        }
        this.log.info(`agent: device ${this.mac} waits for approval`);
      } catch (error) {
        this.log.warn(`agent: authorization failed: ${reason(error)}`);
      }
      await this.sleep(this.jitter(delay));
      delay = this.nextDelay(delay);
    }
  }

  private scheduleChecks(): void {
    const tick = async () => {
      if (this.stopped) return;
      await this.checkNow();
      if (this.stopped) return;
      const timer = setTimeout(() => {
        this.timers.delete(timer);
        void tick();
      }, this.config.update_check_interval * 1000);
      this.timers.add(timer);
    };
    void tick();
  }

  private async socketLoop(): Promise<void> {
    let delay = this.config.retry_min_delay;
    while (!this.stopped) {
      let token: string | undefined;
      try {
        token = await this.client.getToken();
      } catch (error) {
        this.log.warn(`agent: authorization failed: ${reason(error)}`);
      }
      if (token && !this.stopped) {
        const { opened, status } = await this.connect(token);
        if (opened) delay = this.config.retry_min_delay;
        // The token was refused (e.g. the device was deleted and must register again).
        if (status === 401) this.client.dropToken();
      }
      if (this.stopped) return;
      await this.sleep(this.jitter(delay));
      delay = this.nextDelay(delay);
    }
  }

  /** One connection, until it closes. */
  private connect(token: string): Promise<{ opened: boolean; status?: number }> {
    return new Promise((resolve) => {
      const url = `${this.config.server.replace(/^http/, "ws")}/api/v1/devices/ws`;
      const socket = new WebSocket(url, { headers: { authorization: `Bearer token=${token}` }, handshakeTimeout: 10_000, ...this.transport.ws });
      this.socket = socket;
      let opened = false;
      let status: number | undefined;
      let heard = Date.now();
      const watchdog = setInterval(() => {
        if (Date.now() - heard > SILENCE_LIMIT_MS) socket.terminate();
      }, 10_000);
      watchdog.unref();
      socket.on("ping", () => (heard = Date.now()));
      socket.on("unexpected-response", (_request, response) => {
        status = response.statusCode;
        response.resume();
        socket.terminate();
      });
      socket.on("open", () => {
        opened = true;
        this.connections++;
        this.log.info(`agent: connected to ${url}`);
        // Capabilities at once (13.1), with the seed's keys (D11).
        this.send({ method: "capability_report", capabilities: { exec_cmds: true, file_transfer: true, shell_connect: this.shells.enabled } });
        const pending = this.outbox;
        this.outbox = [];
        for (const message of pending) this.send(message);
      });
      socket.on("message", (data, isBinary) => {
        heard = Date.now();
        if (isBinary) return;
        this.onMessage(data.toString());
      });
      socket.on("error", (error) => this.log.debug(`agent: socket error: ${error.message}`));
      socket.on("close", (code, reason) => {
        clearInterval(watchdog);
        if (this.socket === socket) this.socket = undefined;
        if (opened) this.log.info(`agent: disconnected (${code} ${reason.toString()})`);
        resolve({ opened, status });
      });
    });
  }

  private send(message: object): boolean {
    const socket = this.socket;
    if (!socket || socket.readyState !== WebSocket.OPEN) return false;
    socket.send(JSON.stringify(message));
    return true;
  }

  /** Sends now, or on the next connection. */
  private deliver(message: object): void {
    if (this.send(message)) return;
    this.outbox.push(message);
    // Long offline: the oldest go (the server sends unanswered executions again anyway).
    if (this.outbox.length > RECENT_RESULTS) this.outbox.shift();
  }

  private onMessage(text: string): void {
    let message: Record<string, unknown>;
    try {
      message = JSON.parse(text) as Record<string, unknown>;
    } catch {
      return this.log.warn("agent: unparsable message from the server ignored");
    }
    switch (message.method) {
      case "alert":
        return this.log.debug(`agent: server alert ${JSON.stringify(message.alert)}`);
      case "action_list_query":
        this.send({ method: "action_list_update", actions: this.actionDefinitions() });
        return;
      case "action_exec":
        return this.exec(String(message.execution_id), String(message.action_id));
      case "shell_attach":
        this.shells.attach(message.mac_addr, message.uuid).catch((error) => this.log.warn(`agent: shell session failed: ${(error as Error).message}`));
        return;
      case "fs_file_probe":
        void this.probe(String(message.id), message.file);
        return;
      case "fs_file_download":
        void this.upload(String(message.id), message.file, message.upload_urls as string[], Number(message.part_size));
        return;
      default:
        this.log.warn(`agent: unsupported request ${JSON.stringify(message.method)} ignored`);
    }
  }

  // --- actions ----------------------------------------------------------------------------

  private actionDefinitions() {
    const builtin = { action_id: TRIGGER_UPDATE_CHECK(this.config.prefix), action_name: "Check updates", description: "Check for updates", command: [], timeout: 0 };
    return [
      ...this.config.actions.map((a) => ({ action_id: a.id, action_name: a.name, description: a.description, command: a.command, timeout: a.timeout })),
      builtin,
    ];
  }

  private exec(id: string, actionId: string): void {
    const control = (status: string): void => void this.send({ method: "action_exec_control", execution_id: id, status });
    const done = this.results.get(id);
    if (done) {
      // Sent again after a reconnection: the result, not a second run.
      control("ok");
      this.deliver(done);
      return;
    }
    if (this.running.has(id)) return control("ok");
    const builtin = actionId === TRIGGER_UPDATE_CHECK(this.config.prefix);
    const action = this.config.actions.find((a) => a.id === actionId);
    if (!builtin && !action) return control("unknown_action");
    if (this.running.size >= this.config.action_concurrency) return control("full");
    control("ok");
    this.running.add(id);
    const work = builtin
      ? Promise.resolve({ code: 0, output: Buffer.from("Update check queued") }).finally(() => void this.checkNow())
      : runCommand(action!.command, { timeout: action!.timeout, cwd: this.config.data_dir, signal: this.stopController.signal });
    void work.then((result) => {
      this.running.delete(id);
      const message: ExecResult = { method: "action_exec_result", execution_id: id, status_code: result.code, output: result.output.toString("base64") };
      this.results.set(id, message);
      if (this.results.size > RECENT_RESULTS) this.results.delete(this.results.keys().next().value as string);
      this.deliver(message);
    });
  }

  // --- files ------------------------------------------------------------------------------

  private async probe(id: string, file: unknown): Promise<void> {
    const found = await confinedFile(this.config.file_base_dir, file as string);
    this.send({ method: "fs_file_probe_reply", id, status: found ? 0 : 1, size: found?.size ?? 0 });
  }

  private async upload(id: string, file: unknown, urls: string[], partSize: number): Promise<void> {
    try {
      const found = await openConfined(this.config.file_base_dir, file as string);
      if (!found) throw new Error("file is not available");
      try {
        const etags = await uploadParts(found.handle, urls, partSize, this.transport.fetch);
        this.send({ method: "fs_file_download_reply", id, status: 0, etags });
      } finally {
        await found.handle.close();
      }
    } catch (error) {
      this.log.warn(`agent: file upload failed: ${(error as Error).message}`);
      this.send({ method: "fs_file_download_reply", id, status: 1, etags: [] });
    }
  }

  // --- updates ----------------------------------------------------------------------------

  private async updateCheck(): Promise<void> {
    const response = await this.client.request("/api/v1/update/check", { method: "POST", json: this.metadata(), signal: this.stopController.signal });
    if (response.status === 204) return void (await response.body?.cancel());
    const answer = (await response.json().catch(() => ({}))) as Record<string, unknown>;
    if (response.status !== 200) throw new Error(`update check answered ${response.status}: ${JSON.stringify(answer.error ?? "")}`);
    const { uri, sha256 } = answer;
    if (typeof uri !== "string" || typeof sha256 !== "string") throw new Error("update check answer lacks uri or sha256");
    const offered = typeof answer.version === "string" ? answer.version : undefined;
    if (this.config.install_command.length === 0) {
      // Nothing could install it: downloading would only cost bandwidth, and reporting the offered
      // version would claim an update that never happened.
      return this.log.warn(`agent: update ${offered ?? `package ${String(answer.id)}`} offered, but no install_command is configured: not installed`);
    }
    this.log.info(`agent: update ${offered ?? `package ${String(answer.id)}`} offered`);

    // Leftovers of other updates (an offer that changed meanwhile) go; this one's partial stays.
    const downloads = join(this.config.data_dir, "downloads");
    for (const name of readdirSync(downloads)) if (!name.startsWith(sha256.toLowerCase())) rmSync(join(downloads, name), { force: true, recursive: true });

    // Download, resuming after interruptions, for as long as the agent runs.
    let path: string | undefined;
    let delay = this.config.retry_min_delay;
    let lastReported = -1;
    const progress = (percent: number) => {
      // At most one message per 5 % step.
      if (percent - lastReported < 5 && percent !== 0) return;
      lastReported = percent;
      this.send({ method: "update_progress", progress: percent });
    };
    for (let attempt = 1; !path; attempt++) {
      if (this.stopped) return;
      try {
        path = await download({ url: uri, sha256, dir: downloads, onProgress: progress, signal: this.stopController.signal, fetch: this.transport.fetch });
      } catch (error) {
        if (this.stopped) return;
        this.log.warn(`agent: download attempt ${attempt}: ${(error as Error).message}`);
        if (attempt >= 20) throw new Error("download failed too often; trying again at the next check");
        await this.sleep(this.jitter(delay));
        delay = this.nextDelay(delay);
      }
    }

    const argv = this.config.install_command.map((arg) => arg.replaceAll("{file}", path));
    let version = offered;
    if (argv.length > 0) {
      const result = await runCommand(argv, { cwd: this.config.data_dir, signal: this.stopController.signal });
      if (result.code !== 0) throw new Error(`install command exited with ${result.code}: ${result.output.toString().slice(-500)}`);
      // An install command may name the version it installed (`version=X` on a line of its own).
      const named = /^version=(\S+)\s*$/m.exec(result.output.toString());
      version = named?.[1] ?? version;
    }
    try {
      unlinkSync(path);
    } catch {
      // Already gone.
    }
    this.deliver({ method: "update_progress", progress: 100 });
    if (!version) return this.log.warn("agent: installed, but the new version is unknown (the server did not name it)");
    this.state.software_version = version;
    this.saveState();
    this.client.setMetadata(this.metadata());
    this.deliver({ method: "update_version", version });
    this.log.info(`agent: installed ${version}`);
  }
}
