import assert from "node:assert/strict";
import type { TestServer } from "../../helpers/server.ts";
import {
  DeviceClient,
  generateDeviceKey,
  type DeviceKeyPair,
  type DeviceKeyType,
  type Metadata,
  type PublicKeyEncoding,
} from "../../../src/update/client/device-client.ts";
import type { HttpClient } from "../../../src/update/client/http.ts";

let counter = 0;
/** A fresh MAC address per call (unique within the test process). */
export const nextMac = (): string => {
  counter += 1;
  const hex = (process.pid * 1000 + counter).toString(16).padStart(12, "0").slice(-12);
  return hex.match(/../g)!.join(":");
};

export const deviceMetadata = (mac: string, extra: Metadata = {}): Metadata => ({
  "svc.software.version": "v1",
  "svc.hardware.devtype": "board",
  "svc.hardware.macaddr": mac,
  ...extra,
});

const keyCache = new Map<DeviceKeyType, DeviceKeyPair[]>();
/** Keys are slow to make (RSA): a few per type, reused across devices where the test does not care. */
export function key(type: DeviceKeyType = "ed25519", fresh = false): DeviceKeyPair {
  if (fresh) return generateDeviceKey(type);
  const list = keyCache.get(type) ?? [];
  if (list.length === 0) list.push(generateDeviceKey(type));
  keyCache.set(type, list);
  return list[0];
}

export interface ClientOptions {
  mac?: string;
  keys?: DeviceKeyPair;
  encoding?: PublicKeyEncoding;
  extra?: Metadata;
  now?: () => number;
  http?: HttpClient;
}

export function deviceClient(server: TestServer, options: ClientOptions = {}): DeviceClient {
  const mac = options.mac ?? nextMac();
  return new DeviceClient({
    server: server.url,
    privateKeyPem: (options.keys ?? key("ed25519", true)).privateKeyPem,
    metadata: deviceMetadata(mac, options.extra),
    publicKeyEncoding: options.encoding,
    now: options.now,
    http: options.http,
  });
}

/** Approves the pending registration of `client` as admin. */
export async function approve(server: TestServer, client: DeviceClient, confirmKeyChange?: boolean): Promise<Response> {
  return server.request("/api/v1/auth/register", {
    method: "POST",
    token: server.adminToken,
    json: { mac_address: client.mac, public_key: client.publicKeyPem, ...(confirmKeyChange === undefined ? {} : { confirm_key_change: confirmKeyChange }) },
  });
}

/** Full walk: auth (401, pending), approval, auth (token). Returns the client and the device id. */
export async function registerDevice(server: TestServer, options: ClientOptions = {}): Promise<{ client: DeviceClient; id: number; token: string }> {
  const client = deviceClient(server, options);
  assert.equal((await client.authorize()).status, "pending");
  const res = await approve(server, client);
  assert.equal(res.status, 200, await res.clone().text());
  const outcome = await client.authorize();
  assert.equal(outcome.status, "accepted");
  const list = (await (await server.request("/api/v1/devices", { token: server.adminToken })).json()) as { id: number; mac_address: string }[];
  const id = list.find((d) => d.mac_address === client.mac)!.id;
  return { client, id, token: (outcome as { token: string }).token };
}

/** The JSON body of a fetch Response or of a device client's answer. */
export async function json<T = any>(res: { json(): Promise<unknown> } | Promise<{ json(): Promise<unknown> }>): Promise<T> {
  return (await (await res).json()) as T;
}

/** Devices straight into the table (as the benchmark seeds them), with a device token each. */
export async function seedDevices(server: TestServer, count: number): Promise<{ id: number; mac: string; token: string }[]> {
  const macs = Array.from({ length: count }, () => nextMac());
  await server.db.write(async (tx) => {
    for (const mac of macs) {
      await tx.run("INSERT INTO devices (created, name, mac_address, capabilities, metadata, last_access) VALUES (?, ?, ?, '{}', '{}', ?)", [
        "2020-01-01T00:00:00.000Z",
        mac,
        mac,
        "2020-01-01T00:00:00.000Z",
      ]);
    }
  });
  const ids = new Map((await server.db.all<{ id: number; mac_address: string }>("SELECT id, mac_address FROM devices")).map((r) => [r.mac_address, r.id]));
  return macs.map((mac) => {
    const id = ids.get(mac)!;
    return { id, mac, token: server.server.ctx.tokens.issueDevice(mac, id, 3600) };
  });
}
