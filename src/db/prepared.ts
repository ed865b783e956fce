/**
 * Queries of a fixed shape compiled once per engine and run with new values: the hot paths skip the
 * query builder's cost, which is several times the statement's own on the embedded engine
 * (decision 0020).
 */
import type { Compilable, CompiledQuery, QueryResult } from "kysely";
import type { Queries } from "./store.ts";

/** Stands for argument `i` while the query is compiled (a value no caller passes). */
const mark = (i: number): string => `\u0000prepared-argument-${i}\u0000`;

interface Compiled {
  query: CompiledQuery;
  /** For each parameter of the compiled query: the index of the argument it takes, or the value the builder gave it. */
  slots: Array<{ arg: number } | { value: unknown }>;
}

/**
 * `build` makes the query from its arguments, which it may only place as values (a `where`'s
 * right side, a `set`'s or `values`' value, inside `sql` as `${value}`): it runs once per engine
 * with stand-ins, and each call runs that compiled query with the call's arguments. The result is
 * the engine's (rows; for a write, numAffectedRows).
 */
export function prepared<A extends unknown[], R = unknown>(build: (q: Queries, ...args: A) => Compilable<R>): (q: Queries, ...args: A) => Promise<QueryResult<R>> {
  // Keyed by the adapter, which the store's query layer and every transaction of it share.
  const byEngine = new WeakMap<object, Compiled>();
  return (q, ...args) => {
    const adapter = q.getExecutor().adapter;
    let compiled = byEngine.get(adapter);
    if (!compiled) {
      const marks = args.map((_, i) => mark(i));
      const query = build(q, ...(marks as A)).compile();
      const slots = query.parameters.map((value) => {
        const arg = typeof value === "string" ? marks.indexOf(value) : -1;
        return arg >= 0 ? { arg } : { value };
      });
      compiled = { query, slots };
      byEngine.set(adapter, compiled);
    }
    const { query, slots } = compiled;
    const parameters = slots.map((slot) => ("arg" in slot ? args[slot.arg] : slot.value));
    return q.executeQuery<R>({ ...query, parameters });
  };
}
