/*
 * The agent's config as its start reads it (./config.ts: the YAML file and zod/mini). In a build a
 * bundle of its own (AGENT_CONFIG_BUNDLE, ./parts.ts), which the agent runs once and then holds
 * nothing of: the YAML parser and zod are 60% of the rest of the agent's code, and V8 keeps a
 * bundle's whole source and every function it compiled as long as any of its functions lives.
 */
import { ConfigError } from "../util/config-error.ts";
import { loadAgentConfig, type AgentConfig } from "./config.ts";

export type ConfigRead = { config: AgentConfig } | { error: string };

/** loadAgentConfig, with a config error as its message (in a build this bundle's ConfigError is not the agent's). */
export function readAgentConfig(options: Parameters<typeof loadAgentConfig>[0]): ConfigRead {
  try {
    return { config: loadAgentConfig(options) };
  } catch (error) {
    if (error instanceof ConfigError) return { error: error.message };
    throw error;
  }
}
