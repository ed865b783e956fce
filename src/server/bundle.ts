/*
 * What the server's bundle (labgate-main.cjs, build/build.sh; the tests' bundles too) is built
 * with beside the common options, for an idle server's memory (issue 31):
 * - node:http2 is a stand-in (src/http/web/no-http2.ts): @hono/node-server imports it for HTTP/2,
 *   which labgate does not serve.
 * - ws requires tls and https at its top level for its client, which the server does not use:
 *   the agent's stand-ins (src/agent/lazy/), which load the module on first use. labgate's own
 *   TLS (src/server/start.ts) and the test modules' https load them when used.
 *
 *   node --import tsx src/server/bundle.ts     prints them as esbuild flags
 */
import { relative } from "node:path";
import { fileURLToPath } from "node:url";

const file = (path: string) => fileURLToPath(new URL(path, import.meta.url));
export const SERVER_ALIASES: Record<string, string> = {
  "node:http2": file("../http/web/no-http2.ts"),
  tls: file("../agent/lazy/tls.cjs"),
  https: file("../agent/lazy/https.cjs"),
};

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  console.log(Object.entries(SERVER_ALIASES).map(([name, path]) => `--alias:${name}=./${relative(process.cwd(), path)}`).join(" "));
}
