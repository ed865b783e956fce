import { TokenWatch } from "../auth/revocations.ts";
import { InFlight } from "../http/inflight.ts";
import { EventStreams } from "../http/sse.ts";
import type { AppContext } from "../app/context.ts";
import { AuditRetention } from "../audit/audit.ts";

/** Services more than one part uses. */
export interface SharedServices {
  /** Ends long-lived connections (event streams, shells) when their token expires or is revoked. */
  tokenWatch: TokenWatch;
  /** The server-sent event streams (`/api/stream`, `/api/v1/test-runs/stream`). */
  streams: EventStreams;
  /** The requests being handled, named in the log line of an uncaught exception. */
  inFlight: InFlight;
  /** Drops audit entries past the configured age and count, off the request path. */
  auditRetention: AuditRetention;
}

export function createSharedServices(ctx: Pick<AppContext, "clock" | "config" | "db" | "log" | "onClosing">): SharedServices {
  const tokenWatch = new TokenWatch(ctx.db, ctx.clock);
  const streams = new EventStreams(ctx.log, tokenWatch, ctx.config.compat.sse_comments);
  // Open event streams end when the server stops accepting, so that shutdown does not wait on them.
  ctx.onClosing.push(() => streams.endAll());
  const auditRetention = new AuditRetention(ctx.db, ctx.clock, ctx.log, ctx.config.audit);
  auditRetention.start();
  ctx.onClosing.push(() => auditRetention.stop());
  return { tokenWatch, streams, inFlight: new InFlight(), auditRetention };
}
