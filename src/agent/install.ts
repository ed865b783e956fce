/*
 * Update checks and installs: asks the server for an update, downloads it (resuming, for as
 * long as the agent runs), runs the configured install_command, and reports progress and the
 * new version.
 */
import { readdirSync, rmSync, unlinkSync } from "node:fs";
import { join } from "node:path";
import type { DeviceClient, Metadata } from "../update/client/device-client.ts";
import type { Logger } from "../util/log.ts";
import type { AgentConfig } from "./config.ts";
import { runCommand } from "./commands.ts";
import { download } from "./updater.ts";

/** Download attempts of one offer before waiting for the next check. */
const MAX_ATTEMPTS = 20;

export interface InstallContext {
  config: AgentConfig;
  log: Logger;
  client: DeviceClient;
  fetch: typeof fetch;
  signal: AbortSignal;
  stopped(): boolean;
  metadata(): Metadata;
  send(message: object): boolean;
  /** Sends now, or on the next connection. */
  deliver(message: object): void;
  /** Waits `seconds` of backoff, or less once the agent stops. */
  sleep(seconds: number): Promise<void>;
  nextDelay(previous: number): number;
  /** `version` is installed: remember it (state file, metadata). */
  installed(version: string): void;
}

/** One update check; installs what the server offers. Throws what went wrong (the caller logs it). */
export async function checkAndInstall(agent: InstallContext): Promise<void> {
  const { config, log } = agent;
  const response = await agent.client.request("/api/v1/update/check", { method: "POST", json: agent.metadata(), signal: agent.signal });
  if (response.status === 204) return void (await response.body?.cancel());
  const answer = (await response.json().catch(() => ({}))) as Record<string, unknown>;
  if (response.status !== 200) throw new Error(`update check answered ${response.status}: ${JSON.stringify(answer.error ?? "")}`);
  const { uri, sha256 } = answer;
  if (typeof uri !== "string" || typeof sha256 !== "string") throw new Error("update check answer lacks uri or sha256");
  const offered = typeof answer.version === "string" ? answer.version : undefined;
  if (config.install_command.length === 0) {
    // Nothing could install it: downloading would only cost bandwidth, and reporting the offered
    // version would claim an update that never happened.
    return log.warn(`agent: update ${offered ?? `package ${String(answer.id)}`} offered, but no install_command is configured: not installed`);
  }
  log.info(`agent: update ${offered ?? `package ${String(answer.id)}`} offered`);

  // Leftovers of other updates (an offer that changed meanwhile) go; this one's partial stays.
  const downloads = join(config.data_dir, "downloads");
  for (const name of readdirSync(downloads)) if (!name.startsWith(sha256.toLowerCase())) rmSync(join(downloads, name), { force: true, recursive: true });

  // Download, resuming after interruptions, for as long as the agent runs.
  let path: string | undefined;
  let delay = config.retry_min_delay;
  let lastReported = -1;
  const progress = (percent: number) => {
    // At most one message per 5 % step.
    if (percent - lastReported < 5 && percent !== 0) return;
    lastReported = percent;
    agent.send({ method: "update_progress", progress: percent });
  };
  for (let attempt = 1; !path; attempt++) {
    if (agent.stopped()) return;
    try {
      path = await download({ url: uri, sha256, dir: downloads, onProgress: progress, signal: agent.signal, fetch: agent.fetch });
    } catch (error) {
      if (agent.stopped()) return;
      log.warn(`agent: download attempt ${attempt}: ${(error as Error).message}`);
      if (attempt >= MAX_ATTEMPTS) throw new Error("download failed too often; trying again at the next check");
      await agent.sleep(delay);
      delay = agent.nextDelay(delay);
    }
  }

  const argv = config.install_command.map((arg) => arg.replaceAll("{file}", path));
  let version = offered;
  if (argv.length > 0) {
    const result = await runCommand(argv, { cwd: config.data_dir, signal: agent.signal });
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
  agent.deliver({ method: "update_progress", progress: 100 });
  if (!version) return log.warn("agent: installed, but the new version is unknown (the server did not name it)");
  agent.installed(version);
  agent.deliver({ method: "update_version", version });
  log.info(`agent: installed ${version}`);
}
