import type { Kysely, Transaction } from "kysely";

/** PostgreSQL's answers that mean "run the transaction again": a serialization failure, a deadlock. */
const RETRYABLE = new Set(["40001", "40P01"]);

const retryable = (error: unknown) => RETRYABLE.has(String((error as { code?: unknown } | null)?.code));

/**
 * Runs `fn` as one SERIALIZABLE transaction, again (up to `attempts` times, after a short random
 * wait) when PostgreSQL aborts it to keep the serial order. `fn` must therefore do nothing outside
 * the database that cannot happen twice. The embedded engine is serial already and never retries.
 */
export async function transact<Tables, T>(db: Kysely<Tables>, fn: (tx: Transaction<Tables>) => Promise<T>, { attempts = 10 } = {}): Promise<T> {
  for (let attempt = 1; ; attempt++) {
    try {
      return await db.transaction().setIsolationLevel("serializable").execute(fn);
    } catch (error) {
      if (!retryable(error) || attempt >= attempts) throw error;
      await new Promise((resolve) => setTimeout(resolve, Math.random() * 5 * attempt));
    }
  }
}
