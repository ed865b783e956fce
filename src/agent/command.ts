import { COMMON, parse } from "../cli/args.ts";
import { Agent } from "./agent.ts";
import { loadAgentConfig } from "./config.ts";
import { collectStartupGarbage } from "./memory.ts";

/** How long after its first connection the agent drops its start's garbage (src/agent/memory.ts): its first update check is usually done by then. */
const SETTLE_MS = 1000;

/** `labgate agent [--config FILE] [--server URL] [--data-dir DIR]`: runs until SIGINT or SIGTERM. */
export async function agentCommand(args: string[]): Promise<number> {
  const flags = parse(args, { ...COMMON, server: { type: "string" } });
  const config = loadAgentConfig({ file: flags.config, server: flags.server, dataDir: flags["data-dir"] });
  const running = new Agent(config);
  running.start();
  void running.connectedOnce.then(() => setTimeout(collectStartupGarbage, SETTLE_MS).unref());
  process.stderr.write(`labgate agent: device ${config.mac_address}, server ${config.server}, data in ${config.data_dir}\n`);
  await new Promise<void>((resolve) => {
    const stop = () => void running.stop().then(resolve, resolve);
    process.once("SIGINT", stop);
    process.once("SIGTERM", stop);
  });
  return 0;
}
