/*
 * `labgate cluster join`: before a new node's first start, copies the signing key and the link
 * secret (keys/ of the data dir: the only secrets every node must hold alike; the rest of what
 * nodes share is in PostgreSQL and the config) from a running node, with an admin token.
 */
import { existsSync, readFileSync } from "node:fs";
import { isIP } from "node:net";
import { join } from "node:path";
import { installKeyFiles, KEY_FILES, KEYS_DIR, presentKeyFiles, readKeyFiles, type KeyFiles } from "../auth/keys.ts";
import { ClusterKeys } from "../cluster/schema.ts";
import { loadConfig } from "../config/config.ts";
import { httpClient } from "../update/client/http.ts";
import { COMMON, parseWith, UsageError } from "./args.ts";
import { CommandError } from "./users.ts";

/** Whether `host` (a URL's hostname) is this machine: plain HTTP never leaves it. */
export function isLoopbackHost(host: string): boolean {
  const bare = host.replace(/^\[|\]$/g, "");
  if (bare === "localhost") return true;
  if (isIP(bare) === 4) return bare.startsWith("127.");
  return bare === "::1";
}

/** The running node's base URL: https, or http to this machine only (the keys would cross the network in clear). */
function nodeUrl(text: string): URL {
  let url: URL;
  try {
    url = new URL(text);
  } catch {
    throw new UsageError(`--from: expected the URL of a running node (https://node-1:5000), got ${JSON.stringify(text)}`);
  }
  if (url.protocol === "https:") return url;
  if (url.protocol !== "http:") throw new UsageError(`--from: expected an https URL, got ${JSON.stringify(text)}`);
  if (!isLoopbackHost(url.hostname)) {
    throw new UsageError(`--from: refusing plain http to ${url.host}: the keys would cross the network unencrypted; use the node's https URL (plain http is accepted only for a loopback address)`);
  }
  return url;
}

function readSmallFile(flag: string, path: string): string {
  try {
    return readFileSync(path, "utf8");
  } catch (error) {
    throw new UsageError(`${flag}: cannot read ${path} (${(error as NodeJS.ErrnoException).code ?? (error as Error).message})`);
  }
}

export async function clusterCommand(args: string[]): Promise<number> {
  const { values: flags, positionals } = parseWith(args, { ...COMMON, from: { type: "string" }, "token-file": { type: "string" }, "ca-file": { type: "string" } });
  if (positionals[0] !== "join" || positionals.length !== 1) throw new UsageError(`unknown cluster command ${JSON.stringify(positionals.join(" "))}; expected: labgate cluster join`);
  if (!flags.from) throw new UsageError("--from: required (the URL of a running node, e.g. https://node-1:5000)");
  if (!flags["token-file"]) throw new UsageError("--token-file: required (a file holding an admin_rw token of the cluster)");
  const url = nodeUrl(flags.from);
  const token = readSmallFile("--token-file", flags["token-file"]).trim().split("\n")[0]?.trim() ?? "";
  if (!token) throw new UsageError(`--token-file: ${flags["token-file"]} is empty`);
  const ca = flags["ca-file"] ? Buffer.from(readSmallFile("--ca-file", flags["ca-file"])) : undefined;
  const { config } = loadConfig({ file: flags.config, flags: { dataDir: flags["data-dir"] } });
  const dataDir = config.data_dir;
  // Refused before anything is asked: a node's own keys are never replaced (tokens it issued would stop working).
  const present = existsSync(dataDir) ? presentKeyFiles(dataDir) : [];
  if (present.length > 0 && present.length < KEY_FILES.length) throw new CommandError(`${join(dataDir, KEYS_DIR)} holds some keys already; remove it, or start from an empty data dir`);

  const endpoint = `${url.origin}${url.pathname.replace(/\/+$/, "")}/api/v1/cluster/join`;
  let answer: unknown;
  let status: number;
  try {
    const res = await httpClient(ca ? { ca } : {})(endpoint, { method: "POST", headers: { authorization: `Bearer token=${token}` } });
    status = res.status;
    answer = await res.json().catch(() => undefined);
  } catch (error) {
    throw new CommandError(`cannot reach ${url.origin}: ${(error as Error).message}`);
  }
  if (status !== 200) {
    const message = (answer as { error?: unknown } | undefined)?.error;
    throw new CommandError(`${url.origin} refused (${status}): ${typeof message === "string" ? message : "no reason given"}`);
  }
  const parsed = ClusterKeys.safeParse(answer);
  if (!parsed.success) throw new CommandError(`${url.origin} did not answer with a node's keys (is it labgate?)`);
  const files: KeyFiles = parsed.data.files;
  if (present.length > 0) {
    const mine = readKeyFiles(dataDir);
    if (KEY_FILES.every((file) => mine[file] === files[file])) {
      process.stdout.write(`${join(dataDir, KEYS_DIR)} already holds the keys of ${url.origin}'s cluster\n`);
      return 0;
    }
    throw new CommandError(`${join(dataDir, KEYS_DIR)} holds other keys already (this data dir was started before, or joined another cluster); a node joins with an empty data dir`);
  }
  try {
    installKeyFiles(dataDir, files);
  } catch (error) {
    throw new CommandError(`keys from ${url.origin} not written: ${(error as Error).message}`);
  }
  process.stdout.write(`joined: the keys of ${url.origin}'s cluster are in ${join(dataDir, KEYS_DIR)}; start this node with the cluster's database.url\n`);
  return 0;
}
