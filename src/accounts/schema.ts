/**
 * The accounts API's shapes (console sign-in, accounts, token revocation), each once: the routes
 * (accounts/routes.ts) register and parse with them, the handlers answer with their types and
 * the console imports the types. Zod and src/http only.
 */
import * as z from "zod";
import { jsonObject } from "../util/shapes.ts";

export const NAME_PATTERN = /^[A-Za-z0-9_.-]{1,64}$/;
export const MIN_PASSWORD = 8;
/** Longer passwords are refused: scrypt's cost grows with the input. */
export const MAX_PASSWORD = 1024;

export const accountName = z.string({ error: "name: expected a string" }).regex(NAME_PATTERN, { error: "name: 1 to 64 letters, digits, '_', '.' or '-'" });
export const accountPassword = z
  .string({ error: "password: expected a string" })
  .min(MIN_PASSWORD, { error: `password: at least ${MIN_PASSWORD} characters` })
  .max(MAX_PASSWORD, { error: `password: at most ${MAX_PASSWORD} characters` });

/** A console account as the API shows it. */
export const Account = z
  .object({
    name: z.string(),
    scopes: z.array(z.string()).describe("prefixed scope names (svc_admin_rw)"),
    disabled: z.boolean(),
    created: z.string().describe("ISO 8601"),
    last_login: z.string().nullable().describe("ISO 8601; null: never"),
  })
  .meta({ id: "Account" });
export type Account = z.infer<typeof Account>;

const loginString = (key: string) => z.string({ error: `${key}: expected a string` }).max(1024, { error: `${key}: at most 1024 characters` });
/** POST /api/v1/auth/login. */
export const LoginBody = z.strictObject({ username: loginString("username"), password: loginString("password") }, jsonObject);

const scopeList = z.array(z.string(), { error: "scopes: expected a list of scope names" }).max(64, { error: "scopes: too many" }).describe("bare (admin_rw) or prefixed names");
/** POST /api/v1/users. */
export const NewAccount = z.strictObject({ name: accountName, password: accountPassword, scopes: scopeList }, jsonObject);
export type NewAccount = z.infer<typeof NewAccount>;
/** PATCH /api/v1/users/{name}: what to change. */
export const AccountUpdate = z.strictObject(
  { password: accountPassword.optional(), scopes: scopeList.optional(), disabled: z.boolean({ error: "disabled: expected true or false" }).optional() },
  jsonObject,
);
export type AccountUpdate = z.infer<typeof AccountUpdate>;

const REVOKE_ERROR = 'give exactly one of "id" (a token id, as GET /api/whoami shows it) and "user"';
/** POST /api/v1/tokens/revoke: one token by id, or every token of a user issued until now. */
export const RevokeBody = z
  .strictObject(
    {
      id: z.string({ error: "id: expected a string" }).min(1, { error: "id: expected a token id" }).max(128, { error: "id: at most 128 characters" }).optional(),
      user: z.string({ error: "user: expected a string" }).min(1, { error: "user: expected a name" }).max(256, { error: "user: at most 256 characters" }).optional(),
    },
    jsonObject,
  )
  .refine((b) => (b.id === undefined) !== (b.user === undefined), { error: REVOKE_ERROR });
