/* The console's sign-in and the accounts for the OpenAPI document. */
import * as z from "zod";
import { ErrorBody, errors, type Operation } from "../http/openapi.ts";
import { loginBody, newUserBody, revokeBody, userChangeBody } from "./routes.ts";

const Caller = z
  .object({ kind: z.literal("mgmt"), sub: z.string(), scopes: z.array(z.string()), expires: z.string(), id: z.string().optional().describe("the token's id (jti)") })
  .meta({ id: "Caller" });
const Account = z
  .object({ name: z.string(), scopes: z.array(z.string()), disabled: z.boolean(), created: z.string(), last_login: z.string().nullable() })
  .meta({ id: "Account" });
const { 400: e400, 401: e401, 403: e403, 404: e404, 409: e409 } = errors;

export const accountOperations: Operation[] = [
  {
    method: "post",
    path: "/api/v1/auth/login",
    tag: "accounts",
    access: "public",
    summary: "Console sign-in: sets the labgate_session cookie (HttpOnly, SameSite=Strict, Secure over TLS) to a session token",
    body: { json: loginBody },
    responses: {
      200: {
        description: "Signed in (the body is what GET /api/whoami answers)",
        json: Caller,
        headers: { "Set-Cookie": "labgate_session=<token>; Max-Age=<console.session_ttl>; Path=/; HttpOnly; SameSite=Strict (; Secure over TLS)" },
      },
      400: e400,
      401: { description: "Unknown name, wrong password or disabled account (one answer for all)", json: ErrorBody },
      403: { description: "Origin or Referer of another site", json: ErrorBody },
      429: {
        description: "Too many failed logins for this name or from this address",
        json: ErrorBody,
        headers: { "Retry-After": "seconds to wait" },
      },
    },
  },
  {
    method: "post",
    path: "/api/v1/auth/logout",
    tag: "accounts",
    access: "public",
    summary: "Console sign-out: clears the session cookie and revokes its token",
    responses: { 204: { description: "Cookie cleared", headers: { "Set-Cookie": "labgate_session=; Max-Age=0; Path=/; HttpOnly; SameSite=Strict" } }, 403: { description: "Origin or Referer of another site", json: ErrorBody } },
  },
  {
    method: "get",
    path: "/api/v1/users",
    tag: "accounts",
    access: "management",
    summary: "Console accounts (admin_ro)",
    responses: { 200: { description: "By name", json: z.array(Account) }, 401: e401, 403: e403 },
  },
  {
    method: "post",
    path: "/api/v1/users",
    tag: "accounts",
    access: "management",
    summary: "Creates a console account (admin_rw)",
    body: { json: newUserBody },
    responses: { 201: { description: "Created", json: Account }, 400: e400, 401: e401, 403: e403, 409: e409 },
  },
  {
    method: "patch",
    path: "/api/v1/users/{name}",
    tag: "accounts",
    access: "management",
    summary: "Changes an account's password, scopes or disabled flag (admin_rw); disabling or a new password ends its sessions, disabling revokes its tokens; its sessions and tokens act with the new scopes from the next request on",
    body: { json: userChangeBody },
    responses: {
      200: { description: "Changed", json: Account },
      400: e400,
      401: e401,
      403: e403,
      404: e404,
      409: { description: "Would disable yourself or leave no enabled account with admin_rw", json: ErrorBody },
    },
  },
  {
    method: "delete",
    path: "/api/v1/users/{name}",
    tag: "accounts",
    access: "management",
    summary: "Deletes an account (admin_rw): its sessions end, its tokens are revoked, its per-user permissions go",
    responses: {
      204: { description: "Deleted" },
      401: e401,
      403: e403,
      404: e404,
      409: { description: "Would delete yourself or leave no enabled account with admin_rw", json: ErrorBody },
    },
  },
  {
    method: "post",
    path: "/api/v1/tokens/revoke",
    tag: "accounts",
    access: "management",
    summary: "Revokes a management token by id, or every token of a user issued until now (admin_rw); effective on the next request, open streams and shells end",
    body: { json: revokeBody },
    responses: { 200: { description: "Revoked", json: z.object({}) }, 400: e400, 401: e401, 403: e403 },
  },
];
