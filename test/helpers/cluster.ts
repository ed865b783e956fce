/*
 * Nodes of a cluster as child processes (`labgate serve` on one PostgreSQL database): what a test
 * that kills one needs. Each has its own data dir with the first node's signing keys (as
 * `labgate cluster join` copies them), a port chosen before it starts (its advertise_url), and
 * the first node's admin token.
 */
import { cpSync, readFileSync, writeFileSync } from "node:fs";
import { createServer } from "node:net";
import { join } from "node:path";
import { KEYS_DIR } from "../../src/auth/keys.ts";
import { startServe, type ServeProcess } from "./cli.ts";
import { callWith, requestAt, startTestServer, tempDir, type TestServer } from "./server.ts";

export interface NodeProcess extends ServeProcess {
  name: string;
  dataDir: string;
  port: number;
  request: TestServer["request"];
  call: TestServer["call"];
}

export async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once("error", reject);
    server.listen(0, "127.0.0.1", () => {
      const { port } = server.address() as { port: number };
      server.close(() => resolve(port));
    });
  });
}

/**
 * Starts node `name` on `databaseUrl`; `first`: the node whose keys and admin token it takes
 * (none: it is the first, and writes them); `joined`: its data dir has the keys already (from
 * `labgate cluster join`), only `first`'s admin token is taken. `config`: more YAML lines of its config file.
 */
export async function startNode(
  databaseUrl: string,
  name: string,
  options: { first?: NodeProcess; joined?: boolean; dataDir?: string; port?: number; config?: string[]; env?: Record<string, string> } = {},
): Promise<NodeProcess & { adminToken: string }> {
  const dataDir = options.dataDir ?? tempDir();
  if (options.first && !options.joined) cpSync(join(options.first.dataDir, KEYS_DIR), join(dataDir, KEYS_DIR), { recursive: true });
  const port = options.port ?? (await freePort());
  const file = join(dataDir, "labgate.yaml");
  writeFileSync(file, [`cluster:`, `  node_name: ${name}`, `  advertise_url: http://127.0.0.1:${port}`, ...(options.config ?? [])].join("\n") + "\n");
  const serve = await startServe(["serve", "--config", file, "--data-dir", dataDir, "--listen", `127.0.0.1:${port}`, "--database-url", databaseUrl], { env: options.env });
  const adminToken = readFileSync(join((options.first ?? { dataDir }).dataDir, "admin.token"), "utf8").trim();
  const request = requestAt(serve.url);
  return { ...serve, name, dataDir, port, request, call: callWith(request, adminToken), adminToken };
}

/** An in-process node on `url` named `name`, with the signing keys of `keysFrom` (as `labgate cluster join` copies them). */
export async function inProcessNode(url: string, name: string, keysFrom?: string, dataDir = tempDir()): Promise<TestServer> {
  if (keysFrom) cpSync(join(keysFrom, KEYS_DIR), join(dataDir, KEYS_DIR), { recursive: true });
  return startTestServer({ database: { url }, cluster: { node_name: name, advertise_url: `http://${name}.invalid:5000` } }, dataDir);
}
