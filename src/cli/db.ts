import { existsSync } from "node:fs";
import { loadConfig } from "../config/config.ts";
import { refused, unreachable } from "../db/query/connection-errors.ts";
import { redactedText, redactedUrl } from "../db/url.ts";
import { acquireLock, DataDirInUseError } from "../util/lock.ts";
import { COMMON, DB_HELP, parseWith, UsageError } from "./args.ts";
import { CommandError } from "./users.ts";

/** `labgate db copy`: the stopped embedded database into an empty PostgreSQL database. */
export async function dbCommand(args: string[]): Promise<number> {
  const { positionals, values: flags } = parseWith(args, { ...COMMON, to: { type: "string" } });
  if (positionals[0] !== "copy" || positionals.length !== 1) throw new UsageError(`usage:\n${DB_HELP}`);
  if (!flags.to) throw new UsageError("db copy: --to postgres://... is required");
  if (!/^postgres(ql)?:\/\//.test(flags.to)) throw new UsageError("db copy: --to must be a postgres:// URL");
  const { config } = loadConfig({ file: flags.config, flags: { dataDir: flags["data-dir"] } });
  if (!existsSync(config.data_dir)) throw new CommandError(`no labgate database in ${config.data_dir}`);
  let release: () => void;
  try {
    release = acquireLock(config.data_dir);
  } catch (error) {
    if (error instanceof DataDirInUseError) throw new CommandError(`${error.message}: db copy reads a stopped database`);
    throw error;
  }
  try {
    const [{ copyToPostgres, CopyRefused }, { migrations }] = await Promise.all([(await import("../db/parts.ts")).loadPostgresPart(), import("../db/index.ts")]);
    try {
      const copied = await copyToPostgres({
        dataDir: config.data_dir,
        url: flags.to,
        migrations,
        warn: (message) => process.stderr.write(`labgate: ${message}\n`),
        progress: ({ table, rows }) => process.stdout.write(`${table}: ${rows} rows\n`),
      });
      const total = copied.reduce((sum, t) => sum + t.rows, 0);
      process.stdout.write(`copied ${copied.length} tables, ${total} rows, into ${redactedUrl(flags.to)}; the embedded files are unchanged\n`);
      return 0;
    } catch (error) {
      if (error instanceof CopyRefused) throw new CommandError(`db copy: ${error.message}`);
      if (unreachable(error) || refused(error)) throw new CommandError(`db copy: cannot use ${redactedUrl(flags.to)}: ${redactedText((error as Error).message, flags.to)}; nothing was copied`);
      throw error;
    }
  } finally {
    release();
  }
}
