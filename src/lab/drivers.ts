/*
 * The power drivers: each turns `on`, `off` or `cycle` into its device's request or command and
 * either resolves (the port did it) or throws an `upstream` LabgateError saying why not, so that
 * nothing is recorded as done that the PDU did not do. Keys per driver: ./config.ts, docs/lab.md.
 */
import { tmpdir } from "node:os";
import { runTestProcess, type TestRunAs } from "../testrun/engine/identity.ts";
import { programName } from "../util/process.ts";
import { LabgateError } from "../util/errors.ts";
import type { Clock } from "../util/time.ts";
import type { PowerConfig } from "../config/lab.ts";

export const POWER_ACTIONS = ["on", "off", "cycle"] as const;
export type PowerAction = (typeof POWER_ACTIONS)[number];
/** What a successful action leaves the port in. */
export const stateAfter = (action: PowerAction): "on" | "off" => (action === "off" ? "off" : "on");

export interface DriverEnv {
  /** Who `command`, `gpio` and `uhubctl` programs run as (the test user, `test_server.run_as`). */
  runAs: TestRunAs;
  clock: Clock;
}

export type PowerDriver = (action: PowerAction) => Promise<void>;

const failed = (why: string): never => {
  throw new LabgateError("upstream", why);
};

/** One HTTP GET with the driver's timeout; anything but a 2xx is a failure naming what answered. */
async function get(url: string, timeoutSeconds: number, what: string): Promise<string> {
  let response: Response;
  try {
    response = await fetch(url, { signal: AbortSignal.timeout(timeoutSeconds * 1000), redirect: "error" });
  } catch (error) {
    const cause = (error as { cause?: { code?: string; message?: string } }).cause;
    const reason = (error as Error).name === "TimeoutError" ? `no answer within ${timeoutSeconds} s` : (cause?.code ?? cause?.message ?? (error as Error).message);
    return failed(`${what} could not be reached: ${reason}`);
  }
  const text = await response.text().catch(() => "");
  if (!response.ok) failed(`${what} answered ${response.status}: ${text.trim().slice(0, 200) || response.statusText}`);
  return text;
}

/** Off, the configured delay, on: a cycle for drivers that have none of their own. */
const offDelayOn = (set: (on: boolean) => Promise<void>, delaySeconds: number, clock: Clock): PowerDriver => async (action) => {
  if (action !== "cycle") return set(action === "on");
  await set(false);
  await clock.sleep(delaySeconds * 1000);
  await set(true);
};

/** Runs one program as the test user; a failure to start, a timeout or a non-zero exit is an upstream failure. */
async function run(env: DriverEnv, command: string[], timeoutSeconds: number): Promise<void> {
  const dir = env.runAs.workspace?.root ?? tmpdir();
  const result = await runTestProcess(env.runAs.identity, dir, { command, cwd: dir, timeoutMs: timeoutSeconds * 1000, clock: env.clock });
  const name = programName(command);
  if (result.startError) failed(`${name}: ${result.startError}`);
  if (result.timedOut) failed(`${name} did not finish within ${timeoutSeconds} s`);
  if (result.exitCode !== 0) {
    const said = (result.stderr.trim() || result.stdout.trim()).split("\n").slice(-3).join(" ").slice(0, 300);
    failed(`${name} exited with ${result.exitCode ?? result.exitSignal}${said ? `: ${said}` : ""}`);
  }
}

/** The driver of one board's power port. */
export function createDriver(config: PowerConfig, env: DriverEnv): PowerDriver {
  switch (config.driver) {
    case "pdudaemon": {
      const query = (action: PowerAction) =>
        `${config.url}/power/control/${action === "cycle" ? "reboot" : action}?` +
        new URLSearchParams({ hostname: config.hostname, port: String(config.port), ...(action === "cycle" ? { delay: String(config.delay) } : {}) }).toString();
      return async (action) => {
        await get(query(action), config.timeout + (action === "cycle" ? config.delay : 0), `pdudaemon at ${config.url}`);
      };
    }
    case "command":
      return async (action) => {
        if (action === "cycle" && config.cycle) return run(env, config.cycle, config.timeout);
        return offDelayOn((on) => run(env, on ? config.on : config.off, config.timeout), config.delay, env.clock)(action);
      };
    case "tasmota": {
      const what = `tasmota at ${config.url}`;
      const set = async (on: boolean) => {
        const params = new URLSearchParams({ cmnd: `Power${config.relay} ${on ? "On" : "Off"}` });
        if (config.user !== undefined) params.set("user", config.user);
        if (config.password !== undefined) params.set("password", config.password);
        const answer = parseJson(await get(`${config.url}/cm?${params.toString().replaceAll("+", "%20")}`, config.timeout, what), what);
        // Tasmota answers {"POWER":"ON"} with one relay and {"POWER1":"ON"} with several.
        const state = answer[`POWER${config.relay}`] ?? (config.relay === 1 ? answer.POWER : undefined);
        if (state !== (on ? "ON" : "OFF")) failed(`${what} answered ${JSON.stringify(answer).slice(0, 200)} instead of POWER${config.relay} ${on ? "ON" : "OFF"}`);
      };
      return offDelayOn(set, config.delay, env.clock);
    }
    case "shelly": {
      const what = `shelly at ${config.url}`;
      const set = async (on: boolean) => {
        const answer = parseJson(await get(`${config.url}/relay/${config.relay}?turn=${on ? "on" : "off"}`, config.timeout, what), what);
        if (answer.ison !== on) failed(`${what} answered ${JSON.stringify(answer).slice(0, 200)} instead of ison ${on}`);
      };
      return offDelayOn(set, config.delay, env.clock);
    }
    case "gpio": {
      const set = (on: boolean) => run(env, [config.program, ...(config.active_low ? ["--active-low"] : []), config.chip, `${config.line}=${on ? 1 : 0}`], config.timeout);
      return offDelayOn(set, config.delay, env.clock);
    }
    case "uhubctl":
      return (action) => run(env, [config.program, "-l", config.location, "-p", String(config.port), "-a", action, ...(action === "cycle" ? ["-d", String(config.delay)] : [])], config.timeout + config.delay);
  }
}

function parseJson(text: string, what: string): Record<string, unknown> {
  try {
    const value: unknown = JSON.parse(text);
    if (value && typeof value === "object" && !Array.isArray(value)) return value as Record<string, unknown>;
  } catch {
    // falls through to the message
  }
  return failed(`${what} answered something that is not a JSON object: ${text.trim().slice(0, 200)}`);
}
