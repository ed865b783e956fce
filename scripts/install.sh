#!/bin/sh
# Installs labgate as a systemd service: the executable, the units (labgate.service and
# labgate-agent.service), the system users labgate and labgate-runner (scripts/labgate.sysusers)
# and a config in /etc/labgate that is kept when it exists. Idempotent: run it again to upgrade
# the executable and the units. (npm run package builds Debian packages from its staging root.)
#
#   sudo sh scripts/install.sh [--executable dist/labgate] [--prefix /usr/local] [--destdir DIR]
#
# --destdir (or DESTDIR=) installs into a staging root instead of /, and then creates no user
# and reloads no systemd (for packaging, and for the tests). --prefix (or PREFIX=) is where the
# executable goes (PREFIX/bin/labgate); the units are written to run that path.
set -eu

HERE=$(cd "$(dirname "$0")" && pwd)
EXECUTABLE=${EXECUTABLE:-}
PREFIX=${PREFIX:-/usr/local}
DESTDIR=${DESTDIR:-}

usage() {
  sed -n '2,11p' "$0" | sed 's/^# \{0,1\}//'
  exit 2
}

while [ $# -gt 0 ]; do
  case "$1" in
    --executable) EXECUTABLE=${2:?--executable needs a path}; shift 2 ;;
    --executable=*) EXECUTABLE=${1#*=}; shift ;;
    --prefix) PREFIX=${2:?--prefix needs a path}; shift 2 ;;
    --prefix=*) PREFIX=${1#*=}; shift ;;
    --destdir) DESTDIR=${2:?--destdir needs a path}; shift 2 ;;
    --destdir=*) DESTDIR=${1#*=}; shift ;;
    -h|--help) usage ;;
    *) echo "install.sh: unknown option $1" >&2; usage ;;
  esac
done

case "$PREFIX" in
  /*) ;;
  *) echo "install.sh: --prefix must be an absolute path, got $PREFIX" >&2; exit 2 ;;
esac
PREFIX=${PREFIX%/}
[ -n "$PREFIX" ] || PREFIX=/

# The executable: the one given, else a build next to this script (dist/labgate), else one
# copied beside it.
if [ -z "$EXECUTABLE" ]; then
  for candidate in "$HERE/../dist/labgate" "$HERE/labgate"; do
    if [ -f "$candidate" ]; then EXECUTABLE=$candidate; break; fi
  done
fi
if [ -z "$EXECUTABLE" ] || [ ! -f "$EXECUTABLE" ]; then
  echo "install.sh: no labgate executable found (build it with npm run build, or give --executable PATH)" >&2
  exit 1
fi
for file in labgate.service labgate-agent.service labgate.sysusers; do
  [ -f "$HERE/$file" ] || { echo "install.sh: $HERE/$file is missing" >&2; exit 1; }
done
CONFIG_SOURCE="$HERE/../appliance.config.yaml"
[ -f "$CONFIG_SOURCE" ] || CONFIG_SOURCE="$HERE/appliance.config.yaml"
[ -f "$CONFIG_SOURCE" ] || { echo "install.sh: appliance.config.yaml is missing" >&2; exit 1; }

BIN="$PREFIX/bin/labgate"
[ "$PREFIX" = / ] && BIN=/bin/labgate
UNIT_DIR=/etc/systemd/system
CONF_DIR=/etc/labgate
SYSUSERS=/etc/sysusers.d/labgate.conf
LIVE=0
[ -z "$DESTDIR" ] && LIVE=1
if [ "$LIVE" = 1 ] && [ "$(id -u)" != 0 ]; then
  echo "install.sh: run it as root (or give --destdir to stage the files)" >&2
  exit 1
fi

# Writes stdin to $1 with mode $2 through a temp file and a rename, so that a running
# executable or a half-written file is never seen; leaves an identical file untouched.
put() {
  target="$DESTDIR$1"
  mkdir -p "$(dirname "$target")"
  tmp="$target.install-tmp.$$"
  cat > "$tmp"
  chmod "$2" "$tmp"
  if [ -f "$target" ] && cmp -s "$tmp" "$target"; then
    rm -f "$tmp"
    chmod "$2" "$target"
  else
    mv -f "$tmp" "$target"
    echo "installed $1"
  fi
}

put "$BIN" 0755 < "$EXECUTABLE"
for unit in labgate.service labgate-agent.service; do
  sed "s#/usr/local/bin/labgate#$BIN#g" "$HERE/$unit" | put "$UNIT_DIR/$unit" 0644
done
# labgate runs the server; labgate-runner runs what test configs start (test_server.run_as), and
# labgate is in its group to read what the runs write.
put "$SYSUSERS" 0644 < "$HERE/labgate.sysusers"

# The configs are the administrator's: written only when there is none.
# The service's tests run as labgate-runner (the unit may switch to it, README: "Who tests run as").
if [ ! -e "$DESTDIR$CONF_DIR/labgate.yaml" ]; then
  sed 's/^  run_as: ""$/  run_as: labgate-runner/' "$CONFIG_SOURCE" | put "$CONF_DIR/labgate.yaml" 0640
elif ! grep -q '^  run_as: *[A-Za-z0-9_]' "$DESTDIR$CONF_DIR/labgate.yaml"; then
  echo "note: $CONF_DIR/labgate.yaml sets no test_server.run_as: tests run as labgate itself; set run_as: labgate-runner" >&2
fi
if [ ! -e "$DESTDIR$CONF_DIR/agent.yaml" ]; then
  put "$CONF_DIR/agent.yaml" 0640 <<'EOF'
# labgate agent (the device side). See README "The device agent" for every key.
server: http://gateway.lab:5000     # the gateway's URL (https:// with ca_file for HTTPS)
ca_file: ""                         # e.g. /etc/labgate/gateway.pem: trust only this certificate
key_type: ed25519
device_type: generic
install_command: []                 # argv, no shell; "{file}" is the downloaded update
actions:
  - {id: uptime, name: Uptime, command: [uptime], description: "", timeout: 5}
EOF
fi

if [ "$LIVE" = 1 ]; then
  if command -v systemd-sysusers >/dev/null 2>&1; then
    systemd-sysusers "$SYSUSERS"
  else
    id labgate >/dev/null 2>&1 || useradd --system --user-group --home-dir /var/lib/labgate --no-create-home --shell /usr/sbin/nologin labgate
    id labgate-runner >/dev/null 2>&1 || useradd --system --user-group --home-dir /nonexistent --no-create-home --shell /usr/sbin/nologin labgate-runner
    usermod -a -G labgate-runner labgate
  fi
  # The server reads its config (and the TLS key you put next to it) as the labgate user.
  chgrp labgate "$CONF_DIR" "$CONF_DIR/labgate.yaml"
  chmod 0750 "$CONF_DIR"
  if [ -d /run/systemd/system ]; then systemctl daemon-reload; fi
  cat <<EOF

Next: edit $CONF_DIR/labgate.yaml (listen, tls, public_url), then
  systemctl enable --now labgate
  journalctl -u labgate -f
The first start writes the admin token to /var/lib/labgate/admin.token.
EOF
fi
