/**
 * The agent shows its key's fingerprint (issue 47.6): at start, and alone on
 * `labgate agent --fingerprint`; it is the one the gateway lists for its pending registration.
 */
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { dirname, join } from "node:path";
import { promisify } from "node:util";
import { test } from "node:test";
import { useTestServer, waitFor } from "../helpers/server.ts";
import { labgate } from "../helpers/cli.ts";
import { spawnAgent } from "./helpers/agents.ts";

const server = useTestServer();

test("labgate agent prints its key fingerprint at start and on --fingerprint, the one Registrations shows", async () => {
  const agent = await spawnAgent(server, []);
  try {
    const printed = await waitFor(() => /key fingerprint \(SHA-256\) ([0-9a-f ]+)\n/.exec(agent.stderr())?.[1], 10_000, "the fingerprint line");
    assert.match(printed, /^([0-9a-f]{4} ){15}[0-9a-f]{4}$/);
    const pending = await waitFor(
      async () => (await server.call<Array<{ mac_address: string; key_fingerprint: string }>>("GET", "/api/v1/auth/pending?details=true")).body.find((p) => p.mac_address === agent.mac),
      10_000,
      "the pending registration",
    );
    assert.equal(printed.replace(/ /g, ""), pending.key_fingerprint);
    const [bin, ...entry] = await labgate();
    const alone = await promisify(execFile)(bin, [...entry, "agent", "--config", agent.config, "--data-dir", join(dirname(agent.config), "data"), "--fingerprint"]);
    assert.equal(alone.stdout, `${printed}\n`);
  } finally {
    agent.child.kill("SIGTERM");
  }
});
