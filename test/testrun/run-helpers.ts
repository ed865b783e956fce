import { readFileSync } from "node:fs";
import assert from "node:assert/strict";
import { FINAL_STATUSES } from "../../src/testrun/runs/status.ts";
import { openStream } from "../helpers/events.ts";
import { waitFor, type TestServer } from "../helpers/server.ts";

/** Uploads a config through the API (multipart field `file`). */
export async function uploadConfig(server: TestServer, name: string, yaml: string, token = server.adminToken): Promise<void> {
  const form = new FormData();
  form.append("file", new Blob([yaml], { type: "application/yaml" }), name);
  const res = await server.request("/api/v1/configs", { method: "POST", body: form, token });
  assert.equal(res.status, 200, `upload ${name}: ${await res.text()}`);
}

export type RunObject = Record<string, unknown> & { id: string; status: string };

/** POST /api/v1/test-runs; asserts 200 and returns the run object. */
export async function trigger(server: TestServer, body: Record<string, unknown>, token = server.adminToken): Promise<RunObject> {
  const res = await server.request("/api/v1/test-runs", { method: "POST", json: body, token });
  const text = await res.text();
  assert.equal(res.status, 200, `trigger: ${text}`);
  return JSON.parse(text) as RunObject;
}

export async function getRun(server: TestServer, id: string | number, token = server.adminToken): Promise<RunObject> {
  const res = await server.request(`/api/v1/test-runs/${id}`, { token });
  assert.equal(res.status, 200);
  return (await res.json()) as RunObject;
}

/** Waits for a run until `until` holds (default: a final state), on the server's run events (polling where there are none). */
export async function waitRun(server: TestServer, id: string | number, until: (r: RunObject) => boolean = (r) => FINAL_STATUSES.has(r.status), timeoutMs = 15_000): Promise<RunObject> {
  // Subscribed before the first look: no change can fall between the two.
  const stream = await openStream(server, server.adminToken, "/api/v1/test-runs/stream");
  try {
    const run = await getRun(server, id);
    if (until(run)) return run;
    if (stream.status !== 200) {
      return await waitFor(async () => {
        const now = await getRun(server, id);
        return until(now) ? now : undefined;
      }, timeoutMs, `run ${id}`);
    }
    const event = await stream.next((e) => e.event === "run" && e.data.id === run.id && until(e.data as RunObject), timeoutMs, `run ${id} (still ${run.status})`);
    return event.data as RunObject;
  } finally {
    stream.close();
  }
}

/** A trigger as GET /test-runs/trigger/{id} answers it. */
export type TriggerObject = { status: string; error: string; runs: RunObject[]; remote_runs: Array<{ machine: string; group: string; run_id: string }> } & Record<string, unknown>;

/**
 * Waits until a trigger holds `until` (default: no longer running), looking again at each run or
 * trigger event of the server (a trigger's state follows its runs).
 */
export async function waitTrigger(server: TestServer, id: string, until: (t: TriggerObject) => boolean = (t) => t.status !== "running", timeoutMs = 15_000): Promise<TriggerObject> {
  const stream = await openStream(server, server.adminToken, "/api/v1/test-runs/stream");
  const deadline = Date.now() + timeoutMs;
  try {
    for (;;) {
      const seen = stream.events.length;
      const res = await server.request(`/api/v1/test-runs/trigger/${id}`, { token: server.adminToken });
      assert.equal(res.status, 200);
      const trigger = (await res.json()) as TriggerObject;
      if (until(trigger)) return trigger;
      await stream.next((e) => stream.events.indexOf(e) >= seen, Math.max(0, deadline - Date.now()), `trigger ${id} (still ${trigger.status})`);
    }
  } finally {
    stream.close();
  }
}

/** The JSON report rows. */
export async function reportRows(server: TestServer, id: string): Promise<Record<string, string>[]> {
  const res = await server.request(`/api/v1/test-runs/${id}/report?format=json`, { token: server.adminToken });
  assert.equal(res.status, 200, await res.clone().text());
  return (await res.json()) as Record<string, string>[];
}

/** `test name -> status` of a report. */
export const statuses = (rows: Record<string, string>[]) => Object.fromEntries(rows.map((r) => [r["test name"], r.status]));

/** True while a process with this pid exists and is not a zombie (a container's init may not reap). */
export function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
  } catch {
    return false;
  }
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
    return stat.slice(stat.lastIndexOf(")") + 2)[0] !== "Z";
  } catch {
    return false;
  }
}

/**
 * Collects what the server logs at error level and the request-log lines of 5xx answers, so a
 * test can assert that no request was answered 500 (contract: a 500 is a bug).
 */
export function serverErrors(server: TestServer): string[] {
  const lines: string[] = [];
  const log = server.server.ctx.log;
  const { warn, error } = log;
  log.warn = (message) => {
    if (/ 5\d\d [\d.]+ms$/.test(message)) lines.push(message);
    warn(message);
  };
  log.error = (message) => {
    lines.push(message);
    error(message);
  };
  return lines;
}

/** The tests/api-test.yml example of test-run-server.md 4.2 (override hints and suites). */
export const API_TEST = `tests:
  base:
  - simple:
      device: "simple"
      override: device

override: ["tests.ext.0.simple.device"]

test-suites:
  compl:
    tests:
      - base
`;
