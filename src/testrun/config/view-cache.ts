import type { ConfigSource } from "../plan.ts";

/** A config source whose files can be told apart from their earlier versions (ConfigStore.stamp). */
export interface StampedSource extends ConfigSource {
  stamp(name: string): string;
}

interface Entry {
  /** Every file the view read (the config and its includes) with its stamp then. */
  files: Array<[string, string]>;
  outcome: { value: unknown } | { error: unknown };
}

const MAX_ENTRIES = 64;

/**
 * Parsed read views of stored configs (test-suites, override-hints), kept while none of the files
 * they were read from changed (a large config would be parsed again on every request). A failure
 * is kept too: it is as costly to find again. At most MAX_ENTRIES; the oldest goes first.
 */
export class ConfigViewCache {
  private readonly entries = new Map<string, Entry>();
  private readonly source: StampedSource;

  constructor(source: StampedSource) {
    this.source = source;
  }

  get<T>(view: string, name: string, compute: (source: ConfigSource) => T): T {
    const key = `${view}\n${name}`;
    const cached = this.entries.get(key);
    if (cached && cached.files.every(([file, stamp]) => this.source.stamp(file) === stamp)) return settle(cached) as T;
    const files: Array<[string, string]> = [];
    // The stamp is taken before the read: a file replaced between the two is read again next time.
    const recording: ConfigSource = {
      read: (file) => {
        files.push([file, this.source.stamp(file)]);
        return this.source.read(file);
      },
    };
    let entry: Entry;
    try {
      entry = { files, outcome: { value: compute(recording) } };
    } catch (error) {
      entry = { files, outcome: { error } };
    }
    this.entries.delete(key);
    if (this.entries.size >= MAX_ENTRIES) this.entries.delete(this.entries.keys().next().value as string);
    this.entries.set(key, entry);
    return settle(entry) as T;
  }
}

function settle(entry: Entry): unknown {
  if ("error" in entry.outcome) throw entry.outcome.error;
  return entry.outcome.value;
}
