// Apart from src/config/read.ts, so that what only throws or recognises a config error (the CLI's exit code,
// the agent's transport) does not bring the YAML parser into the agent's bundle.

/** A bad config file, flag or environment value; the CLI exits with code 2 and this message. */
export class ConfigError extends Error {}
