import { spawn, spawnSync, type ChildProcess } from "node:child_process";
import { chownSync, existsSync, mkdtempSync, rmSync } from "node:fs";
import { createServer } from "node:net";
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
  /** Stops the cluster and deletes its files. */
  stop(): Promise<void>;
}

/**
 * A PostgreSQL cluster of its own in a temp dir, on 127.0.0.1 and a free port, as an unprivileged
 * user (initdb refuses root: as root it runs as `postgres`). fsync is off: a test kills labgate,
 * never the machine, and the cluster's own crash safety is PostgreSQL's.
 */
export async function startPostgres(): Promise<ThrowawayPostgres> {
  const bin = postgresBin();
  if (!bin) throw new Error("PostgreSQL's binaries are missing: apt-get install postgresql (or set PG_BIN)");
  const dir = mkdtempSync(join(tmpdir(), "labgate-pg-"));
  const user = process.getuid?.() === 0 ? postgresUser() : {};
  if (user.uid !== undefined) chownSync(dir, user.uid, user.gid!);
  const data = join(dir, "data");
  const init = spawnSync(join(bin, "initdb"), ["-D", data, "-U", "labgate", "--auth=trust", "-E", "UTF8", "--locale=C.UTF-8"], { encoding: "utf8", ...user });
  if (init.status !== 0) throw new Error(`initdb failed: ${init.stderr}`);
  const port = await freePort();
  const server: ChildProcess = spawn(
    join(bin, "postgres"),
    ["-D", data, "-p", String(port), "-k", dir, "-c", "listen_addresses=127.0.0.1", "-c", "fsync=off", "-c", "max_connections=200"],
    { stdio: ["ignore", "ignore", "pipe"], ...user },
  );
  let log = "";
  server.stderr!.on("data", (chunk: Buffer) => (log = (log + chunk.toString()).slice(-4000)));
  const { default: pg } = await import("pg");
  const admin = (database = "postgres") => new pg.Client({ host: "127.0.0.1", port, user: "labgate", database });
  for (let attempt = 0; ; attempt++) {
    const client = admin();
    try {
      await client.connect();
      await client.end();
      break;
    } catch (error) {
      await client.end().catch(() => {});
      if (server.exitCode !== null || attempt > 100) throw new Error(`PostgreSQL did not start: ${(error as Error).message}\n${log}`);
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
  }
  const url = (name: string) => `postgres://labgate@127.0.0.1:${port}/${name}`;
  return {
    url,
    async createDatabase(name) {
      const client = admin();
      await client.connect();
      try {
        await client.query(`CREATE DATABASE "${name.replace(/"/g, "")}"`);
      } finally {
        await client.end();
      }
      return url(name);
    },
    async stop() {
      if (server.exitCode === null) {
        const exited = new Promise((resolve) => server.once("exit", resolve));
        server.kill("SIGINT"); // fast shutdown
        await exited;
      }
      rmSync(dir, { recursive: true, force: true });
    },
  };
}
