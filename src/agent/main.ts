// The agent's own entry: what `labgate agent` runs in the single executable and in dist/labgate.cjs
// (chosen by src/launch/launch.ts), so that an agent on a small board loads none of the server.
import "./v8-flags.ts";
import { exitCode, exitWith } from "../cli/exit.ts";
import { agentCommand } from "./command.ts";

exitWith(exitCode(() => agentCommand(process.argv.slice(3))));
