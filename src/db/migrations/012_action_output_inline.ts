import type { Migration } from "../migrate.ts";

/*
 * Small action outputs kept in the log row (action fan-out):
 *
 *   action_log.output  -- the whole output when it is small (src/update/actions/store.ts), else NULL
 *
 * A result then becomes durable with the journal's group commit instead of a file and an fsync of
 * its own: ten thousand devices answering at once cost one write, not ten thousand fsyncs.
 * Larger outputs stay files named by `output_key` as before.
 */
export const m012ActionOutputInline: Migration = {
  version: 12,
  name: "action_output_inline",
  sql: [`ALTER TABLE action_log ADD COLUMN output BLOB`],
};
