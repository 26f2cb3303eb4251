#!/usr/bin/env bash
# libgomp's wait policy as qvl chooses it before main (apps/qvl/openmp_wait_policy.cpp):
# bf16 runs spin 10000 rounds, float32 runs wait passively, a user's
# GOMP_SPINCOUNT or OMP_WAIT_POLICY wins, and every other variable still reads
# as set. libgomp itself says what it read (OMP_DISPLAY_ENV=verbose, on stderr).
source "$(dirname "$0")/common.sh" "$@"

spin_of() { grep -o "GOMP_SPINCOUNT = '[0-9]*'" "$1" | grep -o "[0-9]*"; }

env -u GOMP_SPINCOUNT -u OMP_WAIT_POLICY OMP_DISPLAY_ENV=verbose "$QVL" --version > "$TMP/out" 2> "$TMP/err"
check "no policy set: libgomp spins 10000 rounds" "[ \"\$(spin_of '$TMP/err')\" = 10000 ] || dump '$TMP/err'"
check "... and qvl runs as usual" "grep -q '^qvl ' '$TMP/out'"

env -u OMP_WAIT_POLICY GOMP_SPINCOUNT=5 OMP_DISPLAY_ENV=verbose "$QVL" --version > /dev/null 2> "$TMP/err"
check "GOMP_SPINCOUNT=5 is kept" "[ \"\$(spin_of '$TMP/err')\" = 5 ] || dump '$TMP/err'"

env -u GOMP_SPINCOUNT OMP_WAIT_POLICY=active OMP_DISPLAY_ENV=verbose "$QVL" --version > /dev/null 2> "$TMP/err"
check "OMP_WAIT_POLICY=active is kept" "grep -q \"OMP_WAIT_POLICY = 'ACTIVE'\" '$TMP/err' || dump '$TMP/err'"

for form in "--dtype f32" "--dtype=f32"; do
  env -u GOMP_SPINCOUNT -u OMP_WAIT_POLICY OMP_DISPLAY_ENV=verbose "$QVL" ask --model "$MODEL" $form -n 1 --greedy "Hi" \
    > /dev/null 2> "$TMP/err"
  check "$form waits passively (spin 0)" "[ \"\$(spin_of '$TMP/err')\" = 0 ] || dump '$TMP/err'"
done

# Other variables still reach qvl through its getenv: QVL_ISA picks the tier.
env -u GOMP_SPINCOUNT -u OMP_WAIT_POLICY QVL_ISA=generic "$QVL" --version > "$TMP/out" 2>&1
check "QVL_ISA is still read" "grep -q 'forced by QVL_ISA' '$TMP/out' || dump '$TMP/out'"

exit $fail
