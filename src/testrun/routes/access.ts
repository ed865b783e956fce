import type { MiddlewareHandler } from "hono";
import type { Auth } from "../../auth/middleware.ts";
import type { AppContext, AppEnv } from "../../app/context.ts";

/** The two checks every test-run route uses: `read` (svc_tests_ro) and `write` (svc_tests_rw). */
export interface TestRunAccess {
  read: MiddlewareHandler<AppEnv>;
  write: MiddlewareHandler<AppEnv>;
}

/**
 * Per the contract a token is required (admin scopes imply the tests scopes, see scopes.ts);
 * `test_server.auth: none` turns the checks off for benches with protoplaster clients.
 */
export function testRunAccess(ctx: AppContext, auth: Auth): TestRunAccess {
  if (ctx.config.test_server.auth === "none") {
    const open: MiddlewareHandler<AppEnv> = async (_c, next) => {
      await next();
    };
    return { read: open, write: open };
  }
  return { read: auth.management("tests_ro"), write: auth.management("tests_rw") };
}
