import { exitWith } from "./cli/exit.ts";
import { main } from "./cli/main.ts";

// A single executable passes every argv entry to the app; drop node's own entries.
exitWith(main(process.argv.slice(2)));
