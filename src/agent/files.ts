/*
 * File probes and uploads for the server's fs/file, confined
 * to the agent's file_base_dir: the path is resolved, symlinks included, and must stay inside.
 */
import { constants } from "node:fs";
import { open, readlink, realpath, stat, type FileHandle } from "node:fs/promises";
import { isAbsolute, relative, sep } from "node:path";
import type { DeviceMessage } from "../protocol/labgate/device.ts";
import { httpRequest, type HttpClient } from "../update/client/http.ts";

/** The real path of `file` when it is a regular file inside `baseDir`, else undefined. */
export async function confinedFile(baseDir: string, file: string): Promise<{ path: string; size: number } | undefined> {
  if (typeof file !== "string" || !isAbsolute(file) || file.includes("\0")) return undefined;
  try {
    const base = await realpath(baseDir);
    const path = await realpath(file);
    const rel = relative(base, path);
    if (rel === "" || rel === ".." || rel.startsWith(`..${sep}`) || isAbsolute(rel)) return undefined;
    const info = await stat(path);
    return info.isFile() ? { path, size: info.size } : undefined;
  } catch {
    return undefined;
  }
}

/**
 * Opens the file that `confinedFile` found, making sure that what was opened is that file: no
 * symlink swapped in at the last component (O_NOFOLLOW), no FIFO to block on (O_NONBLOCK), the
 * same inode, and, where /proc shows it, a path still inside `baseDir` (a directory swapped for a
 * symlink between the check and the open).
 */
export async function openConfined(baseDir: string, file: string): Promise<{ handle: FileHandle; size: number } | undefined> {
  const found = await confinedFile(baseDir, file);
  if (!found) return undefined;
  let handle: FileHandle;
  try {
    handle = await open(found.path, constants.O_RDONLY | constants.O_NOFOLLOW | constants.O_NONBLOCK);
  } catch {
    return undefined;
  }
  try {
    const [opened, checked] = await Promise.all([handle.stat(), stat(found.path)]);
    if (!opened.isFile() || opened.ino !== checked.ino || opened.dev !== checked.dev) throw new Error("file changed");
    const actual = await readlink(`/proc/self/fd/${handle.fd}`).catch(() => undefined);
    if (actual !== undefined && (await confinedFile(baseDir, actual))?.path !== actual) throw new Error("file moved outside");
    return { handle, size: opened.size };
  } catch {
    await handle.close();
    return undefined;
  }
}

/**
 * Uploads an open file in parts of `partSize` bytes, one PUT per URL in order (an empty file is
 * one empty part). Returns the ETag of each part, or throws. The handle stays open.
 */
export async function uploadParts(handle: FileHandle, urls: string[], partSize: number, http: HttpClient = httpRequest): Promise<string[]> {
  if (!Array.isArray(urls) || urls.length === 0 || !urls.every((u) => typeof u === "string")) throw new Error("no upload URLs");
  if (!Number.isInteger(partSize) || partSize <= 0) throw new Error("bad part size");
  const etags: string[] = [];
  for (let i = 0; i < urls.length; i++) {
    const buffer = Buffer.alloc(partSize);
    const { bytesRead } = await handle.read(buffer, 0, partSize, i * partSize);
    const put = () => http(urls[i], { method: "PUT", body: buffer.subarray(0, bytesRead), headers: { "content-type": "application/octet-stream" } });
    // A keep-alive connection the server closed as idle just as it was reused fails the write
    // (EPIPE, reset) before any answer; on a busy machine that window is wide. Once more on a fresh one.
    const response = await put().catch(put);
    response.discard();
    const etag = response.headers.etag;
    if (response.status !== 200 || !etag) throw new Error(`part ${i} upload answered ${response.status}`);
    etags.push(etag.replace(/^"|"$/g, ""));
  }
  return etags;
}

/** Answers `fs_file_probe`: whether the file is there (inside `baseDir`) and its size. */
export async function answerProbe(baseDir: string, send: (message: DeviceMessage) => boolean, id: string, file: string): Promise<void> {
  const found = await confinedFile(baseDir, file);
  send({ method: "fs_file_probe_reply", id, status: found ? 0 : 1, size: found?.size ?? 0 });
}

/** Answers `fs_file_download`: uploads the file's parts to the signed URLs, then their ETags. */
export async function answerDownload(
  baseDir: string,
  send: (message: DeviceMessage) => boolean,
  log: { warn(text: string): void },
  http: HttpClient,
  request: { id: string; file: string; urls: string[]; partSize: number },
): Promise<void> {
  const { id } = request;
  try {
    const found = await openConfined(baseDir, request.file);
    if (!found) throw new Error("file is not available");
    try {
      const etags = await uploadParts(found.handle, request.urls, request.partSize, http);
      send({ method: "fs_file_download_reply", id, status: 0, etags });
    } finally {
      await found.handle.close();
    }
  } catch (error) {
    log.warn(`agent: file upload failed: ${(error as Error).message}`);
    send({ method: "fs_file_download_reply", id, status: 1, etags: [] });
  }
}
