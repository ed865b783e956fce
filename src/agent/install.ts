/*
 * Update checks and installs: asks the server for an update, downloads it (resuming, for as
 * long as the agent runs), runs the configured install_command, and reports progress, the new
 * version and the outcome (`update_outcome`: installed, or failed with a reason and the output's
 * tail). With a version_command (A/B systems) the outcome waits for the restart (`confirmInstall`).
 * With verify_keys, only a signed Mender artifact whose every check passed reaches install_command.
 */
import { readdirSync, rmSync, unlinkSync } from "node:fs";
import { join } from "node:path";
import { ArtifactCheck } from "../artifact/mender/reader.ts";
import type { VerifyKey } from "../artifact/mender/keys.ts";
import type { DeviceClient, Metadata } from "../update/client/device-client.ts";
import type { HttpAnswer, HttpClient } from "../update/client/http.ts";
import type { Logger } from "../util/log.ts";
import type { Clock } from "../util/time.ts";
import type { AgentConfig } from "./config.ts";
import { runCommand } from "./commands.ts";
import { outputTail, type UpdateOutcome } from "./outcomes.ts";
import type { DeviceMessage } from "../protocol/labgate/device.ts";
import { applyDelta } from "./delta.ts";
import { reason } from "./registration.ts";
import { ChecksumError, download, SignatureError } from "./updater.ts";

/** Download attempts of one offer before it is reported failed (and tried again at the next offer). */
const MAX_ATTEMPTS = 20;
/** Downloads that did not match their SHA-256 before the offer is reported failed. */
const MAX_CHECKSUM_ERRORS = 3;
/** Tries of one update check (at least one more than there are servers): a server that restarts or fails meanwhile costs a retry, not the check. */
const CHECK_ATTEMPTS = 3;

/** An A/B install waiting for the restart that shows whether it took (kept in the agent's state file). */
export interface PendingInstall {
  version: string;
  from_version: string;
  /** The offer's deployment and attempt, for the outcome after the restart. */
  deployment?: number;
  attempt?: number;
}

/** The deployment and attempt an offer names (its outcomes echo them: docs/device-protocol.md). */
export function offerTag(answer: { deployment?: unknown; attempt?: unknown }): { deployment?: number; attempt?: number } {
  const { deployment, attempt } = answer;
  return Number.isSafeInteger(deployment) && Number.isSafeInteger(attempt) ? { deployment: deployment as number, attempt: attempt as number } : {};
}

export interface InstallContext {
  config: AgentConfig;
  log: Logger;
  client: DeviceClient;
  http: HttpClient;
  signal: AbortSignal;
  stopped(): boolean;
  metadata(): Metadata;
  send(message: DeviceMessage): boolean;
  /** Sends now, or on the next connection. */
  deliver(message: DeviceMessage): void;
  /** Waits `seconds` of backoff, or less once the agent stops. */
  sleep(seconds: number): Promise<void>;
  nextDelay(previous: number): number;
  /** `version` is installed: remember it (state file, metadata). */
  installed(version: string): void;
  /** The version running now. */
  softwareVersion(): string;
  /** Reports an outcome (kept until the server acknowledges it). */
  report(outcome: UpdateOutcome): void;
  /** An A/B install ran: the restart decides (`confirmInstall`). */
  awaitRestart(pending: PendingInstall): void;
  /** Aborted when the server says the deployment was aborted (`update_abort`): install nothing. */
  aborted: AbortSignal;
  /** Offers (sha256, deployment, attempt) already reported failed without a try (no install_command): not again. */
  refusedOffers: Set<string>;
  /** verify_keys, read: none means updates are installed unchecked. */
  verifyKeys: readonly VerifyKey[];
}

/** Why an offer fails on a device that cannot install anything. */
export const NO_INSTALLER = "no install_command is configured on the device";

/** The update check's request, tried again after a connection failure or a 5xx answer (each moves to the next server, if any). */
async function askForUpdate(agent: InstallContext): Promise<HttpAnswer> {
  const attempts = Math.max(CHECK_ATTEMPTS, agent.config.servers.length + 1);
  let delay = agent.config.retry_min_delay;
  for (let attempt = 1; ; attempt++) {
    let why: string;
    try {
      const response = await agent.client.request("/api/v1/update/check", { method: "POST", json: agent.metadata(), signal: agent.signal });
      if (response.status < 500 || attempt >= attempts) return response;
      response.discard();
      why = `answered ${response.status}`;
    } catch (error) {
      if (attempt >= attempts || agent.stopped()) throw error;
      why = reason(error);
    }
    agent.log.info(`agent: update check attempt ${attempt} failed (${why}); trying again`);
    await agent.sleep(delay);
    delay = agent.nextDelay(delay);
  }
}

/** One update check; installs what the server offers. Throws what went wrong (the caller logs it). */
export async function checkAndInstall(agent: InstallContext): Promise<void> {
  const { config, log } = agent;
  const response = await askForUpdate(agent);
  if (response.status === 204) return response.discard();
  const answer = (await response.json().catch(() => ({}))) as Record<string, unknown>;
  if (response.status !== 200) throw new Error(`update check answered ${response.status}: ${JSON.stringify(answer.error ?? "")}`);
  const { uri, sha256 } = answer;
  if (typeof uri !== "string" || typeof sha256 !== "string") throw new Error("update check answer lacks uri or sha256");
  const offered = typeof answer.version === "string" ? answer.version : undefined;
  const tag = offerTag(answer);
  if (config.install_command.length === 0) {
    // Nothing could install it: downloading would only cost bandwidth. The offer fails at once,
    // said once per offer (a deployment would otherwise wait for this device until its timeout).
    const version = offered ?? `package ${String(answer.id)}`;
    // An offer is its package in its deployment's attempt: a retry is a new offer, answered too.
    const key = `${sha256}:${tag.deployment ?? ""}:${tag.attempt ?? ""}`;
    if (agent.refusedOffers.has(key)) return;
    agent.refusedOffers.add(key);
    agent.report({ state: "failed", version, from_version: agent.softwareVersion(), reason: NO_INSTALLER, ...tag });
    return log.warn(`agent: update ${version} offered, but ${NO_INSTALLER}: not installed`);
  }
  log.info(`agent: update ${offered ?? `package ${String(answer.id)}`} offered`);

  // Leftovers of other updates (an offer that changed meanwhile) go; this one's partial stays.
  const downloads = join(config.data_dir, "downloads");
  for (const name of readdirSync(downloads)) if (!name.startsWith(sha256.toLowerCase())) rmSync(join(downloads, name), { force: true, recursive: true });

  const version0 = offered ?? `package ${String(answer.id)}`;
  const from = agent.softwareVersion();
  const failed = (reason: string, output?: Buffer): Error => {
    agent.report({ state: "failed", version: version0, from_version: from, reason, ...(output ? { output: outputTail(output) } : {}), ...tag });
    return new Error(reason);
  };
  const signal = AbortSignal.any([agent.signal, agent.aborted]);
  const abortedByServer = () => {
    if (!agent.aborted.aborted || agent.stopped()) return false;
    agent.report({ state: "aborted", version: version0, from_version: from, reason: "the deployment was aborted", ...tag });
    log.info(`agent: update ${version0} aborted by the server: not installed`);
    return true;
  };

  // Download, resuming after interruptions, MAX_ATTEMPTS times at most.
  let path: string | undefined;
  let delay = config.retry_min_delay;
  let lastReported = -1;
  let checksumErrors = 0;
  const progress = (percent: number) => {
    // At most one message per 5 % step.
    if (percent - lastReported < 5 && percent !== 0) return;
    lastReported = percent;
    agent.send({ method: "update_progress", progress: percent });
  };
  const keys = agent.verifyKeys;
  const check = keys.length > 0 ? () => new ArtifactCheck({ keys }) : undefined;
  // A delta from the version running here, when the gateway made one: a failure falls back to the full package now.
  let deltaNote: string | undefined;
  const delta = answer.delta as { uri?: unknown; sha256?: unknown; size?: unknown } | undefined;
  const base = config.delta_base;
  if (delta && typeof delta.uri === "string" && typeof delta.sha256 === "string" && base.length > 0) {
    try {
      path = await applyDelta({ delta: { uri: delta.uri, sha256: delta.sha256 }, sha256, base, dir: downloads, cwd: config.data_dir, http: agent.http, signal, check });
      deltaNote = `installed from a delta of ${String(delta.size ?? "?")} bytes`;
      log.info(`agent: update ${version0} rebuilt from a delta`);
    } catch (error) {
      if (agent.stopped() || abortedByServer()) return;
      deltaNote = `the delta failed (${(error as Error).message}); installed from the full package`;
      log.warn(`agent: update ${version0}: ${deltaNote}`);
    }
  }
  for (let attempt = 1; !path; attempt++) {
    if (agent.stopped() || abortedByServer()) return;
    try {
      path = await download({ url: uri, sha256, dir: downloads, onProgress: progress, signal, http: agent.http, check });
    } catch (error) {
      if (agent.stopped() || abortedByServer()) return;
      const message = (error as Error).message;
      // The bytes are the offered ones: another download would be refused the same way.
      if (error instanceof SignatureError) throw failed(message);
      log.warn(`agent: download attempt ${attempt}: ${message}`);
      if (error instanceof ChecksumError && ++checksumErrors >= MAX_CHECKSUM_ERRORS) throw failed(`checksum mismatch: ${checksumErrors} downloads did not match the offered sha256`);
      if (attempt >= MAX_ATTEMPTS) throw failed(`download failed after ${attempt} attempts: ${message}`);
      await agent.sleep(delay);
      delay = agent.nextDelay(delay);
    }
  }
  if (abortedByServer()) return;

  agent.report({ state: "installing", version: version0, from_version: from, ...tag });
  const argv = config.install_command.map((arg) => arg.replaceAll("{file}", path));
  let version = offered;
  const result = await runCommand(argv, { cwd: config.data_dir, signal: agent.signal });
  if (agent.stopped()) return;
  if (result.code !== 0) throw failed(`install command exited with ${result.code}`, result.output);
  // An install command may name the version it installed (`version=X` on a line of its own).
  const named = /^version=(\S+)\s*$/m.exec(result.output.toString());
  version = named?.[1] ?? version;
  try {
    unlinkSync(path);
  } catch {
    // Already gone.
  }
  agent.deliver({ method: "update_progress", progress: 100 });
  if (!version) {
    agent.report({ state: "installed", version: version0, from_version: from, reason: "installed; the new version is unknown (the server did not name it)", ...tag });
    return log.warn("agent: installed, but the new version is unknown (the server did not name it)");
  }
  if (config.version_command.length > 0) {
    // A/B: the new slot runs after a restart; the restart tells (confirmInstall).
    agent.awaitRestart({ version, from_version: from, ...tag });
    return log.info(`agent: installed ${version} into the other slot; it is confirmed after the restart`);
  }
  agent.installed(version);
  agent.deliver({ method: "update_version", version });
  // Another version than offered: the server fails the attempt, and the output says why.
  const mismatch = offered !== undefined && version !== offered ? { output: outputTail(result.output) } : {};
  agent.report({ state: "installed", version, from_version: from, ...mismatch, ...(deltaNote ? { reason: deltaNote } : {}), ...tag });
  log.info(`agent: installed ${version}`);
}

/**
 * After a restart with an A/B install pending: the version_command says what runs. The installed
 * version: commit_command (if any) makes it stay, and it is reported installed. Anything else:
 * the device rolled back, reported `failed: rolled back`. Returns the running version to keep.
 */
export async function confirmInstall(config: AgentConfig, pending: PendingInstall, report: (outcome: UpdateOutcome) => void, log: Logger, clock: Clock): Promise<string | undefined> {
  const probe = await runCommand(config.version_command, { cwd: config.data_dir, timeout: 60, clock });
  const running = probe.code === 0 ? probe.output.toString().trim().split("\n").pop()?.trim() ?? "" : "";
  if (running !== pending.version) {
    const reason = probe.code === 0 ? `rolled back: running ${running || "(nothing)"} instead of ${pending.version}` : `rolled back: version_command exited with ${probe.code}`;
    report({ state: "failed", version: pending.version, from_version: pending.from_version, reason, output: outputTail(probe.output), ...offerTag(pending) });
    log.warn(`agent: update ${pending.version} ${reason}`);
    return running || undefined;
  }
  if (config.commit_command.length > 0) {
    const commit = await runCommand(config.commit_command, { cwd: config.data_dir, timeout: 300, clock });
    if (commit.code !== 0) {
      const reason = `commit command exited with ${commit.code}`;
      report({ state: "failed", version: pending.version, from_version: pending.from_version, reason, output: outputTail(commit.output), ...offerTag(pending) });
      log.warn(`agent: update ${pending.version}: ${reason}`);
      return undefined;
    }
  }
  report({ state: "installed", version: pending.version, from_version: pending.from_version, ...offerTag(pending) });
  log.info(`agent: ${pending.version} confirmed after the restart`);
  return running;
}
