/**
 * Group update policies: `<name>,<argument>`, split at the first comma.
 * `no_update` offers nothing; `exact_match,<version>` targets exactly that version.
 */
export const DEFAULT_POLICY = "no_update,";
export const POLICY_NAMES = ["no_update", "exact_match"] as const;
export type PolicyName = (typeof POLICY_NAMES)[number];

export interface Policy {
  name: PolicyName;
  argument: string;
}

/** Parses a policy string; a string is the 400 message when it is invalid. */
export function parsePolicy(text: string): Policy | string {
  const comma = text.indexOf(",");
  if (comma < 0) return "invalid policy: invalid policy string, missing arguments";
  const name = text.slice(0, comma);
  if (!(POLICY_NAMES as readonly string[]).includes(name)) return `invalid policy: invalid policy type: '${name}'`;
  return { name: name as PolicyName, argument: text.slice(comma + 1) };
}

/** The version a policy wants devices to run, or undefined for none. */
export function policyTarget(text: string): string | undefined {
  const policy = parsePolicy(text);
  if (typeof policy === "string" || policy.name === "no_update") return undefined;
  return policy.argument;
}
