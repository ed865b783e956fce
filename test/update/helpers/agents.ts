import { spawn, type ChildProcess } from "node:child_process";
import { mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { Agent } from "../../../src/agent/agent.ts";
import { buildAgentConfig, type AgentConfig } from "../../../src/agent/config.ts";
import { createLogger } from "../../../src/util/log.ts";
import type { Clock } from "../../../src/util/time.ts";
import { labgate } from "../../helpers/cli.ts";
import { openDeviceSocket } from "../../helpers/device-socket.ts";
import { openStream } from "../../helpers/events.ts";
import { tempDir, waitFor, type TestServer } from "../../helpers/server.ts";

let counter = 0;
/** A MAC unique within this test process. */
export function agentMac(): string {
  counter += 1;
  const hex = (0x0a0000000000 + process.pid * 4096 + counter).toString(16).padStart(12, "0").slice(-12);
  return hex.match(/../g)!.join(":");
}

/** Server settings for fast channel tests (short waits; fractions of seconds are fine). */
export const FAST_SERVER = {
  update_server: { ws_ping_interval: 1, device_reply_timeout: 2, action_timeout_margin: 1, action_max_wait: 20, queue_full_retry: 0.2, shell_attach_timeout: 1 },
};

export type AgentOptions = Partial<Omit<AgentConfig, "actions" | "shell">> & { actions?: Array<Record<string, unknown>>; shell?: Record<string, unknown> };

/** An agent (in-process) with its own data and file dirs, started against `server`. */
export function startAgent(server: TestServer | string, options: AgentOptions = {}, extra: { clock?: Clock } = {}): Agent & { dir: string } {
  const dir = tempDir("labgate-agent-");
  const files = join(dir, "files");
  mkdirSync(files, { recursive: true });
  const config = buildAgentConfig({
    server: typeof server === "string" ? server : server.url,
    data_dir: join(dir, "data"),
    key_type: "ed25519",
    mac_address: agentMac(),
    file_base_dir: files,
    update_check_interval: 60,
    retry_min_delay: 0.05,
    retry_max_delay: 0.3,
    log_level: process.env.LABGATE_TEST_LOG ? "debug" : "error",
    actions: [
      { id: "echo", name: "Echo", command: ["sh", "-c", "echo hello; echo oops >&2; exit 3"], timeout: 5 },
      { id: "ok", name: "OK", command: ["echo", "fine"], timeout: 5 },
    ],
    ...options,
  } as Record<string, unknown>);
  const agent = new Agent(config, createLogger(config.log_level), extra) as Agent & { dir: string };
  agent.dir = dir;
  agent.start();
  return agent;
}

/** Approves the agent's pending registration as admin and waits until it holds a token. */
export async function approveAgent(server: TestServer, agent: Agent): Promise<number> {
  await approvePending(server, agent.mac);
  await agent.approved;
  return deviceId(server, agent.mac);
}

/** Approves the pending registration of `mac` as admin (once the device has asked). */
export async function approvePending(server: TestServer, mac: string): Promise<void> {
  const pending = await waitFor(async () => {
    const res = await server.request("/api/v1/auth/pending", { token: server.adminToken });
    const list = (await res.json()) as Array<{ mac_address: string; public_key: string }>;
    return list.find((p) => p.mac_address === mac);
  }, 5000, `pending registration of ${mac}`);
  const res = await server.request("/api/v1/auth/register", { method: "POST", token: server.adminToken, json: { mac_address: pending.mac_address, public_key: pending.public_key } });
  if (res.status !== 200) throw new Error(`approve failed: ${res.status} ${await res.text()}`);
}

export async function deviceId(server: TestServer, mac: string): Promise<number> {
  const res = await server.request("/api/v2/devices", { token: server.adminToken });
  const list = (await res.json()) as Array<{ id: number; mac_address: string }>;
  const found = list.find((d) => d.mac_address === mac);
  if (!found) throw new Error(`device ${mac} not found`);
  return found.id;
}

export async function device(server: TestServer, id: number): Promise<{ connected: boolean; capabilities: Record<string, unknown>; metadata: Record<string, unknown> }> {
  const res = await server.request(`/api/v2/devices/${id}`, { token: server.adminToken });
  return res.json() as never;
}

/** Waits until the server lists the device as connected and knows its capabilities (no event tells the capabilities). */
export async function untilConnected(server: TestServer, id: number): Promise<void> {
  await waitFor(async () => {
    const d = await device(server, id);
    return d.connected && d.capabilities.exec_cmds === true;
  }, 5000, `device ${id} connected`);
}

/** Starts an agent (added to `started`, which the test stops), approves it and waits until it is connected. */
export async function connectedAgent(server: TestServer, started: Agent[], options: AgentOptions = {}, extra: { clock?: Clock } = {}): Promise<{ agent: Agent & { dir: string }; id: number }> {
  const agent = startAgent(server, options, extra);
  started.push(agent);
  const id = await approveAgent(server, agent);
  await untilConnected(server, id);
  return { agent, id };
}

/** A new agent process-equivalent on the same data dir and config (a restart). */
export function restartAgent(previous: Agent & { dir: string }): Agent & { dir: string } {
  const agent = new Agent(previous.config, previous.log) as Agent & { dir: string };
  agent.dir = previous.dir;
  agent.start();
  return agent;
}

export const b64 = (text: string): string => Buffer.from(text).toString("base64");

/**
 * A device client signing with an agent's key. `skewSeconds` moves its clock ahead of the
 * agent's: a signed body is accepted once, so each client of a device needs its own timestamp.
 */
export async function agentClient(server: TestServer, agent: Agent, skewSeconds: number): Promise<import("../../../src/update/client/device-client.ts").DeviceClient> {
  const { DeviceClient } = await import("../../../src/update/client/device-client.ts");
  const { readFileSync } = await import("node:fs");
  return new DeviceClient({
    server: server.url,
    privateKeyPem: readFileSync(join(agent.config.data_dir, "device-key.pem"), "utf8"),
    metadata: agent.metadata(),
    now: () => Math.floor(Date.now() / 1000) + skewSeconds,
  });
}

/**
 * Approves an agent, waits for its socket, then stops it: the device exists, is offline and its
 * key is free for a hand-driven client. Returns the device id.
 */
export async function approvedThenStopped(server: TestServer, agent: Agent): Promise<number> {
  const id = await approveAgent(server, agent);
  await untilConnected(server, id);
  await disconnecting(server, agent.mac, () => agent.stop());
  return id;
}

/** Runs `cause` (an agent's stop, a socket's close) and waits for the server's disconnect event of `mac`. */
export async function disconnecting(server: TestServer, mac: string, cause: () => unknown): Promise<void> {
  const stream = await openStream(server);
  try {
    await cause();
    await stream.next((e) => e.event === "disconnect" && e.data.device === mac, 5000, `disconnect of ${mac}`);
  } finally {
    stream.close();
  }
}

/**
 * Approves a `board` agent at v1, lets it connect, stops it (so nothing answers for the device)
 * and puts the device in a group whose policy offers an uploaded v9. Returns the device id.
 */
export async function offlineDeviceOfferedV9(server: TestServer, agent: Agent): Promise<number> {
  const { offerGroup, uploadOk } = await import("./packages.ts");
  const id = await approvedThenStopped(server, agent);
  const pkg = await uploadOk(server, { token: server.adminToken, version: "v9", devtype: "board" });
  await offerGroup(server, { policy: "exact_match,v9", packages: [pkg.id], devices: [id] });
  return id;
}

let rawCount = 0;
/** A hand-driven device socket (for protocol edge cases a well-behaved agent never produces). */
export async function rawDevice(server: TestServer, agent: Agent): Promise<{ ws: import("ws").WebSocket; token: string; messages: Array<Record<string, unknown>>; next: (method: string) => Promise<Record<string, unknown>> }> {
  // Another timestamp than the agent's (and than earlier raw sockets').
  const client = await agentClient(server, agent, 11 + rawCount);
  rawCount += 1;
  const token = await client.getToken();
  const { ws, messages, next } = await openDeviceSocket(server.url, token!);
  return { ws, token: token!, messages, next: (method) => next(method, 30_000) };
}

/** `labgate agent` as a child process. */
export interface AgentProcess {
  child: ChildProcess;
  mac: string;
  /** Its config file. */
  config: string;
  stderr(): string;
  stdout(): string;
}

/**
 * Starts `labgate agent` (labgate()'s command) with a config of its own dirs, a fresh MAC, fast
 * retries and the YAML lines `extra` (whose top-level keys replace those defaults); resolves once it says it runs (a start can take seconds on
 * a busy machine). `node`: options for node and variables for the child. The caller stops it.
 */
export async function spawnAgent(server: TestServer, extra: string[], node: { args?: string[]; env?: Record<string, string> } = {}): Promise<AgentProcess> {
  const dir = tempDir("labgate-agent-cli-");
  const files = join(dir, "files");
  mkdirSync(files);
  const mac = agentMac();
  const config = join(dir, "agent.yaml");
  const lines = [`server: ${server.url}`, "key_type: ed25519", `mac_address: "${mac}"`, `file_base_dir: ${files}`, "retry_min_delay: 0.05", "retry_max_delay: 0.3", "log_level: error"];
  // A top-level key of `extra` replaces the default's line.
  const keyOf = (line: string) => /^([a-z_]+):/.exec(line)?.[1];
  const given = new Set(extra.map(keyOf));
  writeFileSync(config, [...lines.filter((line) => !given.has(keyOf(line))), ...extra].join("\n"));
  const [bin, ...entry] = await labgate();
  const child = spawn(bin, [...(node.args ?? []), ...entry, "agent", "--config", config, "--data-dir", join(dir, "data")], { stdio: ["ignore", "pipe", "pipe"], env: { ...process.env, ...node.env } });
  let stderr = "";
  let stdout = "";
  child.stdout!.on("data", (chunk) => (stdout += chunk));
  await new Promise<void>((resolve, reject) => {
    child.stderr!.on("data", (chunk) => {
      stderr += chunk;
      if (stderr.includes("labgate agent: device")) resolve();
    });
    child.once("exit", (code) => reject(new Error(`the agent exited (${code}): ${stderr}`)));
  });
  return { child, mac, config, stderr: () => stderr, stdout: () => stdout };
}

/** spawnAgent, then approved and connected; with its device id. */
export async function spawnConnectedAgent(server: TestServer, extra: string[], node: Parameters<typeof spawnAgent>[2] = {}): Promise<AgentProcess & { id: number }> {
  const agent = await spawnAgent(server, extra, node);
  // Open before the approval: the device's connect event cannot come before it is heard.
  const stream = await openStream(server);
  try {
    await approvePending(server, agent.mac);
    await stream.next((e) => e.event === "connect" && e.data.device === agent.mac, 10_000, `${agent.mac} connected (${agent.stderr()})`);
    return { ...agent, id: await deviceId(server, agent.mac) };
  } catch (error) {
    agent.child.kill("SIGKILL");
    throw error;
  } finally {
    stream.close();
  }
}
