import { COMMON, parse } from "../cli/args.ts";
import { ConfigError } from "../config/error.ts";
import { Agent } from "./agent.ts";
import { collectAfterConnecting } from "./memory.ts";
import { loadConfigReader } from "./parts.ts";

/** `labgate agent [--config FILE] [--server URL] [--data-dir DIR]`: runs until SIGINT or SIGTERM. */
export async function agentCommand(args: string[]): Promise<number> {
  const flags = parse(args, { ...COMMON, server: { type: "string" } });
  const read = (await loadConfigReader()).readAgentConfig({ file: flags.config, server: flags.server, dataDir: flags["data-dir"] });
  if ("error" in read) throw new ConfigError(read.error);
  const { config } = read;
  const running = new Agent(config);
  running.start();
  collectAfterConnecting(running.connectedOnce);
  process.stderr.write(`labgate agent: device ${config.mac_address}, server ${config.server}, data in ${config.data_dir}\n`);
  await new Promise<void>((resolve) => {
    const stop = () => void running.stop().then(resolve, resolve);
    process.once("SIGINT", stop);
    process.once("SIGTERM", stop);
  });
  return 0;
}
