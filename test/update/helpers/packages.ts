import { createHash } from "node:crypto";
import { gzipSync } from "node:zlib";
import assert from "node:assert/strict";
import type { TestServer } from "../../helpers/server.ts";

/** One ustar member (header + data padded to 512). */
export function tarMember(name: string, data: Buffer | string): Buffer {
  const body = Buffer.from(data);
  const header = Buffer.alloc(512);
  header.write(name, 0, 100, "utf8");
  header.write("0000644\0", 100, "latin1");
  header.write("0000000\0", 108, "latin1");
  header.write("0000000\0", 116, "latin1");
  header.write(body.length.toString(8).padStart(11, "0") + "\0", 124, "latin1");
  header.write("00000000000\0", 136, "latin1");
  header.write("        ", 148, "latin1");
  header.write("0", 156, "latin1");
  header.write("ustar\0", 257, "latin1");
  header.write("00", 263, "latin1");
  let sum = 0;
  for (const byte of header) sum += byte;
  header.write(sum.toString(8).padStart(6, "0") + "\0 ", 148, "latin1");
  const padding = Buffer.alloc((512 - (body.length % 512)) % 512);
  return Buffer.concat([header, body, padding]);
}

export const tar = (...members: Buffer[]): Buffer => Buffer.concat([...members, Buffer.alloc(1024)]);

/** A device artifact (version, manifest, header.tar with header-info, data) with these payload types. */
export function artifact(types: string[], options: { gzip?: boolean; headerInfo?: string } = {}): Buffer {
  const headerInfo = options.headerInfo ?? JSON.stringify({ payloads: types.map((type) => ({ type })), artifact_provides: { artifact_name: "x" } });
  const header = tar(tarMember("header-info", headerInfo));
  const file = tar(
    tarMember("version", JSON.stringify({ format: "mender", version: 3 })),
    tarMember("manifest", "abc  data/0000.tar\n"),
    tarMember("header.tar", header),
    tarMember("data/0000.tar", tar(tarMember("rootfs.ext4", "payload bytes"))),
  );
  return options.gzip ? gzipSync(file) : file;
}

export const sha256 = (data: Buffer | Uint8Array): string => createHash("sha256").update(data).digest("hex");

export interface UploadOptions {
  token: string;
  version?: string | null;
  devtype?: string | null;
  fields?: Record<string, string>;
  file?: Buffer | null;
  filename?: string;
}

/** Uploads a package with FormData (small files). null leaves a field out. */
export function upload(server: TestServer, options: UploadOptions, prefix = "svc"): Promise<Response> {
  const form = new FormData();
  if (options.version !== null) form.set(`${prefix}.software.version`, options.version ?? "v1");
  if (options.devtype !== null) form.set(`${prefix}.hardware.devtype`, options.devtype ?? "board");
  for (const [key, value] of Object.entries(options.fields ?? {})) form.set(key, value);
  if (options.file !== null) form.set("file", new Blob([new Uint8Array(options.file ?? Buffer.from("hello package"))]), options.filename ?? "pkg.bin");
  return server.request("/api/v1/packages", { method: "POST", token: options.token, body: form });
}

/** Uploads and returns the created package (asserting 200). */
export async function uploadOk(server: TestServer, options: UploadOptions): Promise<{ id: number; sha256: string; created: string; metadata: Record<string, unknown> }> {
  const res = await upload(server, options);
  if (res.status !== 200) throw new Error(`upload failed: ${res.status} ${await res.text()}`);
  return (await res.json()) as { id: number; sha256: string; created: string; metadata: Record<string, unknown> };
}

/** A group (v2, as admin) with `policy` that offers `packages` to `devices`; its id. */
export async function offerGroup(server: TestServer, group: { policy: string; packages: number[]; devices: number[]; priority?: number; metadata?: Record<string, string> }): Promise<number> {
  const created = await server.call<{ id: number }>("POST", "/api/v2/groups", { metadata: group.metadata ?? {}, ...(group.priority === undefined ? {} : { priority: group.priority }) });
  assert.equal(created.status, 200, JSON.stringify(created.body));
  const { id } = created.body;
  const steps: Array<[string, string, unknown]> = [
    ["POST", `/api/v2/groups/${id}/policy`, { policy: group.policy }],
    ["POST", `/api/v2/groups/${id}/package`, { packages: group.packages }],
    ["PATCH", `/api/v2/groups/${id}/devices`, { add: group.devices, remove: [] }],
  ];
  for (const [method, path, json] of steps) {
    const res = await server.call(method, path, json);
    assert.equal(res.status, 200, `${method} ${path}: ${JSON.stringify(res.body)}`);
  }
  return id;
}

/** Bytes that are not all alike (seeded), so that a wrong range or a mix-up shows. */
export const bytesOf = (length: number, seed = 7) => {
  const out = Buffer.alloc(length);
  let x = seed;
  for (let i = 0; i < length; i++) {
    x = (x * 1103515245 + 12345) >>> 0;
    out[i] = x >>> 24;
  }
  return out;
};
