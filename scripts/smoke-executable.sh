#!/usr/bin/env bash
# Smoke test of the single executable: copied alone into an empty directory, with no node on
# PATH and no node_modules above it, it serves /api/health, issues a token, and stops on SIGTERM.
set -euo pipefail
BIN="$(cd "$(dirname "$0")/.." && pwd)/dist/labgate"
[ -x "$BIN" ] || { echo "missing $BIN: run npm run build first" >&2; exit 1; }

WORK="$(mktemp -d)"
trap 'kill -9 "${PID:-0}" 2>/dev/null || true; rm -rf "$WORK"' EXIT
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

kill -TERM "$PID"
wait "$PID"
echo "executable smoke test: ok"
