import type { Kysely, Transaction } from "kysely";

/** PostgreSQL's answers that mean "run the transaction again": a serialization failure, a deadlock. */
const RETRYABLE = new Set(["40001", "40P01"]);

const retryable = (error: unknown) => RETRYABLE.has(String((error as { code?: unknown } | null)?.code));

/**
 * Runs `fn` as one SERIALIZABLE transaction, again (up to `attempts` times, after a short random
 * wait) when PostgreSQL aborts it to keep the serial order. `fn` must therefore do nothing outside
 * the database that cannot happen twice. The embedded engine is serial already and never retries.
 */
export async function transact<Tables, T>(db: Kysely<Tables>, fn: (tx: Transaction<Tables>) => Promise<T>, { attempts = ATTEMPTS } = {}): Promise<T> {
  for (let attempt = 1; ; attempt++) {
    try {
      return await db.transaction().setIsolationLevel("serializable").execute(fn);
    } catch (error) {
      if (!retryable(error) || attempt >= attempts) throw error;
      await new Promise((resolve) => setTimeout(resolve, Math.random() * Math.min(MAX_WAIT_MS, 5 * 2 ** attempt)));
    }
  }
}

/**
 * Enough for a burst of writers on the same rows (a lab's agents registering at once: one of them
 * commits per round), each waiting a random while that doubles up to MAX_WAIT_MS.
 */
const ATTEMPTS = 30;
const MAX_WAIT_MS = 200;
