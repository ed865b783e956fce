/**
 * A group's name, as everything reads it (test targets `group:<name>`, the console, the audit
 * log): `<prefix>.group.name`, the key the reference's CLI and web UI store, else a plain `name`.
 * Pure: the console imports it too.
 */
export function groupNameOf(metadata: Readonly<Record<string, unknown>>, prefix: string): string | undefined {
  for (const key of [`${prefix}.group.name`, "name"]) {
    const value = metadata[key];
    if (typeof value === "string" && value !== "") return value;
  }
  return undefined;
}
