#!/usr/bin/env bash
# Smoke test of the single executables:
#
#   bash scripts/smoke-executable.sh [SERVER [AGENT]]     (default: dist/labgate for both)
#
# Each is copied alone into an empty directory, with no node on PATH and no node_modules above
# it. The SERVER serves /api/health and the console, issues a token, takes a package upload,
# runs a sample test config, and stops on SIGTERM; the AGENT registers with it, runs an action,
# installs the uploaded package through an update check and runs a test run; then a backup is
# restored and served.
# An arm64 executable runs under qemu-aarch64-static (with /usr/aarch64-linux-gnu as its root)
# on another machine, so that `smoke-executable.sh dist/labgate dist/labgate-linux-arm64` checks
# an arm64 agent against an x64 server and the reverse order an arm64 server.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
SERVER_BIN="$(realpath "${1:-$ROOT/dist/labgate}")"
AGENT_BIN="$(realpath "${2:-$SERVER_BIN}")"
for bin in "$SERVER_BIN" "$AGENT_BIN"; do
  [ -x "$bin" ] || { echo "missing $bin: run npm run build first" >&2; exit 1; }
done

# The command prefix that runs executable $1 here: qemu for an aarch64 ELF (e_machine 0xb7) on another machine.
runner() {
  if [ "$(od -An -tx1 -j18 -N2 "$1" | tr -d ' \n')" = b700 ] && [ "$(uname -m)" != aarch64 ]; then
    echo "$(command -v qemu-aarch64-static || echo qemu-aarch64-static) -L /usr/aarch64-linux-gnu"
  fi
}

WORK="$(mktemp -d)"
# Only the processes it started: `kill 0` (an unset PID) would kill the caller's whole process group.
trap 'for p in ${PID:-} ${AGENT:-}; do kill -9 "$p" 2>/dev/null || true; done; rm -rf "$WORK"' EXIT
cp "$SERVER_BIN" "$WORK/labgate"
cp "$AGENT_BIN" "$WORK/labgate-agent"
cd "$WORK"
# No node on PATH for labgate: it must not need node. Test runs find `uname` (the sample's first
# command) in bin/, which holds nothing else.
mkdir bin
ln -s "$(command -v uname)" bin/uname
CLEAN_ENV=(env -i HOME="$WORK" PATH="$WORK/bin")
# shellcheck disable=SC2207
LABGATE=("${CLEAN_ENV[@]}" $(runner "$SERVER_BIN") ./labgate)
# shellcheck disable=SC2207
AGENT_CMD=("${CLEAN_ENV[@]}" $(runner "$AGENT_BIN") ./labgate-agent)
echo "server: $("${LABGATE[@]}" version)"
echo "agent:  $("${AGENT_CMD[@]}" version)"

# Starts `labgate serve` on data dir $1, logging to $2.{out,err}; sets PID and URL.
serve() {
  local started
  started=$(date +%s%N)
  "${LABGATE[@]}" serve --listen 127.0.0.1:0 --data-dir "$1" > "$2.out" 2> "$2.err" &
  PID=$!
  for _ in $(seq 1 300); do grep -q "labgate listening on" "$2.out" 2>/dev/null && break; sleep 0.1; done
  URL="$(sed -n 's/^labgate listening on //p' "$2.out")"
  [ -n "$URL" ] || { echo "server did not start"; cat "$2.err"; exit 1; }
  echo "listening after $((($(date +%s%N) - started) / 1000000)) ms; first log line: $(head -n 1 "$2.err")"
}
# GETs path $1 with the admin token (more curl arguments after it).
api() {
  local path=$1
  shift
  curl -sf -H "Authorization: Bearer token=$ADMIN" "$@" "$URL$path"
}
# Prints field $2 of the JSON on stdin, read as a JavaScript expression on `j` (the host's node parses it).
json() { node -e 'let s="";process.stdin.on("data",(d)=>(s+=d)).on("end",()=>{const j=JSON.parse(s);const v=eval(process.argv[1]);if(v!==undefined)process.stdout.write(typeof v==="string"?v:JSON.stringify(v))})' "$1"; }

serve ./data server
grep -q "labgate $("${LABGATE[@]}" version | sed -n 's/^labgate \([^ ]*\) .*/\1/p') .*linux-" server.err || { echo "the startup log does not name the version and arch"; exit 1; }
# The build's code cache fits this executable (else the launcher says so, and starts are slower).
! grep "refused the code cache" server.err || exit 1
HEALTH="$(curl -sf "$URL/api/health")"
echo "health: $HEALTH"
echo "$HEALTH" | grep -q '"wasm":"sea-asset"' || { echo "wasm not loaded from the executable"; exit 1; }

TOKEN="$("${LABGATE[@]}" token issue --user smoke --scopes svc_admin_ro --ttl 1h --data-dir ./data)"
WHO="$(curl -sf -H "Authorization: Bearer token=$TOKEN" "$URL/api/whoami")"
echo "whoami: $WHO"
echo "$WHO" | grep -q '"sub":"smoke"' || { echo "issued token not accepted"; exit 1; }
ADMIN="$(cat data/admin.token)"
api /api/whoami | grep -q '"sub":"admin"'

# The web console, from the executable's assets: the page and the script it names.
PAGE="$(curl -sf "$URL/")"
echo "$PAGE" | grep -q '<div id="app">' || { echo "console page not served"; exit 1; }
SCRIPT="$(echo "$PAGE" | sed -n 's/.*<script type="module" src="\([^"]*\)".*/\1/p')"
CONSOLE="$(curl -sf -o /dev/null -w "console: %{http_code} %{content_type} $SCRIPT" "$URL$SCRIPT")"
echo "$CONSOLE"
echo "$CONSOLE" | grep -q "^console: 200 text/javascript" || { echo "console script not served"; exit 1; }

# Uploads test config file $1 and runs it to the end: sets STATUS and REPORT (its rows, JSON).
run_config() {
  api /api/v1/configs -F "file=@$1" > /dev/null
  local run
  run="$(api /api/v1/test-runs -H 'content-type: application/json' -d "{\"config_name\":\"$(basename "$1")\"}" | json j.id)"
  STATUS=""
  for _ in $(seq 1 200); do
    STATUS="$(api "/api/v1/test-runs/$run" | json j.status)"
    case "$STATUS" in pending | running) sleep 0.1 ;; *) break ;; esac
  done
  REPORT="$(api "/api/v1/test-runs/$run/report?format=json")"
  echo "test run $run ($(basename "$1")): $STATUS, $(echo "$REPORT" | json 'j.map((r)=>r.status).join(" ")')"
}

# A sample test config, run to the end (assets/testrun/samples/exec.yml: a program, a shell line).
run_config "$ROOT/assets/testrun/samples/exec.yml"
[ "$STATUS" = finished ] && ! echo "$REPORT" | grep -q '"status":"failed"' || { echo "test run failed: $REPORT"; exit 1; }

# A package upload (multipart, streamed to the object store), offered to the agent's device through a group.
head -c 300000 /dev/urandom > image.bin
PACKAGE="$(api /api/v1/packages -F file=@image.bin -F svc.software.version=v2 -F svc.hardware.devtype=smoke-board | json j.id)"
[ -n "$PACKAGE" ] || { echo "package upload failed"; exit 1; }

# The device agent: registers, is approved, runs an action over the WebSocket, then installs the
# package its update check is offered.
mkdir -p files
cat > agent.yaml << EOF
server: $URL
key_type: ed25519
mac_address: "0e:00:00:00:00:01"
device_type: smoke-board
software_version: v1
file_base_dir: ./files
retry_min_delay: 0.2
retry_max_delay: 1
update_check_interval: 1
install_command: [/bin/cp, "{file}", "$WORK/installed.bin"]
tests: {enabled: true}
actions:
  - {id: hello, command: [/bin/echo, from-agent], timeout: 5}
EOF
"${AGENT_CMD[@]}" agent --config agent.yaml --data-dir ./agent-data > agent.out 2> agent.err &
AGENT=$!
APPROVE=""
for _ in $(seq 1 100); do
  APPROVE="$(api /api/v1/auth/pending | json 'j.filter((x)=>x.mac_address==="0e:00:00:00:00:01").map((p)=>({mac_address:p.mac_address,public_key:p.public_key}))[0]')"
  [ -n "$APPROVE" ] && break
  sleep 0.1
done
[ -n "$APPROVE" ] || { echo "agent did not register"; cat agent.err; exit 1; }
api /api/v1/auth/register -X POST -H "content-type: application/json" -d "$APPROVE" > /dev/null
# Connected once its action list can be read (an exec before that would be queued).
for _ in $(seq 1 100); do
  api /api/v2/devices/0e:00:00:00:00:01/action/list > /dev/null && break
  sleep 0.2
done
EXEC="$(curl -s -H "Authorization: Bearer token=$ADMIN" "$URL/api/v2/devices/0e:00:00:00:00:01/action/exec/hello")"
echo "agent action: $EXEC"
echo "$EXEC" | grep -q "\"output\":\"$(printf 'from-agent\n' | base64)\"" || { echo "agent action failed"; cat agent.err; exit 1; }

DEVICE="$(api "/api/v2/devices?q=0e:00:00:00:00:01" | json 'j[0].id')"
GROUP="$(api /api/v2/groups -H 'content-type: application/json' -d '{"metadata":{"name":"smoke"}}' | json j.id)"
api "/api/v2/groups/$GROUP/package" -H 'content-type: application/json' -d "{\"packages\":[$PACKAGE]}" > /dev/null
api "/api/v2/groups/$GROUP/policy" -H 'content-type: application/json' -d '{"policy":"exact_match,v2"}' > /dev/null
api "/api/v2/groups/$GROUP/devices" -X PATCH -H 'content-type: application/json' -d "{\"add\":[$DEVICE],\"remove\":[]}" > /dev/null
VERSION=""
for _ in $(seq 1 150); do
  VERSION="$(api "/api/v2/devices/$DEVICE" | json 'j.metadata["svc.software.version"]')"
  [ "$VERSION" = v2 ] && break
  sleep 0.2
done
echo "agent update: device reports $VERSION"
[ "$VERSION" = v2 ] && cmp -s image.bin installed.bin || { echo "update not installed"; cat agent.err; exit 1; }

# A test run on the device: the agent loads its test-run engine (a bundle of its own) for it.
printf '%s\n' "tests:" "  board:" '    machines: ["device:0e:00:00:00:00:01"]' "    tests:" '    - exec: {name: kernel, command: [uname, -s], stdout_regex: "^Linux"}' > device.yml
run_config device.yml
[ "$STATUS" = finished ] && echo "$REPORT" | grep -q '"status":"passed"' && ! echo "$REPORT" | grep -q '"status":"failed"' || { echo "device test run failed: $REPORT"; cat agent.err; exit 1; }
kill -TERM "$AGENT"
wait "$AGENT"

# Backup while it runs (through its API), then a restore that a second server serves.
"${LABGATE[@]}" backup --data-dir ./data --out backup.tar
"${LABGATE[@]}" restore --in backup.tar --data-dir ./restored

kill -TERM "$PID"
wait "$PID"

serve ./restored restored
api /api/v2/devices | grep -q '0e:00:00:00:00:01' || { echo "restored server lacks the device"; exit 1; }
kill -TERM "$PID"
wait "$PID"
echo "executable smoke test: ok ($(basename "$SERVER_BIN") server, $(basename "$AGENT_BIN") agent)"
