#!/usr/bin/env bash
# Debian packages of the executables that npm run build made (dpkg-deb, no network):
# dist/labgate_VERSION_amd64.deb from dist/labgate and dist/labgate_VERSION_arm64.deb from
# dist/labgate-linux-arm64 (each that exists), added to dist/SHA256SUMS.
#
# The files are what scripts/install.sh stages with --prefix /usr, the units and the sysusers
# entry moved where packages keep theirs: /usr/bin/labgate, /lib/systemd/system/labgate.service
# and labgate-agent.service, /usr/lib/sysusers.d/labgate.conf, /etc/labgate/labgate.yaml and
# agent.yaml (conffiles). build/deb/ holds the maintainer scripts and the copyright file.
set -euo pipefail
cd "$(dirname "$0")/.."

VERSION=$(node -p 'require("./package.json").version')
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
built=0

for pair in amd64:dist/labgate arm64:dist/labgate-linux-arm64; do
  arch=${pair%%:*} executable=${pair#*:}
  [ -f "$executable" ] || continue
  root="$WORK/$arch"
  sh scripts/install.sh --executable "$executable" --prefix /usr --destdir "$root" > /dev/null
  mkdir -p "$root/lib/systemd" "$root/usr/lib"
  mv "$root/etc/systemd/system" "$root/lib/systemd/system"
  mv "$root/etc/sysusers.d" "$root/usr/lib/sysusers.d"
  rmdir "$root/etc/systemd"

  doc="$root/usr/share/doc/labgate"
  mkdir -p "$doc"
  cp build/deb/copyright "$doc/copyright"
  printf 'labgate (%s) unstable; urgency=medium\n\n  * labgate %s (commit %s).\n\n -- labgate developers <labgate@example.org>  %s\n' \
    "$VERSION" "$VERSION" "$(git rev-parse --short=12 HEAD 2> /dev/null || echo unknown)" \
    "$(date -u -R ${SOURCE_DATE_EPOCH:+-d "@$SOURCE_DATE_EPOCH"})" | gzip -9n > "$doc/changelog.gz"
  # node's own libraries (OpenSSL, zlib, ICU, ...) are built into the executable, as every
  # Node.js single executable has them: lintian's embedded-library check would flag each.
  mkdir -p "$root/usr/share/lintian/overrides"
  printf 'labgate: embedded-library *\n' > "$root/usr/share/lintian/overrides/labgate"

  mkdir -p "$root/DEBIAN"
  cp build/deb/postinst build/deb/prerm build/deb/postrm "$root/DEBIAN/"
  (cd "$root" && find etc -type f | sed 's#^#/#' | sort) > "$root/DEBIAN/conffiles"
  cat > "$root/DEBIAN/control" << CONTROL
Package: labgate
Version: $VERSION
Architecture: $arch
Maintainer: labgate developers <labgate@example.org>
Installed-Size: $(du -sk --exclude=DEBIAN "$root" | cut -f1)
Depends: libc6 (>= 2.28), libgcc-s1, libstdc++6 (>= 5.2), passwd
Section: net
Priority: optional
Description: device update management and test runs for isolated lab networks
 labgate is one executable for the gateway box of an isolated lab network:
 a device update management server (packages, download links, groups,
 update checks, device registration), a test-run server (YAML test configs,
 runs, reports, artifacts) and a web console, with local storage only. The
 same executable runs the device agent.
 .
 labgate.service runs "labgate serve" as the system user labgate with its
 data in /var/lib/labgate; labgate-agent.service runs the agent on a device.
CONTROL
  (cd "$root" && find . -path ./DEBIAN -prune -o -type f -printf '%P\0' | sort -z | xargs -0 md5sum) > "$root/DEBIAN/md5sums"
  find "$root" -type d -exec chmod 0755 {} +
  dpkg-deb --root-owner-group -Zxz -z1 --build "$root" "dist/labgate_${VERSION}_$arch.deb" > /dev/null
  echo "dist/labgate_${VERSION}_$arch.deb: $(stat -c %s "dist/labgate_${VERSION}_$arch.deb") bytes"
  built=$((built + 1))
done
[ "$built" -gt 0 ] || { echo "package.sh: no executable in dist/: run npm run build first" >&2; exit 1; }

# The checksums of the build, and of these packages.
(cd dist && { grep -v '\.deb$' SHA256SUMS 2> /dev/null || true; sha256sum labgate_"$VERSION"_*.deb; } > SHA256SUMS.new && mv SHA256SUMS.new SHA256SUMS)
