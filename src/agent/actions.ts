/*
 * The agent's actions: the list it reports, and executions run at
 * most `action_concurrency` at a time, answered at least once (a result is kept for an
 * execution the server sends again after a reconnection).
 */
import { TRIGGER_UPDATE_CHECK, type DeviceMessage, type DeviceMessageOf } from "../protocol/labgate/device.ts";
import type { Clock } from "../util/time.ts";
import type { AgentConfig } from "./config.ts";
import { runCommand } from "./commands.ts";

/** Results kept for re-delivery. */
const RECENT_RESULTS = 500;

type ExecResult = DeviceMessageOf<"action_exec_result">;

export interface ActionLink {
  send(message: DeviceMessage): boolean;
  /** Sends now, or on the next connection. */
  deliver(message: DeviceMessage): void;
}

export class AgentActions {
  private readonly running = new Set<string>();
  private readonly results = new Map<string, ExecResult>();
  private readonly config: AgentConfig;
  private readonly link: ActionLink;
  private readonly signal: AbortSignal;
  private readonly checkNow: () => void;
  private readonly clock: Clock;

  /** `signal` aborts when the agent stops (running commands end); `checkNow` is the built-in update check; `clock` times the commands. */
  constructor(config: AgentConfig, link: ActionLink, signal: AbortSignal, checkNow: () => void, clock: Clock) {
    this.config = config;
    this.link = link;
    this.signal = signal;
    this.checkNow = checkNow;
    this.clock = clock;
  }

  definitions(): DeviceMessageOf<"action_list_update">["actions"] {
    const builtin = { action_id: TRIGGER_UPDATE_CHECK(this.config.prefix), action_name: "Check updates", description: "Check for updates", command: [], timeout: 0 };
    return [
      ...this.config.actions.map((a) => ({ action_id: a.id, action_name: a.name, description: a.description, command: a.command, timeout: a.timeout })),
      builtin,
    ];
  }

  exec(id: string, actionId: string): void {
    const control = (status: string): void => void this.link.send({ method: "action_exec_control", execution_id: id, status });
    const done = this.results.get(id);
    if (done) {
      // Sent again after a reconnection: the result, not a second run.
      control("ok");
      this.link.deliver(done);
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
      : runCommand(action!.command, { timeout: action!.timeout, cwd: this.config.data_dir, signal: this.signal, clock: this.clock });
    void work.then((result) => {
      this.running.delete(id);
      const message: ExecResult = { method: "action_exec_result", execution_id: id, status_code: result.code, output: result.output.toString("base64") };
      this.results.set(id, message);
      if (this.results.size > RECENT_RESULTS) this.results.delete(this.results.keys().next().value as string);
      this.link.deliver(message);
    });
  }
}
