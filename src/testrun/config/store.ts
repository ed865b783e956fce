/**
 * The config store: a flat directory DATA_DIR/testrun/configs/.
 * Only names accepted by isConfigName are ever joined to the directory, so nothing outside it
 * can be read, written or deleted.
 */
import { randomBytes } from "node:crypto";
import { lstatSync, mkdirSync, readdirSync, readFileSync, rmSync, unlinkSync, type Stats } from "node:fs";
import { open, rename, unlink } from "node:fs/promises";
import { join } from "node:path";
import type { Readable } from "node:stream";
import { rfc822 } from "../../util/time.ts";
import { fsyncDir } from "../../util/files.ts";
import { isConfigName } from "./names.ts";
import { LabgateError } from "../../util/errors.ts";
import { yamlSyntaxProblem } from "./yaml.ts";
import type { ConfigSource } from "../plan.ts";
import type { TestConfig } from "../schema.ts";

/** A stored config; `created` is its upload time (the file's modification time). */
export type ConfigInfo = Pick<TestConfig, "name" | "created">;

/** Why a save was refused. */
export class ConfigSaveError extends LabgateError {
  /** `line`: the line of the YAML problem, when known; the error body carries it. */
  constructor(code: "invalid" | "too_large", message: string, line?: number) {
    super(code, message, line === undefined ? undefined : { line });
  }
}

const TEMP_PREFIX = ".upload-";

/** A received, checked and fsynced upload that is not yet visible in the store. */
export interface PendingConfig {
  commit(): Promise<ConfigInfo>;
  discard(): Promise<void>;
}

export class ConfigStore implements ConfigSource {
  readonly dir: string;
  readonly maxBytes: number;

  constructor(dir: string, maxBytes: number) {
    this.dir = dir;
    this.maxBytes = maxBytes;
    mkdirSync(this.dir, { recursive: true, mode: 0o700 });
    // Temp files of uploads cut short by a crash (the data dir lock means none is in flight now).
    for (const name of readdirSync(this.dir)) if (name.startsWith(TEMP_PREFIX)) rmSync(join(this.dir, name), { force: true });
  }

  /** Path of a stored config, or undefined when the name is not valid or not a regular file. */
  private file(name: string): { path: string; stat: Stats } | undefined {
    if (!isConfigName(name)) return undefined;
    const path = join(this.dir, name);
    try {
      const stat = lstatSync(path);
      return stat.isFile() ? { path, stat } : undefined;
    } catch {
      return undefined;
    }
  }

  /** What changes when a stored config changes (inode, size, mtime), "" when there is none: keys caches of parsed views. */
  stamp(name: string): string {
    const found = this.file(name);
    return found ? `${found.stat.ino}:${found.stat.size}:${found.stat.mtimeMs}` : "";
  }

  /** Every stored config, sorted by name. */
  list(): ConfigInfo[] {
    return readdirSync(this.dir, { withFileTypes: true })
      .filter((d) => d.isFile() && isConfigName(d.name))
      .map((d) => this.info(d.name))
      .filter((i): i is ConfigInfo => i !== undefined)
      .sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
  }

  /** The list with each config's size in bytes (the console's list). */
  listWithSizes(): Array<ConfigInfo & { size: number }> {
    return this.list().map((info) => ({ ...info, size: this.file(info.name)?.stat.size ?? 0 }));
  }

  info(name: string): ConfigInfo | undefined {
    const found = this.file(name);
    return found ? { name, created: rfc822(found.stat.mtime, "+0000") } : undefined;
  }

  /** The path to stream a download from, or undefined. */
  pathOf(name: string): string | undefined {
    return this.file(name)?.path;
  }

  /** ConfigSource: the text of a stored config (the loader reads includes through this). */
  read(name: string): string | undefined {
    const found = this.file(name);
    if (!found) return undefined;
    try {
      return readFileSync(found.path, "utf8");
    } catch {
      return undefined;
    }
  }

  /** Deletes a config; false when there was none. */
  delete(name: string): boolean {
    const found = this.file(name);
    if (!found) return false;
    try {
      unlinkSync(found.path);
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code === "ENOENT") return false;
      throw error;
    }
    fsyncDir(this.dir);
    return true;
  }

  /**
   * Streams `content` into a temp file of the store: size limit, YAML check, fsync. Nothing is
   * visible until `commit()` (rename, directory fsync); `discard()` removes the temp file.
   * Throws ConfigSaveError (invalid, too large) after removing the temp file.
   */
  async receive(name: string, content: AsyncIterable<Uint8Array> | Readable): Promise<PendingConfig> {
    if (!isConfigName(name)) throw new ConfigSaveError("invalid", "invalid config name");
    const temp = join(this.dir, `${TEMP_PREFIX}${randomBytes(8).toString("hex")}.tmp`);
    const handle = await open(temp, "wx", 0o600);
    const discard = () => unlink(temp).catch(() => undefined);
    try {
      const chunks: Buffer[] = [];
      let size = 0;
      // Past the limit keep reading but drop the bytes: the multipart parser must see the part end.
      for await (const chunk of content) {
        size += chunk.byteLength;
        if (size > this.maxBytes) continue;
        const bytes = Buffer.from(chunk);
        chunks.push(bytes);
        await handle.write(bytes);
      }
      if (size > this.maxBytes) throw new ConfigSaveError("too_large", `config is larger than ${this.maxBytes} bytes`);
      // The limit keeps this small; the YAML check needs the whole text anyway.
      const problem = yamlSyntaxProblem(new TextDecoder("utf-8", { fatal: false }).decode(Buffer.concat(chunks)));
      if (problem) throw new ConfigSaveError("invalid", `invalid YAML: ${problem.message}`, problem.line);
      await handle.sync();
    } catch (error) {
      await handle.close().catch(() => undefined);
      await discard();
      throw error;
    }
    await handle.close();
    return {
      discard,
      commit: async () => {
        try {
          await rename(temp, join(this.dir, name));
        } catch (error) {
          await discard();
          throw error;
        }
        fsyncDir(this.dir);
        return this.info(name)!;
      },
    };
  }

  /** receive + commit in one step (for callers that have the whole content). */
  async save(name: string, content: AsyncIterable<Uint8Array> | Readable): Promise<ConfigInfo> {
    return (await this.receive(name, content)).commit();
  }
}
