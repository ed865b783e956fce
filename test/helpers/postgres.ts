import { spawn, spawnSync, type ChildProcess } from "node:child_process";
import { chownSync, existsSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { createServer } from "node:net";
import { after, before } from "node:test";
import { tmpdir } from "node:os";
import { join } from "node:path";

/** Debian's PostgreSQL binaries: the newest major under /usr/lib/postgresql, or PG_BIN. */
export function postgresBin(): string | undefined {
  if (process.env.PG_BIN) return process.env.PG_BIN;
  const root = "/usr/lib/postgresql";
  if (!existsSync(root)) return undefined;
  const majors = spawnSync("ls", [root], { encoding: "utf8" }).stdout.split("\n").filter((v) => /^\d+$/.test(v)).sort((a, b) => Number(b) - Number(a));
  const bin = majors.map((major) => join(root, major, "bin")).find((dir) => existsSync(join(dir, "initdb")));
  return bin;
}

/** The account PostgreSQL runs as when the tests run as root (initdb refuses root). */
function postgresUser(): { uid?: number; gid?: number } {
  const id = (flag: string) => Number(spawnSync("id", [flag, "postgres"], { encoding: "utf8" }).stdout.trim());
  const uid = id("-u");
  if (!Number.isInteger(uid) || uid === 0) throw new Error("as root the tests run PostgreSQL as the user postgres, which is missing: apt-get install postgresql");
  return { uid, gid: id("-g") };
}

async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once("error", reject);
    server.listen(0, "127.0.0.1", () => {
      const { port } = server.address() as { port: number };
      server.close(() => resolve(port));
    });
  });
}

export interface ThrowawayPostgres {
  /** `postgres://` URL of database `name` (made by `createDatabase`). */
  url(name: string): string;
  /** Makes an empty database and returns its URL. */
  createDatabase(name: string): Promise<string>;
  /** Drops a database `createDatabase` made (ending its connections first). */
  dropDatabase(name: string): Promise<void>;
  /** Makes a role that logs in only with `password` (the cluster's own role `labgate` needs none). */
  createRole(name: string, password: string): Promise<void>;
  /** Stops PostgreSQL as a crash or an operator would (fast shutdown: sessions are ended), keeping its files; `start` again. */
  halt(): Promise<void>;
  /** Starts it again on the same port and files after `halt`. */
  start(): Promise<void>;
  /** Stops the cluster and deletes its files. */
  stop(): Promise<void>;
  /** The postmaster's process id while it runs (a benchmark counts its CPU and its backends'). */
  pid(): number | undefined;
}

/** Local connections and the role `labgate` on 127.0.0.1 need no password; every other role does. */
const HBA = ["local all all trust", "host all labgate 127.0.0.1/32 trust", "host all all 127.0.0.1/32 scram-sha-256", ""].join("\n");

/**
 * A PostgreSQL cluster of its own in a temp dir, on 127.0.0.1 and a free port, as an unprivileged
 * user (initdb refuses root: as root it runs as `postgres`). fsync is off: a test kills labgate,
 * never the machine, and the cluster's own crash safety is PostgreSQL's; `durable` turns it on
 * (a benchmark, which must pay for what a deployed PostgreSQL pays for).
 */
export async function startPostgres({ maxConnections = 200, durable = false }: { maxConnections?: number; durable?: boolean } = {}): Promise<ThrowawayPostgres> {
  const bin = postgresBin();
  if (!bin) throw new Error("PostgreSQL's binaries are missing: apt-get install postgresql (or set PG_BIN)");
  const dir = mkdtempSync(join(tmpdir(), "labgate-pg-"));
  const user = process.getuid?.() === 0 ? postgresUser() : {};
  if (user.uid !== undefined) chownSync(dir, user.uid, user.gid!);
  const data = join(dir, "data");
  const init = spawnSync(join(bin, "initdb"), ["-D", data, "-U", "labgate", "--auth=trust", "-E", "UTF8", "--locale=C.UTF-8"], { encoding: "utf8", ...user });
  if (init.status !== 0) throw new Error(`initdb failed: ${init.stderr}`);
  writeFileSync(join(data, "pg_hba.conf"), HBA);
  if (user.uid !== undefined) chownSync(join(data, "pg_hba.conf"), user.uid, user.gid!);
  const port = await freePort();
  const { default: pg } = await import("pg");
  const admin = (database = "postgres") => new pg.Client({ host: "127.0.0.1", port, user: "labgate", database });
  let server: ChildProcess | undefined;
  const launch = async () => {
    const child = spawn(
      join(bin, "postgres"),
      ["-D", data, "-p", String(port), "-k", dir, "-c", "listen_addresses=127.0.0.1", "-c", `fsync=${durable ? "on" : "off"}`, "-c", `max_connections=${maxConnections}`],
      { stdio: ["ignore", "ignore", "pipe"], ...user },
    );
    server = child;
    let log = "";
    child.stderr!.on("data", (chunk: Buffer) => (log = (log + chunk.toString()).slice(-4000)));
    for (let attempt = 0; ; attempt++) {
      const client = admin();
      try {
        await client.connect();
        await client.end();
        return;
      } catch (error) {
        await client.end().catch(() => {});
        if (child.exitCode !== null || attempt > 100) throw new Error(`PostgreSQL did not start: ${(error as Error).message}\n${log}`);
        await new Promise((resolve) => setTimeout(resolve, 100));
      }
    }
  };
  const halt = async () => {
    if (!server || server.exitCode !== null || server.signalCode !== null) return;
    const exited = new Promise((resolve) => server!.once("exit", resolve));
    server.kill("SIGINT"); // fast shutdown
    await exited;
  };
  const onAdmin = async (statement: string) => {
    const client = admin();
    await client.connect();
    try {
      await client.query(statement);
    } finally {
      await client.end();
    }
  };
  await launch();
  const url = (name: string) => `postgres://labgate@127.0.0.1:${port}/${name}`;
  const quoted = (name: string) => `"${name.replace(/"/g, "")}"`;
  return {
    url,
    async createDatabase(name) {
      await onAdmin(`CREATE DATABASE ${quoted(name)}`);
      return url(name);
    },
    async dropDatabase(name) {
      await onAdmin(`DROP DATABASE IF EXISTS ${quoted(name)} WITH (FORCE)`);
    },
    async createRole(name, password) {
      await onAdmin(`CREATE ROLE ${quoted(name)} LOGIN PASSWORD '${password.replace(/'/g, "''")}'`);
    },
    halt,
    start: launch,
    pid: () => (server && server.exitCode === null && server.signalCode === null ? server.pid : undefined),
    async stop() {
      await halt();
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

/**
 * A throwaway cluster for a test file's tests: started in `before` (then `setup` runs, in the same
 * hook, since Node 20 starts a file's top-level `before` hooks together), stopped in `after` once
 * `teardown` has stopped what uses it.
 */
export function usePostgres({
  setup,
  teardown,
  ...options
}: { maxConnections?: number; durable?: boolean; setup?: (postgres: ThrowawayPostgres) => Promise<unknown>; teardown?: () => Promise<unknown> } = {}): ThrowawayPostgres {
  let current: ThrowawayPostgres | undefined;
  before(async () => {
    current = await startPostgres(options);
    await setup?.(current);
  });
  after(async () => {
    try {
      await teardown?.();
    } finally {
      await current?.stop();
    }
  });
  return new Proxy({} as ThrowawayPostgres, {
    get(_, key) {
      if (!current) throw new Error("usePostgres: the cluster starts in before(); use it in tests and hooks");
      return current[key as keyof ThrowawayPostgres];
    },
  });
}
