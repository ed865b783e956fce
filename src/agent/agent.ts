/*
 * `labgate agent`: the device side of the update server for Linux lab devices. It keeps its key,
 * registers and waits for approval (registration.ts), keeps the management WebSocket open,
 * reconnecting with backoff so a server restart needs no help (socket.ts), reports capabilities,
 * runs configured actions (actions.ts), serves file probes and uploads inside file_base_dir
 * (files.ts), and checks for, downloads, verifies and installs updates (install.ts), reporting
 * progress and the new version, and runs test runs the gateway sends (tests.ts). This file wires
 * them together and holds the device's state.
 */
import { mkdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { KeyFileError, loadVerifyKeys, type VerifyKey } from "../artifact/mender/keys.ts";
import { ConfigError } from "../util/config-error.ts";
import type { Metadata } from "../update/client/device-client.ts";
import { writeFileDurable } from "../util/files.ts";
import { createLogger, type Logger } from "../util/log.ts";
import { systemClock, type Clock } from "../util/time.ts";
import { AgentActions } from "./actions.ts";
import type { AgentConfig } from "./config.ts";
import { answerDownload, answerProbe } from "./files.ts";
import { checkAndInstall, confirmInstall, type PendingInstall } from "./install.ts";
import { OutcomeQueue } from "./outcomes.ts";
import type { DeviceMessage } from "../protocol/labgate/device.ts";
import { readServerMessage } from "../protocol/labgate/wire.ts";
import { Registration } from "./registration.ts";
import { ManagementSocket } from "./socket.ts";
import { ServerList } from "./servers.ts";
import { serverTransport, type ServerTransport } from "./transport.ts";
import { ShellSessions } from "./shell.ts";
import { runCommand } from "./commands.ts";
import { TestRunner } from "./tests.ts";
import { ownUserRuns, prepareRunAs } from "../testrun/engine/identity.ts";

const STATE_FILE = "state.json";

/** verify_keys read at start: a file without a usable key stops the agent (exit 2). */
function readVerifyKeys(files: readonly string[]): VerifyKey[] {
  try {
    return loadVerifyKeys(files);
  } catch (error) {
    if (error instanceof KeyFileError) throw new ConfigError(`agent config key verify_keys: ${error.message}`);
    throw error;
  }
}

interface State {
  software_version: string;
  /** An A/B install that the next start confirms (or finds rolled back). */
  pending_install?: PendingInstall;
}

export class Agent {
  readonly config: AgentConfig;
  readonly log: Logger;
  private registration!: Registration;
  private socket!: ManagementSocket;
  private actions!: AgentActions;
  private transport!: ServerTransport;
  private servers!: ServerList;
  private shells!: ShellSessions;
  private tests!: TestRunner;
  private state!: State;
  private outcomes!: OutcomeQueue;
  /** Offers failed at once for want of an install_command (install.ts). */
  private readonly refusedOffers = new Set<string>();
  private verifyKeys: VerifyKey[] = [];
  /** Aborted by the server's `update_abort` (a new one for every check). */
  private updateAbort = new AbortController();
  private stopped = false;
  private readonly stopController = new AbortController();
  private checking: Promise<void> | undefined;
  private checkAgain = false;
  /** Resolves when the agent is approved and holds a token (tests wait on it). */
  readonly approved: Promise<void>;
  private markApproved!: () => void;
  /** Resolves when the management socket first opens. */
  readonly connectedOnce: Promise<void>;
  private markConnected!: () => void;

  /** The device's clock: its time and every wait (backoff, update checks); tests skew and move it. */
  private readonly clock: Clock;

  constructor(config: AgentConfig, log: Logger = createLogger(config.log_level), options: { clock?: Clock } = {}) {
    this.config = config;
    this.log = log;
    this.clock = options.clock ?? systemClock;
    this.approved = new Promise((resolve) => (this.markApproved = resolve));
    this.connectedOnce = new Promise((resolve) => (this.markConnected = resolve));
  }

  get mac(): string {
    return this.config.mac_address;
  }

  get softwareVersion(): string {
    return this.state.software_version;
  }

  get connected(): boolean {
    return this.socket?.connected ?? false;
  }

  /** Connection count, for tests and logs. */
  get connections(): number {
    return this.socket?.connections ?? 0;
  }

  /** Starts everything in the background; returns once the key and state are loaded. */
  start(): void {
    mkdirSync(join(this.config.data_dir, "downloads"), { recursive: true, mode: 0o700 });
    this.state = this.loadState();
    this.verifyKeys = readVerifyKeys(this.config.verify_keys);
    this.servers = new ServerList(this.config.servers, this.log, { min: this.config.retry_min_delay, max: this.config.retry_max_delay });
    const transport = serverTransport(this.config.ca_file);
    this.transport = { ...transport, http: this.servers.client(transport.http) };
    this.registration = new Registration(this.config, this.log, this.transport, this.clock, this.metadata());
    const client = this.registration.client;
    this.shells = new ShellSessions({
      config: this.config.shell,
      mac: this.mac,
      // A session is attached where the management socket is: that node asked for it.
      server: () => this.socket.server ?? this.servers.current(),
      ws: this.transport.ws,
      log: this.log,
      clock: this.clock,
      token: () => client.getToken(),
    });
    this.socket = new ManagementSocket(this.servers, "/api/v1/devices/ws", this.transport, this.log, this.config.retry_min_delay, {
      token: () => this.registration.token(),
      refused: () => client.dropToken(),
      // Capabilities at once, with the keys the reference's agents send.
      greeting: () => ({ method: "capability_report", capabilities: { exec_cmds: true, file_transfer: true, shell_connect: this.shells.enabled, tests: this.config.tests.enabled } }),
      // Outcomes the server has not acknowledged yet go again on every connection.
      connected: () => {
        this.markConnected();
        this.outcomes.resend();
      },
      // The gateway ends a share whose device disconnects ("device disconnected"): it stops here too.
      disconnected: () => this.tests?.abandon(),
      onMessage: (text) => this.onMessage(text),
      sleep: (seconds) => this.backoff(seconds),
      nextDelay: (previous) => this.nextDelay(previous),
      stopped: () => this.stopped,
      clock: this.clock,
    });
    this.outcomes = new OutcomeQueue(this.config.data_dir, (message) => this.socket.send(message));
    this.actions = new AgentActions(this.config, this.socket, this.stopController.signal, () => void this.checkNow(), this.clock);
    const tests = this.config.tests;
    // Who runs the tests: checked now, so that an agent that cannot switch to run_as stops at start (exit 2).
    const runAs = !tests.enabled ? {} : tests.run_as ? prepareRunAs(tests.run_as, this.config.data_dir, tests.work_dir, { runAs: "agent config key tests.run_as", workDir: "agent config key tests.work_dir" }) : ownUserRuns();
    void runAs.containment?.describe().then((line) => this.log.info(`agent: tests: ${line}`), (error: Error) => this.log.error(`agent: tests: choosing how runs are contained failed: ${error.message}`));
    this.tests = new TestRunner({
      config: tests,
      runAs,
      dataDir: this.config.data_dir,
      server: this.config.server,
      http: this.transport.http,
      token: () => client.getToken(),
      send: (message) => this.socket.send(message),
      log: this.log,
      clock: this.clock,
      sleep: (seconds) => this.backoff(seconds),
    });
    void this.run();
  }

  async stop(): Promise<void> {
    this.stopped = true;
    this.stopController.abort();
    this.shells?.closeAll();
    await this.tests?.stop();
    await this.socket?.close();
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
        if (this.updateAbort.signal.aborted) this.updateAbort = new AbortController();
        // An A/B install waits for its restart: nothing else until then.
        if (this.state.pending_install) break;
        try {
          await checkAndInstall({
            config: this.config,
            log: this.log,
            client: this.registration.client,
            http: this.transport.http,
            signal: this.stopController.signal,
            stopped: () => this.stopped,
            metadata: () => this.metadata(),
            send: (message) => this.socket.send(message),
            deliver: (message) => this.socket.deliver(message),
            sleep: (seconds) => this.backoff(seconds),
            nextDelay: (previous) => this.nextDelay(previous),
            installed: (version) => this.installed(version),
            softwareVersion: () => this.state.software_version,
            report: (outcome) => this.outcomes.report(outcome),
            awaitRestart: (pending) => this.saveState({ ...this.state, pending_install: pending }),
            aborted: this.updateAbort.signal,
            refusedOffers: this.refusedOffers,
            verifyKeys: this.verifyKeys,
          });
        } catch (error) {
          if (!this.stopped) this.log.warn(`update: ${(error as Error).message}`);
        }
      } while (this.checkAgain && !this.stopped);
    })().finally(() => (this.checking = undefined));
    return this.checking;
  }

  // --- state, metadata --------------------------------------------------------------------

  private loadState(): State {
    const path = join(this.config.data_dir, STATE_FILE);
    try {
      const state = JSON.parse(readFileSync(path, "utf8")) as Partial<State>;
      if (typeof state.software_version === "string") {
        const pending = state.pending_install;
        const valid = pending && typeof pending.version === "string" && typeof pending.from_version === "string";
        return { software_version: state.software_version, ...(valid ? { pending_install: pending } : {}) };
      }
    } catch {
      // First start (or an unreadable file): the configured version.
    }
    return { software_version: this.config.software_version };
  }

  private saveState(state: State): void {
    this.state = state;
    writeFileDurable(join(this.config.data_dir, STATE_FILE), JSON.stringify(this.state) + "\n", 0o600);
  }

  private installed(version: string): void {
    const { pending_install: _done, ...rest } = this.state;
    this.saveState({ ...rest, software_version: version });
    this.registration.client.setMetadata(this.metadata());
  }

  /** An A/B install pending from before the restart: the version_command tells whether it took. */
  private async confirmPending(): Promise<void> {
    const pending = this.state.pending_install;
    if (!pending) return;
    const running = await confirmInstall(this.config, pending, (outcome) => this.outcomes.report(outcome), this.log, this.clock);
    if (running === pending.version) {
      this.installed(running);
      this.socket.deliver({ method: "update_version", version: running });
    } else {
      const { pending_install: _gone, ...rest } = this.state;
      this.saveState(rest);
    }
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
    // The gateway warns before deploying an unsigned package to a device that would refuse it.
    if (this.verifyKeys.length > 0) metadata[`${p}.update.verify_keys`] = this.verifyKeys.map((key) => key.fingerprint);
    return metadata;
  }

  // --- main loop --------------------------------------------------------------------------

  /** Waits about `seconds` (a little jitter), but never past stop(). */
  private backoff(seconds: number): Promise<void> {
    return this.clock.sleep(seconds * (0.8 + Math.random() * 0.4) * 1000, this.stopController.signal);
  }

  /** Backoff: doubles from retry_min_delay to retry_max_delay. */
  private nextDelay(previous: number): number {
    const { retry_min_delay: min, retry_max_delay: max } = this.config;
    return Math.min(max, Math.max(min, previous * 2));
  }

  private async run(): Promise<void> {
    const accepted = await this.registration.untilAccepted({ sleep: (s) => this.backoff(s), nextDelay: (p) => this.nextDelay(p), stopped: () => this.stopped });
    if (!accepted || this.stopped) return;
    await this.confirmPending().catch((error) => this.log.warn(`agent: confirming the last install failed: ${(error as Error).message}`));
    this.markApproved();
    void this.checkEvery();
    if (this.servers.urls.length > 1) void this.returnToFirst();
    await this.socket.run();
  }

  /** An update check now and every update_check_interval until the agent stops. */
  private async checkEvery(): Promise<void> {
    while (!this.stopped) {
      await this.checkNow();
      await this.clock.sleep(this.config.update_check_interval * 1000, this.stopController.signal);
    }
  }

  /** While another server is in use, asks the first now and then (backing off) whether it answers, and goes back to it once it does. */
  private async returnToFirst(): Promise<void> {
    const first = this.servers.urls[0];
    const plain = serverTransport(this.config.ca_file).http;
    while (!this.stopped) {
      await this.backoff(this.servers.away ? this.servers.nextReturnDelay() : this.config.retry_max_delay);
      if (this.stopped || !this.servers.away) continue;
      const answers = await plain(`${first}/api/health`, { signal: this.stopController.signal }).then(
        (response) => (response.discard(), response.status < 500),
        () => false,
      );
      if (!answers || this.stopped) continue;
      this.servers.returned();
      this.socket.reconnect("returning to the first server");
    }
  }

  /** The validation of an installed update failed on the gateway: the configured rollback_command runs. */
  private async rollback(version: string, runId: string): Promise<void> {
    const command = this.config.rollback_command;
    if (command.length === 0) return this.log.warn(`agent: validation of ${version} failed (test run ${runId}); no rollback_command configured`);
    const result = await runCommand(
      command.map((arg) => arg.replaceAll("{version}", version)),
      { cwd: this.config.data_dir, timeout: 600, signal: this.stopController.signal, clock: this.clock },
    );
    this.log[result.code === 0 ? "info" : "warn"](`agent: validation of ${version} failed (test run ${runId}): rollback_command exited ${result.code}`);
  }

  /** A frame from the server, parsed against its method's schema; one that does not fit is logged and dropped. */
  private onMessage(text: string): void {
    const read = readServerMessage(text);
    if (!("message" in read)) {
      if (read.dropped === "unparsable") return this.log.warn("agent: unparsable message from the server ignored");
      if (read.dropped === "unknown") return this.log.warn(`agent: unsupported request ${JSON.stringify(read.method.slice(0, 64))} ignored`);
      return this.log.warn(`agent: malformed ${read.method} from the server ignored (${read.problem})`);
    }
    const { message } = read;
    const send = (reply: DeviceMessage) => this.socket.send(reply);
    switch (message.method) {
      case "alert":
        return this.log.debug(`agent: server alert ${JSON.stringify(message.alert)}`);
      case "update_outcome_ack":
        return this.outcomes.acknowledged(message.id);
      case "update_abort":
        // Only an update under way listens; the next check makes a new signal.
        if (this.checking) this.updateAbort.abort();
        return;
      case "validation_failed":
        void this.rollback(message.version, message.run_id);
        return;
      case "action_list_query":
        send({ method: "action_list_update", actions: this.actions.definitions() });
        return;
      case "action_exec":
        return this.actions.exec(message.execution_id, message.action_id);
      case "shell_attach":
        this.shells.attach(message.mac_addr, message.uuid).catch((error) => this.log.warn(`agent: shell session failed: ${(error as Error).message}`));
        return;
      case "fs_file_probe":
        void answerProbe(this.config.file_base_dir, send, message.id, message.file);
        return;
      case "fs_file_download":
        void answerDownload(this.config.file_base_dir, send, this.log, this.transport.http, { id: message.id, file: message.file, urls: message.upload_urls, partSize: message.part_size });
        return;
      case "test_run_start":
        return this.tests.start(message);
      case "test_run_abort":
        return this.tests.abort(message);
    }
  }
}
