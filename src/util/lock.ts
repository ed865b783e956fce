import { closeSync, openSync, readFileSync, unlinkSync, writeSync } from "node:fs";
import { join } from "node:path";

export const LOCK_FILE = "labgate.lock";

/** Another live process serves this data dir. */
export class DataDirInUseError extends Error {}

function isAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === "EPERM";
  }
}

/**
 * Takes the data dir for this process. The lock file holds the owner's pid; a lock whose
 * process is gone (kill -9, power loss) is taken over, so it never stays stuck.
 */
export function acquireLock(dataDir: string): () => void {
  const path = join(dataDir, LOCK_FILE);
  for (let attempt = 0; attempt < 3; attempt++) {
    try {
      const fd = openSync(path, "wx", 0o600);
      writeSync(fd, `${process.pid}\n`);
      closeSync(fd);
      return () => {
        try {
          if (readFileSync(path, "utf8").trim() === String(process.pid)) unlinkSync(path);
        } catch {
          /* already gone */
        }
      };
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== "EEXIST") throw error;
    }
    let owner = NaN;
    try {
      owner = Number.parseInt(readFileSync(path, "utf8").trim(), 10);
    } catch {
      /* vanished between open and read: retry */
    }
    if (Number.isInteger(owner) && owner > 0 && owner !== process.pid && isAlive(owner)) {
      throw new DataDirInUseError(`data dir ${dataDir} is in use by labgate process ${owner} (lock file ${path}); stop it first`);
    }
    try {
      unlinkSync(path);
    } catch {
      /* someone else removed it */
    }
  }
  throw new DataDirInUseError(`could not take the lock file ${path}`);
}
