/*
 * The audit log's view of a request: who calls (identity and client address) and, for a refused
 * one, its route. The audit module takes these plain fields, so that it does not know HTTP.
 */
import type { Context } from "hono";
import { matchedRoutes } from "hono/route";
import type { AppContext, AppEnv } from "../app/context.ts";
import { actorFor, recordChange, type Actor, type Caller } from "../audit/audit.ts";
import type { RefusedRequest } from "../audit/refusals.ts";
import type { Clock } from "../util/time.ts";
import { clientAddress } from "./transport.ts";

/** The caller of a request: its identity (when authenticated) and its client address. */
export function callerOf(c: Context<AppEnv>): Caller {
  return { identity: c.get("identity") as AppEnv["Variables"]["identity"] | undefined, client: clientAddress(c) };
}

/** The actor of a request, acting now. */
export const actorOf = (c: Context<AppEnv>, clock: Clock): Actor => actorFor(callerOf(c), clock);

/**
 * A refused request: the pattern of the route it matched, also for a refusal by a middleware that
 * runs before the route (cross-site), since the whole match is known from the start.
 */
export function refusedRequestOf(c: Context<AppEnv>): RefusedRequest {
  const route = matchedRoutes(c)
    .filter((r) => r.method !== "ALL")
    .pop();
  return { ...callerOf(c), method: c.req.method, route: route?.path, path: c.req.path, userAgent: c.req.header("user-agent") };
}

/**
 * Records a change that is not a database transaction (a config file, a test run's processes, a
 * backup's stream) in a transaction of its own, right after the change and before the answer.
 */
export const recordRequest = (ctx: Pick<AppContext, "clock" | "store">, c: Context<AppEnv>, action: string, target: string, detail?: Record<string, unknown>): Promise<void> =>
  recordChange(ctx, actorOf(c, ctx.clock), action, target, detail);
