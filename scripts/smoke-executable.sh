#!/usr/bin/env bash
# Smoke test of the single executable: copied alone into an empty directory, with no node on
# PATH and no node_modules above it, it serves /api/health and the console, issues a token, runs an agent that
# registers and executes an action, and stops on SIGTERM.
set -euo pipefail
BIN="$(cd "$(dirname "$0")/.." && pwd)/dist/labgate"
[ -x "$BIN" ] || { echo "missing $BIN: run npm run build first" >&2; exit 1; }

WORK="$(mktemp -d)"
trap 'kill -9 "${PID:-0}" "${AGENT:-0}" 2>/dev/null || true; rm -rf "$WORK"' EXIT
cp "$BIN" "$WORK/labgate"
cd "$WORK"
# No PATH at all for labgate itself: it must not need node or any other program.
CLEAN_ENV=(env -i HOME="$WORK" PATH=/nonexistent)

"${CLEAN_ENV[@]}" ./labgate version
"${CLEAN_ENV[@]}" ./labgate serve --listen 127.0.0.1:0 --data-dir ./data > out.log 2> err.log &
PID=$!
for _ in $(seq 1 100); do grep -q "labgate listening on" out.log 2>/dev/null && break; sleep 0.1; done
URL="$(sed -n 's/^labgate listening on //p' out.log)"
[ -n "$URL" ] || { echo "server did not start"; cat err.log; exit 1; }

HEALTH="$(curl -sf "$URL/api/health")"
echo "health: $HEALTH"
echo "$HEALTH" | grep -q '"wasm":"sea-asset"' || { echo "wasm not loaded from the executable"; exit 1; }

TOKEN="$("${CLEAN_ENV[@]}" ./labgate token issue --user smoke --scopes svc_admin_ro --ttl 1h --data-dir ./data)"
WHO="$(curl -sf -H "Authorization: Bearer token=$TOKEN" "$URL/api/whoami")"
echo "whoami: $WHO"
echo "$WHO" | grep -q '"sub":"smoke"' || { echo "issued token not accepted"; exit 1; }
ADMIN="$(cat data/admin.token)"
curl -sf -H "Authorization: Bearer token=$ADMIN" "$URL/api/whoami" | grep -q '"sub":"admin"'

# The web console, from the executable's assets: the page and the script it names.
PAGE="$(curl -sf "$URL/")"
echo "$PAGE" | grep -q '<div id="app">' || { echo "console page not served"; exit 1; }
SCRIPT="$(echo "$PAGE" | sed -n 's/.*<script type="module" src="\([^"]*\)".*/\1/p')"
curl -sf -o /dev/null -w "console: %{http_code} %{content_type} $SCRIPT\n" "$URL$SCRIPT" | tee /dev/stderr | grep -q "^console: 200 text/javascript"

# The device agent from the same executable: registers, is approved, runs an action over the WebSocket.
mkdir -p files
printf 'server: %s\nkey_type: ed25519\nmac_address: "0e:00:00:00:00:01"\nfile_base_dir: ./files\nretry_min_delay: 0.2\nretry_max_delay: 1\nactions:\n  - {id: hello, command: [/bin/echo, from-agent], timeout: 5}\n' "$URL" > agent.yaml
"${CLEAN_ENV[@]}" ./labgate agent --config agent.yaml --data-dir ./agent-data > agent.out 2> agent.err &
AGENT=$!
APPROVE=""
for _ in $(seq 1 50); do
  APPROVE="$(curl -sf -H "Authorization: Bearer token=$ADMIN" "$URL/api/v1/auth/pending" | node -e 'let s="";process.stdin.on("data",(d)=>(s+=d)).on("end",()=>{const p=JSON.parse(s).find((x)=>x.mac_address==="0e:00:00:00:00:01");if(p)process.stdout.write(JSON.stringify({mac_address:p.mac_address,public_key:p.public_key}))})')"
  [ -n "$APPROVE" ] && break
  sleep 0.1
done
[ -n "$APPROVE" ] || { echo "agent did not register"; cat agent.err; exit 1; }
curl -sf -X POST -H "content-type: application/json" -H "Authorization: Bearer token=$ADMIN" -d "$APPROVE" "$URL/api/v1/auth/register" > /dev/null
# Connected once its action list can be read (an exec before that would be queued).
for _ in $(seq 1 50); do
  curl -sf -H "Authorization: Bearer token=$ADMIN" "$URL/api/v2/devices/0e:00:00:00:00:01/action/list" > /dev/null && break
  sleep 0.2
done
EXEC="$(curl -s -H "Authorization: Bearer token=$ADMIN" "$URL/api/v2/devices/0e:00:00:00:00:01/action/exec/hello")"
echo "agent action: $EXEC"
echo "$EXEC" | grep -q "\"output\":\"$(printf 'from-agent\n' | base64)\"" || { echo "agent action failed"; cat agent.err; exit 1; }
kill -TERM "$AGENT"
wait "$AGENT"

# Backup while it runs (through its API), then a restore that a second server serves.
"${CLEAN_ENV[@]}" ./labgate backup --data-dir ./data --out backup.tar
"${CLEAN_ENV[@]}" ./labgate restore --in backup.tar --data-dir ./restored

kill -TERM "$PID"
wait "$PID"

"${CLEAN_ENV[@]}" ./labgate serve --listen 127.0.0.1:0 --data-dir ./restored > out2.log 2> err2.log &
PID=$!
for _ in $(seq 1 100); do grep -q "labgate listening on" out2.log 2>/dev/null && break; sleep 0.1; done
URL="$(sed -n 's/^labgate listening on //p' out2.log)"
[ -n "$URL" ] || { echo "restored server did not start"; cat err2.log; exit 1; }
curl -sf -H "Authorization: Bearer token=$ADMIN" "$URL/api/v2/devices" | grep -q '0e:00:00:00:00:01' || { echo "restored server lacks the device"; exit 1; }
kill -TERM "$PID"
wait "$PID"
echo "executable smoke test: ok"
