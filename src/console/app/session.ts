import type { Caller } from "../../http/schema.ts";

/** Who is signed in (GET /api/whoami, or the login answer); what they may see follows. */
export type Me = Caller;

/** The scope without the server's prefix (`svc_admin_rw` -> `admin_rw`). */
const bare = (scope: string) => scope.replace(/^[^_]+_/, "");

export const hasScope = (me: Me, scope: string): boolean => me.scopes.some((s) => bare(s) === scope);
export const isAdmin = (me: Me): boolean => hasScope(me, "admin_rw") || hasScope(me, "admin_ro");
export const canAdminWrite = (me: Me): boolean => hasScope(me, "admin_rw");
/** The server's scope prefix, taken from the account's own scopes ("svc" by default). */
export const prefixOf = (me: Me): string => me.scopes[0]?.replace(/_.*$/, "") || "svc";

/**
 * Where the console opens: Test runs for an account whose scopes are all test-run scopes (a
 * technician), else Devices.
 */
export const homePath = (me: Me): string =>
  me.scopes.length > 0 && me.scopes.every((s) => bare(s) === "tests_ro" || bare(s) === "tests_rw") ? "/runs" : "/devices";
