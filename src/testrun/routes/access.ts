import type { MiddlewareHandler } from "hono";
import type { Auth } from "../../auth/middleware.ts";
import type { AppContext, AppEnv } from "../../app/context.ts";
import { errors, type Access, type Reply } from "../../http/openapi.ts";

/** The two checks every test-run route uses, and what its operation (`route()`) says of them. */
export interface TestRunAccess {
  /** svc_tests_ro (admin scopes imply the tests scopes, src/auth/scopes.ts). */
  read: MiddlewareHandler<AppEnv>;
  /** svc_tests_rw. */
  write: MiddlewareHandler<AppEnv>;
  /** The operation's tag and who may call. */
  doc: { tag: string; access: Access };
  /** `responses` with the 401 and 403 answers when a token is needed. */
  replies<R extends Record<number, Reply>>(responses: R): R & Refusals;
}

type Refusals = { 401: (typeof errors)[401]; 403: (typeof errors)[403] };

/**
 * A token is required (docs/tokens-and-permissions.md); `test_server.auth: none` turns the checks
 * off for benches with protoplaster clients.
 */
export function testRunAccess(ctx: AppContext, auth: Auth): TestRunAccess {
  const tag = "test runs";
  if (ctx.config.test_server.auth === "none") {
    const open: MiddlewareHandler<AppEnv> = async (_c, next) => {
      await next();
    };
    return { read: open, write: open, doc: { tag, access: "public" }, replies: <R>(responses: R) => responses as R & Refusals };
  }
  return {
    read: auth.management("tests_ro"),
    write: auth.management("tests_rw"),
    doc: { tag, access: "management" },
    replies: <R>(responses: R) => ({ 401: errors[401], 403: errors[403], ...responses }),
  };
}
