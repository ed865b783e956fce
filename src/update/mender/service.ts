/*
 * Mender's device API on labgate's model: a Mender client authenticates through the registration
 * domain (a pending registration until approved), its inventory is the device's metadata, its
 * next-deployment call is labgate's update check and its status reports are deployment outcomes.
 * Nothing here decides what a device gets: the resolver and the deployments do.
 */
import { createHash } from "node:crypto";
import type { AppContext } from "../../app/context.ts";
import type { DeviceIdentity } from "../../auth/tokens.ts";
import { LabgateError } from "../../util/errors.ts";
import { dateOf, isoTime } from "../../util/time.ts";
import { IdentityData, type DeploymentInstructions, type DeploymentLog, type DeploymentStatus, type InventoryAttributes } from "../../protocol/mender/device.ts";
import { firstMessage } from "../../util/shapes.ts";
import { admitDevice, type DeviceAuthResult } from "../registration/authorize.ts";
import { decodeSignature, parseDeviceKey, verifyDeviceSignature } from "../registration/keys.ts";
import { metaKeys, type Metadata } from "../devices/metadata.ts";
import { getDevice, getDeviceByMac, replaceDeviceMetadata } from "../devices/devices.ts";
import { getPackage } from "../packages/packages.ts";
import { tail, type DeploymentService } from "../deployments/service.ts";
import { latestMembership } from "../deployments/store.ts";
import type { Outcome } from "../deployments/schema.ts";
import type { UpdateProgress } from "../progress/progress.ts";
import type { UpdateCatalog } from "../updatecheck/catalog.ts";
import { updateCheck } from "../updatecheck/check.ts";

const MAC = /^[0-9A-Fa-f]{2}([:-][0-9A-Fa-f]{2}){5}$/;
/** How long a failure report waits for the deployment log the client sends right after it. */
export const LOG_WAIT_MS = 5000;

/** The MAC a Mender identity names (`mac`), else a stable id made from the whole identity. */
export function macOfIdentity(identity: IdentityData): string {
  const mac = identity.mac;
  if (typeof mac === "string" && MAC.test(mac)) return mac.toLowerCase().replaceAll("-", ":");
  const canonical = JSON.stringify(Object.keys(identity).sort().map((k) => [k, identity[k]]));
  return `mender-${createHash("sha256").update(canonical).digest("hex").slice(0, 16)}`;
}

/** The id a Mender client names an offer by: deployment, attempt and package (0s when the group's policy offered it). */
const offerId = (deployment: number | undefined, attempt: number | undefined, pkg: number) => `${deployment ?? 0}-${attempt ?? 0}-${pkg}`;
function parseOfferId(id: string): { deployment?: number; attempt?: number; pkg: number } | undefined {
  const match = /^(\d{1,15})-(\d{1,15})-(\d{1,15})$/.exec(id);
  if (!match) return undefined;
  const [deployment, attempt, pkg] = match.slice(1).map(Number);
  return deployment > 0 ? { deployment, attempt, pkg } : { pkg };
}

const attributeText = (value: InventoryAttributes[number]["value"]): string | string[] => (Array.isArray(value) ? value.map(String) : String(value));

export class MenderDevices {
  /** Failures waiting for their log, by device and offer. */
  private readonly failures = new Map<string, { timer: NodeJS.Timeout; report: (output: string | null) => Promise<void> }>();
  private readonly ctx: AppContext;
  private readonly deployments: DeploymentService;
  private readonly progress: UpdateProgress;
  private readonly catalog: UpdateCatalog;

  constructor(ctx: AppContext, deployments: DeploymentService, progress: UpdateProgress, catalog: UpdateCatalog) {
    this.ctx = ctx;
    this.deployments = deployments;
    this.progress = progress;
    this.catalog = catalog;
    ctx.onClosing.push(() => {
      for (const { timer } of this.failures.values()) clearTimeout(timer);
      this.failures.clear();
    });
  }

  /**
   * An auth request: the body's shape, the key, `X-MEN-Signature` over the raw bytes, then the
   * registration domain's one step (a token, or a pending registration).
   */
  async authorize(raw: Buffer, body: { id_data: string; pubkey: string }, signature: string | undefined, client: string): Promise<DeviceAuthResult> {
    let identity: IdentityData;
    try {
      const parsed = IdentityData.safeParse(JSON.parse(body.id_data));
      if (!parsed.success) throw new LabgateError("invalid", firstMessage(parsed.error));
      identity = parsed.data;
    } catch (error) {
      if (error instanceof LabgateError) throw error;
      throw new LabgateError("invalid", 'field "id_data" is not JSON');
    }
    if (Object.keys(identity).length === 0) throw new LabgateError("invalid", 'field "id_data" names no identity attribute');
    const key = parseDeviceKey(body.pubkey, { ecdsa: true });
    if (typeof key === "string") throw new LabgateError("invalid", key);
    if (signature === undefined || signature.trim() === "") throw new LabgateError("unauthenticated", "missing X-MEN-Signature header");
    const bytes = decodeSignature(signature);
    if (!bytes || !verifyDeviceSignature(key, raw, bytes)) throw new LabgateError("unauthenticated", "signature verification failed");

    const keys = metaKeys(this.ctx.config.prefix);
    const mac = macOfIdentity(identity);
    const stored = await getDeviceByMac(this.ctx.store.query, mac);
    const known: Metadata = stored ? (JSON.parse(stored.metadata) as Metadata) : { [keys.version]: "unknown", [keys.devtype]: "unknown" };
    const metadata: Metadata = { ...known, [keys.mac]: mac, [keys.protocol]: "mender", [keys.identity]: body.id_data };
    return admitDevice(this.ctx, { mac, key, publicKey: body.pubkey, metadata }, dateOf(this.ctx.clock), client);
  }

  /** Inventory: `merge` (PATCH) keeps attributes not named; PUT replaces them all. Labgate's own keys stay. */
  async inventory(device: DeviceIdentity, attributes: InventoryAttributes, merge: boolean): Promise<void> {
    const { prefix } = this.ctx.config;
    const keys = metaKeys(prefix);
    const current = await this.metadataOf(device);
    const own = Object.fromEntries(Object.entries(current).filter(([name]) => name.startsWith(`${prefix}.`)));
    const next: Metadata = merge ? { ...current } : own;
    for (const { name, value } of attributes) {
      if (name.startsWith(`${prefix}.`)) continue; // labgate's keys are not the device's to set
      next[name] = attributeText(value);
    }
    const version = next.artifact_name;
    const devtype = next.device_type;
    if (typeof version === "string" && version !== "") next[keys.version] = version;
    if (typeof devtype === "string" && devtype !== "") next[keys.devtype] = devtype;
    await replaceDeviceMetadata(this.ctx.store.query, device.deviceId, next);
  }

  /** The next-deployment call: labgate's update check for what the device says it runs. */
  async next(device: DeviceIdentity, provides: { artifact_name: string; device_type: string }, base: string): Promise<DeploymentInstructions | undefined> {
    const keys = metaKeys(this.ctx.config.prefix);
    const metadata: Metadata = { ...(await this.metadataOf(device)), [keys.version]: provides.artifact_name, [keys.devtype]: provides.device_type };
    await replaceDeviceMetadata(this.ctx.store.query, device.deviceId, metadata);
    const now = dateOf(this.ctx.clock);
    const offer = await updateCheck(this.ctx, this.progress, this.catalog, this.deployments, device, metadata, base, now);
    if (!offer) return undefined;
    return {
      id: offerId(offer.deployment, offer.attempt, offer.id),
      artifact: {
        id: String(offer.id),
        artifact_name: offer.version,
        source: { uri: offer.uri, expire: isoTime(now.getTime() + this.ctx.config.update_server.download_link_ttl * 1000) },
        device_types_compatible: [provides.device_type],
      },
    };
  }

  /** A status report of an offer: the deployment's device state and outcome, as labgate's agent reports them; 409 once its deployment was aborted. */
  async status(device: DeviceIdentity, id: string, status: DeploymentStatus): Promise<void> {
    const offer = parseOfferId(id);
    const pkg = offer && (await getPackage(this.ctx.store.query, offer.pkg));
    if (!offer || !pkg) throw new LabgateError("not_found", `no deployment ${id} for this device`);
    const version = String((JSON.parse(pkg.metadata) as Metadata)[metaKeys(this.ctx.config.prefix).version] ?? pkg.version);
    // Mender's client stops a deployment whose status report gets 409: that is labgate's abort.
    if (offer.deployment !== undefined && (await latestMembership(this.ctx.store.query, device.deviceId, offer.deployment))?.state === "aborted") {
      throw new LabgateError("conflict", `deployment ${offer.deployment} was aborted`);
    }
    const conn = { deviceId: device.deviceId, mac: device.mac };
    const outcome = (state: Outcome["state"], extra: Partial<Outcome> = {}): Outcome => ({
      reportId: `mender:${id}:${status}`,
      deployment: offer.deployment,
      attempt: offer.attempt,
      state,
      version,
      fromVersion: null,
      reason: null,
      output: null,
      ...extra,
    });
    switch (status) {
      case "downloading":
        return this.deployments.progress(device.deviceId, device.mac, 0);
      case "pause_before_installing":
        return;
      case "installing":
      case "pause_before_rebooting":
      case "rebooting":
      case "pause_before_committing":
        return this.deployments.outcome(conn, outcome("installing", { reportId: undefined }));
      case "success":
      case "already-installed":
        return this.deployments.outcome(conn, outcome("installed"));
      case "failure": {
        // The client sends the log of a failure right after its status: the outcome waits for it.
        const key = `${device.deviceId}:${id}`;
        if (this.failures.has(key)) return;
        const report = async (output: string | null) => {
          clearTimeout(this.failures.get(key)?.timer);
          this.failures.delete(key);
          await this.deployments.outcome(conn, outcome("failed", { reason: "the Mender client reported failure", output }));
        };
        const timer = setTimeout(() => void report(null).catch((error) => this.ctx.log.warn(`mender: failure of ${id} not recorded: ${(error as Error).message}`)), LOG_WAIT_MS);
        timer.unref();
        this.failures.set(key, { timer, report });
        return;
      }
    }
  }

  /** The deployment log of a failure: its last 4 KiB are the failure's output. */
  async log(device: DeviceIdentity, id: string, log: DeploymentLog): Promise<void> {
    if (!parseOfferId(id)) throw new LabgateError("not_found", `no deployment ${id} for this device`);
    const key = `${device.deviceId}:${id}`;
    const waiting = this.failures.get(key);
    if (!waiting) return;
    const text = log.messages.map((m) => [m.timestamp, m.level, m.message].filter((part) => part !== undefined && part !== "").join(" ")).join("\n");
    await waiting.report(tail(text));
  }

  private async metadataOf(device: DeviceIdentity): Promise<Metadata> {
    const row = await getDevice(this.ctx.store.query, device.deviceId);
    if (!row) throw new LabgateError("unauthenticated", "device unauthorized");
    return JSON.parse(row.metadata) as Metadata;
  }
}
