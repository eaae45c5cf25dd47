#!/usr/bin/env bash
# The redis-server the wheel carries (scripts/wheel.sh), in build/redis/redis-server: built from
# Debian's source package of the version this system's apt offers (its security patches applied),
# downloaded with `apt-get source`, which checks it against Debian's archive keys. TLS built in
# (phalanx start --tls), no systemd, glibc's malloc (Debian's source leaves out the bundled jemalloc,
# and the GCS's load does not need it). Needs root (or sudo)
# once, for a deb-src entry and dpkg-dev. Skipped when already built.
set -euo pipefail
cd "$(dirname "$0")/.."
out=build/redis
if [ -x "$out/redis-server" ]; then exit 0; fi
SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
src=/etc/apt/sources.list.d/phalanx-src.sources
if [ ! -f "$src" ]; then
  echo "== adding Debian's source archive to apt ($src)"
  $SUDO tee "$src" > /dev/null <<'SOURCES'
Types: deb-src
URIs: http://deb.debian.org/debian
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb-src
URIs: http://deb.debian.org/debian-security
Suites: bookworm-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SOURCES
  $SUDO apt-get update -qq
fi
bash scripts/install_debs.sh dpkg-dev libssl-dev pkg-config
version=$(apt-cache policy redis-server | awk '/Candidate:/ {print $2}')
echo "== building redis-server $version from Debian's source for the wheel"
work=$(mktemp -d)
chmod 755 "$work"
trap 'rm -rf "$work"' EXIT
(cd "$work" && apt-get source -qq "redis=$version" 2>&1 | grep -v "unsandboxed" || true)
tree=$(find "$work" -maxdepth 1 -type d -name 'redis-*' | head -1)
[ -n "$tree" ] || { echo "apt-get source redis=$version gave no source tree" >&2; exit 1; }
make -C "$tree" -j"$(nproc)" BUILD_TLS=yes USE_SYSTEMD=no MALLOC=libc > "$work/make.log" 2>&1 || { tail -30 "$work/make.log"; exit 1; }
install -D -m 755 "$tree/src/redis-server" "$out/redis-server"
"$out/redis-server" --version
