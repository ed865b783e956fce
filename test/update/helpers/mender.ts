/*
 * Mender artifacts made by Debian's `mender-artifact` (3.9), signed with keys made by openssl as
 * it accepts them (RSA in PKCS#1 form, ECDSA P-256 in SEC1 form), and the same artifacts tampered
 * with member by member.
 */
import { execFileSync } from "node:child_process";
import { createHash, createPrivateKey, generateKeyPairSync, sign } from "node:crypto";
import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { gunzipSync, gzipSync } from "node:zlib";
import tar from "tar-stream";
import { tempDir } from "../../helpers/server.ts";

export interface SigningKey {
  kind: "rsa" | "ec" | "ed25519";
  /** The private key file (what `mender-artifact -k` takes; Ed25519: PKCS#8, signed by sign()). */
  key: string;
  /** The public key file (PEM SPKI): what verify_keys and update_server.signing.keys list. */
  pub: string;
  /** SHA-256 of the SPKI DER, hex. */
  fingerprint: string;
}

const run = (program: string, args: string[]) => execFileSync(program, args, { stdio: ["ignore", "pipe", "pipe"] });

/** A new key pair in its own directory. */
export function makeKey(kind: SigningKey["kind"]): SigningKey {
  const dir = tempDir(`labgate-key-${kind}-`);
  const key = join(dir, `${kind}.key`);
  const pub = join(dir, `${kind}.pub`);
  if (kind === "rsa") run("openssl", ["genrsa", "-traditional", "-out", key, "2048"]);
  else if (kind === "ec") run("openssl", ["ecparam", "-genkey", "-name", "prime256v1", "-noout", "-out", key]);
  else {
    const pair = generateKeyPairSync("ed25519");
    writeFileSync(key, pair.privateKey.export({ type: "pkcs8", format: "pem" }));
  }
  writeFileSync(pub, run("openssl", ["pkey", "-in", key, "-pubout"]));
  const fingerprint = createHash("sha256").update(run("openssl", ["pkey", "-pubin", "-in", pub, "-outform", "DER"])).digest("hex");
  return { kind, key, pub, fingerprint };
}

/**
 * A `single-file` artifact of `payload` (installed as /tmp/<file name>) named `name` for
 * `deviceType`, signed with `key` when given (Ed25519 is signed afterwards: mender-artifact
 * cannot).
 */
export async function makeArtifact(options: { name: string; deviceType: string; payload: Buffer; key?: SigningKey; fileName?: string }): Promise<Buffer> {
  const dir = tempDir("labgate-artifact-");
  const fileName = options.fileName ?? "image.bin";
  writeFileSync(join(dir, "dest_dir"), "/tmp");
  writeFileSync(join(dir, "filename"), fileName);
  writeFileSync(join(dir, fileName), options.payload);
  const out = join(dir, "out.mender");
  const signWith = options.key && options.key.kind !== "ed25519" ? ["-k", options.key.key] : [];
  run("mender-artifact", ["write", "module-image", "-T", "single-file", "-n", options.name, "-t", options.deviceType, "-o", out, "-f", join(dir, "dest_dir"), "-f", join(dir, "filename"), "-f", join(dir, fileName), ...signWith]);
  const artifact = readFileSync(out);
  return options.key?.kind === "ed25519" ? resign(artifact, options.key) : artifact;
}

/** `mender-artifact validate` of an artifact with a public key: whether it accepts it. */
export function menderValidates(artifact: Buffer, key: SigningKey): boolean {
  const file = join(tempDir("labgate-validate-"), "a.mender");
  writeFileSync(file, artifact);
  try {
    run("mender-artifact", ["validate", "-k", key.pub, file]);
    return true;
  } catch {
    return false;
  }
}

interface Member {
  name: string;
  data: Buffer;
}

async function members(archive: Buffer): Promise<Member[]> {
  const extract = tar.extract();
  const out: Member[] = [];
  const done = (async () => {
    for await (const entry of extract) {
      const chunks: Buffer[] = [];
      for await (const chunk of entry as AsyncIterable<Buffer>) chunks.push(chunk);
      out.push({ name: entry.header.name, data: Buffer.concat(chunks) });
    }
  })();
  extract.end(archive);
  await done;
  return out;
}

async function pack(list: Member[]): Promise<Buffer> {
  const packer = tar.pack();
  for (const member of list) packer.entry({ name: member.name, size: member.data.length, mode: 0o600, mtime: new Date(0) }, member.data);
  packer.finalize();
  const chunks: Buffer[] = [];
  for await (const chunk of packer as AsyncIterable<Buffer>) chunks.push(chunk);
  return Buffer.concat(chunks);
}

/** The artifact with its members changed by `change` (members in order, name and bytes). */
export async function rewrite(artifact: Buffer, change: (list: Member[]) => Member[] | void): Promise<Buffer> {
  const list = await members(artifact);
  return pack(change(list) ?? list);
}

/** The artifact whose payload file has one byte changed (the payload tar repacked, the manifest kept). */
export async function tamperPayload(artifact: Buffer): Promise<Buffer> {
  const list = await members(artifact);
  const data = list.find((m) => m.name === "data/0000.tar.gz")!;
  const files = await members(gunzipSync(data.data));
  const image = files.find((f) => !["dest_dir", "filename"].includes(f.name))!;
  image.data = Buffer.from(image.data);
  image.data[Math.floor(image.data.length / 2)] ^= 0x01;
  data.data = gzipSync(await pack(files));
  return pack(list);
}

/** The artifact with one member's bytes changed by `edit`. */
export function tamperMember(artifact: Buffer, name: string, edit: (data: Buffer) => Buffer): Promise<Buffer> {
  return rewrite(artifact, (list) => {
    const member = list.find((m) => m.name === name);
    if (!member) throw new Error(`no member ${name}`);
    member.data = edit(Buffer.from(member.data));
  });
}

/** The artifact's manifest (edited by `editManifest`) signed again with `key`, as mender-artifact would (manifest.sig added when it had none). */
export async function resign(artifact: Buffer, key: SigningKey, editManifest: (text: string) => string = (t) => t): Promise<Buffer> {
  return rewrite(artifact, (list) => {
    const manifest = list.find((m) => m.name === "manifest")!;
    manifest.data = Buffer.from(editManifest(manifest.data.toString("utf8")));
    const privateKey = createPrivateKey(readFileSync(key.key));
    const signature = key.kind === "ed25519" ? sign(null, manifest.data, privateKey) : sign("sha256", manifest.data, key.kind === "ec" ? { key: privateKey, dsaEncoding: "ieee-p1363" } : privateKey);
    const sig = { name: "manifest.sig", data: Buffer.from(signature.toString("base64")) };
    const rest = list.filter((m) => m.name !== "manifest.sig");
    const at = rest.indexOf(manifest) + 1;
    return [...rest.slice(0, at), sig, ...rest.slice(at)];
  });
}
