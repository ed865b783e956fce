/*
 * Remote actions (docs/update-server.md, "Actions"): the action log, execution while the device is
 * connected, the queue of pending rows delivered when it connects (oldest first, at least once),
 * and the results the device sends back. Every wait is bounded.
 */
import { randomUUID } from "node:crypto";
import type { Actor } from "../../audit/audit.ts";
import type { AppContext } from "../../app/context.ts";
import { LabgateError, type ErrorCode } from "../../util/errors.ts";
import { DeviceGoneError, DeviceTimeoutError, type ChannelHub, type DeviceConnection } from "../channel/hub.ts";
import { deviceFailure, notConnected } from "../channel/errors.ts";
import { hasCapability, type ActionEntry, type DeviceMessageOf } from "../../protocol/labgate/device.ts";
import type { Action, ActionLogEntry, ExecResult, PeerExecutions, PeerOutcomes } from "./schema.ts";
import { signedFileUrl, type DeviceFileStore } from "../devicefiles/store.ts";
import { ActionLogStore, INLINE_OUTPUT_BYTES, type LogRow } from "./store.ts";
import { memoryRelief } from "../../util/memory-relief.ts";
import { callPeer } from "../../cluster/peer.ts";

export type { ActionStatus } from "./store.ts";
/** Output bytes a log entry carries inline: a log of many large outputs stays a modest answer. */
export const MAX_INLINE_OUTPUT = 64 * 1024;

/** What an execution came to: the device's result, or queued for its next connection. */
export type ExecOutcome = { queued: true } | ExecResult;

/** Executions of a fan-out started per event-loop turn. */
const SEND_SLICE = 200;
/** A fan-out to this many devices or more leaves enough freed heap behind for V8 to give back (memoryRelief). */
const RELIEF_DEVICES = 1000;

/** The device answered `action_exec` with something other than ok/full. */
class DeviceRefusedError extends Error {}

/** 409 unless the device reported the `action` capability. */
function requireActionCapability(capabilities: Record<string, unknown>): void {
  if (!hasCapability(capabilities, "action")) throw new LabgateError("conflict", "device does not support actions");
}

/** A loop, not `find()`: no closure per device of a fan-out. */
/** An action as the API serves it, from the device's entry: its short field names (`id`, `name`) read as the served ones. */
function actionOf(entry: ActionEntry, id: string): Action {
  const timeout = entry.timeout ?? 0;
  return { action_id: id, action_name: entry.action_name ?? entry.name ?? id, description: entry.description ?? "", command: entry.command ?? [], timeout: timeout > 0 ? timeout : 0 };
}

/** A device's action list as the API serves it; entries without an id are left out. */
function actionsOf(entries: ActionEntry[]): Action[] {
  const out: Action[] = [];
  for (const entry of entries) {
    const id = entry.action_id ?? entry.id;
    if (id) out.push(actionOf(entry, id));
  }
  return out;
}

function findAction(entries: ActionEntry[], actionId: string): Action | undefined {
  for (const entry of entries) if ((entry.action_id ?? entry.id) === actionId && actionId) return actionOf(entry, actionId);
  return undefined;
}

export class ActionService {
  private readonly ctx: Pick<AppContext, "clock" | "config" | "store" | "log" | "tokens" | "cluster">;
  private readonly hub: ChannelHub;
  private readonly files: DeviceFileStore;
  private readonly store: ActionLogStore;
  /** Executions driven right now (by a request or a dispatcher): not to be dispatched again. */
  private readonly inflight = new Set<string>();

  /** The device messages it handles, its connect hook and its outputs' file route are installed by createUpdateDomain. */
  constructor(ctx: Pick<AppContext, "clock" | "config" | "store" | "log" | "tokens" | "cluster">, hub: ChannelHub, files: DeviceFileStore) {
    this.ctx = ctx;
    this.hub = hub;
    this.files = files;
    this.store = new ActionLogStore(ctx.store, ctx.clock, (message) => ctx.log.warn(message));
  }

  /** An output kept in its log row (1 KiB or less) rather than in a file, for the file store to serve. */
  storedOutput(executionId: string): Promise<{ data: Uint8Array; modified: Date } | undefined> {
    return this.store.inlineOutput(executionId);
  }

  /** `action_exec_control`: the device took (ok), refused or put off (full) an action. */
  control(conn: DeviceConnection, message: DeviceMessageOf<"action_exec_control">): void {
    if (!conn.settle(`control:${message.execution_id}`, message.status)) {
      this.ctx.log.debug(`device ${conn.mac}: action_exec_control for ${message.execution_id} that nobody waits for`);
    }
  }

  /** A device connected: its queue is delivered. */
  connected(conn: DeviceConnection): void {
    void this.dispatch(conn).catch((error) => this.ctx.log.error(`device ${conn.mac}: queue dispatch: ${(error as Error).message}`));
  }

  private get timeouts() {
    return this.ctx.config.update_server;
  }

  /** The connected device's action list (asked of the node holding its socket when that is another). */
  async list(mac: string, here = false): Promise<Action[]> {
    const conn = this.hub.get(mac);
    const peer = conn || here ? undefined : this.ctx.cluster.locate(mac);
    if (peer?.url) return (await callPeer<{ actions: Action[] }>(this.ctx.cluster, peer, `/api/v1/cluster/devices/${encodeURIComponent(mac)}/actions`, { timeoutMs: 3 * this.timeouts.device_reply_timeout * 1000 })).actions;
    if (!conn) throw notConnected();
    try {
      const timeout = this.timeouts.device_reply_timeout;
      requireActionCapability(conn.capabilities ?? (await conn.waitCapabilities(timeout)));
      return actionsOf(await conn.actionList(timeout));
    } catch (error) {
      throw deviceFailure(error);
    }
  }

  /**
   * Executes `actionId` on the device and waits for its result, or queues it when the device is
   * offline (`queued`). The log row is on disk (pending) before anything is sent.
   */
  async exec(mac: string, actionId: string, actor: Actor): Promise<ExecOutcome> {
    const [execution] = await this.start([mac], actionId, actor);
    const outcome = await execution;
    if (outcome.status === "rejected") throw outcome.reason;
    return outcome.value;
  }

  /**
   * `exec` on many devices at once (a fan-out): every log row is written by one durable write
   * before anything is sent, and the results are recorded in shared writes as they come back.
   * Settles once every device has answered, failed or been queued; one outcome per MAC, in order.
   */
  async execMany(macs: string[], actionId: string, actor: Actor): Promise<Array<PromiseSettledResult<ExecOutcome>>> {
    const burst = macs.length >= RELIEF_DEVICES;
    if (burst) memoryRelief.begin();
    try {
      return await Promise.all(await this.start(macs, actionId, actor));
    } finally {
      if (burst) memoryRelief.end();
    }
  }

  /**
   * Writes the pending rows, then starts each execution: SEND_SLICE devices per event-loop turn,
   * so that other requests (and the first results) are served between slices of a large fan-out.
   * A device whose queue is full (max_queued_actions rows without a result), or an offline one
   * past the request's max_queued_per_request, gets no row: 429. Resolves once all are started.
   */
  private async start(macs: string[], actionId: string, actor: Actor): Promise<Array<Promise<PromiseSettledResult<ExecOutcome>>>> {
    const { max_queued_actions: perDevice, max_queued_per_request: perRequest } = this.timeouts;
    let offline = 0;
    const overRequest = new Set(macs.filter((mac) => !this.hub.isConnected(mac) && ++offline > perRequest));
    const taken = macs.filter((mac) => !overRequest.has(mac));
    const ids = taken.map(() => randomUUID());
    // Marked in flight before the rows exist, so that a dispatcher starting meanwhile skips them.
    for (const id of ids) this.inflight.add(id);
    let stored: boolean[];
    try {
      const audit = { actor, devices: taken };
      stored = await this.store.insertPending(ids.map((id, i) => ({ id, mac: taken[i], actionId, cap: perDevice, audit: i === 0 ? audit : undefined })));
    } catch (error) {
      for (const id of ids) this.inflight.delete(id);
      throw error;
    }
    const refusals = new Map<string, LabgateError>();
    for (const mac of overRequest) refusals.set(mac, new LabgateError("too_many", `one request queues actions for at most ${perRequest} offline devices (update_server.max_queued_per_request)`));
    const executionOf = new Map<string, string>();
    taken.forEach((mac, i) => {
      if (stored[i]) return void executionOf.set(mac, ids[i]);
      this.inflight.delete(ids[i]);
      refusals.set(mac, new LabgateError("too_many", `device ${mac} has ${perDevice} actions waiting already (update_server.max_queued_actions)`));
    });
    const executions: Array<Promise<PromiseSettledResult<ExecOutcome>>> = [];
    for (let i = 0; i < macs.length; i++) {
      if (i > 0 && i % SEND_SLICE === 0) await new Promise((resolve) => setImmediate(resolve));
      const refusal = refusals.get(macs[i]);
      executions.push(refusal ? Promise.resolve({ status: "rejected", reason: refusal }) : this.drive(macs[i], executionOf.get(macs[i])!, actionId));
    }
    return executions;
  }

  /**
   * One logged execution: sent when the device is connected, its result awaited; else left queued.
   * Settles with its outcome rather than rejecting (one promise per device of a fan-out, not two).
   */
  private async drive(mac: string, id: string, actionId: string, here = false): Promise<PromiseSettledResult<ExecOutcome>> {
    try {
      const conn = this.hub.get(mac);
      const peer = conn || here ? undefined : this.ctx.cluster.locate(mac);
      if (peer?.url) return await this.driveOn(peer.url, peer.name, mac, id, actionId);
      if (!conn) return { status: "fulfilled", value: { queued: true } };
      try {
        // What the device reported and listed is usually known: no wait, no promise, then.
        const timeout = this.timeouts.device_reply_timeout;
        requireActionCapability(conn.capabilities ?? (await conn.waitCapabilities(timeout)));
        const definition = findAction(conn.actions ?? (await conn.actionList(timeout)), actionId);
        if (!definition) throw new LabgateError("not_found", `action ${actionId} is not defined on the device`);
        // The action's own timeout bounds the wait (plus a margin); no timeout: the configured maximum.
        const resultWait = definition.timeout > 0 ? definition.timeout + this.timeouts.action_timeout_margin : this.timeouts.action_max_wait;
        const deadline = this.ctx.clock.now() + (resultWait + this.timeouts.device_reply_timeout) * 1000;
        // Waiting starts before sending: a fast device's result may arrive with its acknowledgement.
        const result = conn.wait<ExecResult>(`result:${id}`, resultWait + this.timeouts.device_reply_timeout);
        result.catch(() => {});
        await this.deliver(conn, id, actionId, deadline);
        return { status: "fulfilled", value: await result };
      } catch (error) {
        await this.fail(id);
        if (error instanceof DeviceRefusedError) return { status: "rejected", reason: new LabgateError("upstream", error.message) };
        return { status: "rejected", reason: deviceFailure(error) };
      }
    } finally {
      this.inflight.delete(id);
    }
  }

  /**
   * Executions logged here for devices whose sockets are on other nodes: the node holding a
   * device's socket drives it (driveHere), the executions of one fan-out on one node in one request.
   */
  private readonly peerBatches = new Map<string, { name: string; actionId: string; executions: Array<{ mac: string; id: string; settle: (outcome: PromiseSettledResult<ExecOutcome>) => void }> }>();

  private driveOn(url: string, name: string, mac: string, id: string, actionId: string): Promise<PromiseSettledResult<ExecOutcome>> {
    return new Promise((settle) => {
      const key = `${url}\n${actionId}`;
      let batch = this.peerBatches.get(key);
      if (!batch) {
        this.peerBatches.set(key, (batch = { name, actionId, executions: [] }));
        // The slices of one fan-out (SEND_SLICE per turn) go in one request.
        setImmediate(() => {
          this.peerBatches.delete(key);
          void this.sendBatch(url, batch!);
        });
      }
      batch.executions.push({ mac, id, settle });
    });
  }

  private async sendBatch(url: string, batch: { name: string; actionId: string; executions: Array<{ mac: string; id: string; settle: (outcome: PromiseSettledResult<ExecOutcome>) => void }> }): Promise<void> {
    const { action_max_wait: most, device_reply_timeout: reply } = this.timeouts;
    try {
      const res = await fetch(`${url}/api/v1/cluster/actions`, {
        method: "POST",
        headers: { authorization: `Bearer token=${this.ctx.cluster.peerToken()}`, "content-type": "application/json" },
        body: JSON.stringify({ action_id: batch.actionId, executions: batch.executions.map(({ mac, id }) => ({ mac, id })) } satisfies PeerExecutions),
        signal: AbortSignal.timeout((most + 3 * reply) * 1000),
      });
      if (res.status !== 200) throw new Error(`answered ${res.status}`);
      const { outcomes } = (await res.json()) as PeerOutcomes;
      batch.executions.forEach(({ settle }, i) => {
        const outcome = outcomes[i];
        if (outcome && "result" in outcome) settle({ status: "fulfilled", value: outcome.result });
        else if (outcome && "queued" in outcome) settle({ status: "fulfilled", value: { queued: true } });
        else settle({ status: "rejected", reason: new LabgateError((outcome?.error.code ?? "upstream") as ErrorCode, outcome?.error.message ?? `node ${batch.name} gave no outcome`) });
      });
    } catch (error) {
      for (const { id, settle } of batch.executions) {
        await this.fail(id);
        settle({ status: "rejected", reason: new LabgateError("upstream", `node ${batch.name}, which holds the device's socket, did not answer: ${(error as Error).message}`) });
      }
    }
  }

  /** Another node's executions (logged there, pending) for devices whose sockets are here; one outcome each, in order. */
  async driveHere(actionId: string, executions: Array<{ mac: string; id: string }>): Promise<PeerOutcomes["outcomes"]> {
    const settled = await Promise.all(
      executions.map(({ mac, id }) => {
        if (this.inflight.has(id)) return Promise.resolve<PromiseSettledResult<ExecOutcome>>({ status: "rejected", reason: new LabgateError("conflict", `execution ${id} is under way already`) });
        this.inflight.add(id);
        return this.drive(mac, id, actionId, true);
      }),
    );
    return settled.map((outcome) => {
      if (outcome.status === "fulfilled") return "queued" in outcome.value ? { queued: true as const } : { result: outcome.value };
      const reason = outcome.reason as Error;
      return { error: { code: reason instanceof LabgateError ? reason.code : "internal", message: reason.message } };
    });
  }

  /** Sends `action_exec` until the device takes it (ok) or refuses; `full` is retried later. */
  private async deliver(conn: DeviceConnection, id: string, actionId: string, deadline: number): Promise<void> {
    for (;;) {
      const control = conn.wait<string>(`control:${id}`, this.timeouts.device_reply_timeout);
      conn.send({ method: "action_exec", execution_id: id, action_id: actionId });
      const status = await control;
      if (status === "ok") return this.store.markSent(id);
      if (status !== "full") throw new DeviceRefusedError(`device refused the action (status ${JSON.stringify(status)})`);
      if (this.ctx.clock.now() + this.timeouts.queue_full_retry * 1000 > deadline) throw new DeviceTimeoutError(`device ${conn.mac} kept its action queue full`);
      await this.ctx.clock.sleep(this.timeouts.queue_full_retry * 1000);
      if (!conn.open) throw new DeviceGoneError(`device ${conn.mac} disconnected`);
    }
  }

  /** Marks a row `error` unless it already holds a final status (a failure to do so is logged). */
  private async fail(id: string): Promise<void> {
    await this.store.fail(id).catch((error) => this.ctx.log.error(`action ${id}: status not stored: ${(error as Error).message}`));
  }

  /** `action_exec_result`: the row gets its final status, exit code and output. */
  async result(conn: DeviceConnection, message: DeviceMessageOf<"action_exec_result">): Promise<void> {
    const { execution_id: id, status_code: code } = message;
    const output = Buffer.from(message.output ?? "", "base64");
    const answer: ExecResult = { status_code: code, output: output.toString("base64") };
    // Small outputs go into the row (durable with the shared commit), larger ones into a file first.
    const key = output.length > INLINE_OUTPUT_BYTES ? await this.files.writeObject("actions", output) : null;
    const recorded = await this.store.recordResult({ id, mac: conn.mac, code, output: key || output.length === 0 ? null : output, key });
    if (recorded !== "stored") await this.files.remove(key);
    // Too late (the request already answered 504), or delivered twice: the first word stands.
    if (recorded === "late") this.ctx.log.info(`device ${conn.mac}: late result for execution ${id} ignored`);
    // Removed from the log meanwhile (remove, clear pending): a request still waiting gets its answer.
    if (!conn.settle(`result:${id}`, answer) && recorded === "unknown") this.ctx.log.warn(`device ${conn.mac}: result for unknown execution ${id} ignored`);
  }

  /** Delivers the queue of a device that just connected: oldest first. */
  private async dispatch(conn: DeviceConnection): Promise<void> {
    const queued = async () => (await this.store.queued(conn.mac)).filter((row) => !this.inflight.has(row.id));
    if ((await queued()).length === 0) return;
    let actions: ActionEntry[];
    try {
      const caps = await conn.waitCapabilities(this.timeouts.device_reply_timeout);
      if (!hasCapability(caps, "action")) return;
      actions = await conn.actionList(this.timeouts.device_reply_timeout);
    } catch {
      return; // silent device or gone: the rows stay queued for the next connection
    }
    for (const row of await queued()) {
      if (!conn.open) return;
      if (!findAction(actions, row.action_id)) {
        await this.fail(row.id);
        continue;
      }
      this.inflight.add(row.id);
      try {
        await this.deliver(conn, row.id, row.action_id, this.ctx.clock.now() + this.timeouts.action_max_wait * 1000);
      } catch (error) {
        if (error instanceof DeviceRefusedError) {
          await this.fail(row.id);
          continue;
        }
        return; // timeout or disconnect: try again on the next connection
      } finally {
        this.inflight.delete(row.id);
      }
    }
  }

  /** The log of a device, newest first; each entry carries its output inline and as a link. */
  async log(mac: string, base: string): Promise<ActionLogEntry[]> {
    const exitCodes = this.ctx.config.compat.action_log_status === "exit_code";
    return Promise.all(
      (await this.store.entries(mac)).map(async (row) => {
        const key = row.output_key ?? (row.output ? this.files.actionOutputKey(row.id) : null);
        return {
          id: row.id,
          action: row.action_id,
          created: row.created.slice(0, 19),
          status: exitCodes && row.status_code !== null ? String(row.status_code) : row.status,
          status_code: row.status_code,
          ...(await this.inlineOutput(row)),
          download_url: key ? signedFileUrl(this.ctx, base, key) : null,
        };
      }),
    );
  }

  private async inlineOutput(row: LogRow): Promise<{ output: string | null; output_truncated: boolean }> {
    if (row.status_code === null) return { output: null, output_truncated: false };
    if (row.output) return { output: Buffer.from(row.output).toString("base64"), output_truncated: false };
    if (!row.output_key) return { output: "", output_truncated: false };
    const { data, truncated } = await this.files.readObject(row.output_key, MAX_INLINE_OUTPUT);
    return { output: data.toString("base64"), output_truncated: truncated };
  }

  /** Deletes finished rows (success or error). */
  async clearLog(mac: string, actor: Actor): Promise<void> {
    await this.removeFiles(await this.store.clearFinished(mac, actor));
  }

  /**
   * Empties the queue: every row without a result. `sent` rows go too, since they would be
   * delivered again on the next connection; one the device runs right now cannot be
   * recalled, and its late result is ignored.
   */
  async clearPending(mac: string, actor: Actor): Promise<void> {
    await this.removeFiles(await this.store.clearPending(mac, actor));
  }

  /** Deletes the listed rows of that device, whatever their status; unknown ids are ignored. */
  async remove(mac: string, ids: string[], actor: Actor): Promise<void> {
    await this.removeFiles(await this.store.remove(mac, ids, actor));
  }

  private async removeFiles(keys: Array<string | null>): Promise<void> {
    for (const key of keys) await this.files.remove(key);
  }
}
