import { AccessWatch, type AccountGate } from "../auth/authority.ts";
import { InFlight } from "../http/inflight.ts";
import { EventStreams } from "../http/sse.ts";
import type { AppContext } from "../app/context.ts";
import { AuditRetention } from "../audit/audit.ts";
import { AuditSpool } from "../audit/spool.ts";
import { RefusalLog } from "../audit/refusals.ts";

/** Services more than one part uses. */
export interface SharedServices {
  /** Ends long-lived connections (event streams, shells) when their token or account no longer allows them. */
  accessWatch: AccessWatch;
  /** The server-sent event streams (`/api/stream`, `/api/v1/test-runs/stream`). */
  streams: EventStreams;
  /** The requests being handled, named in the log line of an uncaught exception. */
  inFlight: InFlight;
  /** Drops audit entries past the configured age and count, off the request path. */
  auditRetention: AuditRetention;
  /** Records refused requests, counted per client, actor and route in a window. */
  refusals: RefusalLog;
  /** Moves the entries of commands run beside the server (`labgate token issue`, `restore`) into the audit log. */
  auditSpool: AuditSpool;
}

export function createSharedServices(ctx: Pick<AppContext, "clock" | "config" | "dataDir" | "store" | "log" | "cluster" | "onClosing" | "onShutdown">, accountGate: AccountGate | undefined): SharedServices {
  const accessWatch = new AccessWatch(ctx.store, accountGate, ctx.clock, ctx.log);
  const streams = new EventStreams(ctx.log, ctx.clock, accessWatch, ctx.config.compat.sse_comments);
  // Open event streams end when the server stops accepting, so that shutdown does not wait on them.
  ctx.onClosing.push(() => streams.endAll());
  const auditRetention = new AuditRetention(ctx.store, ctx.clock, ctx.log, ctx.config.audit);
  auditRetention.start(() => ctx.cluster.runs("audit_retention"));
  ctx.onClosing.push(() => auditRetention.stop());
  // The last window's counts are written after the last request, before the database closes.
  const refusals = new RefusalLog(ctx.store, ctx.clock, ctx.log, ctx.config.audit);
  refusals.start();
  ctx.onShutdown.push(() => refusals.stop());
  const auditSpool = new AuditSpool(ctx.store, ctx.dataDir, ctx.log, ctx.clock);
  auditSpool.start();
  ctx.onClosing.push(() => auditSpool.stop());
  return { accessWatch, streams, inFlight: new InFlight(), auditRetention, refusals, auditSpool };
}
