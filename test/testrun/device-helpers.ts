/*
 * A device that speaks the test-run protocol by hand (docs/device-tests.md, "Messages on the
 * device socket"): registered and named over HTTP, its socket reporting `tests: true`, and the
 * test driving each message and upload itself (what a well-behaved agent never sends included).
 * Needs only the server's URL and admin token, so it works against the single executable too.
 */
import assert from "node:assert/strict";
import { openDeviceSocket } from "../helpers/device-socket.ts";
import type { TestServer } from "../helpers/server.ts";
import { registerDevice } from "../update/helpers/devices.ts";

export interface ProtocolDevice {
  id: number;
  mac: string;
  token: string;
  /** The next `test_run_start` (or `test_run_abort`, ...) the gateway sends. */
  next(method: string, timeoutMs?: number): Promise<Record<string, unknown>>;
  send(message: Record<string, unknown>): void;
  /** A `test_run_row` of `run` (fields over the defaults). */
  row(run: string, fields?: Record<string, unknown>): void;
  /** PUT of an artifact at `offset`: its status and JSON answer. */
  upload(run: string, name: string, body: Uint8Array | string, offset?: number): Promise<{ status: number; body: Record<string, unknown> }>;
  close(): void;
}

/** A registered, approved, connected device named `name` (and with `mac` when given). */
export async function protocolDevice(server: Pick<TestServer, "url" | "request" | "adminToken">, name: string, mac?: string): Promise<ProtocolDevice> {
  const registered = await registerDevice(server as TestServer, mac ? { mac } : {});
  const renamed = await server.request(`/api/v2/devices/${registered.id}`, { method: "PATCH", json: { name }, token: server.adminToken });
  assert.equal(renamed.status, 200, await renamed.text());
  const socket = await openDeviceSocket(server.url, registered.token, `device ${registered.client.mac}`);
  const send = socket.send;
  send({ method: "capability_report", capabilities: { tests: true } });
  const mac0 = registered.client.mac;
  return {
    id: registered.id,
    mac: mac0,
    token: registered.token,
    next: socket.next,
    send,
    row: (run, fields = {}) => send({ method: "test_run_row", run_id: run, start_time: Date.now(), test_name: "case", module: "m", duration: 0, message: "", status: "passed", artifacts: [], ...fields }),
    upload: async (run, name, body, offset = 0) => {
      const res = await server.request(`/api/v1/devices/test-runs/${run}/artifacts/${name}?offset=${offset}`, {
        method: "PUT",
        body: typeof body === "string" ? body : Buffer.from(body),
        headers: { "content-type": "application/octet-stream" },
        token: registered.token,
      });
      return { status: res.status, body: (await res.json().catch(() => ({}))) as Record<string, unknown> };
    },
    close: () => socket.ws.close(),
  };
}
