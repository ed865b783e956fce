import { TokenWatch } from "../auth/revocations.ts";
import { InFlight } from "../http/inflight.ts";
import { EventStreams } from "../http/sse.ts";
import type { AppContext } from "../app/context.ts";

/** Services more than one part uses. */
export interface SharedServices {
  /** Ends long-lived connections (event streams, shells) when their token expires or is revoked. */
  tokenWatch: TokenWatch;
  /** The server-sent event streams (`/api/stream`, `/api/v1/test-runs/stream`). */
  streams: EventStreams;
  /** The requests being handled, named in the log line of an uncaught exception. */
  inFlight: InFlight;
}

export function createSharedServices(ctx: Pick<AppContext, "clock" | "config" | "db" | "log" | "onClosing">): SharedServices {
  const tokenWatch = new TokenWatch(ctx.db, ctx.clock);
  const streams = new EventStreams(ctx.log, tokenWatch, ctx.config.compat.sse_comments);
  // Open event streams end when the server stops accepting, so that shutdown does not wait on them.
  ctx.onClosing.push(() => streams.endAll());
  return { tokenWatch, streams, inFlight: new InFlight() };
}
