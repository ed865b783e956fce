/** Scope names without the product prefix; the config's `prefix` is put in front (`svc_admin_rw`). */
export const SCOPES = [
  "admin_rw",
  "admin_ro",
  "create_group",
  "upload_single_file",
  "upload_rootfs_image",
  "upload_nonstandard_artifact",
  "tests_rw",
  "tests_ro",
] as const;
export type Scope = (typeof SCOPES)[number];

const READ_SCOPES: ReadonlySet<Scope> = new Set<Scope>(["admin_ro", "tests_ro"]);

export const scopeName = (prefix: string, scope: Scope): string => `${prefix}_${scope}`;

/** Maps prefixed names from a token to known scopes; unknown names are dropped. */
export function parseScopes(prefix: string, names: Iterable<string>): Set<Scope> {
  const known = new Map(SCOPES.map((s) => [scopeName(prefix, s), s] as const));
  const out = new Set<Scope>();
  for (const name of names) {
    const scope = known.get(name);
    if (scope) out.add(scope);
  }
  return out;
}

/** Prefixed or bare scope names to scopes; the first unknown name is returned as an error text. */
export function parseScopeNames(prefix: string, names: readonly string[]): Scope[] | string {
  const scopes: Scope[] = [];
  for (const raw of names) {
    const scope = SCOPES.find((s) => raw === s || raw === scopeName(prefix, s));
    if (!scope) return `unknown scope ${JSON.stringify(raw)}; known: ${SCOPES.map((s) => scopeName(prefix, s)).join(", ")}`;
    if (!scopes.includes(scope)) scopes.push(scope);
  }
  return scopes;
}

/**
 * `admin_rw` includes every scope (write and read); `admin_ro` includes every read scope;
 * `tests_rw` includes `tests_ro`.
 */
export function grants(granted: ReadonlySet<Scope>, required: Scope): boolean {
  if (granted.has(required) || granted.has("admin_rw")) return true;
  if (READ_SCOPES.has(required) && granted.has("admin_ro")) return true;
  return required === "tests_ro" && granted.has("tests_rw");
}

export const grantsAny = (granted: ReadonlySet<Scope>, required: readonly Scope[]): boolean => required.some((s) => grants(granted, s));
