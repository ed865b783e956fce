import { strict as assert } from "node:assert";
import { once } from "node:events";
import { readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { test } from "node:test";
import { build } from "esbuild";
import { AGENT_ALIASES, AGENT_DEFINE } from "../../src/agent/bundle.ts";
import { tempDir, useTestServer, waitFor } from "../helpers/server.ts";
import { spawnConnectedAgent } from "../update/helpers/agents.ts";

const src = fileURLToPath(new URL("../../src/", import.meta.url));

/** The files in a bundle of `entry` built with the agent's options (src/agent/bundle.ts). */
async function agentBundleInputs(entry: string): Promise<string[]> {
  const options = { bundle: true, platform: "node", format: "cjs", write: false, metafile: true, logLevel: "silent", alias: AGENT_ALIASES, define: AGENT_DEFINE } as const;
  const { metafile } = await build({ ...options, entryPoints: [`${src}${entry}`] });
  return Object.keys(metafile.inputs);
}

test("the agent's bundle holds no server, database, console, HTTP route or OpenAPI code (a small board's memory)", async () => {
  const inputs = await agentBundleInputs("agent/main.ts");
  assert.ok(inputs.some((path) => path.endsWith("src/agent/agent.ts")), "the agent itself is in it");
  // tar-stream is the agent's own: it reads Mender artifacts to verify their signatures (src/artifact/mender/).
  const server = inputs.filter((path) => /src\/(server|db|console|http|accounts|audit|backup|storage|update\/(?!client\/|channel\/protocol))|node_modules\/(hono|@hono|sql\.js|busboy)\//.test(path));
  assert.deepEqual(server, []);
});

test("the agent's config reader and test-run engine are bundles of their own, which the agent's bundle does not hold (src/agent/parts.ts)", async () => {
  // zod's mini API is the agent's own: it parses the device protocol's messages (src/protocol/); classic zod is not.
  const parts = /src\/agent\/config\.ts|src\/testrun\/(modules|runs\/runner)|node_modules\/(yaml|fast-xml-parser|csv-parse|csv-stringify)\/|node_modules\/zod\/(?!mini\/|v4\/(mini|core|locales)\/)/;
  assert.deepEqual((await agentBundleInputs("agent/main.ts")).filter((path) => parts.test(path)), []);
  const config = await agentBundleInputs("agent/config-reader.ts");
  assert.ok(config.some((path) => path.endsWith("src/agent/config.ts")) && config.some((path) => path.includes("node_modules/yaml/")), "the config reader's bundle holds the config and the YAML parser");
  const engine = await agentBundleInputs("agent/test-engine.ts");
  assert.ok(engine.some((path) => path.endsWith("src/testrun/runs/runner.ts")) && engine.some((path) => path.includes("src/testrun/modules/")), "the engine's bundle holds the runner and its modules");
});

test("zod is imported as a namespace (import * as z): one `import { z }` puts all of zod, its locales too, into the bundles", () => {
  const named: string[] = [];
  const walk = (dir: string) => {
    for (const entry of readdirSync(dir, { withFileTypes: true })) {
      const path = join(dir, entry.name);
      if (entry.isDirectory()) walk(path);
      else if (/\.tsx?$/.test(entry.name) && /import\s*\{[^}]*\}\s*from\s*"zod"/.test(readFileSync(path, "utf8"))) named.push(path);
    }
  };
  walk(src);
  assert.deepEqual(named, []);
});

const server = useTestServer();

test("an idle agent, approved and connected, has loaded neither fetch's undici nor tls, https, zlib, fs/promises or child_process (a small board's memory)", async () => {
  const list = join(tempDir("labgate-modules-"), "loaded.txt");
  const fixture = fileURLToPath(new URL("../fixtures/module-list.cjs", import.meta.url));
  // Its registration, token and socket are behind it (src/agent/bundle.ts makes ws's tls, https and zlib, fs/promises and child_process load on first use).
  const agent = await spawnConnectedAgent(server, [], { args: ["--require", fixture], env: { LABGATE_MODULE_LIST: list } });
  agent.child.kill("SIGTERM");
  await once(agent.child, "exit");
  const loaded = readFileSync(list, "utf8").split("\n").map((line) => line.replace(/^NativeModule /, ""));
  assert.ok(loaded.includes("http") && loaded.includes("crypto"), "the list is of an agent that talked to the server");
  const unused = ["internal/deps/undici/undici", "tls", "https", "zlib", "http2", "fs/promises", "internal/readline/interface", "child_process", "dgram"];
  assert.deepEqual(loaded.filter((name) => unused.includes(name)), []);
});

test("a connected agent drops its start's garbage with one whole-heap collection soon after connecting (src/agent/memory.ts)", async () => {
  // V8 prints each collection with --trace-gc; `testing` marks those that the program asked for (gc()).
  const agent = await spawnConnectedAgent(server, [], { args: ["--trace-gc"] });
  try {
    const asked = () => agent.stdout().split("\n").filter((line) => /Mark-Compact.*testing/.test(line));
    await waitFor(() => asked().length > 0, 10_000, `the agent's collection (--trace-gc: ${agent.stdout().slice(-500)})`);
  } finally {
    agent.child.kill("SIGTERM");
    await once(agent.child, "exit");
  }
});
