import { parseArgs, type ParseArgsConfig } from "node:util";
import { parseScopeNames, type Scope } from "../auth/scopes.ts";

/** The usage lines of the user and backup commands (here, so that help loads neither). */
export const USER_HELP = `  labgate user add NAME --scopes S1,S2 [--password-file F] [--config FILE] [--data-dir DIR] [--database-url URL]
  labgate user passwd NAME [--password-file F] [--config FILE] [--data-dir DIR] [--database-url URL]
  labgate user disable NAME | enable NAME [--config FILE] [--data-dir DIR] [--database-url URL]
  labgate user list [--config FILE] [--data-dir DIR] [--database-url URL]`;
export const BACKUP_HELP = `  labgate backup --out FILE [--config FILE] [--data-dir DIR] [--database-url URL]
  labgate restore --in FILE --data-dir NEW [--database-url URL]`;

export const CLUSTER_HELP = `  labgate cluster join --from URL --token-file FILE [--ca-file FILE] [--config FILE] [--data-dir DIR]`;

export const DB_HELP = `  labgate db copy --to postgres://USER:PASSWORD@HOST:PORT/DB [--config FILE] [--data-dir DIR]`;

/** A usage error: exit code 2. */
export class UsageError extends Error {}

export const COMMON = {
  config: { type: "string" },
  "data-dir": { type: "string" },
} as const satisfies ParseArgsConfig["options"];

/** The commands that open the database: where it is when it is PostgreSQL's (database.url). */
export const DATABASE = {
  ...COMMON,
  "database-url": { type: "string" },
} as const satisfies ParseArgsConfig["options"];

/** The flags of `args` (no positionals). */
export function parse<T extends NonNullable<ParseArgsConfig["options"]>>(args: string[], options: T) {
  return parseWith(args, options, false).values;
}

/** The flags and positionals of `args`. */
export function parseWith<T extends NonNullable<ParseArgsConfig["options"]>>(args: string[], options: T, allowPositionals = true) {
  try {
    return parseArgs({ args, options, strict: true, allowPositionals });
  } catch (error) {
    throw new UsageError((error as Error).message);
  }
}

/** `--scopes S1,S2` (prefixed or bare names) to scopes; at least one unless `allowNone`. */
export function parseScopeList(prefix: string, text: string, allowNone = false): Scope[] {
  const scopes = parseScopeNames(prefix, text.split(/[,\s]+/).filter(Boolean));
  if (typeof scopes === "string") throw new UsageError(`--scopes: ${scopes}`);
  if (scopes.length === 0 && !allowNone) throw new UsageError("--scopes: give at least one scope");
  return scopes;
}
