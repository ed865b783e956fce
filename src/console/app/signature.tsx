/** What the package pages share about a package's signature (docs/update-server.md "Signed artifacts"). */
import type { Package } from "../../update/packages/schema.ts";
import { Badge } from "./ui.tsx";

/** What the gateway's signature check made of a package at upload (update_server.signing); "not checked" without it. */
export function SignatureBadge({ pkg, prefix, long }: { pkg: Package; prefix: string; long?: boolean }) {
  const status = pkg.metadata[`${prefix}.signature.status`];
  const key = String(pkg.metadata[`${prefix}.signature.key`] ?? "");
  const reason = pkg.metadata[`${prefix}.signature.reason`];
  if (status === "signed") return <Badge tone="ok" title={`signed by key ${key} (SHA-256 of its public key)`}>{long ? `signed by ${key}` : `signed ${key.slice(0, 12)}`}</Badge>;
  if (status === "unsigned" || status === "invalid") return <Badge tone="warn" title={String(reason ?? "")}>{long && reason ? `${status}: ${String(reason)}` : status}</Badge>;
  return <Badge tone="muted" title="stored while the gateway checked no signatures">not checked</Badge>;
}
