/*
 * Debian's swupdate (2022.12, suricatta in hawkBit mode), unchanged, as a test device: it runs in
 * its own mount namespace with a private dir over /tmp (its IPC sockets' fixed paths), so
 * several run side by side and nothing of the machine changes; its files live under /var/tmp.
 * Its .swu images are made here as SWUpdate documents them: a CMS-signed sw-description and
 * the files, in a cpio archive (crc format). Needs root (unshare, mount).
 */
import { execFileSync, spawn, type ChildProcess } from "node:child_process";
import { createHash } from "node:crypto";
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";

/** A dir outside /tmp (the client's /tmp is its own); removed by `removeAll`. */
const made: string[] = [];
export function workDir(label: string): string {
  const dir = mkdtempSync(join("/var/tmp", label));
  made.push(dir);
  return dir;
}
export const removeAll = () => {
  for (const dir of made.splice(0)) rmSync(dir, { recursive: true, force: true });
};

export interface Signer {
  cert: string;
  key: string;
}

/** A self-signed certificate for CMS signatures, with the purpose swupdate checks by default (emailProtection). */
export function makeSigner(dir: string): Signer {
  const cert = join(dir, "signer.crt");
  const key = join(dir, "signer.key");
  execFileSync("openssl", ["req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=labgate test signer", "-addext", "extendedKeyUsage=emailProtection", "-addext", "keyUsage=digitalSignature", "-keyout", key, "-out", cert], { stdio: "ignore" });
  return { cert, key };
}

/** A signed .swu for hardware revision 1.0 whose one file (`rawfile` handler) is written to `path` with `content`. */
export function makeSwu(dir: string, signer: Signer, version: string, path: string, content: string): Buffer {
  const build = join(dir, `swu-${version}`);
  mkdirSync(build, { recursive: true });
  writeFileSync(join(build, "app.conf"), content);
  const sha256 = createHash("sha256").update(content).digest("hex");
  writeFileSync(
    join(build, "sw-description"),
    `software = {\n  version = "${version}";\n  description = "labgate test image";\n  hardware-compatibility: [ "1.0" ];\n  files: (\n    {\n      filename = "app.conf";\n      path = "${path}";\n      sha256 = "${sha256}";\n    }\n  );\n}\n`,
  );
  execFileSync("openssl", ["cms", "-sign", "-in", "sw-description", "-out", "sw-description.sig", "-signer", signer.cert, "-inkey", signer.key, "-outform", "DER", "-nosmimecap", "-binary"], { cwd: build });
  execFileSync("sh", ["-c", "printf 'sw-description\\nsw-description.sig\\napp.conf\\n' | cpio -o -H crc --quiet > image.swu"], { cwd: build });
  return readFileSync(join(build, "image.swu"));
}

export interface SwupdateClient {
  output(): string;
  stop(): Promise<void>;
}

export interface SwupdateOptions {
  serverUrl: string;
  controllerId: string;
  token: string;
  signer: Signer;
  /** `-c`: the state to confirm at start (2: the image installed before the restart works). */
  confirm?: 2 | 3;
}

export function startSwupdate(options: SwupdateOptions): SwupdateClient {
  const privateTmp = workDir("labgate-swupdate-tmp-");
  const suricatta = ["-t", "DEFAULT", "-i", options.controllerId, "-u", options.serverUrl, "-k", options.token, ...(options.confirm ? ["-c", String(options.confirm)] : [])].join(" ");
  // -H: the board and revision an image's hardware-compatibility is checked against (else /etc/hwrevision).
  const script = `mount --bind "$1" /tmp && exec swupdate -v -H labgate-board:1.0 -k "$2" -u "$3"`;
  const child: ChildProcess = spawn("unshare", ["--mount", "--propagation", "private", "sh", "-c", script, "swupdate", privateTmp, options.signer.cert, suricatta], {
    stdio: ["ignore", "pipe", "pipe"],
    detached: true,
  });
  let log = "";
  child.stdout!.on("data", (chunk) => (log += chunk));
  child.stderr!.on("data", (chunk) => (log += chunk));
  const exited = new Promise<void>((resolve) => child.once("exit", () => resolve()));
  return {
    output: () => log,
    async stop() {
      if (child.exitCode === null && child.pid !== undefined) process.kill(-child.pid, "SIGTERM");
      await exited;
    },
  };
}
