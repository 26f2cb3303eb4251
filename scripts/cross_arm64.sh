#!/usr/bin/env bash
# Cross-builds qvl for aarch64 (ARM64) on an x86_64 Debian 12 machine and runs
# its tests under user-mode QEMU (docs/ARM64.md):
#   1. host tools: g++-aarch64-linux-gnu, qemu-user-static (apt, as root),
#   2. a sysroot of Debian's arm64 packages (libtorch 1.13 and the rest of
#      scripts/setup.sh's list, with their library dependencies) unpacked with
#      dpkg-deb -x into $QVL_ARM64_SYSROOT (default: arm64-sysroot/ beside the
#      source tree) when it is missing; no arm64 package is installed,
#   3. configure build-arm64/ with cmake/aarch64-linux-gnu.cmake and build
#      qvl, the test suites and the CLI tests' helper,
#   4. run the tests under QEMU, once per emulated CPU:
#        scripts/cross_arm64.sh            the unit and model suites
#        scripts/cross_arm64.sh --all      every test of the test command (ctest in
#                                          build-arm64: the suites and the CLI scripts,
#                                          whose qvl runs through binfmt_misc)
# Exits non-zero if any step or test fails. Extra arguments go to both test
# binaries (doctest options, e.g. -tc='*kernel*'), or with --all to ctest (-R ask).
# Environment: QVL_ARM64_SYSROOT, QVL_ARM64_BUILD (build-arm64), QVL_ARM64_JOBS (2),
# QVL_ARM64_SKIP_TESTS=1 (build only), QVL_ARM64_CPUS (the QEMU CPUs to run on,
# default "max neoverse-n1 cortex-a57": BF16 and dot product, dot product only,
# neither).
set -euo pipefail
cd "$(dirname "$0")/.."
all=0
[ "${1:-}" = --all ] && { all=1; shift; }
SRC=$PWD
SYSROOT=${QVL_ARM64_SYSROOT:-$(dirname "$SRC")/arm64-sysroot}
BUILD=${QVL_ARM64_BUILD:-build-arm64}
JOBS=${QVL_ARM64_JOBS:-2}
log() { echo "cross_arm64: $*" >&2; }
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"

# --- 1. host tools ---------------------------------------------------------
HOST_PACKAGES=(g++-aarch64-linux-gnu qemu-user-static binfmt-support cmake ninja-build pkg-config python3)
missing=()
for p in "${HOST_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
updated=0
if ! dpkg --print-foreign-architectures | grep -qx arm64; then
  log "adding the arm64 architecture to dpkg (package lists only; nothing arm64 gets installed)"
  $SUDO dpkg --add-architecture arm64
  $SUDO apt-get update -qq
  updated=1
fi
if [ ${#missing[@]} -gt 0 ]; then
  log "installing ${missing[*]}"
  [ $updated = 1 ] || $SUDO apt-get update -qq
  updated=1
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2
fi
QEMU=$(command -v qemu-aarch64-static || command -v qemu-aarch64)

# --- 2. sysroot --------------------------------------------------------------
# Packages the project uses (scripts/setup.sh), plus the runtime basics.
ROOTS="libtorch-dev libcli11-dev libfmt-dev doctest-dev nlohmann-json3-dev
       libpng-dev libturbojpeg0-dev libjpeg62-turbo-dev libutf8proc-dev libssl-dev
       libwebp-dev libtiff-dev libgif-dev libpoppler-cpp-dev
       libedit-dev libcpp-httplib-dev libopenblas0-pthread libgomp1 libstdc++6 libgcc-s1 libc6"
# libtorch-dev depends on python3-dev, which a C++ build does not need.
SKIP="python3-dev"
STAMP="$SYSROOT/.qvl-sysroot"

resolve_packages() {
  # Depends/Pre-Depends closure of $ROOTS for arm64, first alternative that
  # exists, candidate versions; Architecture: all packages only if they are
  # -dev (headers): the rest (fonts, data, perl, debconf) are no use here.
  # Prints "name:arch=version" lines for apt-get download.
  python3 - "$ROOTS" "$SKIP" <<'EOF'
import re, subprocess, sys
ARCH = "arm64"
roots, skip = sys.argv[1].split(), set(sys.argv[2].split())
info = {}
def query(args):
    out = subprocess.run(["apt-cache", "show", "--no-all-versions"] + args,
                         capture_output=True, text=True).stdout
    for stanza in out.split("\n\n"):
        f, key = {}, None
        for line in stanza.splitlines():
            if line.startswith(" ") and key:
                f[key] += line
                continue
            key, _, value = line.partition(":")
            f[key] = value.strip()
        if "Package" in f and f.get("Architecture") in (ARCH, "all"):
            info.setdefault(f["Package"], f)
def show(names):
    names = sorted({n for n in names if n not in info})
    if not names:
        return
    query([f"{n}:{ARCH}" for n in names])
    rest = [n for n in names if n not in info]
    if rest:
        query(rest)  # Architecture: all
    for n in names:
        info.setdefault(n, None)
def groups(field):
    out = []
    for g in field.split(","):
        alts = [re.split(r"[\s(:\[]", a.strip(), maxsplit=1)[0] for a in g.split("|") if a.strip()]
        if alts:
            out.append(alts)
    return out
chosen, seen, unresolved, queue = [], set(), set(), list(roots)
while queue:
    show(queue)
    level = []
    for n in queue:
        if n in seen:
            continue
        seen.add(n)
        f = info.get(n)
        if f is None:
            unresolved.add(n)
            continue
        if f["Architecture"] == "all" and not n.endswith("-dev") and n not in roots:
            continue
        chosen.append(n)
        level += groups(f.get("Pre-Depends", "")) + groups(f.get("Depends", ""))
    show([a for g in level for a in g])
    queue = []
    for g in level:
        real = [a for a in g if info.get(a) and a not in skip]
        if real:
            queue.append(real[0])
        elif not any(a in skip for a in g):
            unresolved.add("|".join(g))
for n in sorted(chosen):
    f = info[n]
    print(f"{n}={f['Version']}" if f["Architecture"] == "all" else f"{n}:{ARCH}={f['Version']}")
print("cross_arm64: virtual, not unpacked: " + " ".join(sorted(unresolved)), file=sys.stderr)
EOF
}

make_sysroot() {
  log "making the arm64 sysroot in $SYSROOT"
  [ $updated = 1 ] || $SUDO apt-get update -qq
  rm -rf "$SYSROOT"
  mkdir -p "$SYSROOT/.debs"
  local list
  list=$(resolve_packages)
  log "downloading $(echo "$list" | wc -l) arm64 packages"
  # apt-get download as root writes as _apt unless the folder is theirs.
  (cd "$SYSROOT/.debs" && apt-get download -q $list >/dev/null 2>"$SYSROOT/.debs/download.log") ||
    { cat "$SYSROOT/.debs/download.log" >&2; exit 1; }
  for deb in "$SYSROOT"/.debs/*.deb; do
    dpkg-deb -x "$deb" "$SYSROOT"
  done
  # Debian 12 is merged-/usr: /lib -> usr/lib (dpkg-deb -x would have replaced
  # such a link with a folder, so merge afterwards).
  if [ -d "$SYSROOT/lib" ] && [ ! -L "$SYSROOT/lib" ]; then
    cp -a "$SYSROOT/lib/." "$SYSROOT/usr/lib/"
    rm -rf "$SYSROOT/lib"
    ln -s usr/lib "$SYSROOT/lib"
  fi
  # Absolute links (libz.so -> /lib/aarch64-linux-gnu/libz.so.1...) would point
  # into the host: make them relative to their place in the sysroot.
  find "$SYSROOT" -type l -lname '/*' -print0 | while IFS= read -r -d '' link; do
    target=$(readlink "$link")
    ln -sfn "$(realpath -m --relative-to="$(dirname "$link")" "$SYSROOT$target")" "$link"
  done
  # What update-alternatives would do on an arm64 machine: BLAS/LAPACK are OpenBLAS.
  local multi="$SYSROOT/usr/lib/aarch64-linux-gnu"
  ln -sfn openblas-pthread/libblas.so.3 "$multi/libblas.so.3"
  ln -sfn openblas-pthread/liblapack.so.3 "$multi/liblapack.so.3"
  ln -sfn openblas-pthread/libopenblas.so.0 "$multi/libopenblas.so.0"
  rm -rf "$SYSROOT/.debs" "$SYSROOT/usr/share/doc" "$SYSROOT/usr/share/man" "$SYSROOT/usr/share/locale"
  { echo "# roots: $(echo $ROOTS)"; echo "$list"; } > "$STAMP"
  log "sysroot ready: $(du -sh "$SYSROOT" | cut -f1)"
}
# A sysroot made from another package list (the project gained a library
# since) is made again.
if [ ! -f "$STAMP" ] || [ "$(head -1 "$STAMP")" != "# roots: $(echo $ROOTS)" ]; then make_sysroot; fi

# --- 3. configure and build ---------------------------------------------------
log "configuring $BUILD"
cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_TOOLCHAIN_FILE="$SRC/cmake/aarch64-linux-gnu.cmake" \
  -DQVL_ARM64_SYSROOT="$SYSROOT" >&2
start=$(date +%s)
cmake --build "$BUILD" -j "$JOBS" --target qvl qvl_unit_tests qvl_model_tests qvl_make_photo >&2
log "built in $(( $(date +%s) - start )) s: $(file -b "$BUILD/apps/qvl" | cut -d, -f1-2)"
[ "${QVL_ARM64_SKIP_TESTS:-0}" = 1 ] && exit 0

# --- 4. tests under QEMU --------------------------------------------------------
# The binaries find tests/data through the absolute QVL_TEST_DATA compiled in;
# -L (or QEMU_LD_PREFIX) makes QEMU load ld-linux-aarch64.so.1 and the
# libraries from the sysroot. QEMU reads QEMU_CPU itself.
export QVL_TEST_UNDER_QEMU=1 QVL_TEST_TIME_SCALE=${QVL_TEST_TIME_SCALE:-10}
CPUS=${QVL_ARM64_CPUS:-max neoverse-n1 cortex-a57}
if [ "$all" -eq 1 ]; then
  # The CLI scripts run qvl (an aarch64 program) by its path: the kernel hands
  # it to QEMU through binfmt_misc, which QEMU_LD_PREFIX points at the sysroot.
  mountpoint -q /proc/sys/fs/binfmt_misc || $SUDO mount -t binfmt_misc binfmt_misc /proc/sys/fs/binfmt_misc
  $SUDO update-binfmts --enable qemu-aarch64 >&2 || true
  export QEMU_LD_PREFIX="$SYSROOT"
  "$BUILD/apps/qvl" --version > /dev/null ||
    { log "this machine cannot run aarch64 programs through binfmt_misc"; exit 1; }
fi
status=0
for cpu in $CPUS; do
  export QEMU_CPU=$cpu
  if [ "$all" -eq 1 ]; then
    log "ctest in $BUILD under QEMU (cpu $cpu): $("$BUILD/apps/qvl" --version | grep -m1 kernels)"
    start=$(date +%s)
    if (cd "$BUILD" && ctest --output-on-failure -j "$JOBS" "$@"); then
      log "cpu $cpu: every test passed in $(( $(date +%s) - start )) s"
    else
      status=1
      log "cpu $cpu: FAILED after $(( $(date +%s) - start )) s"
    fi
    continue
  fi
  for t in qvl_unit_tests qvl_model_tests; do
    log "running $t under $(basename "$QEMU") (cpu $cpu)"
    start=$(date +%s)
    if "$QEMU" -L "$SYSROOT" "$BUILD/tests/$t" "$@"; then
      log "$t passed in $(( $(date +%s) - start )) s (cpu $cpu)"
    else
      status=1
      log "$t FAILED after $(( $(date +%s) - start )) s (cpu $cpu)"
    fi
  done
done
exit $status
