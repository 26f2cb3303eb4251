#!/usr/bin/env bash
# Installs qvl's Debian package in a fresh minbase root of a Debian release and
# runs it there: proof that the package's Depends bring in everything qvl needs
# on a machine that never built it. Needs root and the Debian mirror; not part
# of the test command (the first run of a release spends minutes in debootstrap).
#
#   scripts/test_deb.sh [--deb FILE] [--build DIR] [SUITE]
#
# SUITE: bookworm (default) or trixie. The package is FILE, else what
# `cpack -G DEB` makes from the build folder DIR (else $QVL_BUILD_DIR, else
# build/; build qvl there first). Under $QVL_ROOTS (default /var/tmp/qvl-roots)
# SUITE-minbase is the pristine root, made once with debootstrap and never
# changed; each run copies it and removes the copy at the end
# (QVL_KEEP_ROOT=1 keeps it for a look).
set -euo pipefail

deb=""
build="${QVL_BUILD_DIR:-}"
suite=bookworm
while [ $# -gt 0 ]; do
  case "$1" in
    --deb) deb="$2"; shift 2 ;;
    --build) build="$2"; shift 2 ;;
    bookworm|trixie) suite="$1"; shift ;;
    *) echo "usage: $0 [--deb FILE] [--build DIR] [bookworm|trixie]" >&2; exit 2 ;;
  esac
done
# Paths given are relative to where the script was called from; build/ to the source tree.
[ -n "$deb" ] && deb=$(realpath -m "$deb")
if [ -n "$build" ]; then build=$(realpath -m "$build"); else build="$(realpath "$(dirname "$0")/..")/build"; fi
roots="${QVL_ROOTS:-/var/tmp/qvl-roots}"
base="$roots/$suite-minbase"
log() { echo "test_deb: $*" >&2; }

work=$(mktemp -d)
root=""
cleanup() {
  if [ -n "$root" ]; then
    mountpoint -q "$root/proc" && umount "$root/proc"
    if [ "${QVL_KEEP_ROOT:-0}" = 1 ]; then
      log "kept $root"
    elif ! grep -q " $root/" /proc/mounts; then  # never delete through a mount
      rm -rf --one-file-system "$root"
    fi
  fi
  rm -rf "$work"
}
trap cleanup EXIT

if [ -z "$deb" ]; then
  [ -x "$build/apps/qvl" ] || { log "no $build/apps/qvl: build qvl first, or give --deb FILE"; exit 1; }
  log "packaging $build with cpack"
  cpack -G DEB -B "$work/cpack" --config "$build/CPackConfig.cmake" > "$work/cpack.log" || { cat "$work/cpack.log" >&2; exit 1; }
  deb=$(ls "$work"/cpack/qvl_*.deb)
fi
[ -f "$deb" ] || { log "no package $deb"; exit 1; }
dpkg-deb -f "$deb" Package Version Architecture Depends >&2
# An empty Depends means dpkg-shlibdeps saw no binary (e.g. cpack ran while qvl was being linked).
dpkg-deb -f "$deb" Depends | grep -q libtorch || { log "FAIL: $deb does not depend on libtorch"; exit 1; }

if [ ! -d "$base" ]; then
  log "making the pristine $suite root $base (debootstrap, a few minutes)"
  mkdir -p "$roots"
  rm -rf --one-file-system "$base.partial"
  debootstrap --variant=minbase "$suite" "$base.partial" http://deb.debian.org/debian > "$work/debootstrap.log" 2>&1 ||
    { tail -n 20 "$work/debootstrap.log" >&2; exit 1; }
  mv "$base.partial" "$base"
fi
root=$(mktemp -d "$roots/$suite-deb-test.XXXXXX")
cp -a "$base/." "$root/"
cp /etc/resolv.conf "$root/etc/resolv.conf"
cp "$deb" "$root/tmp/"
mount -t proc proc "$root/proc"
in_root() { chroot "$root" env DEBIAN_FRONTEND=noninteractive LC_ALL=C.UTF-8 PATH=/usr/sbin:/usr/bin:/sbin:/bin "$@"; }

log "installing $(basename "$deb") and its dependencies in $root"
in_root apt-get update -qq
in_root apt-get install -y -qq --no-install-recommends "/tmp/$(basename "$deb")" > "$work/apt.log" 2>&1 ||
  { tail -n 30 "$work/apt.log" >&2; exit 1; }
log "$(grep -c '^Setting up' "$work/apt.log") packages set up"

log "qvl --version"
version=$(in_root qvl --version)
echo "$version"
[[ $version == "qvl "[0-9]* ]] || { log "FAIL: qvl --version printed no version"; exit 1; }
# As an ordinary user, as people run it: /usr/share/qvl is read-only for them,
# so qvl keeps its cache in ~/.cache/qvl.
in_root useradd -m qvltest
question=(qvl ask --model /usr/share/qvl/tiny-qwen3-vl --image /usr/share/qvl/photo.jpg --greedy -n 8 "What is this?")
log "${question[*]}"
answer=$(chroot --userspec=qvltest:qvltest "$root" env HOME=/home/qvltest LC_ALL=C.UTF-8 "${question[@]}")
echo "$answer"
[ -n "$answer" ] || { log "FAIL: no answer"; exit 1; }
log "ok: qvl from $(basename "$deb") runs in a fresh $suite root"
