import { main } from "./cli/main.ts";

// A single executable passes every argv entry to the app; drop node's own entries.
const args = process.argv.slice(2);
main(args).then(
  (code) => process.exit(code),
  (error) => {
    process.stderr.write(`labgate: ${(error as Error).stack ?? error}\n`);
    process.exit(1);
  },
);
