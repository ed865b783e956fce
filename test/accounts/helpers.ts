import { readFileSync } from "node:fs";
import { join } from "node:path";
import type { TestServer } from "../helpers/server.ts";

/** The first admin's password, as the first start wrote it. */
export const adminPassword = (server: TestServer): string => readFileSync(join(server.dataDir, "admin.password"), "utf8").trim();

/** The session cookie a login answer set (`labgate_session=<token>`), or undefined. */
export function sessionCookie(res: Response): string | undefined {
  const line = res.headers.getSetCookie().find((c) => c.startsWith("labgate_session="));
  return line?.split(";")[0];
}

/** POST /api/v1/auth/login with JSON; `origin` is sent as the browser would. */
export const login = (server: TestServer, username: string, password: string, headers: Record<string, string> = {}) =>
  server.request("/api/v1/auth/login", { method: "POST", json: { username, password }, headers });

/** Signs in and returns the cookie header value. */
export async function signIn(server: TestServer, username: string, password: string): Promise<string> {
  const res = await login(server, username, password);
  if (res.status !== 200) throw new Error(`login ${username}: ${res.status} ${await res.text()}`);
  return sessionCookie(res)!;
}

/** Headers of a browser request from this server's own pages (same Origin) with `cookie`. */
export const fromConsole = (server: TestServer, cookie: string): Record<string, string> => ({ cookie, origin: server.url });
