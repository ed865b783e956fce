/*
 * File download from a device (docs/device-protocol.md, "File uploads"): probe, multipart plan,
 * signed expiring part URLs that accept only the parts of an open transfer (each once), assembly
 * with ETag checks, parts removed in every outcome, every wait bounded.
 */
import { randomUUID } from "node:crypto";
import type { Readable } from "node:stream";
import type { AppContext } from "../../app/context.ts";
import { recordAudit, type Actor } from "../../audit/audit.ts";
import { inputProblem } from "../../util/errors.ts";
import { LabgateError } from "../../util/errors.ts";
import type { ChannelHub, DeviceConnection } from "../channel/hub.ts";
import { deviceFailure, notConnected } from "../channel/errors.ts";
import { hasCapability, type DeviceMessageOf } from "../../protocol/labgate/device.ts";
import { getDevice } from "../devices/devices.ts";
import { PART_NAME, PartTooLargeError, signedFileUrl, type DeviceFileStore } from "./store.ts";
import type { FetchedFile, PeerFetch } from "./schema.ts";
import type { PeerNode } from "../../cluster/cluster.ts";

/** The longest wait for another node's fetch. */
const PEER_FETCH_MS = 86_400_000;

export const PART_LINK = "multipart_part";
const MiB = 1024 * 1024;
export const PART_SIZE = 10 * MiB;
const MIN_PART = 5 * MiB;
const MAX_PART = 5 * 1024 * MiB;
const MAX_PARTS = 10_000;
const MAX_FILE = 5 * 1024 * 1024 * MiB;

/** How a file of `size` bytes is cut; an empty file is one empty part. */
export function planParts(size: number): { partSize: number; count: number } {
  let partSize = Math.min(MAX_PART, Math.max(MIN_PART, PART_SIZE));
  let count = size <= partSize ? 1 : Math.ceil(size / partSize);
  if (count > MAX_PARTS) {
    partSize = Math.ceil(size / MAX_PARTS);
    count = Math.ceil(size / partSize);
  }
  return { partSize, count };
}

interface Transfer {
  id: string;
  parts: string[];
  partSize: number;
  /** Parts being written or written: each part name is accepted once. */
  taken: Set<string>;
  done: Set<string>;
}

type ProbeReply = DeviceMessageOf<"fs_file_probe_reply">;
type DownloadReply = DeviceMessageOf<"fs_file_download_reply">;

export class FileTransferService {
  private readonly ctx: Pick<AppContext, "config" | "log" | "store" | "tokens" | "cluster">;
  private readonly hub: ChannelHub;
  private readonly store: DeviceFileStore;
  private readonly open = new Map<string, Transfer>();

  /** The device messages it handles are installed by createUpdateDomain. */
  constructor(ctx: Pick<AppContext, "config" | "log" | "store" | "tokens" | "cluster">, hub: ChannelHub, store: DeviceFileStore) {
    this.ctx = ctx;
    this.hub = hub;
    this.store = store;
  }

  /** `fs_file_probe_reply`: the answer to a probe. */
  probeReply(conn: DeviceConnection, message: ProbeReply): void {
    if (!conn.settle(`probe:${message.id}`, message)) this.ctx.log.warn(`device ${conn.mac}: fs_file_probe_reply for no open probe ignored`);
  }

  /** `fs_file_download_reply`: the device uploaded the parts. */
  downloadReply(conn: DeviceConnection, message: DownloadReply): void {
    if (!conn.settle(`download:${message.id}`, message)) this.ctx.log.warn(`device ${conn.mac}: fs_file_download_reply for no open transfer ignored`);
  }

  /**
   * Fetches `file` from device `deviceId`: `{status: 0, url}` or `{status: 1, url: ""}`. A request
   * the device was asked is in the audit log (`file.fetch`, with its outcome) before the answer.
   */
  async fetch(deviceId: number, file: string, base: string, actor: Actor, here = false): Promise<FetchedFile> {
    const device = await getDevice(this.ctx.store.query, deviceId);
    if (!device) throw new LabgateError("not_found", "device does not exist");
    const conn = this.hub.get(device.mac_address);
    // The device's socket is on another node: that node fetches it, and the file's link is its own.
    const peer = conn || here ? undefined : this.ctx.cluster.locate(device.mac_address);
    if (peer?.url) {
      const fetched = await this.fetchOn(peer, deviceId, file, actor);
      // A file every node reads is served by the node asked, as a file of a device of its own.
      return this.store.shared && fetched.url.startsWith(`${peer.url}/`) ? { ...fetched, url: `${base}${fetched.url.slice(peer.url.length)}` } : fetched;
    }
    if (!conn || conn.deviceId !== device.id) throw notConnected();
    const record = (outcome: Record<string, unknown>) =>
      recordAudit(this.ctx.store.query, actor, "file.fetch", `device:${device.id}`, { mac: device.mac_address, file, ...outcome });
    let result: FetchedFile;
    try {
      result = await this.transfer(conn, file, base);
    } catch (error) {
      await record({ error: (error as Error).message.slice(0, 256) }).catch((failure: Error) => this.ctx.log.warn(`audit: file.fetch not saved: ${failure.message}`));
      throw error;
    }
    await record({ status: result.status });
    return result;
  }

  private async fetchOn(peer: PeerNode, deviceId: number, file: string, actor: Actor): Promise<FetchedFile> {
    const body: PeerFetch = { device: deviceId, file, actor: { kind: actor.kind as PeerFetch["actor"]["kind"], name: actor.name, tokenId: actor.tokenId, client: actor.client } };
    let res: Response;
    try {
      res = await fetch(`${peer.url}/api/v1/cluster/files`, {
        method: "POST",
        headers: { authorization: `Bearer token=${this.ctx.cluster.peerToken()}`, "content-type": "application/json" },
        body: JSON.stringify(body),
        // The other node bounds the transfer by its size; this only ends a wait on a node that went silent.
        signal: AbortSignal.timeout(PEER_FETCH_MS),
      });
    } catch (error) {
      throw new LabgateError("upstream", `node ${peer.name}, which holds the device's socket, did not answer: ${(error as Error).message}`);
    }
    const answer = (await res.json().catch(() => ({}))) as FetchedFile & { error?: string };
    if (res.status === 200) return { status: answer.status, url: answer.url };
    throw new LabgateError(res.status === 504 ? "timeout" : res.status === 409 ? "conflict" : res.status === 404 ? "not_found" : "upstream", answer.error ?? `node ${peer.name} answered ${res.status}`);
  }

  /** Probes, plans the parts and waits for the device to upload them (see the top of this file). */
  private async transfer(conn: DeviceConnection, file: string, base: string): Promise<FetchedFile> {
    const { device_reply_timeout: replyTimeout, file_transfer_timeout: transferTimeout, file_transfer_min_rate: minRate } = this.ctx.config.update_server;
    let transfer: Transfer | undefined;
    try {
      const caps = await conn.waitCapabilities(replyTimeout);
      if (!hasCapability(caps, "filesystem")) throw new LabgateError("conflict", "device does not support file transfers");

      const probeId = randomUUID();
      const probing = conn.wait<ProbeReply>(`probe:${probeId}`, replyTimeout);
      conn.send({ method: "fs_file_probe", id: probeId, file });
      const probe = await probing;
      const size = probe.size;
      // An empty file is a file: only a failed probe means "missing".
      if (probe.status !== 0 || size === undefined || !Number.isSafeInteger(size) || size < 0) return { status: 1, url: "" };
      if (size > MAX_FILE) throw new LabgateError("too_large", "file is larger than 5 TiB");

      const { partSize, count } = planParts(size);
      const id = randomUUID();
      transfer = { id, parts: Array.from({ length: count }, (_, i) => `${id}_part${i}`), partSize, taken: new Set(), done: new Set() };
      const seconds = transferTimeout + size / minRate;
      const urls = transfer.parts.map((name) => {
        const { expires, signature } = this.ctx.tokens.signLink(PART_LINK, name, Math.ceil(seconds) + 60);
        return `${base}/local_storage_multipart/parts/${name}?expires=${expires}&signature=${signature}`;
      });
      this.open.set(id, transfer);
      const downloading = conn.wait<DownloadReply>(`download:${id}`, seconds);
      conn.send({ method: "fs_file_download", id, file, upload_urls: urls, part_size: partSize });
      const reply = await downloading;
      this.open.delete(id);
      const etags = reply.etags;
      const complete =
        reply.status === 0 &&
        Array.isArray(etags) &&
        etags.length === count &&
        transfer.parts.every((name, i) => etags[i] === name && transfer!.done.has(name));
      if (!complete) {
        this.store.removeParts(transfer.parts);
        return { status: 1, url: "" };
      }
      const key = await this.store.assemble(transfer.parts);
      return { status: 0, url: signedFileUrl(this.ctx, base, key) };
    } catch (error) {
      if (transfer) {
        this.open.delete(transfer.id);
        this.store.removeParts(transfer.parts);
      }
      throw deviceFailure(error);
    }
  }

  /** `PUT /local_storage_multipart/parts/{part}`: only a signed part of an open transfer, once. */
  async putPart(name: string, expires: string | undefined, signature: string | undefined, body: Readable | undefined): Promise<{ etag: string }> {
    const verdict = this.ctx.tokens.verifyLink(PART_LINK, name, expires, signature);
    if (verdict === "expired") throw new LabgateError("forbidden", "upload link has expired");
    if (verdict !== "ok") throw new LabgateError("forbidden", "upload link signature is missing or invalid");
    const match = PART_NAME.exec(name);
    const transfer = match ? this.open.get(match[1]) : undefined;
    if (!transfer || !transfer.parts.includes(name)) throw new LabgateError("not_found", "no open transfer has this part");
    if (transfer.taken.has(name)) throw new LabgateError("conflict", "this part was already uploaded");
    transfer.taken.add(name);
    try {
      if (!body) throw new Error("empty body");
      await this.store.writePart(name, body, transfer.partSize);
    } catch (error) {
      transfer.taken.delete(name);
      this.store.removeParts([name]);
      if (error instanceof PartTooLargeError) throw new LabgateError("too_large", error.message);
      throw new LabgateError("invalid", `part upload failed: ${inputProblem(error)}`);
    }
    if (this.open.get(transfer.id) !== transfer) {
      // The transfer ended (timeout) while this part arrived.
      this.store.removeParts([name]);
      throw new LabgateError("not_found", "the transfer is over");
    }
    transfer.done.add(name);
    return { etag: name };
  }
}
