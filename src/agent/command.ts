import { join } from "node:path";
import { COMMON, parse } from "../cli/args.ts";
import { ConfigError } from "../util/config-error.ts";
import { keyFingerprint, loadOrCreateDeviceKey } from "../update/client/device-client.ts";
import { Agent } from "./agent.ts";
import { collectAfterConnecting } from "./memory.ts";
import { loadConfigReader } from "./parts.ts";
import { DEVICE_KEY_FILE } from "./registration.ts";

/**
 * `labgate agent [--config FILE] [--server URL] [--data-dir DIR]`: runs until SIGINT or SIGTERM;
 * with `--fingerprint` prints the device key's fingerprint (making the key on a first run) and ends.
 */
export async function agentCommand(args: string[]): Promise<number> {
  const flags = parse(args, { ...COMMON, server: { type: "string" }, fingerprint: { type: "boolean" } });
  const read = (await loadConfigReader()).readAgentConfig({ file: flags.config, server: flags.server, dataDir: flags["data-dir"] });
  if ("error" in read) throw new ConfigError(read.error);
  const { config } = read;
  // What the Registrations page shows to compare with before approving.
  const fingerprint = keyFingerprint(loadOrCreateDeviceKey(join(config.data_dir, DEVICE_KEY_FILE), config.key_type).privateKeyPem);
  if (flags.fingerprint) {
    process.stdout.write(`${fingerprint}\n`);
    return 0;
  }
  const running = new Agent(config);
  running.start();
  collectAfterConnecting(running.connectedOnce);
  process.stderr.write(`labgate agent: device ${config.mac_address}, server ${config.servers.join(", ")}, data in ${config.data_dir}\nlabgate agent: key fingerprint (SHA-256) ${fingerprint}\n`);
  await new Promise<void>((resolve) => {
    const stop = () => void running.stop().then(resolve, resolve);
    process.once("SIGINT", stop);
    process.once("SIGTERM", stop);
  });
  return 0;
}
