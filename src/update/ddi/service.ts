/*
 * hawkBit's Direct Device Integration on labgate's model: a target is a device an administrator
 * created, authenticated by its target token; a poll is labgate's update check, whose offer
 * becomes an action that stays open until the device closes it; feedback becomes the
 * deployment's device state and outcome, as labgate's agent reports them; an open action whose
 * deployment was aborted (or moved on) is offered as a cancel. Nothing here decides what a device
 * gets: the resolver and the deployments do.
 */
import { createHash, randomBytes, timingSafeEqual } from "node:crypto";
import { createReadStream } from "node:fs";
import type { AppContext } from "../../app/context.ts";
import { recordAudit, type Actor } from "../../audit/audit.ts";
import type { DeviceIdentity } from "../../auth/tokens.ts";
import type { ActionFeedback, CancelAction, ConfigData, ControllerBase, DeploymentBase } from "../../protocol/hawkbit/ddi.ts";
import type { PackageStorage } from "../../storage/packages.ts";
import { objectLink } from "../../storage/links.ts";
import { LabgateError } from "../../util/errors.ts";
import { dateOf, isoTime } from "../../util/time.ts";
import { getDevice, getDeviceByMac, insertDevice, replaceDeviceMetadata } from "../devices/devices.ts";
import { metaKeys, type Metadata } from "../devices/metadata.ts";
import { tail, type DeploymentService } from "../deployments/service.ts";
import { getDeployment, latestMembership } from "../deployments/store.ts";
import type { Outcome } from "../deployments/schema.ts";
import { getPackage } from "../packages/packages.ts";
import type { UpdateProgress } from "../progress/progress.ts";
import type { UpdateCatalog } from "../updatecheck/catalog.ts";
import { updateCheck } from "../updatecheck/check.ts";
import * as store from "./store.ts";
import type { UpdateDomain } from "../domain.ts";

/** The protocol a DDI target's device record names (`<prefix>.device.protocol`). */
export const DDI_PROTOCOL = "ddi";
/** Closed actions kept per target (its recent history on the target's page). */
const ACTIONS_KEPT = 20;

export interface Target {
  controllerId: string;
  deviceId: number;
  mac: string;
}

export interface TargetCredentials {
  controller_id: string;
  device_id: number;
  target_token: string;
}

export interface TargetView {
  controller_id: string;
  device_id: number;
  token: "set" | "revoked";
  created: string;
  token_set: string;
  actions: Array<{ id: number; deployment: number | null; version: string; state: string; result: string | null; details: string | null; updated: string }>;
}

const digest = (token: string): string => createHash("sha256").update(token).digest("hex");
const newToken = (): string => randomBytes(24).toString("base64url");
const hhmmss = (seconds: number): string => [seconds / 3600, (seconds % 3600) / 60, seconds % 60].map((n) => String(Math.floor(n)).padStart(2, "0")).join(":");
/** A file name suricatta installs (it skips artifacts not named `*.swu`); RAUC's updater takes any. */
const artifactName = (version: string): string => `${version.replace(/[^A-Za-z0-9._-]/g, "_")}.swu`;

/** The SHA-1 and MD5 of a stored file, read once. */
function fileHashes(path: string): Promise<{ sha1: string; md5: string }> {
  const sha1 = createHash("sha1");
  const md5 = createHash("md5");
  return new Promise((resolve, reject) => {
    createReadStream(path)
      .on("data", (chunk) => {
        sha1.update(chunk);
        md5.update(chunk);
      })
      .on("error", reject)
      .on("end", () => resolve({ sha1: sha1.digest("hex"), md5: md5.digest("hex") }));
  });
}

export class DdiTargets {
  private readonly ctx: AppContext;
  private readonly deployments: DeploymentService;
  private readonly progress: UpdateProgress;
  private readonly catalog: UpdateCatalog;
  private readonly storage: PackageStorage;
  private readonly deviceGate: UpdateDomain["deviceGate"];

  constructor(ctx: AppContext, update: Pick<UpdateDomain, "deployments" | "progress" | "catalog" | "storage" | "deviceGate">) {
    this.ctx = ctx;
    this.deployments = update.deployments;
    this.progress = update.progress;
    this.catalog = update.catalog;
    this.storage = update.storage;
    this.deviceGate = update.deviceGate;
  }

  // --- targets, as an administrator manages them ---------------------------------------------------

  /** A new target: its device (protocol `ddi`, its MAC field the controller id) and a token, shown this once. */
  async create(input: { controller_id: string; name: string; device_type: string }, actor: Actor): Promise<TargetCredentials> {
    const { controller_id: controllerId } = input;
    const keys = metaKeys(this.ctx.config.prefix);
    const at = isoTime(dateOf(this.ctx.clock));
    const metadata: Metadata = { [keys.version]: "unknown", [keys.devtype]: input.device_type, [keys.mac]: controllerId, [keys.protocol]: DDI_PROTOCOL, [keys.name]: input.name };
    const token = newToken();
    // The device and its target are one change: a target is never without its device.
    const deviceId = await this.ctx.store.transact(async (tx) => {
      if (await getDeviceByMac(tx, controllerId)) throw new LabgateError("conflict", `a device with MAC address (controller id) ${controllerId} exists already`);
      const id = await insertDevice(tx, controllerId, { created: at, name: input.name, publicKey: "", fingerprint: "", metadataText: JSON.stringify(metadata), at, tags: [] });
      await store.insertTarget(tx, { controller_id: controllerId, device_id: id, token_sha256: digest(token), created: at, token_set: at });
      await recordAudit(tx, actor, "ddi.target_create", `device:${id}`, { controller_id: controllerId });
      return id;
    });
    return { controller_id: controllerId, device_id: deviceId, target_token: token };
  }

  /** A new token for a target; the one it had stops working at once. */
  async replaceToken(controllerId: string, actor: Actor): Promise<TargetCredentials> {
    const target = await this.targetRow(controllerId);
    const token = newToken();
    await this.setToken(target, digest(token), actor, "ddi.token_replace");
    return { controller_id: controllerId, device_id: target.device_id, target_token: token };
  }

  /** No token: the target is refused (401) until it gets a new one. */
  async revokeToken(controllerId: string, actor: Actor): Promise<void> {
    await this.setToken(await this.targetRow(controllerId), null, actor, "ddi.token_revoke");
  }

  async view(controllerId: string): Promise<TargetView> {
    const target = await this.targetRow(controllerId);
    const actions = await store.recentActions(this.ctx.store.query, target.device_id, ACTIONS_KEPT);
    return {
      controller_id: target.controller_id,
      device_id: target.device_id,
      token: target.token_sha256 === null ? "revoked" : "set",
      created: target.created,
      token_set: target.token_set,
      actions: actions.map((a) => ({ id: a.id, deployment: a.deployment_id, version: a.version, state: a.state, result: a.result, details: a.details, updated: a.updated })),
    };
  }

  private async targetRow(controllerId: string): Promise<store.TargetRow> {
    const target = await store.getTarget(this.ctx.store.query, controllerId);
    if (!target) throw new LabgateError("not_found", `no DDI target ${controllerId}`);
    return target;
  }

  private async setToken(target: store.TargetRow, tokenSha256: string | null, actor: Actor, action: string): Promise<void> {
    const at = isoTime(dateOf(this.ctx.clock));
    await this.ctx.store.transact(async (tx) => {
      if (!(await store.setTargetToken(tx, target.controller_id, tokenSha256, at))) throw new LabgateError("not_found", `no DDI target ${target.controller_id}`);
      await recordAudit(tx, actor, action, `device:${target.device_id}`, { controller_id: target.controller_id });
    });
  }

  // --- what a target asks ------------------------------------------------------------------------------

  /**
   * The target a request speaks for: the configured tenant, a known controller id and its token
   * (`Authorization: TargetToken <token>`); anything else is 401 and changes nothing.
   */
  async authenticate(tenant: string, controllerId: string, authorization: string | undefined): Promise<Target> {
    const refused = new LabgateError("unauthenticated", "the target token is missing or wrong for this controller id");
    const [scheme, token, ...rest] = (authorization ?? "").trim().split(/\s+/);
    if (tenant !== this.ctx.config.update_server.ddi.tenant || scheme?.toLowerCase() !== "targettoken" || !token || rest.length > 0 || token.length > 256) throw refused;
    const target = await store.getTarget(this.ctx.store.query, controllerId);
    if (!target?.token_sha256 || !timingSafeEqual(Buffer.from(target.token_sha256), Buffer.from(digest(token)))) throw refused;
    const authenticated = { controllerId, deviceId: target.device_id, mac: controllerId };
    // Through the gate every device token passes: its device still exists, and its last_access is its last poll.
    if (!(await this.deviceGate(this.identity(authenticated)))) throw refused;
    return authenticated;
  }

  /** The poll: the open action (to install or to cancel), else labgate's update check, which may open one. */
  async poll(target: Target, base: string): Promise<ControllerBase> {
    const root = `${base}/${this.ctx.config.update_server.ddi.tenant}/controller/v1/${encodeURIComponent(target.controllerId)}`;
    const links: ControllerBase["_links"] = {};
    const metadata = await this.metadataOf(target);
    if (metadata[metaKeys(this.ctx.config.prefix).identity] === undefined) links.configData = { href: `${root}/configData` };
    let action = await store.openAction(this.ctx.store.query, target.deviceId);
    if (!action) action = await this.offer(target, metadata, base);
    if (action && (await this.cancelled(target, action))) links.cancelAction = { href: `${root}/cancelAction/${action.id}` };
    else if (action) links.deploymentBase = { href: `${root}/deploymentBase/${action.id}?c=${action.attempt ?? 0}` };
    return { config: { polling: { sleep: hhmmss(this.ctx.config.update_server.ddi.polling_interval) } }, _links: links };
  }

  /** What labgate's update check offers now, as a new open action. */
  private async offer(target: Target, metadata: Metadata, base: string): Promise<store.ActionRow | undefined> {
    const now = dateOf(this.ctx.clock);
    const offer = await updateCheck(this.ctx, this.progress, this.catalog, this.deployments, this.identity(target), metadata, base, now);
    if (!offer) return undefined;
    const at = isoTime(now);
    const row = { device_id: target.deviceId, deployment_id: offer.deployment ?? null, attempt: offer.attempt ?? null, package_id: offer.id, version: offer.version, state: "open", result: null, details: null, created: at, updated: at };
    const id = await this.ctx.store.transact(async (tx) => {
      // Two polls at once open one action.
      const open = await store.openAction(tx, target.deviceId);
      return open?.id ?? (await store.insertAction(tx, row));
    });
    return store.getAction(this.ctx.store.query, target.deviceId, id);
  }

  /**
   * An open action is cancelled once its deployment was aborted (a device installing then is
   * told too: an action is open until the device says otherwise), or the device is in another
   * deployment now.
   */
  private async cancelled(target: Target, action: store.ActionRow): Promise<boolean> {
    if (action.deployment_id === null) return false;
    const latest = await latestMembership(this.ctx.store.query, target.deviceId);
    if (latest && latest.deployment_id !== action.deployment_id) return true;
    const deployment = await getDeployment(this.ctx.store.query, action.deployment_id);
    return !deployment || deployment.status === "aborted" || latest?.state === "aborted";
  }

  /** `deploymentBase/{actionId}`: the action's package as the one artifact of one chunk. */
  async deploymentBase(target: Target, actionId: number, base: string): Promise<DeploymentBase> {
    const action = await this.openActionOf(target, actionId);
    const pkg = await getPackage(this.ctx.store.query, action.package_id);
    if (!pkg) throw new LabgateError("not_found", `the package of action ${actionId} was deleted`);
    const hashes = await this.hashes(pkg.id, pkg.storage_name);
    const uri = await objectLink(this.ctx, base, pkg.storage_name);
    const artifact = { filename: artifactName(action.version), hashes: { ...hashes, sha256: pkg.sha256 }, size: pkg.size, _links: { download: { href: uri }, "download-http": { href: uri } } };
    return {
      id: String(action.id),
      deployment: { download: "forced", update: "forced", chunks: [{ part: "os", version: action.version, name: pkg.devtype || action.version, artifacts: [artifact] }] },
    };
  }

  /** `cancelAction/{actionId}`: the cancel of an open action. */
  async cancelAction(target: Target, actionId: number): Promise<CancelAction> {
    const action = await this.openActionOf(target, actionId);
    if (!(await this.cancelled(target, action))) throw new LabgateError("not_found", `action ${actionId} is not cancelled`);
    return { id: String(action.id), cancelAction: { stopId: String(action.id) } };
  }

  /**
   * Feedback on an action being installed: `proceeding` is the device downloading, or installing
   * once every chunk is done (`cnt` = `of`); `closed` ends the action with its result, an outcome
   * of its deployment; `canceled` or `rejected` by the device is a failure.
   */
  async feedback(target: Target, actionId: number, feedback: ActionFeedback): Promise<void> {
    const action = await this.openActionOf(target, actionId);
    const { execution, result, details } = feedback.status;
    const text = details && details.some((d) => d.trim() !== "") ? tail(details.join("\n")) : null;
    const conn = { deviceId: target.deviceId, mac: target.mac };
    switch (execution) {
      case "proceeding": {
        const progress = result?.progress;
        if (progress && progress.of > 0 && progress.cnt >= progress.of) return this.deployments.outcome(conn, this.outcome(action, "installing"));
        return this.deployments.progress(target.deviceId, target.mac, progress && progress.of > 0 ? Math.floor((progress.cnt * 100) / progress.of) : 0);
      }
      case "download":
        return this.deployments.progress(target.deviceId, target.mac, 0);
      case "scheduled":
      case "resumed":
      case "downloaded":
        return;
      case "closed":
        if (result?.finished === "success") return this.close(target, action, "success", text);
        if (result?.finished === "failure") return this.close(target, action, "failure", text, "the device reported failure");
        throw new LabgateError("invalid", 'a "closed" feedback needs status.result.finished "success" or "failure"');
      case "canceled":
      case "rejected":
        return this.close(target, action, "failure", text, `the device ${execution} the action`);
    }
  }

  private async close(target: Target, action: store.ActionRow, result: "success" | "failure", details: string | null, reason?: string): Promise<void> {
    const updated = isoTime(dateOf(this.ctx.clock));
    if (!(await store.updateAction(this.ctx.store.query, action.id, { state: "closed", result, details, updated }))) return;
    if (result === "success") {
      // What a DDI device runs is what it last installed: the next update check starts from it.
      const keys = metaKeys(this.ctx.config.prefix);
      await replaceDeviceMetadata(this.ctx.store.query, target.deviceId, { ...(await this.metadataOf(target)), [keys.version]: action.version });
    }
    const conn = { deviceId: target.deviceId, mac: target.mac };
    await this.deployments.outcome(conn, this.outcome(action, result === "success" ? "installed" : "failed", { reason: reason ?? null, output: details }));
    await store.trimActions(this.ctx.store.query, target.deviceId, ACTIONS_KEPT);
  }

  /** Feedback on a cancel: `closed` or `canceled` acknowledges it (the action ends, aborted); `rejected` keeps the action open. */
  async cancelFeedback(target: Target, actionId: number, feedback: ActionFeedback): Promise<void> {
    const action = await this.openActionOf(target, actionId);
    const { execution, details } = feedback.status;
    if (execution !== "closed" && execution !== "canceled") return;
    const text = details && details.some((d) => d.trim() !== "") ? tail(details.join("\n")) : null;
    const updated = isoTime(dateOf(this.ctx.clock));
    if (!(await store.updateAction(this.ctx.store.query, action.id, { state: "canceled", result: null, details: text, updated }))) return;
    await this.deployments.outcome({ deviceId: target.deviceId, mac: target.mac }, this.outcome(action, "aborted", { reason: "cancelled on the device" }));
    await store.trimActions(this.ctx.store.query, target.deviceId, ACTIONS_KEPT);
  }

  /**
   * `configData`: the attributes join the device's metadata (`merge`, the default), replace the
   * ones it sent before (`replace`) or are removed (`remove`); `device_type` sets the device type.
   * Labgate's own keys are not the device's to set.
   */
  async configData(target: Target, config: ConfigData): Promise<void> {
    const { prefix } = this.ctx.config;
    const keys = metaKeys(prefix);
    const current = await this.metadataOf(target);
    const sent = typeof current[keys.identity] === "string" ? (JSON.parse(current[keys.identity] as string) as Record<string, string>) : {};
    const attributes: Record<string, string> = {};
    for (const [name, value] of Object.entries(config.data)) if (!name.startsWith(`${prefix}.`)) attributes[name] = value;
    const mode = config.mode ?? "merge";
    const kept = mode === "merge" ? sent : mode === "replace" ? {} : Object.fromEntries(Object.entries(sent).filter(([name]) => !(name in attributes)));
    const next: Record<string, string> = mode === "remove" ? kept : { ...kept, ...attributes };
    const metadata: Metadata = Object.fromEntries(Object.entries(current).filter(([name]) => name.startsWith(`${prefix}.`) || !(name in sent)));
    Object.assign(metadata, next);
    metadata[keys.identity] = JSON.stringify(next);
    if (typeof next.device_type === "string" && next.device_type !== "") metadata[keys.devtype] = next.device_type;
    await replaceDeviceMetadata(this.ctx.store.query, target.deviceId, metadata);
  }

  private async openActionOf(target: Target, actionId: number): Promise<store.ActionRow> {
    const action = Number.isSafeInteger(actionId) ? await store.getAction(this.ctx.store.query, target.deviceId, actionId) : undefined;
    if (!action) throw new LabgateError("not_found", `no action ${actionId} for this target`);
    if (action.state !== "open") throw new LabgateError("conflict", `action ${actionId} is ${action.state}`);
    return action;
  }

  private outcome(action: store.ActionRow, state: Outcome["state"], extra: Partial<Outcome> = {}): Outcome {
    return {
      reportId: state === "installing" ? undefined : `ddi:${action.id}:${state}`,
      deployment: action.deployment_id ?? undefined,
      attempt: action.attempt ?? undefined,
      state,
      version: action.version,
      fromVersion: null,
      reason: null,
      output: null,
      ...extra,
    };
  }

  /** A package's SHA-1 and MD5 (DDI names them beside the SHA-256), computed once. */
  private async hashes(packageId: number, storageName: string): Promise<{ sha1: string; md5: string }> {
    const known = await store.artifactHashes(this.ctx.store.query, packageId);
    if (known) return known;
    const file = await this.storage.localFile(storageName);
    if (!file) throw new LabgateError("not_found", "the package's file is missing from storage");
    const hashes = await fileHashes(file.path).finally(() => file.release());
    await store.storeArtifactHashes(this.ctx.store.query, packageId, hashes);
    return hashes;
  }

  private identity(target: Target): DeviceIdentity {
    return { kind: "device", mac: target.mac, deviceId: target.deviceId, key: "", expiresAt: 0 };
  }

  private async metadataOf(target: Target): Promise<Metadata> {
    const row = await getDevice(this.ctx.store.query, target.deviceId);
    if (!row) throw new LabgateError("unauthenticated", "the target's device was deleted");
    return JSON.parse(row.metadata) as Metadata;
  }
}
