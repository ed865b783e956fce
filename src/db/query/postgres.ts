/**
 * Kysely over PostgreSQL through pg's pool. Both are imported only here, and this module only
 * when `database.url` names a PostgreSQL database: the embedded default never loads them.
 */
import type { Kysely, PostgresPool, PostgresPoolClient } from "kysely";
import type { Pool } from "pg";
import { redactedText } from "../url.ts";
import { unreachable } from "./connection-errors.ts";

/** pg's type ids whose text form labgate reads as a number: int8 (counts, ids) and numeric (sums, averages), as SQLite answers them. */
const NUMBERS = new Set([20, 1700]);

/** How long a connection may take before the attempt fails: a start that cannot reach PostgreSQL says so well within 30 s. */
const CONNECT_TIMEOUT_MS = 10_000;

export interface PostgresOptions {
  /** Connections in the pool. */
  max?: number;
  /**
   * What a query that cannot reach PostgreSQL throws instead of pg's error (e.g. the main
   * bundle's DatabaseUnavailableError: this module is in a bundle of its own, so the caller
   * passes its class); by default pg's error as it is.
   */
  unavailable?: (message: string) => Error;
  /**
   * Commits that answer before PostgreSQL has the change on disk (synchronous_commit off: on disk
   * within a fraction of a second, lost only with PostgreSQL's own crash, never half-applied):
   * for writes that need no acknowledgement.
   */
  lazyCommits?: boolean;
}

export interface PostgresQueryLayer<Tables> {
  query: Kysely<Tables>;
  pool: Pool;
}

export async function postgresPool<Tables>(url: string, { max = 10, unavailable, lazyCommits = false }: PostgresOptions = {}): Promise<PostgresQueryLayer<Tables>> {
  const [{ default: pg }, { Kysely, PostgresDialect }] = await Promise.all([import("pg"), import("kysely")]);
  // Per pool, not pg's global parsers: ids and counts stay numbers, as on the embedded engine.
  const types = {
    getTypeParser: ((id: number, format?: "text" | "binary") => (NUMBERS.has(id) ? (value: string) => Number(value) : pg.types.getTypeParser(id, format as "text"))) as typeof pg.types.getTypeParser,
  };
  // Connecting is bounded; waiting for a free connection is not (as a transaction waits for the embedded engine's lock): a busy pool is not a lost database.
  class BoundedConnect extends pg.Client {
    constructor(config?: ConstructorParameters<typeof pg.Client>[0]) {
      super({ ...(typeof config === "string" ? { connectionString: config } : config), connectionTimeoutMillis: CONNECT_TIMEOUT_MS });
    }
  }
  const pool = new pg.Pool({ connectionString: url, max, types, Client: BoundedConnect, ...(lazyCommits ? { options: "-c synchronous_commit=off" } : {}) });
  // An idle client's error (the server restarted) must not crash the process: the pool drops it.
  pool.on("error", () => {});
  // Nor one in use (its query fails with the error, and the pool drops it on release).
  pool.on("connect", (client) => void client.on("error", () => {}));
  const mapped = unavailable ? guarded(pool, url, unavailable) : pool;
  return { query: new Kysely<Tables>({ dialect: new PostgresDialect({ pool: mapped as unknown as PostgresPool }) }), pool };
}

export async function postgresQueryLayer<Tables>(url: string, options: PostgresOptions = {}): Promise<Kysely<Tables>> {
  return (await postgresPool<Tables>(url, options)).query;
}

/** `pool` with the errors of an unreachable PostgreSQL thrown as `unavailable` (the password left out of the message). */
function guarded(pool: Pool, url: string, unavailable: (message: string) => Error): PostgresPool {
  const map = (error: unknown): unknown => (unreachable(error) ? unavailable(`the database is unavailable: ${redactedText((error as Error).message || String((error as { code?: unknown }).code), url)}`) : error);
  return {
    connect: async () => {
      let client;
      try {
        client = await pool.connect();
      } catch (error) {
        throw map(error);
      }
      const held = client;
      return {
        query: ((...args: unknown[]) => {
          const result = (held.query as (...a: unknown[]) => unknown)(...args);
          return result instanceof Promise ? result.catch((error: unknown) => Promise.reject(map(error))) : result;
        }) as PostgresPoolClient["query"],
        release: () => held.release(),
      };
    },
    end: () => pool.end(),
    options: pool.options,
    // Kysely cancels a query through a client of this class.
    Client: (pool as unknown as { Client: PostgresPool["Client"] }).Client,
  };
}
