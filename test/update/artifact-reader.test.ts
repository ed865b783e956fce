/*
 * The Mender artifact reader (src/artifact/mender/reader.ts) on artifacts Debian's mender-artifact
 * wrote and signed, and on the same artifacts tampered with: each refusal names its problem.
 */
import assert from "node:assert/strict";
import { createReadStream, writeFileSync } from "node:fs";
import { join } from "node:path";
import { Readable } from "node:stream";
import { test } from "node:test";
import { loadVerifyKeys, KeyFileError } from "../../src/artifact/mender/keys.ts";
import { ArtifactCheck, ArtifactError, readArtifact, type ArtifactProblem } from "../../src/artifact/mender/reader.ts";
import { tempDir } from "../helpers/server.ts";
import { makeArtifact, makeKey, menderValidates, resign, tamperMember, tamperPayload } from "./helpers/mender.ts";

const rsa = makeKey("rsa");
const ec = makeKey("ec");
const ed = makeKey("ed25519");
const stranger = makeKey("rsa");
const keys = loadVerifyKeys([rsa.pub, ec.pub, ed.pub]);
const payload = Buffer.alloc(200_000, "labgate image ");

const read = (artifact: Buffer, withKeys = keys) => readArtifact(Readable.from([artifact]), { keys: withKeys });
/** manifest.sig (base64) with one bit of the signature changed. */
const flipSignatureBit = (sig: Buffer): Buffer => {
  const raw = Buffer.from(sig.toString(), "base64");
  raw[10] ^= 1;
  return Buffer.from(raw.toString("base64"));
};

async function refused(artifact: Buffer, problem: ArtifactProblem, detail: RegExp): Promise<void> {
  await assert.rejects(read(artifact), (error: unknown) => {
    assert.ok(error instanceof ArtifactError, String(error));
    assert.equal(error.problem, problem, error.message);
    assert.match(error.message, detail);
    assert.ok(error.message.startsWith(`${problem}: `));
    return true;
  });
}

test("artifacts signed by mender-artifact with RSA and ECDSA keys (and Ed25519) verify; the reader says what they are and which key signed", async () => {
  for (const key of [rsa, ec, ed]) {
    const artifact = await makeArtifact({ name: `release-${key.kind}`, deviceType: "board-a", payload, key });
    if (key.kind !== "ed25519") assert.ok(menderValidates(artifact, key), "mender-artifact accepts it too");
    const info = await read(artifact);
    assert.equal(info.artifact_name, `release-${key.kind}`);
    assert.deepEqual(info.device_types, ["board-a"]);
    assert.deepEqual(info.payload_types, ["single-file"]);
    assert.equal(info.format_version, 3);
    assert.equal(info.signed, true);
    assert.equal(info.signed_by?.fingerprint, key.fingerprint, `${key.kind}: the fingerprint is openssl's SHA-256 of the SPKI DER`);
  }
});

test("without keys the signature is not checked, but every checksum is", async () => {
  const unsigned = await makeArtifact({ name: "plain", deviceType: "b", payload });
  const info = await readArtifact(Readable.from([unsigned]));
  assert.equal(info.signed, false);
  assert.equal(info.artifact_name, "plain");
  await assert.rejects(readArtifact(Readable.from([await tamperPayload(unsigned)])), { message: /^payload checksum: data\/0000\/image\.bin does not match/ });
});

test("each tampered artifact is refused with its problem", async () => {
  const signed = await makeArtifact({ name: "r1", deviceType: "b", payload, key: rsa });
  await refused(await makeArtifact({ name: "r1", deviceType: "b", payload }), "unsigned", /no manifest\.sig/);
  await refused(Buffer.from("just some file, not an artifact"), "unsigned", /not a Mender artifact/);
  await refused(await makeArtifact({ name: "r1", deviceType: "b", payload, key: stranger }), "no key matches", /none of the 3 key/);
  await refused(await tamperMember(signed, "manifest.sig", (sig) => flipSignatureBit(sig)), "no key matches", /manifest\.sig/);
  await refused(await tamperMember(signed, "manifest", (m) => Buffer.from(m.toString().replace(/^./, (c) => (c === "0" ? "1" : "0")))), "no key matches", /manifest\.sig/);
  await refused(await tamperPayload(signed), "payload checksum", /data\/0000\/image\.bin does not match its manifest checksum/);
  await refused(
    await tamperMember(signed, "data/0000.tar.gz", (gz) => {
      gz[Math.floor(gz.length / 2)] ^= 0xff;
      return gz;
    }),
    "payload checksum",
    /data\/0000/,
  );
  await refused(await tamperMember(signed, "header.tar.gz", (h) => Buffer.concat([h, Buffer.alloc(1)])), "manifest", /header\.tar\.gz does not match its manifest checksum/);
  // A manifest signed again by a trusted key but that no longer lists the header.
  await refused(await resign(signed, rsa, (m) => m.replace(/^.*header\.tar\.gz\n/m, "")), "manifest", /header\.tar\.gz is not in the manifest/);
  await refused(await resign(signed, ec, (m) => `${m}${"0".repeat(64)}  data/0000/extra.bin\n`), "manifest", /data\/0000\/extra\.bin is in the manifest but not in the artifact/);
});

test("key files: a private key, an unsupported curve or no key at all is refused naming the file", () => {
  const dir = tempDir("labgate-keys-");
  const cases: Array<[string, string, RegExp]> = [
    ["private.pem", "-----BEGIN EC PRIVATE KEY-----\nMHcCAQEE\n-----END EC PRIVATE KEY-----\n", /EC PRIVATE KEY, not a public key/],
    ["empty.pem", "nothing here\n", /no PEM public key/],
  ];
  for (const [name, text, message] of cases) {
    writeFileSync(join(dir, name), text);
    assert.throws(() => loadVerifyKeys([join(dir, name)]), (error: unknown) => error instanceof KeyFileError && message.test(error.message) && error.message.includes(name));
  }
  assert.throws(() => loadVerifyKeys([join(dir, "missing.pem")]), /missing\.pem: cannot be read \(ENOENT\)/);
});

test("a large artifact streams through the check with flat memory", async () => {
  const big = Buffer.alloc(48 * 1024 * 1024);
  for (let i = 0; i < big.length; i += 4096) big.writeUInt32LE((i * 2654435761) >>> 0, i);
  const file = join(tempDir("labgate-big-"), "big.mender");
  writeFileSync(file, await makeArtifact({ name: "big", deviceType: "b", payload: big, key: ec }));
  const check = new ArtifactCheck({ keys });
  const base = process.memoryUsage().arrayBuffers;
  let peak = 0;
  for await (const chunk of createReadStream(file)) {
    await check.write(chunk as Buffer);
    peak = Math.max(peak, process.memoryUsage().arrayBuffers - base);
  }
  const info = await check.end();
  assert.equal(info.signed_by?.fingerprint, ec.fingerprint);
  assert.ok(peak < 16 * 1024 * 1024, `buffers grew by ${peak} bytes while reading a 48 MB artifact`);
});
