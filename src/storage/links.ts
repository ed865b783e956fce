import type { AppContext } from "../app/context.ts";

/** Signatures of `/local_storage/` links are bound to this purpose (see TokenService.signLink). */
export const LOCAL_STORAGE_LINK = "local_storage";

/**
 * A package object's download link: a presigned URL of the S3 store, or labgate's own signed
 * `/local_storage/` link (the local driver, and S3 with `storage.s3.proxy`).
 */
export async function objectLink(ctx: Pick<AppContext, "config" | "tokens" | "objects">, base: string, name: string, ttlSeconds = ctx.config.update_server.download_link_ttl): Promise<string> {
  const direct = ctx.objects.driver === "local" || ctx.config.storage.s3.proxy ? undefined : await ctx.objects.presign(name, ttlSeconds);
  return direct ?? signedObjectUrl(ctx, base, name, ttlSeconds);
}

/** An absolute, signed, expiring download link for a stored object. */
export function signedObjectUrl(ctx: Pick<AppContext, "config" | "tokens">, base: string, name: string, ttlSeconds = ctx.config.update_server.download_link_ttl): string {
  const { expires, signature } = ctx.tokens.signLink(LOCAL_STORAGE_LINK, name, ttlSeconds);
  return `${base}/local_storage/${name}?expires=${expires}&signature=${signature}`;
}
