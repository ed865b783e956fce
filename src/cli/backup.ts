import { createReadStream, createWriteStream, existsSync, renameSync, statSync } from "node:fs";
import { basename, dirname, join, relative, resolve, isAbsolute } from "node:path";
import { PassThrough, Readable, type Writable } from "node:stream";
import { finished } from "node:stream/promises";
import { cliActor, recordAudit } from "../audit/audit.ts";
import { appendToSpool } from "../audit/spool.ts";
import { BackupError, readArchive, type ReadResult } from "../backup/archive.ts";
import { takeSnapshot } from "../backup/backup.ts";
import { restoreBackup, type Restored } from "../backup/restore.ts";
import { checkDatabaseUrl, loadConfig } from "../config/config.ts";
import { redactedUrl } from "../db/url.ts";
import { fsyncDir, fsyncFile, removeWritten } from "../util/files.ts";
import { DATABASE, parse, UsageError } from "./args.ts";
import { CommandError, onDataDir } from "./users.ts";

const describe = (r: ReadResult) => `${r.entries.length} files, ${r.bytes} bytes; taken ${r.info.created} from ${String(r.info.data_dir)}`;

/**
 * Copies the backup stream `source` to `out` ("-": stdout) and checks it on the way (the same
 * check restore makes): a file only appears at `out`, by rename, once all of it is on disk and
 * intact.
 */
async function saveChecked(source: Readable, out: string): Promise<ReadResult> {
  const toStdout = out === "-";
  const temp = toStdout ? "" : join(dirname(out), `.${basename(out)}.partial-${process.pid}`);
  const sink: Writable = toStdout ? process.stdout : createWriteStream(temp, { flags: "wx", mode: 0o600 });
  const checker = new PassThrough();
  source.pipe(sink, { end: !toStdout });
  source.pipe(checker);
  const fail = (error: Error) => {
    source.destroy();
    if (!toStdout) sink.destroy();
    checker.destroy();
    return error;
  };
  source.once("error", (error) => checker.destroy(error));
  try {
    const [result] = await Promise.all([
      readArchive(checker).catch((error) => Promise.reject(fail(error))),
      toStdout ? finished(source) : finished(sink).catch((error) => Promise.reject(fail(error))),
    ]);
    if (!toStdout) {
      await fsyncFile(temp);
      renameSync(temp, out);
      fsyncDir(dirname(out));
    }
    return result;
  } catch (error) {
    if (!toStdout) await removeWritten(sink, temp);
    throw error instanceof BackupError ? new CommandError(`backup not written: ${error.message}`) : error;
  }
}

/**
 * With no server running, backup opens the database, which writes a new image and journal: as
 * another user than the data dir's owner (root, for a service's data dir) those files would be
 * theirs and the service could not read them.
 */
function refuseForeignOwner(dataDir: string): void {
  const owner = statSync(dataDir).uid;
  if (process.getuid && process.getuid() !== owner) {
    throw new CommandError(`${dataDir} belongs to uid ${owner}: with no server running, run labgate backup as that user (e.g. sudo -u labgate)`);
  }
}

/** `labgate backup --out FILE`: from the running server (its API), or from the data dir when none runs. */
export async function backupCommand(args: string[]): Promise<number> {
  const flags = parse(args, { ...DATABASE, out: { type: "string" } });
  if (!flags.out) throw new UsageError("--out: required (the backup file to write, or - for stdout)");
  const { config } = loadConfig({ file: flags.config, flags: { dataDir: flags["data-dir"], databaseUrl: flags["database-url"] } });
  const out = flags.out === "-" ? "-" : resolve(flags.out);
  if (out !== "-") {
    const rel = relative(resolve(config.data_dir), out);
    if (!rel.startsWith("..") && !isAbsolute(rel)) throw new UsageError(`--out: ${out} is inside the data dir; put backups elsewhere`);
    if (!existsSync(dirname(out))) throw new UsageError(`--out: directory ${dirname(out)} does not exist`);
  }
  const result = await onDataDir(
    config,
    async (store) => {
      refuseForeignOwner(config.data_dir);
      // In the log before the snapshot, as the server does: the backup holds its own entry.
      await recordAudit(store.query, cliActor(), "backup", "data_dir");
      const snapshot = await takeSnapshot({ config, store, serverRunning: false, now: new Date(), warn: (m) => process.stderr.write(`labgate: ${m}\n`) });
      const stream = new PassThrough({ highWaterMark: 256 * 1024 });
      const writing = snapshot.write(stream);
      const [saved] = await Promise.all([saveChecked(stream, out), writing]);
      return saved;
    },
    async (_call, request) => {
      const res = await request("POST", "/api/v1/backup");
      if (res.status !== 200) {
        const answer = (await res.json().catch(() => ({}))) as { error?: string };
        throw new CommandError(`backup refused by the server: ${answer.error ?? `status ${res.status}`}`);
      }
      return saveChecked(res.body, out);
    },
  );
  process.stderr.write(`labgate: backup ${out === "-" ? "written to stdout" : `written to ${out}`}: ${describe(result)}\n`);
  return 0;
}

/**
 * `labgate restore --in FILE --data-dir NEW [--database-url URL]` (or LABGATE_DATABASE_URL): with
 * a URL, the backup's database goes into that empty PostgreSQL database.
 */
export async function restoreCommand(args: string[]): Promise<number> {
  const flags = parse(args, { in: { type: "string" }, "data-dir": { type: "string" }, "database-url": { type: "string" } });
  // Checked as serve checks it, before anything is read.
  const given = flags["database-url"] !== undefined ? (["--database-url", flags["database-url"]] as const) : (["LABGATE_DATABASE_URL", process.env.LABGATE_DATABASE_URL ?? ""] as const);
  const url = given[1] ? checkDatabaseUrl(given[1], given[0]) : "";
  if (!flags.in) throw new UsageError("--in: required (the backup file, or - for stdin)");
  if (!flags["data-dir"]) throw new UsageError("--data-dir: required (a new or empty directory to restore into)");
  const input = flags.in === "-" ? process.stdin : createReadStream(flags.in);
  const opened = new Promise<void>((resolve, reject) => {
    if (flags.in === "-") return resolve();
    input.once("open", () => resolve()).once("error", (error: NodeJS.ErrnoException) => reject(new CommandError(`--in: cannot read ${flags.in}: ${error.code ?? error.message}`)));
  });
  await opened;
  let result: Restored;
  try {
    result = await restoreBackup(input, flags["data-dir"], {
      // The restore's entry waits in the new data dir's audit spool: its first start logs it.
      beforeCommit: (dir, read) => appendToSpool(dir, cliActor(), "restore", "data_dir", { from: String(read.info.data_dir), taken: String(read.info.created), files: read.entries.length, bytes: read.bytes }),
      databaseUrl: url || undefined,
      warn: (message) => process.stderr.write(`labgate: ${message}\n`),
    });
  } catch (error) {
    throw error instanceof BackupError ? new CommandError(`nothing restored: ${error.message}`) : error;
  }
  const target = resolve(flags["data-dir"]);
  // The same line on both engines; the copy's own line says where the database went.
  process.stdout.write(`restored into ${target}: ${describe(result)}\n`);
  if (result.copied) process.stdout.write(`copied ${result.copied.length} tables, ${result.copied.reduce((sum, t) => sum + t.rows, 0)} rows into ${redactedUrl(url)}\n`);
  const moved = result.info.moved_into_data_dir;
  if (moved && typeof moved === "object") {
    for (const [from, to] of Object.entries(moved)) process.stdout.write(`note: ${from} is now ${join(target, String(to))}\n`);
  }
  return 0;
}
