/*
 * Test runs sent by the gateway (docs/device-tests.md): the device's share of a run, executed here
 * with the test-run engine and its built-in modules (script modules come with the share), one run
 * at a time, within `tests.max_duration`. Rows go back over the management socket as cases end;
 * artifacts are uploaded afterwards, each resumable from the size the gateway has; then the end.
 * Imports only the engine and modules, nothing of the server; the engine loads with the first run
 * (./parts.ts).
 */
import { createReadStream } from "node:fs";
import { mkdir, rm, stat } from "node:fs/promises";
import { join } from "node:path";
import type { DeviceMessage, TestRunAbort, TestRunEnd, TestRunRow, TestRunStart } from "../protocol/labgate/device.ts";
import type { TestPlan } from "../testrun/plan.ts";
import { listArtifacts } from "../testrun/runs/artifacts.ts";
import { artifactsDir } from "../testrun/paths.ts";
import type { HttpAnswer, HttpClient } from "../update/client/http.ts";
import type { Logger } from "../util/log.ts";
import type { Clock } from "../util/time.ts";
import type { TestRunAs } from "../testrun/engine/identity.ts";
import type { AgentTests } from "./config.ts";
import { loadTestEngine } from "./parts.ts";

let engine: ReturnType<typeof loadTestEngine> | undefined;
/** The test-run engine, loaded with the first run: an agent that runs no tests never holds it. */
const loadEngine = () => (engine ??= loadTestEngine());

export const TESTS_DISABLED_HERE = "tests are disabled on this device (tests.enabled is false in its agent config)";
/** A metadata command's limit on the device (the gateway's default `metadata_timeout`). */
const METADATA_TIMEOUT_MS = 60_000;
/** Attempts per artifact when the connection breaks mid-upload (each resumes where the gateway stopped). */
const UPLOAD_ATTEMPTS = 5;

export interface TestRunnerDeps {
  config: AgentTests;
  /** `tests.run_as`: the user the runs' programs run as and its work dir (prepareRunAs; none: the agent's user), and what holds each run's processes. */
  runAs: TestRunAs;
  /** The agent's data dir: runs work under `tests/`. */
  dataDir: string;
  /** The gateway's URL. */
  server: string;
  http: HttpClient;
  /** A device token for the artifact uploads. */
  token(): Promise<string | undefined>;
  /** Sends on the management socket now (false when it is down: the gateway fails the share then). */
  send(message: DeviceMessage): boolean;
  log: Logger;
  clock: Clock;
  /** Waits between upload attempts. */
  sleep(seconds: number): Promise<void>;
}

/** Why a share stops when the connection to the gateway is lost. */
const ABANDONED = "disconnected from the gateway";
const RUN_ID = /^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$/;

export class TestRunner {
  private readonly deps: TestRunnerDeps;
  private current: { id: string; controller: AbortController; done: Promise<void> } | undefined;
  private stopping = false;

  constructor(deps: TestRunnerDeps) {
    this.deps = deps;
  }

  /** `test_run_start`: runs the share, or answers its end at once when it cannot. */
  start(start: TestRunStart): void {
    const id = start.run_id;
    if (!RUN_ID.test(id)) return this.deps.log.warn("agent: test_run_start without a valid run_id ignored");
    const refuse = (error: string) => void this.end({ method: "test_run_end", run_id: id, status: "failed", error, warnings: [] });
    if (!this.deps.config.enabled) return refuse(TESTS_DISABLED_HERE);
    // A share already aborted only winds down (the gateway no longer runs it): the new one waits for it.
    if (this.current && !this.current.controller.signal.aborted) return refuse(`the device is running test run ${this.current.id}`);
    const controller = new AbortController();
    const previous = this.current?.done ?? Promise.resolve();
    const current = { id, controller, done: previous.then(() => this.run(start, controller)) };
    this.current = current;
    void current.done.finally(() => {
      if (this.current === current) this.current = undefined;
    });
  }

  /** The management socket closed: the gateway has ended the share already, so it stops here, nothing uploaded. */
  abandon(): void {
    this.current?.controller.abort(ABANDONED);
  }

  /** `test_run_abort`: stops the run (its processes get SIGTERM, then SIGKILL). */
  abort(message: TestRunAbort): void {
    if (this.current && this.current.id === message.run_id) this.current.controller.abort(message.reason || "Aborted by user");
  }

  /** Agent stop: the run is aborted and awaited. */
  async stop(): Promise<void> {
    this.stopping = true;
    this.current?.controller.abort("agent stopping");
    await this.current?.done;
  }

  private end(message: TestRunEnd): boolean {
    return this.deps.send(message);
  }

  private async run(start: TestRunStart, controller: AbortController): Promise<void> {
    const { deps } = this;
    const id = start.run_id;
    const work = join(deps.dataDir, "tests", id);
    const dirs = { configs: work, reports: work, artifacts: join(work, "artifacts"), results: work };
    const seconds = deps.config.max_duration;
    const limit = new AbortController();
    if (seconds > 0) void deps.clock.sleep(seconds * 1000, limit.signal).then(() => controller.abort(`tests.max_duration (${seconds} s) exceeded`));
    let end: TestRunEnd;
    try {
      await rm(work, { recursive: true, force: true });
      await mkdir(dirs.artifacts, { recursive: true, mode: 0o700 });
      deps.log.info(`agent: test run ${id}: ${start.entries.length} entries`);
      const plan = { entries: start.entries, metadata: start.metadata } as TestPlan;
      const { executeRun, SEED_COLUMNS } = await loadEngine();
      const result = await executeRun(
        { id, plan, pattern: start.pattern, machineTarget: null },
        {
          // The gateway checked the entries (modules known, params valid) when the run was triggered.
          compat: true,
          dataDir: work,
          scripts: start.modules,
          dirs,
          clock: deps.clock,
          reportColumns: SEED_COLUMNS,
          metadataTimeoutMs: METADATA_TIMEOUT_MS,
          roots: { sys: deps.config.sys_root, dev: deps.config.dev_root, firmware: deps.config.firmware_root },
          ...deps.runAs,
          power: (action) => this.power(id, action),
          onRow: (row) => {
            const message: TestRunRow = {
              method: "test_run_row",
              run_id: id,
              start_time: row.startTime.getTime(),
              test_name: row.testName,
              module: row.module,
              duration: row.duration,
              message: row.message,
              status: row.status,
              artifacts: row.artifacts,
              name: row.name ?? "",
              output: row.output ?? "",
            };
            deps.send(message);
          },
        },
        controller.signal,
      );
      const reason = typeof controller.signal.reason === "string" ? controller.signal.reason : null;
      const warnings = [...result.warnings];
      // What the cases wrote is uploaded after an abort too (the gateway takes it while it waits for the end).
      if (!this.stopping && controller.signal.reason !== ABANDONED) warnings.push(...(await this.uploadArtifacts(id, artifactsDir(dirs, id), Math.max(0, start.artifacts_max_bytes))));
      end = { method: "test_run_end", run_id: id, status: result.status, error: reason ?? result.error, warnings };
    } catch (error) {
      end = { method: "test_run_end", run_id: id, status: "failed", error: `runner error: ${(error as Error).message}`, warnings: [] };
    } finally {
      limit.abort();
    }
    deps.log.info(`agent: test run ${id} ${end.status}${end.error ? `: ${end.error}` : ""}`);
    this.end(end);
    await rm(work, { recursive: true, force: true }).catch(() => {});
  }

  /** The `power` module: the gateway switches this board (with the run's caller's permission) and answers once done. */
  private async power(id: string, action: string): Promise<void> {
    const token = await this.deps.token();
    if (!token) throw new Error("no device token");
    const response = await this.deps.http(`${this.deps.server}/api/v1/devices/test-runs/${encodeURIComponent(id)}/power`, {
      method: "POST",
      headers: { authorization: `Bearer token=${token}`, "content-type": "application/json" },
      body: JSON.stringify({ action }),
    });
    const answer = (await response.json().catch(() => ({}))) as { error?: unknown };
    if (response.status !== 200) throw new Error(typeof answer.error === "string" ? answer.error : `the gateway answered ${response.status}`);
  }

  /** Uploads every artifact of the run (within the gateway's budget); returns warnings for what did not go. */
  private async uploadArtifacts(id: string, dir: string, budget: number): Promise<string[]> {
    const warnings: string[] = [];
    let left = budget;
    for (const { name } of await listArtifacts(dir)) {
      const path = join(dir, ...name.split("/"));
      const size = (await stat(path)).size;
      if (size > left) {
        warnings.push(`artifact ${name} (${size} bytes) not uploaded: over the ${budget} bytes the gateway takes`);
        continue;
      }
      const problem = await this.upload(id, name, path, size);
      if (problem) warnings.push(`artifact ${name} not uploaded: ${problem}`);
      else left -= size;
    }
    return warnings;
  }

  /**
   * PUTs one artifact from `offset`; after a broken connection, asks the gateway where it stands
   * (an empty PUT at 0 answers the size it has, 409) and goes on from there. Returns a problem, or undefined.
   */
  private async upload(id: string, name: string, path: string, size: number): Promise<string | undefined> {
    const url = `${this.deps.server}/api/v1/devices/test-runs/${encodeURIComponent(id)}/artifacts/${name.split("/").map(encodeURIComponent).join("/")}`;
    let offset = 0;
    /** False after a broken connection: the next request only asks where the gateway stands. */
    let known = true;
    let problem = "";
    for (let attempt = 0; attempt < UPLOAD_ATTEMPTS; attempt++) {
      const token = await this.deps.token();
      if (!token) return "no device token";
      const body = known && offset < size ? createReadStream(path, { start: offset, end: size - 1 }) : new Uint8Array(0);
      let response: HttpAnswer;
      try {
        response = await this.deps.http(`${url}?offset=${offset}`, {
          method: "PUT",
          headers: { authorization: `Bearer token=${token}`, "content-type": "application/octet-stream" },
          body,
        });
      } catch (error) {
        problem = (error as Error).message;
        offset = 0;
        known = false;
        await this.deps.sleep(Math.min(2 ** attempt * 0.1, 2));
        continue;
      }
      const answer = (await response.json().catch(() => ({}))) as { offset?: unknown; error?: unknown };
      if (response.status === 200 && answer.offset === size) return undefined;
      if ((response.status === 200 || response.status === 409) && typeof answer.offset === "number" && answer.offset <= size) {
        offset = answer.offset;
        known = true;
        continue;
      }
      return `HTTP ${response.status}${typeof answer.error === "string" ? `: ${answer.error}` : ""}`;
    }
    return problem || "too many attempts";
  }
}
