#!/usr/bin/env bash
# Runs README's two commands (scripts/demo.sh, then scripts/test.sh) as a new
# user of another Debian release would: in a minimal root file system of that
# release made with debootstrap from Debian's own packages, entered with
# chroot. Not part of the test command (a fresh run downloads ~1.5 GB of
# packages and builds qvl from scratch: most of an hour on 2 cores).
#
#   scripts/test_debian.sh                 Debian 13 (trixie), a fresh copy of the base root
#   scripts/test_debian.sh --suite bookworm
#   scripts/test_debian.sh --reuse         keep the work root of the last run (packages, build/)
#   scripts/test_debian.sh --demo-only     only scripts/demo.sh
#   scripts/test_debian.sh --shell         a shell in the work root instead of the commands
#
# Roots live in $QVL_ROOTS (default /var/tmp/qvl-roots): SUITE-base is what
# debootstrap made, SUITE-work the copy the commands run in. Extra arguments
# after -- go to scripts/test.sh (ctest options, e.g. -R serve), and
# QVL_SKIP_SANITIZE=1 reaches it too. Needs root (debootstrap, chroot, mount).
set -euo pipefail
cd "$(dirname "$0")/.."
SRC=$PWD

suite=trixie reuse=0 demo_only=0 shell=0
test_args=()
while [ $# -gt 0 ]; do
  case "$1" in
    --suite) suite="$2"; shift 2 ;;
    --reuse) reuse=1; shift ;;
    --demo-only) demo_only=1; shift ;;
    --shell) shell=1; shift ;;
    --) shift; test_args=("$@"); break ;;
    *) echo "test_debian: unknown argument $1" >&2; exit 2 ;;
  esac
done
[ "$(id -u)" -eq 0 ] || { echo "test_debian: needs root (debootstrap, chroot, mount)" >&2; exit 2; }

ROOTS="${QVL_ROOTS:-/var/tmp/qvl-roots}"
BASE="$ROOTS/$suite-base"
WORK="$ROOTS/$suite-work"
MIRROR="${QVL_DEBIAN_MIRROR:-http://deb.debian.org/debian}"
log() { echo "test_debian[$suite]: $*" >&2; }

if ! command -v debootstrap > /dev/null; then
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap >&2
fi
if [ ! -f "$BASE/etc/debian_version" ]; then
  log "debootstrap --variant=minbase $suite into $BASE"
  rm -rf "$BASE"
  mkdir -p "$ROOTS"
  debootstrap --variant=minbase "$suite" "$BASE" "$MIRROR" >&2
fi

mounted=()
unmount_all() {
  local i
  for ((i = ${#mounted[@]} - 1; i >= 0; i--)); do umount -R -l "${mounted[$i]}" 2> /dev/null || true; done
}
trap unmount_all EXIT
if [ "$reuse" -eq 0 ] || [ ! -d "$WORK" ]; then
  log "fresh work root $WORK (a copy of $BASE)"
  rm -rf "$WORK"
  cp -a "$BASE" "$WORK"
fi
for fs in proc sys dev; do
  mkdir -p "$WORK/$fs"
  mountpoint -q "$WORK/$fs" && continue
  case $fs in
    proc) mount -t proc proc "$WORK/proc" ;;
    sys) mount --rbind /sys "$WORK/sys" && mount --make-rslave "$WORK/sys" ;;
    dev) mount --rbind /dev "$WORK/dev" && mount --make-rslave "$WORK/dev" ;;
  esac
  mounted+=("$WORK/$fs")
done
cp /etc/resolv.conf "$WORK/etc/resolv.conf"
grep -q "$(hostname)" "$WORK/etc/hosts" 2> /dev/null || echo "127.0.1.1 $(hostname)" >> "$WORK/etc/hosts"

# The checkout as it is (tracked and untracked files, not the ignored ones):
# the commands build in there from nothing unless --reuse kept its build/.
# Only files whose contents differ are copied, with the time of the copy:
# restoring their own times could leave them older than a kept build's
# objects, which would then not be rebuilt.
DEST="$WORK/root/qvl"
STAGE=$(mktemp -d)
git ls-files -z --cached --others --exclude-standard | tar -C "$SRC" --null -T - -cf - | tar -C "$STAGE" -xf -
mkdir -p "$DEST"
(cd "$DEST" && find . -path './build*' -prune -o -type f -print0) | while IFS= read -r -d '' f; do
  [ -e "$STAGE/$f" ] || rm -f "$DEST/$f"
done
(cd "$STAGE" && find . -type f -print0) | while IFS= read -r -d '' f; do
  cmp -s "$STAGE/$f" "$DEST/$f" || { mkdir -p "$(dirname "$DEST/$f")" && cp -P --preserve=mode "$STAGE/$f" "$DEST/$f"; }
done
rm -rf "$STAGE"

in_root() {
  chroot "$WORK" /usr/bin/env -i HOME=/root LANG=C.UTF-8 TERM="${TERM:-dumb}" QVL_SKIP_SANITIZE="${QVL_SKIP_SANITIZE:-0}" \
    PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin "$@"
}
if [ "$shell" -eq 1 ]; then
  in_root bash -c 'cd /root/qvl && exec bash -i'
  exit
fi
log "$(in_root cat /etc/debian_version), $(uname -m); running scripts/demo.sh"
start=$(date +%s)
in_root bash -c 'cd /root/qvl && scripts/demo.sh'
demo_s=$(($(date +%s) - start))
log "scripts/demo.sh passed in ${demo_s} s"
[ "$demo_only" -eq 1 ] && exit 0
start=$(date +%s)
status=0
in_root bash -c 'cd /root/qvl && scripts/test.sh "$@"' test.sh "${test_args[@]}" || status=$?
log "scripts/test.sh exited $status after $(($(date +%s) - start)) s (demo.sh took ${demo_s} s)"
exit "$status"
