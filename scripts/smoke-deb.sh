#!/usr/bin/env bash
# Checks the Debian packages that npm run package made (as root, on Debian; .ci/run runs it):
# lintian finds no error in either; the amd64 package installs, `labgate serve` started as
# labgate.service starts it (its user, group, working directory, umask and ExecStart) answers
# /api/health; a reinstall keeps an edited config; `dpkg -r` keeps the data dir and
# `dpkg --purge` removes it.
set -euo pipefail
cd "$(dirname "$0")/.."
[ "$(id -u)" = 0 ] || { echo "smoke-deb.sh: run it as root (it installs the package)" >&2; exit 1; }
VERSION=$(node -p 'require("./package.json").version')
DEB="dist/labgate_${VERSION}_amd64.deb"
[ -f "$DEB" ] || { echo "missing $DEB: run npm run build && npm run package first" >&2; exit 1; }
if dpkg -s labgate > /dev/null 2>&1; then echo "smoke-deb.sh: labgate is already installed here; not touching it" >&2; exit 1; fi

for deb in dist/labgate_"$VERSION"_*.deb; do
  # --fail-on error: a non-zero exit for errors only (warnings are printed).
  lintian --fail-on error "$deb" 2>&1 | sed "s#^#lintian $(basename "$deb"): #"
done

trap '[ -z "${PID:-}" ] || kill "$PID" 2> /dev/null || true; dpkg --purge labgate > /dev/null 2>&1 || true' EXIT
dpkg -i "$DEB"
dpkg -L labgate | grep -qx /usr/bin/labgate
/usr/bin/labgate version
id labgate
id labgate-runner
[ "$(stat -c '%U %a' /var/lib/labgate)" = "labgate 700" ] || { echo "/var/lib/labgate: $(stat -c '%U %a' /var/lib/labgate)"; exit 1; }
grep -qx /etc/labgate/labgate.yaml /var/lib/dpkg/info/labgate.conffiles

# As the unit starts it; LABGATE_LISTEN (beaten by no flag of ExecStart) keeps it on loopback.
UNIT=/lib/systemd/system/labgate.service
field() { sed -n "s/^$1=//p" "$UNIT"; }
read -r -a EXEC <<< "$(field ExecStart)"
# The unit's AmbientCapabilities and CapabilityBoundingSet (CAP_SETUID CAP_SETGID: test processes
# run as the runner user) in setpriv's spelling: +setuid,+setgid.
caps() { field "$1" | tr ' ' '\n' | sed -n 's/^CAP_\(.*\)$/+\L\1/p' | paste -sd, -; }
AMBIENT=$(caps AmbientCapabilities)
BOUNDING=$(caps CapabilityBoundingSet)
LOG=$(mktemp)
(
  cd "$(field WorkingDirectory)"
  umask "$(field UMask)"
  exec setpriv --reuid="$(field User)" --regid="$(field Group)" --init-groups \
    --inh-caps="$AMBIENT" --ambient-caps="$AMBIENT" --bounding-set="-all,$BOUNDING" env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin LABGATE_LISTEN=127.0.0.1:0 "${EXEC[@]}"
) > "$LOG" 2>&1 &
PID=$!
URL=""
for _ in $(seq 1 300); do
  URL=$(sed -n 's/^labgate listening on //p' "$LOG")
  [ -n "$URL" ] && break
  sleep 0.1
done
[ -n "$URL" ] || { echo "the packaged service did not start:"; cat "$LOG"; exit 1; }
echo "packaged service ($(field User), ${EXEC[*]}): $(curl -sf "$URL/api/health")"
kill -TERM "$PID"
wait "$PID"
PID=""
[ "$(stat -c %U /var/lib/labgate/labgate.db)" = labgate ] || { echo "the database is not the service user's"; exit 1; }

# An upgrade (here: the same package again) keeps the administrator's config.
echo "# edited" >> /etc/labgate/labgate.yaml
dpkg -i "$DEB"
tail -n 1 /etc/labgate/labgate.yaml | grep -qx "# edited" || { echo "reinstall replaced the edited config"; exit 1; }

dpkg -r labgate
[ ! -e /usr/bin/labgate ] || { echo "dpkg -r left /usr/bin/labgate"; exit 1; }
[ -f /var/lib/labgate/labgate.db ] && [ -f /var/lib/labgate/admin.token ] || { echo "dpkg -r removed the data dir"; exit 1; }
dpkg --purge labgate
for dir in /var/lib/labgate /var/lib/labgate-runs; do [ ! -e "$dir" ] || { echo "dpkg --purge left $dir"; exit 1; }; done
trap - EXIT
rm -f "$LOG"
echo "Debian package smoke test: ok"
