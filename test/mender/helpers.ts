/*
 * Debian's mender-client, unchanged, as a test device: each client runs in its own mount
 * namespace with temp dirs bind-mounted over its built-in paths (/etc/mender for artifact_info,
 * the identity script's dir, the update modules' dir), so several run side by side and nothing
 * of the machine changes. Needs root (unshare, mount).
 */
import { spawn, type ChildProcess } from "node:child_process";
import { chmodSync, copyFileSync, mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { tempDir } from "../helpers/server.ts";

export interface MenderClient {
  mac: string;
  dir: string;
  /** What the daemon printed (its log). */
  output(): string;
  stop(): Promise<void>;
}

export interface MenderOptions {
  serverUrl: string;
  mac: string;
  deviceType: string;
  artifactName: string;
  /** The `single-file` update module's text (default: Debian's). */
  singleFileModule?: string;
}

const BUILT_IN = { etc: "/etc/mender", identity: "/usr/share/mender/identity", modules: "/usr/share/mender/modules/v3" };

export function startMender(options: MenderOptions): MenderClient {
  const dir = tempDir("labgate-mender-");
  const paths = { etc: join(dir, "etc"), identity: join(dir, "identity"), modules: join(dir, "modules"), data: join(dir, "data") };
  for (const path of Object.values(paths)) mkdirSync(path, { recursive: true });
  writeFileSync(join(paths.etc, "artifact_info"), `artifact_name=${options.artifactName}\n`);
  writeFileSync(join(paths.data, "device_type"), `device_type=${options.deviceType}\n`);
  const identity = join(paths.identity, "mender-device-identity");
  writeFileSync(identity, `#!/bin/sh\necho mac=${options.mac}\n`);
  chmodSync(identity, 0o755);
  const module = join(paths.modules, "single-file");
  if (options.singleFileModule) writeFileSync(module, options.singleFileModule);
  else copyFileSync(join(BUILT_IN.modules, "single-file"), module);
  chmodSync(module, 0o755);
  const config = join(dir, "mender.conf");
  writeFileSync(
    config,
    JSON.stringify({ ServerURL: options.serverUrl, UpdatePollIntervalSeconds: 1, InventoryPollIntervalSeconds: 1, RetryPollIntervalSeconds: 1, DBus: { Enabled: false } }),
  );
  const script = [
    `mount --bind "$1" ${BUILT_IN.etc}`,
    `mount --bind "$2" ${BUILT_IN.identity}`,
    `mount --bind "$3" ${BUILT_IN.modules}`,
    `exec mender --config "$4" --fallback-config "$4" --data "$5" --no-syslog --log-level info daemon`,
  ].join(" && ");
  const child: ChildProcess = spawn("unshare", ["--mount", "--propagation", "private", "sh", "-c", script, "mender", paths.etc, paths.identity, paths.modules, config, paths.data], {
    stdio: ["ignore", "pipe", "pipe"],
    detached: true,
  });
  let log = "";
  child.stdout!.on("data", (chunk) => (log += chunk));
  child.stderr!.on("data", (chunk) => (log += chunk));
  const exited = new Promise<void>((resolve) => child.once("exit", () => resolve()));
  return {
    mac: options.mac,
    dir,
    output: () => log,
    async stop() {
      if (child.exitCode === null && child.pid !== undefined) process.kill(-child.pid, "SIGTERM");
      await exited;
    },
  };
}
